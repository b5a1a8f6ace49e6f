// Reporters for the raw benchmarks: a header echoing configuration and environment, a fixed-
// column table with units, and JSON lines (fields documented in docs/bench-output.md).
#include <fabflow/bench/raw.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>

#include "bench/report.h"

namespace fabflow {
namespace {

using report::fmt;
using report::size_text;

std::string test_name(RawTest t) { return t == RawTest::latency ? "latency" : "bandwidth"; }

nlohmann::json common_fields(const RawResult& r, const RawRow& row) {
  const auto& e = r.env;
  nlohmann::json j = report::base_row(e, "raw");
  j.update({
      {"type", test_name(row.test)},
      {"op", std::string(to_string(row.op))},
      {"size_bytes", row.size},
      {"iterations", row.iterations},
      {"warmup", r.params.warmup},
      {"inject", row.injected},
      {"signal_every", r.params.signal_every},
      {"progress", std::string(to_string(r.params.progress))},
      {"progress_thread",
       {{"initiator", e.progress_thread_initiator}, {"target", e.progress_thread_target}}},
      {"cpus", {{"initiator", e.cpu_initiator}, {"target", e.cpu_target}}},
      {"cpu_ns_per_msg",
       {{"initiator", row.cpu.initiator_ns_per_msg}, {"target", row.cpu.target_ns_per_msg}}},
      {"progress_thread_cpu_s", row.cpu.progress_thread_s},
      {"instructions_per_msg", nullptr},
      {"cycles_per_msg", nullptr},
  });
  return j;
}

}  // namespace

void print_raw_header(std::ostream& out, const RawResult& r) {
  const auto& e = r.env;
  const auto& p = r.params;
  report::print_header(
      out, e, "raw",
      {"op " + std::string(to_string(p.op)) + "  warmup " + std::to_string(p.warmup) + "  window " +
           std::to_string(p.window) + "  signal every " + std::to_string(p.signal_every) +
           "  batch " + std::to_string(p.batch) + "  queues " + std::to_string(p.queues) +
           "  threads " + std::to_string(p.threads) + "  inject " + (p.inject ? "on" : "off"),
       "FI_MORE (batch > 1): " + r.more_hint,
       "progress " + std::string(to_string(p.progress)) + " (thread: initiator " +
           (e.progress_thread_initiator ? "yes" : "no") + ", target " +
           (e.progress_thread_target ? "yes" : "no") + ")",
       "latency: one-way (half the round trip) for send/write/writedata, completion time for "
       "read/atomics; warm-up excluded; hw counters n/a"});
}

void print_raw_table(std::ostream& out, const RawResult& r) {
  char line[256];
  bool header = false;
  for (const auto& row : r.rows) {
    if (row.test != RawTest::latency) continue;
    if (!header) {
      out << "\n  op          bytes    iters  mean(us)   p50(us)   p90(us)   p99(us) p99.9(us)"
             " p99.99(us)   max(us)  cpu ns/msg init/target\n";
      header = true;
    }
    const auto& l = row.latency;
    std::snprintf(line, sizeof line,
                  "  %-10s %6s %8llu %9.3f %9.3f %9.3f %9.3f %9.3f %10.3f %9.3f  %7.0f / %-7.0f "
                  "%s%s\n",
                  std::string(to_string(row.op)).c_str(), size_text(row.size).c_str(),
                  static_cast<unsigned long long>(row.iterations), l.mean / 1e3, l.p50 / 1e3,
                  l.p90 / 1e3, l.p99 / 1e3, l.p999 / 1e3, l.p9999 / 1e3, l.max / 1e3,
                  row.cpu.initiator_ns_per_msg, row.cpu.target_ns_per_msg,
                  row.injected ? "inject" : "", row.one_way ? "" : " (completion time)");
    out << line;
  }
  header = false;
  for (const auto& row : r.rows) {
    if (row.test != RawTest::bandwidth) continue;
    if (!header) {
      out << "\n  op          bytes    iters       MB/s     Mmsg/s  cpu ns/msg init/target\n";
      if (r.params.threads > 1)
        out << "  (" << r.params.threads << " initiator threads"
            << (row.threads_pinned ? ", each on a core of its own" : ", not pinned (too few cores)")
            << ": iters, MB/s and Mmsg/s are their sum; per thread in --json)\n";
      header = true;
    }
    std::snprintf(line, sizeof line, "  %-10s %6s %8llu %10.2f %10.4f  %7.0f / %-7.0f %s\n",
                  std::string(to_string(row.op)).c_str(), size_text(row.size).c_str(),
                  static_cast<unsigned long long>(row.iterations), row.mbps, row.msgs_per_s / 1e6,
                  row.cpu.initiator_ns_per_msg, row.cpu.target_ns_per_msg,
                  row.injected ? "inject" : "");
    out << line;
  }
  if (!r.rows.empty() && r.rows.front().cpu.progress_thread_s > 0)
    out << "\n  progress threads used " << fmt("%.3f", r.rows.front().cpu.progress_thread_s)
        << " CPU s over the whole run\n";
  out.flush();
}

void print_raw_json(std::ostream& out, const RawResult& r) {
  for (const auto& row : r.rows) {
    nlohmann::json j = common_fields(r, row);
    if (row.test == RawTest::latency) {
      j["latency_kind"] = row.one_way ? "one_way" : "completion";
      j["reliable"] = row.reliable;
      j["lost"] = row.lost;  // unreliable endpoints: pings of `iterations` with no answer
      j["latency_ns"] = report::latency_json(row.latency);
    } else {
      j["window"] = r.params.window;
      j["batch"] = r.params.batch;
      j["batching"] = r.params.batch > 1;
      j["queues"] = r.params.queues;
      j["more_hint"] = r.more_hint;
      j["seconds"] = row.seconds;
      j["MBps"] = row.mbps;
      j["msgs_per_s"] = row.msgs_per_s;
      j["threads"] = row.threads;
      j["threads_pinned"] = row.threads_pinned;
      nlohmann::json shares = nlohmann::json::array();
      for (const auto& t : row.per_thread)
        shares.push_back({{"cpu", t.cpu},
                          {"iterations", t.iterations},
                          {"seconds", t.seconds},
                          {"MBps", t.mbps},
                          {"msgs_per_s", t.msgs_per_s}});
      j["per_thread"] = shares;
      if (!row.per_thread.empty()) {
        auto [lo, hi] = std::minmax_element(row.per_thread.begin(), row.per_thread.end(),
                                            [](const RawThreadShare& a, const RawThreadShare& b) {
                                              return a.msgs_per_s < b.msgs_per_s;
                                            });
        j["thread_msgs_per_s"] = {{"min", lo->msgs_per_s}, {"max", hi->msgs_per_s}};
      }
    }
    out << j.dump() << "\n";
  }
  out.flush();
}

}  // namespace fabflow
