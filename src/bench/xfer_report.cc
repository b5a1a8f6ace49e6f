// Reporters of bench xfer: the header, one fixed-column line per size, batch and direction, and
// JSON lines (fields: docs/bench-output.md).
#include <fabflow/bench/xfer.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>

#include "bench/report.h"

namespace fabflow {

namespace {

// The longest run of a point's batch that the engine cuts into operations: a contiguous batch
// is merged into one (docs/transfer-engine.md, "Contiguous transfers"), a scattered one is not.
std::size_t largest_run(const XferRow& row) {
  return row.layout == XferLayout::contiguous ? row.size * row.batch : row.size;
}

}  // namespace

void print_xfer_header(std::ostream& out, const XferResult& r) {
  const auto& p = r.params;
  report::print_table_header(
      out, r.env, "xfer",
      {"rank 0 submits batches of one-sided transfers into rank 1's memory (write) or from it "
       "(read), each batch with a notification to rank 1; " +
           report::size_text(p.bytes_per_point) + " per point (" + std::to_string(p.min_batches) +
           "-" + std::to_string(p.max_batches) + " batches), " + std::to_string(p.max_outstanding) +
           " operations in flight at most per endpoint; " + std::to_string(p.endpoints) +
           (p.endpoints > 1 ? " endpoints (transfers striped over those reaching both memories)"
                            : " endpoint"),
       std::string("what arrived: ") +
           (p.verify
                ? "checked where it landed, outside the timed sections (every byte of a "
                  "transfer up to 4 KiB; of a larger one one page in 16, at most 16, and the last)"
                : "not checked (--no-verify)"),
       "layout: contig(uous), each transfer right after the one before on both ranks, or "
       "scatt(ered), a transfer-sized gap after each; MB/s = 10^6 bytes/s of transfers; op: the "
       "largest operation posted (a contiguous batch is merged into one run first; the "
       "engine's max_operation, 0 asked: the transport's preferred size); batch: submit to "
       "completion at rank 0; CPU: ns per byte on rank 0 | rank 1" +
           std::string(p.reference
                           ? "; memcpy: the batch's bytes copied in memory; 2-sided: the fastest "
                             "of bench bulk's protocols at the transfer size (ping-pong or "
                             "stream), same run; raw: the provider's streaming RMA write of the "
                             "transfer size (bench bulk's raw write), same run"
                           : "")},
      "  dir   layout       size  batch      op  batches       MB/s  transfers/s  batch p50(us)  "
      "batch "
      "p99(us)  "
      "cpu ns/B 0 | 1" +
          std::string(p.reference
                          ? "   memcpy MB/s  of memcpy  2-sided MB/s  of 2-sided     raw MB/s  "
                            "  of raw  2-sided best"
                          : ""));
}

void print_xfer_row(std::ostream& out, const XferResult& r, const XferRow& row) {
  char line[512];
  const std::string dir(bulk::kDirectionNames.name(row.direction));
  const char* layout = row.layout == XferLayout::scattered ? "scatt" : "contig";
  if (!row.unsupported.empty()) {
    std::snprintf(line, sizeof line, "  %-5s %-6s %10s %6zu  not run: %s\n", dir.c_str(), layout,
                  report::size_text(row.size).c_str(), row.batch, row.unsupported.c_str());
    out << line << std::flush;
    return;
  }
  std::snprintf(line, sizeof line,
                "  %-5s %-6s %10s %6zu %7s %8llu %10.1f %12.0f %14.2f %14.2f %7.3f | %.3f",
                dir.c_str(), layout, report::size_text(row.size).c_str(), row.batch,
                report::size_text(std::min(row.max_operation, largest_run(row))).c_str(),
                static_cast<unsigned long long>(row.batches), row.mb_s, row.transfers_per_s,
                row.batch_ns.p50 / 1e3, row.batch_ns.p99 / 1e3, row.cpu_ns_per_byte_initiator,
                row.cpu_ns_per_byte_target);
  out << line;
  if (r.params.reference && row.memcpy_mb_s) {
    std::snprintf(line, sizeof line, " %13.1f %9.2fx", *row.memcpy_mb_s,
                  *row.memcpy_mb_s > 0 ? row.mb_s / *row.memcpy_mb_s : 0.0);
    out << line;
  }
  if (r.params.reference && row.two_sided_mb_s) {
    const double two = *row.two_sided_mb_s;
    std::snprintf(line, sizeof line, " %13.1f %10.2fx", two, two > 0 ? row.mb_s / two : 0.0);
    out << line;
    if (row.raw_write_mb_s) {
      const double raw = *row.raw_write_mb_s;
      std::snprintf(line, sizeof line, " %12.1f %8.2fx", raw, raw > 0 ? row.mb_s / raw : 0.0);
    } else {
      std::snprintf(line, sizeof line, " %12s %9s", "n/a", "");
    }
    out << line;
    std::snprintf(line, sizeof line, "  %s/%s", row.two_sided_protocol.c_str(),
                  row.two_sided_phase.c_str());
    out << line;
  }
  out << "\n" << std::flush;
}

void print_xfer_json(std::ostream& out, const XferResult& r, const XferRow& row) {
  nlohmann::json j = report::base_row(r.env, "xfer");
  j["direction"] = std::string(bulk::kDirectionNames.name(row.direction));
  j["layout"] = std::string(kXferLayoutNames.name(row.layout));
  j["size"] = row.size;
  j["batch"] = row.batch;
  j["max_outstanding"] = r.params.max_outstanding;
  j["endpoints"] = r.params.endpoints;
  j["verified"] = r.params.verify;
  j["operation_size"] = row.operation_size;
  j["max_operation"] = row.max_operation;
  if (report::print_if_unsupported(out, j, row.unsupported)) return;
  j["batches"] = row.batches;
  j["footprint_bytes"] = row.footprint_bytes;
  j["seconds"] = row.seconds;
  j["mb_s"] = row.mb_s;
  j["transfers_per_s"] = row.transfers_per_s;
  j["batch_ns"] = report::latency_json(row.batch_ns);
  j["cpu_ns_per_byte"] = {{"initiator", row.cpu_ns_per_byte_initiator},
                          {"target", row.cpu_ns_per_byte_target}};
  j["memcpy_mb_s"] = report::optional_json(row.memcpy_mb_s);
  j["endpoint_bytes"] = row.endpoint_bytes;
  j["endpoint_operations"] = row.endpoint_operations;
  j["two_sided_mb_s"] = report::optional_json(row.two_sided_mb_s);
  if (row.two_sided_mb_s) {
    j["two_sided_protocol"] = row.two_sided_protocol;
    j["two_sided_phase"] = row.two_sided_phase;
  }
  j["raw_write_mb_s"] = report::optional_json(row.raw_write_mb_s);
  report::print_json_line(out, j);
}

}  // namespace fabflow
