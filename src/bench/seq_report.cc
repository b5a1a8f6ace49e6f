// Reporters of bench seq: the header, one fixed-column line per design, the fetch-add
// reference, and JSON lines (fields: docs/bench-output.md).
#include <fabflow/bench/seq.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <optional>
#include <ostream>
#include <string>

#include "bench/report.h"

namespace fabflow {
namespace {

// Fig. 7's series names: the design, multi-queue marked.
std::string variant_of(const SeqRow& row) {
  std::string v(seq::to_string(row.design));
  if (row.queues > 1) v += "-multiqueue";
  return v;
}

}  // namespace

void print_seq_header(std::ostream& out, const SeqResult& r) {
  const auto& p = r.params;
  report::print_table_header(
      out, r.env, "seq",
      {"clients " + std::to_string(r.clients) + " x " + std::to_string(p.outstanding) +
           " in flight  server workers " + std::to_string(p.workers) + " x " +
           std::to_string(p.queues) + " queues  batch " + std::to_string(p.batch) +
           "  spec responses " + (p.batch_responses ? "batched (FI_MORE)" : "one by one"),
       "FI_MORE on batched responses: " +
           (r.rows.empty() ? std::string("n/a") : r.rows.front().more_hint),
       "requests " + std::to_string(p.requests) + " per client, warm-up " +
           std::to_string(p.warmup),
       "req/s: sum of the clients' rates; latency: issue to answer; CPU per request: clients "
       "over the measured requests, server over all it served (busy polling included)"},
      "  design            req/s  p50(us)  p99(us)  resp/batch  client ns/req  server "
      "ns/req  spec miss  exactly-once");
}

void print_seq_row(std::ostream& out, const SeqResult&, const SeqRow& row) {
  if (report::print_if_unsupported_design(out, variant_of(row), row.unsupported)) return;
  char line[512];
  std::snprintf(line, sizeof line, "  %-14s %10.0f %8.2f %8.2f %11s %14.0f %14s %10s  %s\n",
                variant_of(row).c_str(), row.requests_per_s, row.latency.p50 / 1e3,
                row.latency.p99 / 1e3, report::fmt_or_na(row.responses_per_batch, "%.2f").c_str(),
                row.client_cpu_ns_per_request,
                report::fmt_or_na(row.server_cpu_ns_per_request, "%.0f").c_str(),
                report::fmt_or_na(row.spec_miss_fraction, "%.2g").c_str(), row.check.c_str());
  out << line << std::flush;
}

void print_seq_reference(std::ostream& out, const SeqResult& r) {
  if (!r.reference) return;
  double best = 0;
  for (const SeqRow& row : r.rows) best = std::max(best, row.requests_per_s);
  char line[256];
  std::snprintf(line, sizeof line,
                "  reference: bare fetch-add by %u threads on one shared counter %.0f ops/s "
                "(best design / reference %.2f)\n",
                r.reference->threads, r.reference->ops_per_s,
                r.reference->ops_per_s > 0 ? best / r.reference->ops_per_s : 0.0);
  out << line << std::flush;
}

void print_seq_json(std::ostream& out, const SeqResult& r, const SeqRow& row) {
  const auto& p = r.params;
  nlohmann::json j = report::design_row(r.env, "seq", "sequencer", row, variant_of(row));
  j["queues"] = row.queues;
  j["batching"] = row.batching;
  j["more_hint"] = row.more_hint;
  if (report::print_if_unsupported(out, j, row.unsupported)) return;
  j["requests"] = row.requests;
  j["warmup"] = p.warmup;
  j["requests_per_s"] = row.requests_per_s;
  j["latency_ns"] = report::latency_json(row.latency);
  j["responses_per_batch"] = report::optional_json(row.responses_per_batch);
  j["cpu_ns_per_request"] = {{"client", row.client_cpu_ns_per_request},
                             {"server", report::optional_json(row.server_cpu_ns_per_request)}};
  j["spec_miss_fraction"] = report::optional_json(row.spec_miss_fraction);
  j["served"] = row.served;
  j["counter_first"] = row.counter_first;
  j["counter_final"] = row.counter_final;
  j["order_violations"] = row.order_violations;
  j["exactly_once"] = row.exactly_once;
  j["check"] = row.check;
  j["reference_ops_per_s"] = r.reference ? nlohmann::json(r.reference->ops_per_s) : nullptr;
  report::print_json_line(out, j);
}

void print_seq_reference_json(std::ostream& out, const SeqResult& r) {
  if (!r.reference) return;
  nlohmann::json j = report::base_row(r.env, "seq");
  j["type"] = "sequencer_reference";
  j["threads"] = r.reference->threads;
  j["ops_per_s"] = r.reference->ops_per_s;
  report::print_json_line(out, j);
}

}  // namespace fabflow
