// Reading an advise profile back for `auto` (fabflow/advice.h, docs/advise.md).
#include <fabflow/advice.h>
#include <fabflow/version.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>

#include "common/machine.h"

namespace fabflow::advice {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// "64", "4K", "1M", "2G" (binary multiples, as the benches' -S): bytes, or nullopt.
std::optional<std::size_t> size_of(const std::string& text) {
  std::size_t i = 0, n = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) && n < (1ull << 40))
    n = n * 10 + static_cast<std::size_t>(text[i++] - '0');
  if (i == 0) return std::nullopt;
  const std::string rest = text.substr(i);
  if (rest.empty()) return n;
  if (rest == "K" || rest == "k") return n << 10;
  if (rest == "M") return n << 20;
  if (rest == "G") return n << 30;
  return std::nullopt;
}

std::string str(const json& j, const char* key, const char* dflt = "") {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>()
                                                                : std::string(dflt);
}

// Why profile `a` cannot answer `q` ("" when it can).
std::string mismatch(const json& a, const Query& q) {
  if (str(a, "family") != q.family) return "it is for another family";
  if (str(a, "fabflow_version") != FABFLOW_VERSION)
    return "it was measured by fabflow " + str(a, "fabflow_version", "?");
  const MachineIdentity& here = machine_identity();
  const json fp = a.contains("fingerprint") ? a["fingerprint"] : json::object();
  const unsigned cores = fp.is_object() && fp.contains("cores") && fp["cores"].is_number_unsigned()
                             ? fp["cores"].get<unsigned>()
                             : 0u;
  if (str(fp, "cpu_model") != here.cpu_model || cores != here.cores ||
      str(fp, "kernel") != here.kernel)
    return "it was measured on another machine (" + str(fp, "cpu_model", "?") + ", " +
           std::to_string(cores) + " cores, kernel " + str(fp, "kernel", "?") + ")";
  bool measured = false;
  if (a.contains("providers") && a["providers"].is_array())
    for (const auto& p : a["providers"]) measured = measured || (p.is_string() && p == q.provider);
  if (!measured) return "it did not measure " + q.provider;
  const json w = a.contains("workload") ? a["workload"] : json::object();
  const std::string size = str(w, "size");
  if (q.size == 0 ? !size.empty() : size_of(size) != q.size)
    return "it measured size '" + size + "', not " +
           (q.size == 0 ? std::string("none") : std::to_string(q.size) + " bytes");
  if (w.is_object() && w.contains("args") && w["args"].is_array() && !w["args"].empty()) {
    std::string args;
    for (const auto& x : w["args"])
      args += (args.empty() ? "" : " ") + (x.is_string() ? x.get<std::string>() : x.dump());
    return "its workload had more bench flags (" + args + ")";
  }
  const std::string objective = str(a, "objective");
  if (std::find(q.objectives.begin(), q.objectives.end(), objective) == q.objectives.end()) {
    std::string wanted;
    for (const auto& o : q.objectives) wanted += (wanted.empty() ? "" : " or ") + o;
    return "it ranks by " + objective + ", not " + wanted;
  }
  return "";
}

}  // namespace

fs::path default_profile(std::string_view family) {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const fs::path dir =
      cache && *cache ? fs::path(cache) : fs::path(home && *home ? home : "/tmp") / ".cache";
  return dir / "fabflow" / ("advise-" + std::string(family) + ".json");
}

ProfileAnswer read_profile(const Query& q) {
  ProfileAnswer out;
  const fs::path path = q.profile.empty() ? default_profile(q.family) : fs::path(q.profile);
  std::ifstream in(path);
  if (!in) {
    out.why_not =
        "no profile at " + path.string() + " (fabflow advise " + q.family + " writes one)";
    return out;
  }
  const json a = json::parse(in, nullptr, false);
  if (a.is_discarded() || !a.is_object() || str(a, "type") != "advice" || !a.contains("ranked") ||
      !a["ranked"].is_array()) {
    out.why_not = "the profile " + path.string() + " is not an advise profile: ignored";
    return out;
  }
  if (out.why_not = mismatch(a, q); !out.why_not.empty()) return out;
  out.source = "profile " + path.string() + " (" + str(a, "created", "?") + ")";
  out.unit = str(a, "unit");
  for (const auto& r : a["ranked"]) {
    if (!r.is_object() || str(r, "provider") != q.provider || !r.contains("design") ||
        !r["design"].is_string() || !r.contains("median") || !r["median"].is_number())
      continue;
    out.ranked.push_back(
        {r["design"].get<std::string>(), r["median"].get<double>(), str(r, "status") == "tied"});
  }
  if (out.ranked.empty()) out.why_not = "the profile ranks no design on " + q.provider;
  return out;
}

Choice choose(const ProfileAnswer& profile, const std::vector<std::string>& rule_order,
              std::string_view rule,
              const std::function<std::string(const std::string& design)>& allowed) {
  std::string cannot;  // the profile's designs ahead of the choice that cannot open here
  for (std::size_t i = 0; i < profile.ranked.size(); ++i) {
    const RankedDesign& r = profile.ranked[i];
    if (const std::string why_not = allowed(r.design); !why_not.empty()) {
      cannot += (cannot.empty() ? "" : "; ") + r.design + " cannot open here: " + why_not;
      continue;
    }
    std::string why = profile.source + ": median " + value_text(r.median, profile.unit);
    if (i + 1 < profile.ranked.size()) {
      const RankedDesign& next = profile.ranked[i + 1];
      why += ", next " + next.design + " " + value_text(next.median, profile.unit) +
             (next.tied ? " (tied)" : "");
    }
    if (!cannot.empty()) why += "; ahead of it " + cannot;
    return {r.design, why, true};
  }
  const std::string not_used = profile.ranked.empty()
                                   ? "no profile used: " + profile.why_not
                                   : "no design of the profile can open here (" + cannot + ")";
  std::string refused;
  for (const std::string& d : rule_order) {
    if (const std::string why_not = allowed(d); why_not.empty())
      return {d, "the rule: " + std::string(rule) + "; " + not_used, false};
    else
      refused += (refused.empty() ? "" : "; ") + d + ": " + why_not;
  }
  return {"", "no design can open here (" + refused + "); " + not_used, false};
}

std::string value_text(double v, std::string_view unit) {
  std::ostringstream s;
  s << std::setprecision(3);
  const double a = std::fabs(v);
  if (unit == "ns") {
    if (a >= 1e6)
      s << v / 1e6 << " ms";
    else if (a >= 1e3)
      s << v / 1e3 << " us";
    else
      s << v << " ns";
    return s.str();
  }
  if (a >= 1e9)
    s << v / 1e9 << " G ";
  else if (a >= 1e6)
    s << v / 1e6 << " M ";
  else if (a >= 1e4)
    s << v / 1e3 << " k ";
  else if (a >= 100)
    s << std::fixed << std::setprecision(0) << v << " ";
  else
    s << v << " ";
  return s.str() + std::string(unit);
}

}  // namespace fabflow::advice
