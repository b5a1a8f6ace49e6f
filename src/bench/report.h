// What every family's reporters share: the header with its warnings, the environment and
// latency objects of the JSON lines, and number formatting. One place, so the families print
// the same facts the same way.
#pragma once

#include <fabflow/bench/common.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fabflow::report {

// "# fabflow <version> (<revision>) bench <family> ..." then the machine, the provider, the
// family's own `config` lines (each printed after "# "), pinning and clock, and one "# WARNING:"
// line per environment_warnings() entry.
void print_header(std::ostream& out, const RunEnvironment& env, std::string_view family,
                  const std::vector<std::string>& config);

// print_header, then after a blank line the table's `columns` line, flushed: the header of the
// families whose rows come one at a time.
void print_table_header(std::ostream& out, const RunEnvironment& env, std::string_view family,
                        const std::vector<std::string>& config, const std::string& columns);

// The "environment" object of every JSON line (docs/bench-output.md).
nlohmann::json environment_json(const RunEnvironment& env);

// {mean, stdev, min, p50, p90, p99, p999, p9999, max} in nanoseconds, the sample count, and
// the histogram as [lower_ns, upper_ns, count] rows where this process has it
// (docs/bench-output.md).
nlohmann::json latency_json(const LatencyStats& l);

// The fields every family's JSON line starts with: bench, provider, endpoint, inject_size,
// pinned, clock, versions, build type and the environment object.
nlohmann::json base_row(const RunEnvironment& env, std::string_view family);

// The value, or JSON null where the run did not measure it.
nlohmann::json optional_json(const std::optional<double>& v);

// 64, 4K, 1M.
std::string size_text(std::size_t bytes);

// printf-style formatting of one number.
std::string fmt(const char* format, double v);

// fmt of the value, or "n/a" where the run did not measure it.
std::string fmt_or_na(const std::optional<double>& v, const char* format);

// Hits, misses and invalidations of a registration cache: "12/3/0".
std::string cache_counts(std::uint64_t hits, std::uint64_t misses, std::uint64_t invalidations);

// Writes `j` as one line and flushes.
void print_json_line(std::ostream& out, const nlohmann::json& j);

// For a row that did not run (`why` not empty): writes `j` with "unsupported": why as its line
// and returns true. Returns false for a row that ran.
bool print_if_unsupported(std::ostream& out, nlohmann::json& j, const std::string& why);

// For a design that did not run (`why` not empty): writes its table line,
// "  <design, 14 wide> unsupported: <why>", and returns true. Returns false for one that ran.
bool print_if_unsupported_design(std::ostream& out, const std::string& design,
                                 const std::string& why);

// The JSON line of a design's row of the client-server families (kv, seq) as it starts:
// base_row of `family`, the line's `type`, the design, its series name (`variant`), the workers,
// the clients, what each keeps in flight, the batch.
template <class Row>
nlohmann::json design_row(const RunEnvironment& env, std::string_view family, std::string_view type,
                          const Row& row, const std::string& variant) {
  nlohmann::json j = base_row(env, family);
  j["type"] = type;
  j["design"] = std::string(to_string(row.design));
  j["variant"] = variant;
  j["workers"] = row.workers;
  j["clients"] = row.clients;
  j["outstanding"] = row.outstanding;
  j["batch"] = row.batch;
  return j;
}

// Warns on stderr (JSON mode, where stdout holds only rows) about each environment_warnings().
void warn_stderr(const RunEnvironment& env);

}  // namespace fabflow::report

namespace fabflow {

// The latency object of the JSON lines, and back: the figures and, where present, the histogram
// as [lower_ns, upper_ns, count] rows (report::latency_json is to_json).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(LatencyFigures, mean, stdev, min, p50, p90, p99, p999, p9999,
                                   max, samples)
void to_json(nlohmann::json& j, const LatencyStats& l);
void from_json(const nlohmann::json& j, LatencyStats& l);

}  // namespace fabflow
