// What every family's reporters share: the header with its warnings, the environment and
// latency objects of the JSON lines, and number formatting. One place, so the families print
// the same facts the same way.
#pragma once

#include <fabflow/bench/common.h>

#include <nlohmann/json.hpp>

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

// Warns on stderr (JSON mode, where stdout holds only rows) about each environment_warnings().
void warn_stderr(const RunEnvironment& env);

}  // namespace fabflow::report
