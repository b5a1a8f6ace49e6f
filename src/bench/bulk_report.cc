// Reporters of bench bulk: the header (shapes, rendezvous path, cache state), one fixed-column
// line per protocol and size, and JSON lines (fields: docs/bench-output.md).
#include <fabflow/bench/bulk.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>

#include "bench/report.h"

namespace fabflow {
namespace {

nlohmann::json stats_json(const bulk::Stats& s) {
  return {{"registrations", s.registrations},
          {"registration_ns", s.registration_ns},
          {"deregistration_ns", s.deregistration_ns},
          {"cache_hits", s.cache_hits},
          {"cache_misses", s.cache_misses},
          {"cache_evictions", s.cache_evictions},
          {"cache_invalidations", s.cache_invalidations},
          {"control_messages", s.control_messages},
          {"cma_bytes", s.cma_bytes},
          {"mapped_bytes", s.mapped_bytes},
          {"rma_operations", s.rma_operations}};
}

}  // namespace

void print_bulk_plan(std::ostream& out, const bulk::Costs& c, const bulk::ChannelOptions& o,
                     bool comment) {
  const char* lead = comment ? "# " : "";
  char line[512];
  if (!c.measured) {
    out << lead << "auto: fixed thresholds (costs not measured): eager up to "
        << report::size_text(o.eager_limit) << ", copy up to " << report::size_text(o.copy_limit)
        << ", pipeline above\n";
    return;
  }
  std::snprintf(line, sizeof line,
                "%sauto's costs, measured at open: registration %.2f us + %.3f ns/B%s  memcpy "
                "%.3f ns/B  round trip %.1f us  rendezvous wire %.3f ns/B\n",
                lead, c.reg_call_ns / 1e3, c.reg_byte_ns,
                c.registration_free ? " (none on local: cross-memory attach)" : "",
                c.memcpy_byte_ns, c.round_trip_ns / 1e3, c.wire_byte_ns);
  out << line;
  std::snprintf(line, sizeof line, "%s  %9s  %-10s %12s %12s %12s %12s  (estimated us)\n", lead,
                "size", "auto", "eager", "copy", "rndv-write", "pipeline");
  out << line;
  for (std::size_t s = 1; s <= (std::size_t{1} << 30); s *= 4) {
    std::string est[4];
    int k = 0;
    for (bulk::Protocol p : bulk::kAutoCandidates) {
      const double e = bulk::estimate_ns(c, o, p, s);
      est[k++] = std::isfinite(e) ? report::fmt("%.1f", e / 1e3) : "-";
    }
    std::snprintf(line, sizeof line, "%s  %9s  %-10s %12s %12s %12s %12s\n", lead,
                  report::size_text(s).c_str(),
                  std::string(bulk::to_string(bulk::cheapest(c, o, s))).c_str(), est[0].c_str(),
                  est[1].c_str(), est[2].c_str(), est[3].c_str());
    out << line;
  }
}

void print_bulk_header(std::ostream& out, const BulkResult& r) {
  const auto& p = r.params;
  const auto& o = r.options;
  report::print_header(
      out, r.env, "bulk",
      {"eager limit " + report::size_text(o.eager_limit) + "  bounce " +
           report::size_text(o.bounce_size) + "  fragment " + report::size_text(o.frag_size) +
           (o.frag_growth > 1 ? " growing x" + report::fmt("%.3g", o.frag_growth) + " to " +
                                    report::size_text(o.max_frag)
                              : std::string()) +
           "  depth " + std::to_string(o.depth) + "  copy-ahead " +
           report::size_text(o.copy_ahead) + "  auto: copy up to " +
           report::size_text(o.copy_limit) + ", pipeline above",
       "split copies (local, between fabflow memories, both ranks copying half): " +
           (o.split_copy_min ? "from " + report::size_text(o.split_copy_min) : std::string("off")),
       std::string("registration pinning (--mr-pin): ") +
           (p.pin ? "on (mlock at registration, munlock at deregistration); " + p.memlock
                  : std::string("off")),
       "buffers: " +
           (p.memory == BufferMemory::fabflow
                ? std::string("the channel's memory (--memory fabflow: registered once")
                : std::string("user memory (") +
                      (p.reuse == 0 ? std::string("never replaced")
                                    : "a freshly mapped buffer every " + std::to_string(p.reuse) +
                                          " messages")) +
           ")",
       "rendezvous: " + r.rendezvous_path, "registration cache: " + r.cache_state,
       std::string("what arrived: ") +
           (p.verify ? "checked by the receiver outside the timed sections (every byte up to "
                       "4 KiB; of a larger message one page in 16, at most 16, and the last)"
                     : "not checked (--no-verify)"),
       "ping-pong MB/s: size over half the round trip; stream MB/s: " + std::to_string(p.window) +
           " messages in flight, one way; regs/msg and reg us/msg: both ranks, ping-pong; CPU "
           "ns/B: streaming, each side"});
  print_bulk_plan(out, r.costs, r.options, true);
  out << "\n  protocol              size  pp MB/s  half-rtt(us)  stream MB/s  regs/msg  reg "
         "us/msg  hits/miss/inval   cpu ns/B s/r";
  if (p.reference)
    out << "   memcpy MB/s  raw write MB/s  of memcpy pp|stream  copy pp MB/s  pp of it";
  out << "\n";
  out.flush();
}

void print_bulk_row(std::ostream& out, const BulkResult& r, const BulkRow& row) {
  char line[512];
  const std::string proto(bulk::to_string(row.protocol));
  if (!row.unsupported.empty()) {
    std::snprintf(line, sizeof line, "  %-16s %9s  not run: %s\n", proto.c_str(),
                  report::size_text(row.size).c_str(), row.unsupported.c_str());
    out << line << std::flush;
    return;
  }
  const std::string cache =
      report::cache_counts(row.cache_hits, row.cache_misses, row.cache_invalidations);
  std::snprintf(line, sizeof line, "  %-16s %9s %8.0f %13.1f %12.0f %9.2f %11.1f %16s %7.3f/%.3f",
                proto.c_str(), report::size_text(row.size).c_str(), row.pingpong_mb_s,
                row.half_rtt_us, row.stream_mb_s, row.registrations_per_message,
                row.registration_us_per_message, cache.c_str(), row.cpu_ns_per_byte_sender,
                row.cpu_ns_per_byte_receiver);
  out << line;
  if (r.params.reference) {
    const double memcpy = row.memcpy_mb_s.value_or(0);
    const double walked = row.copy_pingpong_mb_s.value_or(0);
    std::snprintf(line, sizeof line, "  %12.0f  %14s  %8.2fx|%.2fx  %12.0f  %7.2fx", memcpy,
                  row.raw_write_mb_s ? report::fmt("%.0f", *row.raw_write_mb_s).c_str() : "n/a",
                  memcpy > 0 ? row.pingpong_mb_s / memcpy : 0.0,
                  memcpy > 0 ? row.stream_mb_s / memcpy : 0.0, walked,
                  walked > 0 ? row.pingpong_mb_s / walked : 0.0);
    out << line;
  }
  out << "\n" << std::flush;
}

void print_bulk_json(std::ostream& out, const BulkResult& r, const BulkRow& row) {
  const auto& p = r.params;
  const auto& o = r.options;
  nlohmann::json j = report::base_row(r.env, "bulk");
  j["type"] = "bulk";
  j["protocol"] = std::string(bulk::to_string(row.protocol));
  j["size"] = row.size;
  j["reuse"] = p.reuse;
  j["memory"] = std::string(kBufferMemoryNames.name(p.memory));
  j["mr_pin"] = p.pin;
  if (p.pin) j["memlock"] = p.memlock;
  j["eager_limit"] = o.eager_limit;
  j["bounce_size"] = o.bounce_size;
  j["frag_size"] = o.frag_size;
  j["frag_growth"] = o.frag_growth;
  j["max_frag"] = o.max_frag;
  j["depth"] = o.depth;
  j["split_copy_min"] = o.split_copy_min;
  j["window"] = p.window;
  j["verified"] = p.verify;
  j["rendezvous_path"] = r.rendezvous_path;
  j["cache_state"] = r.cache_state;
  j["costs"] = {{"measured", r.costs.measured},
                {"reg_call_ns", r.costs.reg_call_ns},
                {"reg_byte_ns", r.costs.reg_byte_ns},
                {"memcpy_byte_ns", r.costs.memcpy_byte_ns},
                {"round_trip_ns", r.costs.round_trip_ns},
                {"wire_byte_ns", r.costs.wire_byte_ns},
                {"registration_free", r.costs.registration_free}};
  j["auto_choice"] = std::string(bulk::to_string(
      r.costs.measured ? bulk::cheapest(r.costs, r.options, row.size) : bulk::Protocol::automatic));
  if (report::print_if_unsupported(out, j, row.unsupported)) return;
  j["messages"] = row.messages;
  j["pingpong_mb_s"] = row.pingpong_mb_s;
  j["half_rtt_us"] = row.half_rtt_us;
  j["stream_mb_s"] = row.stream_mb_s;
  j["registrations_per_message"] = row.registrations_per_message;
  j["registration_us_per_message"] = row.registration_us_per_message;
  j["cache"] = {{"hits", row.cache_hits},
                {"misses", row.cache_misses},
                {"evictions", row.cache_evictions},
                {"invalidations", row.cache_invalidations}};
  j["stream_sender"] = stats_json(row.sender);
  j["stream_receiver"] = stats_json(row.receiver);
  j["cpu_ns_per_byte"] = {{"sender", row.cpu_ns_per_byte_sender},
                          {"receiver", row.cpu_ns_per_byte_receiver}};
  j["memcpy_mb_s"] = report::optional_json(row.memcpy_mb_s);
  j["copy_pingpong_mb_s"] = report::optional_json(row.copy_pingpong_mb_s);
  j["raw_write_mb_s"] = report::optional_json(row.raw_write_mb_s);
  if (!row.raw_write_unsupported.empty()) j["raw_write_unsupported"] = row.raw_write_unsupported;
  report::print_json_line(out, j);
}

}  // namespace fabflow
