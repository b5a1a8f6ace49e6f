// The header, warnings and JSON pieces every benchmark family shares.
#include "bench/report.h"

#include <cstdio>
#include <iostream>
#include <ostream>

namespace fabflow::report {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string fmt_or_na(const std::optional<double>& v, const char* format) {
  return v ? fmt(format, *v) : "n/a";
}

std::string cache_counts(std::uint64_t hits, std::uint64_t misses, std::uint64_t invalidations) {
  return std::to_string(hits) + "/" + std::to_string(misses) + "/" + std::to_string(invalidations);
}

void print_json_line(std::ostream& out, const nlohmann::json& j) {
  out << j.dump() << "\n" << std::flush;
}

bool print_if_unsupported(std::ostream& out, nlohmann::json& j, const std::string& why) {
  if (why.empty()) return false;
  j["unsupported"] = why;
  print_json_line(out, j);
  return true;
}

bool print_if_unsupported_design(std::ostream& out, const std::string& design,
                                 const std::string& why) {
  if (why.empty()) return false;
  char line[512];
  std::snprintf(line, sizeof line, "  %-14s unsupported: %s\n", design.c_str(), why.c_str());
  out << line << std::flush;
  return true;
}

nlohmann::json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::string size_text(std::size_t s) {
  if (s >= (1u << 20) && s % (1u << 20) == 0) return std::to_string(s >> 20) + "M";
  if (s >= (1u << 10) && s % (1u << 10) == 0) return std::to_string(s >> 10) + "K";
  return std::to_string(s);
}

void print_header(std::ostream& out, const RunEnvironment& e, std::string_view family,
                  const std::vector<std::string>& config) {
  const auto& c = e.caps;
  out << "# fabflow " << e.fabflow_version << " (" << e.git_revision << ") bench " << family
      << "  (libfabric " << e.libfabric_version << ", build " << e.build_type
      << (e.sanitizer.empty() ? "" : "+" + e.sanitizer) << ")\n"
      << "# machine " << e.cpu_model << ", " << e.cores << " cores, SMT " << e.smt << ", governor "
      << e.governor << ", TSC " << (e.tsc_invariant ? "invariant" : "not invariant") << ", kernel "
      << e.kernel << ", load " << fmt("%.2f", e.load_start) << "\n";
  if (!c.provider.empty())  // a run with no fabric (bench lat's socket baselines) has none
    out << "# provider " << c.provider << "  endpoint " << to_string(c.endpoint) << "  fabric "
        << c.fabric << "  domain " << c.domain << (c.stores_demoted ? "  stores demoted" : "")
        << "\n"
        << "# inject_size " << c.inject_size << "  max_msg_size "
        << (c.max_msg_size >= (std::size_t{1} << 48) ? std::string("unlimited")
                                                     : std::to_string(c.max_msg_size))
        << "  cq_data_size " << c.cq_data_size << "  data progress "
        << (c.data_progress_manual ? "manual" : "auto") << "\n";
  for (const auto& line : config) out << "# " << line << "\n";
  out << "# pinned "
      << (e.pinned
              ? "cpu " + std::to_string(e.cpu_initiator) + " / cpu " + std::to_string(e.cpu_target)
              : std::string("NO"))
      << "  clock " << e.clock << "  launcher " << e.launcher
      << (e.irqs_on_pinned >= 0
              ? "  device interrupts on the pinned cpus " + std::to_string(e.irqs_on_pinned)
              : std::string())
      << (e.cpu_idle.empty() ? std::string() : "  idle cpus " + e.cpu_idle) << "\n";
  for (const auto& w : environment_warnings(e)) out << "# WARNING: " << w << "\n";
}

void print_table_header(std::ostream& out, const RunEnvironment& env, std::string_view family,
                        const std::vector<std::string>& config, const std::string& columns) {
  print_header(out, env, family, config);
  out << "\n" << columns << "\n";
  out.flush();
}

nlohmann::json environment_json(const RunEnvironment& env) {
  RunEnvironment e = env;
  if (e.others_cpu < 0) measure_others_cpu(e);  // a row reported before the run finished
  return {{"cpu_model", e.cpu_model},
          {"cores", e.cores},
          {"governor", e.governor},
          {"smt", e.smt},
          {"tsc_invariant", e.tsc_invariant},
          {"kernel", e.kernel},
          {"load_start", e.load_start},
          {"load_end", e.load_end < 0 ? nlohmann::json(nullptr) : nlohmann::json(e.load_end)},
          {"others_cpu", e.others_cpu < 0 ? nlohmann::json(nullptr) : nlohmann::json(e.others_cpu)},
          {"busy", e.busy()},
          {"fabflow_version", e.fabflow_version},
          {"git_revision", e.git_revision},
          {"libfabric_version", e.libfabric_version},
          {"providers_found", e.providers_found},
          {"build_type", e.build_type},
          {"sanitizer", e.sanitizer},
          {"launcher", e.launcher},
          {"pinned", e.pinned},
          {"pinned_smt_siblings", e.pinned_smt_siblings},
          {"cpu_idle", e.cpu_idle.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.cpu_idle)},
          {"device_irqs_on_pinned",
           e.irqs_on_pinned < 0 ? nlohmann::json(nullptr) : nlohmann::json(e.irqs_on_pinned)},
          {"clock", e.clock}};
}

nlohmann::json latency_json(const LatencyStats& l) { return l; }

nlohmann::json base_row(const RunEnvironment& e, std::string_view family) {
  return {{"bench", family},
          {"provider", e.caps.provider},
          {"endpoint", std::string(to_string(e.caps.endpoint))},
          {"inject_size", e.caps.inject_size},
          {"stores_demoted", e.caps.stores_demoted},
          {"pinned", e.pinned},
          {"clock", e.clock},
          {"build_type", e.build_type},
          {"fabflow_version", e.fabflow_version},
          {"libfabric_version", e.libfabric_version},
          {"environment", environment_json(e)}};
}

void warn_stderr(const RunEnvironment& env) {
  for (const auto& w : environment_warnings(env)) std::cerr << "fabflow: warning: " << w << "\n";
}

}  // namespace fabflow::report

namespace fabflow {

void to_json(nlohmann::json& j, const LatencyStats& l) {
  j = static_cast<const LatencyFigures&>(l);
  if (!l.histogram.empty()) {
    nlohmann::json buckets = nlohmann::json::array();
    for (const auto& b : l.histogram) buckets.push_back({b.lower_ns, b.upper_ns, b.count});
    j["histogram"] = std::move(buckets);
  }
}

void from_json(const nlohmann::json& j, LatencyStats& l) {
  j.get_to(static_cast<LatencyFigures&>(l));
  l.histogram.clear();
  if (!j.contains("histogram")) return;
  for (const auto& b : j.at("histogram"))
    l.histogram.push_back(
        {b.at(0).get<double>(), b.at(1).get<double>(), b.at(2).get<std::uint64_t>()});
}

}  // namespace fabflow
