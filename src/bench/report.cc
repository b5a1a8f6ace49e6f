// Reporters for the raw benchmarks: a header echoing configuration and environment, a fixed-
// column table with units, and JSON lines (fields documented in docs/bench-output.md).
#include <fabflow/bench.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <ostream>
#include <string>

namespace fabflow {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string size_text(std::size_t s) {
  if (s >= (1u << 20) && s % (1u << 20) == 0) return std::to_string(s >> 20) + "M";
  if (s >= (1u << 10) && s % (1u << 10) == 0) return std::to_string(s >> 10) + "K";
  return std::to_string(s);
}

std::string test_name(RawTest t) { return t == RawTest::latency ? "latency" : "bandwidth"; }

nlohmann::json common_fields(const RawResult& r, const RawRow& row) {
  const auto& e = r.env;
  return {
      {"type", test_name(row.test)},
      {"bench", "raw"},
      {"provider", e.caps.provider},
      {"endpoint", std::string(to_string(e.caps.endpoint))},
      {"op", std::string(to_string(row.op))},
      {"size_bytes", row.size},
      {"iterations", row.iterations},
      {"warmup", r.params.warmup},
      {"inject", row.injected},
      {"inject_size", e.caps.inject_size},
      {"signal_every", r.params.signal_every},
      {"progress", std::string(to_string(r.params.progress))},
      {"progress_thread", {{"initiator", e.progress_thread_initiator},
                           {"target", e.progress_thread_target}}},
      {"pinned", e.pinned},
      {"cpus", {{"initiator", e.cpu_initiator}, {"target", e.cpu_target}}},
      {"clock", e.clock},
      {"build_type", e.build_type},
      {"fabflow_version", e.fabflow_version},
      {"libfabric_version", e.libfabric_version},
      {"cpu_ns_per_msg", {{"initiator", row.cpu.initiator_ns_per_msg},
                          {"target", row.cpu.target_ns_per_msg}}},
      {"progress_thread_cpu_s", row.cpu.progress_thread_s},
      {"instructions_per_msg", nullptr},
      {"cycles_per_msg", nullptr},
  };
}

}  // namespace

void print_raw_header(std::ostream& out, const RawResult& r) {
  const auto& e = r.env;
  const auto& c = e.caps;
  out << "# fabflow " << e.fabflow_version << " bench raw  (libfabric " << e.libfabric_version
      << ", build " << e.build_type << (e.sanitizer.empty() ? "" : "+" + e.sanitizer) << ")\n"
      << "# provider " << c.provider << "  endpoint " << to_string(c.endpoint) << "  fabric "
      << c.fabric << "  domain " << c.domain << "\n"
      << "# inject_size " << c.inject_size << "  max_msg_size "
      << (c.max_msg_size >= (std::size_t{1} << 48) ? std::string("unlimited")
                                                    : std::to_string(c.max_msg_size))
      << "  cq_data_size " << c.cq_data_size << "  data progress "
      << (c.data_progress_manual ? "manual" : "auto") << "\n"
      << "# op " << to_string(r.params.op) << "  warmup " << r.params.warmup << "  window "
      << r.params.window << "  signal every " << r.params.signal_every << "  batch "
      << r.params.batch << "  inject " << (r.params.inject ? "on" : "off") << "\n"
      << "# progress " << to_string(r.params.progress) << " (thread: initiator "
      << (e.progress_thread_initiator ? "yes" : "no") << ", target "
      << (e.progress_thread_target ? "yes" : "no") << ")  pinned "
      << (e.pinned ? "cpu " + std::to_string(e.cpu_initiator) + " / cpu " +
                         std::to_string(e.cpu_target)
                   : std::string("NO"))
      << "  clock " << e.clock << "  launcher " << e.launcher << "\n"
      << "# latency: one-way (half the round trip) for send/write/writedata, completion time "
         "for read/atomics; warm-up excluded; hw counters n/a\n";
  if (e.build_type != "Release" && e.build_type != "RelWithDebInfo")
    out << "# WARNING: " << e.build_type << " build: numbers are not representative\n";
  if (!e.sanitizer.empty())
    out << "# WARNING: sanitizer build (" << e.sanitizer << "): numbers are not representative\n";
  if (!e.pinned) out << "# WARNING: threads are not pinned: busy-polling numbers may be far off\n";
}

void print_raw_table(std::ostream& out, const RawResult& r) {
  char line[256];
  bool header = false;
  for (const auto& row : r.rows) {
    if (row.test != RawTest::latency) continue;
    if (!header) {
      out << "\n  op          bytes    iters  mean(us)   p50(us)   p90(us)   p99(us) p99.9(us)"
             "   max(us)  cpu ns/msg init/target\n";
      header = true;
    }
    const auto& l = row.latency;
    std::snprintf(line, sizeof line,
                  "  %-10s %6s %8llu %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f  %7.0f / %-7.0f %s%s\n",
                  std::string(to_string(row.op)).c_str(), size_text(row.size).c_str(),
                  static_cast<unsigned long long>(row.iterations), l.mean / 1e3, l.p50 / 1e3,
                  l.p90 / 1e3, l.p99 / 1e3, l.p999 / 1e3, l.max / 1e3,
                  row.cpu.initiator_ns_per_msg, row.cpu.target_ns_per_msg,
                  row.injected ? "inject" : "", row.one_way ? "" : " (completion time)");
    out << line;
  }
  header = false;
  for (const auto& row : r.rows) {
    if (row.test != RawTest::bandwidth) continue;
    if (!header) {
      out << "\n  op          bytes    iters       MB/s     Mmsg/s  cpu ns/msg init/target\n";
      header = true;
    }
    std::snprintf(line, sizeof line, "  %-10s %6s %8llu %10.2f %10.4f  %7.0f / %-7.0f %s\n",
                  std::string(to_string(row.op)).c_str(), size_text(row.size).c_str(),
                  static_cast<unsigned long long>(row.iterations), row.mbps,
                  row.msgs_per_s / 1e6, row.cpu.initiator_ns_per_msg,
                  row.cpu.target_ns_per_msg, row.injected ? "inject" : "");
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
      const auto& l = row.latency;
      j["latency_kind"] = row.one_way ? "one_way" : "completion";
      j["latency_ns"] = {{"mean", l.mean}, {"min", l.min},   {"p50", l.p50}, {"p90", l.p90},
                         {"p99", l.p99},   {"p999", l.p999}, {"max", l.max}};
    } else {
      j["window"] = r.params.window;
      j["batch"] = r.params.batch;
      j["seconds"] = row.seconds;
      j["MBps"] = row.mbps;
      j["msgs_per_s"] = row.msgs_per_s;
    }
    out << j.dump() << "\n";
  }
  out.flush();
}

}  // namespace fabflow
