// Reporters for the inbound benchmarks: header, a fixed-column table with units, and JSON
// lines (fields documented in docs/bench-output.md).
#include <fabflow/bench/inbound.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <ostream>
#include <string>

#include "bench/report.h"

namespace fabflow {
namespace {

using report::fmt;
using report::size_text;

const char* row_type(Op op) { return is_atomic(op) ? "atomics" : "inbound"; }

std::string op_list(const std::vector<Op>& ops) {
  std::string s;
  for (Op op : ops) {
    if (!s.empty()) s += ',';
    s += to_string(op);
  }
  return s;
}

std::string check_text(const InboundRow& row) {
  if (!row.checked) return "n/a";
  return row.check_passed ? "passed" : "failed";
}

}  // namespace

// The exactly-once column: the counters' sum (atomics) or the server's count of stamped
// messages (sends), against what the clients did.
std::string check_detail(const InboundRow& row) {
  if (!row.checked) return "n/a";
  if (row.op == Op::send)
    return check_text(row) + " (received " + std::to_string(row.received) + ", sent " +
           std::to_string(row.expected) + ")";
  return check_text(row) + " (sum " + std::to_string(row.counter_sum) + ", expected " +
         std::to_string(row.expected_sum) + ")";
}

void print_inbound_header(std::ostream& out, const InboundResult& r) {
  const auto& p = r.params;
  std::string counters;
  for (std::uint64_t k : p.counters) {
    if (!counters.empty()) counters += ',';
    counters += std::to_string(k);
  }
  report::print_header(
      out, r.env, "inbound",
      {"ops " + op_list(p.ops) + "  clients " + std::to_string(r.clients) + " (ranks 0.." +
           std::to_string(r.clients - 1) + ") -> server rank " + std::to_string(r.clients) +
           "  window " + std::to_string(p.window) + " per client  warmup " +
           std::to_string(p.warmup),
       "atomics: counters " + counters + "  stride " + std::to_string(p.stride) +
           " B  chosen uniformly at random (seed " + std::to_string(p.seed) + ")" +
           (p.probe_aliasing ? "  + same/different 12-low-bit pair probe" : ""),
       "server: drives progress only, and receives the sends (" +
           std::string(r.env.progress_thread_target ? "progress thread" : "inline, one thread") +
           ")" + (r.oversubscribed ? "  clients yield when idle (more ranks than CPUs)" : ""),
       "rate: all clients' measured operations / the slowest client's time (send: the server's "
       "measured receives / its time from the phase's start to the last); latency: post to "
       "completion"});
}

void print_inbound_table(std::ostream& out, const InboundResult& r) {
  char line[320];
  out << "\n  op      bytes  counters  aliasing          Mops/s      MB/s   p50(us)   p99(us)"
         "   max(us)  exactly-once\n";
  for (const auto& row : r.rows) {
    const auto& l = row.latency;
    std::snprintf(line, sizeof line, "  %-6s %6s  %8s  %-15s %9.4f %9.1f %9.3f %9.3f %9.3f  %s\n",
                  std::string(to_string(row.op)).c_str(), size_text(row.size).c_str(),
                  is_atomic(row.op) ? std::to_string(row.counters).c_str() : "-",
                  is_atomic(row.op) ? std::string(name_of(row.aliasing)).c_str() : "-",
                  row.ops_per_s / 1e6, row.mbps, l.p50 / 1e3, l.p99 / 1e3, l.max / 1e3,
                  check_detail(row).c_str());
    out << line;
  }
  out.flush();
}

void print_inbound_json(std::ostream& out, const InboundResult& r) {
  const auto& p = r.params;
  for (const auto& row : r.rows) {
    nlohmann::json j = report::base_row(r.env, "inbound");
    nlohmann::json per_client = nlohmann::json::array();
    for (std::size_t c = 0; c < row.clients.size(); ++c) {
      const auto& cl = row.clients[c];
      per_client.push_back({{"client", c},
                            {"ops", cl.ops},
                            {"seconds", cl.seconds},
                            {"ops_per_s", static_cast<double>(cl.ops) / cl.seconds},
                            {"latency_ns", report::latency_json(cl.latency)}});
    }
    j.update({
        {"type", row_type(row.op)},
        {"op", std::string(to_string(row.op))},
        {"size_bytes", row.size},
        {"clients", r.clients},
        {"window", p.window},
        {"iterations", p.iterations},
        {"warmup", p.warmup},
        {"ops", row.ops},
        {"seconds", row.seconds},
        {"ops_per_s", row.ops_per_s},
        {"MBps", row.mbps},
        {"latency_kind", "completion"},
        {"latency_ns", report::latency_json(row.latency)},
        {"per_client", per_client},
        {"progress", std::string(to_string(p.progress))},
        {"progress_thread", r.env.progress_thread_target},
        {"server_cpu_s", row.server_cpu_s},
        {"oversubscribed", r.oversubscribed},
    });
    if (is_atomic(row.op)) {
      j.update({{"counters", row.counters},
                {"stride", row.aliasing == Aliasing::none ? p.stride : 0},
                {"aliasing", std::string(name_of(row.aliasing))},
                {"probe", row.aliasing != Aliasing::none},
                {"exactly_once", check_text(row)},
                {"counter_sum", row.counter_sum},
                {"expected_sum", row.expected_sum}});
    }
    if (row.op == Op::send) {
      j.update({{"rate_of", "server"}, {"exactly_once", check_text(row)}, {"sent", row.expected}});
      if (row.checked) j["received"] = row.received;
    }
    out << j.dump() << "\n";
  }
  out.flush();
}

void print_inbound_unsupported(std::ostream& out, const RunEnvironment& env, Op op,
                               const std::string& why, bool json) {
  if (!json) {
    out << "  " << to_string(op) << "  unsupported: " << why << "\n";
    out.flush();
    return;
  }
  nlohmann::json j = report::base_row(env, "inbound");
  j.update({{"type", row_type(op)}, {"op", std::string(to_string(op))}, {"unsupported", why}});
  out << j.dump() << "\n";
  out.flush();
}

}  // namespace fabflow
