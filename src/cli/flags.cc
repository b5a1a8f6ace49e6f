// Range and name checks of the CLI's flags (flags.h).
#include "cli/flags.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "cli/commands.h"

namespace fabflow::cli {
namespace {

std::string range_text(std::int64_t lo, std::int64_t hi) {
  return std::to_string(lo) + ".." + std::to_string(hi);
}

}  // namespace

std::string long_name(const std::string& names) {
  std::string best;
  for (const auto& n : split(names, ','))
    if (best.empty() || n.size() > best.size()) best = n;
  return best;
}

std::int64_t parse_integer(const std::string& flag, const std::string& text, std::int64_t lo,
                           std::int64_t hi) {
  auto bad = [&] {
    return CLI::ValidationError(flag + " must be an integer in " + range_text(lo, hi) + ", got '" +
                                text + "'");
  };
  if (text.empty()) throw bad();
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE || v < lo || v > hi ||
      std::isspace(static_cast<unsigned char>(text.front())))
    throw bad();
  return v;
}

double parse_real(const std::string& flag, const std::string& text, double lo, double hi) {
  std::ostringstream range;
  range << lo << ".." << hi;
  auto bad = [&] {
    return CLI::ValidationError(flag + " must be a number in " + range.str() + ", got '" + text +
                                "'");
  };
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) throw bad();
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (*end != '\0' || !std::isfinite(v) || v < lo || v > hi) throw bad();
  return v;
}

CLI::Option* add_real(CLI::App& app, const std::string& names, double& var, double lo, double hi,
                      const std::string& help) {
  const std::string flag = long_name(names);
  std::ostringstream range;
  range << lo << ".." << hi;
  auto* opt = app.add_option_function<std::string>(
      names,
      [&var, flag, lo, hi](const std::string& text) { var = parse_real(flag, text, lo, hi); },
      help + " (" + range.str() + ")");
  opt->type_name(kRealType);
  return opt;
}

CLI::Validator choice_validator(std::function<bool(const std::string&)> accept,
                                std::vector<std::string> valid, bool list) {
  return CLI::Validator(
      [accept, valid, list](std::string& value) -> std::string {
        std::vector<std::string> items = list ? split(value, ',') : std::vector<std::string>{value};
        if (items.empty()) return "no value given";
        for (const auto& item : items)
          if (!accept(item)) {
            std::string names;
            for (const auto& n : valid) names += (names.empty() ? "" : ", ") + n;
            return "unknown value '" + item + "' (use " + names + ")";
          }
        return {};
      },
      "");
}

std::vector<std::size_t> parse_sizes_or_zero(const std::string& text, const std::string& flag) {
  std::vector<std::size_t> out;
  for (const auto& item : split(text, ',')) {
    if (item == "0") {
      out.push_back(0);
      continue;
    }
    auto more = parse_sizes(item);
    out.insert(out.end(), more.begin(), more.end());
  }
  if (out.empty()) throw UsageError((flag.empty() ? "" : flag + ": ") + "no sizes given");
  return out;
}

}  // namespace fabflow::cli
