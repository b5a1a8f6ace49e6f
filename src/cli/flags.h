// Flag registration with the checks in the parser: numeric flags with a declared range, and
// enumerated flags checked against their enum's name table (include/fabflow/names.h). A bad
// value is one line naming the flag, what it accepts and what it got; the CLI exits with 2.
#pragma once

#include <fabflow/bench/common.h>
#include <fabflow/names.h>
#include <fabflow/status.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <sstream>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace fabflow::cli {

// The help text's type for every numeric flag ("N" integers, "X" reals); the bad-input test
// finds the numeric flags of each subcommand by it.
inline constexpr const char* kIntegerType = "N";
inline constexpr const char* kRealType = "X";

// The largest count any count flag takes (items, iterations, requests): 10^12.
inline constexpr std::uint64_t kMaxCount = 1'000'000'000'000;

// "--items" from "-I,--items".
std::string long_name(const std::string& names);

// Parses the whole of `text` as a decimal integer in [lo, hi]; throws CLI::ValidationError
// "<flag> must be in lo..hi, got '<text>'".
std::int64_t parse_integer(const std::string& flag, const std::string& text, std::int64_t lo,
                           std::int64_t hi);
double parse_real(const std::string& flag, const std::string& text, double lo, double hi);

// An integer flag whose value must lie in [lo, hi] (hi is at most INT64_MAX).
template <class T>
CLI::Option* add_number(CLI::App& app, const std::string& names, T& var, T lo, T hi,
                        const std::string& help) {
  static_assert(std::is_integral_v<T>);
  const std::string flag = long_name(names);
  const auto l = static_cast<std::int64_t>(lo);
  const auto h = static_cast<std::int64_t>(std::min<std::uint64_t>(
      static_cast<std::uint64_t>(hi),
      static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())));
  auto* opt = app.add_option_function<std::string>(
      names,
      [&var, flag, l, h](const std::string& text) {
        var = static_cast<T>(parse_integer(flag, text, l, h));
      },
      help + " (" + std::to_string(l) + ".." + std::to_string(h) + ")");
  opt->type_name(kIntegerType);
  return opt;
}

CLI::Option* add_real(CLI::App& app, const std::string& names, double& var, double lo, double hi,
                      const std::string& help);

// Checks the value, or with `list` each comma-separated item, with `accept`; a refused item
// is reported with the valid names `valid`.
CLI::Validator choice_validator(std::function<bool(const std::string&)> accept,
                                std::vector<std::string> valid, bool list);

// An enumerated flag over E's name table; the value stays text for the command to turn into
// E with parse_name<E> (which cannot fail once this check passed).
template <class E>
CLI::Option* add_choice(CLI::App& app, const std::string& names, std::string& var,
                        const std::string& help, bool list = false,
                        std::vector<std::string> extra = {}) {
  std::vector<std::string> valid;
  for (E v : all_values<E>()) valid.emplace_back(name_of(v));
  valid.insert(valid.end(), extra.begin(), extra.end());
  auto accept = [extra](const std::string& s) {  // aliases too
    return parse_name<E>(s).has_value() || std::find(extra.begin(), extra.end(), s) != extra.end();
  };
  std::string shown;
  for (const auto& v : valid) shown += (shown.empty() ? "" : ",") + v;
  auto* opt = app.add_option(names, var, help);
  opt->check(
      choice_validator(accept, valid, list).description("{" + shown + "}" + (list ? "[,..]" : "")));
  return opt;
}

// add_choice for a comma-separated list of E's names, or "all".
template <class E>
CLI::Option* add_choice_list(CLI::App& app, const std::string& names, std::string& var,
                             const std::string& help) {
  return add_choice<E>(app, names, var, help, /*list=*/true, {"all"});
}

// The counts of a family that measures a number of requests: measured and warm-up, at their
// defaults.
struct MeasuredCounts {
  std::uint64_t measured = 10000;
  std::uint64_t warmup = 1000;
};

// The measured count (`names`, e.g. "-I,--requests") and the warm-up count (-w,--warmup) of
// `what` ("requests per client"): "measured <what>" and "<what> not measured".
inline void add_measured_counts(CLI::App& app, const std::string& names, MeasuredCounts& counts,
                                const std::string& what) {
  add_number<std::uint64_t>(app, names, counts.measured, 1, kMaxCount, "measured " + what);
  add_number<std::uint64_t>(app, "-w,--warmup", counts.warmup, 0, kMaxCount,
                            what + " not measured");
}

// --seed: a seed in 0..INT64_MAX.
inline CLI::Option* add_seed(CLI::App& app, std::uint64_t& seed, const std::string& help) {
  return add_number<std::uint64_t>(app, "--seed", seed, 0, std::numeric_limits<std::int64_t>::max(),
                                   help);
}

// One size ("64K", "1M") for `flag`; throws UsageError for a list, a sweep or malformed text.
inline std::size_t parse_one_size(const std::string& flag, const std::string& text) {
  auto v = parse_sizes(text);
  if (v.size() != 1) throw UsageError(flag + " takes one size, got '" + text + "'");
  return v.front();
}

// parse_sizes, plus 0 (a header-only message) as a list item of its own. An empty list is a
// UsageError ("<flag>: no sizes given", or without the flag's name when `flag` is empty).
std::vector<std::size_t> parse_sizes_or_zero(const std::string& text, const std::string& flag = "");

// The values of a comma-separated list of E's names (as add_choice(..., list=true) checked
// them), "all" meaning every value. Throws UsageError for an unknown name or an empty list.
template <class E>
std::vector<E> parse_choice_list(const std::string& text) {
  std::vector<E> out;
  std::string name;
  std::istringstream in(text);
  while (std::getline(in, name, ',')) {
    if (name.empty()) continue;
    if (name == "all") {
      auto every = all_values<E>();
      out.insert(out.end(), every.begin(), every.end());
    } else if (auto v = parse_name<E>(name)) {
      out.push_back(*v);
    } else {
      throw UsageError("unknown value '" + name + "' (use " + name_list<E>() + " or all)");
    }
  }
  if (out.empty()) throw UsageError("no value given");
  return out;
}

// parse_choice_list without repeats, in the order first given; "all" alone or nothing is
// `every` (a family's own list, which may leave out a value such as "auto").
template <class E, std::size_t N>
std::vector<E> parse_choice_set(const std::string& text, const E (&every)[N]) {
  if (text.empty() || text == "all") return {std::begin(every), std::end(every)};
  std::vector<E> out;
  for (E v : parse_choice_list<E>(text))
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  return out;
}

}  // namespace fabflow::cli
