// `auto`: the design a fabflow object opens when its user names none, taken from what
// `fabflow advise` measured on this machine (the family's profile), else from a rule the
// caller documents. A profile is trusted only when it was measured here (same CPU model, core
// count and kernel), by this fabflow version, on the provider asked about, for the same size
// and one of the objectives wanted, with no other workload flags; anything else is ignored
// and the reason given. docs/advise.md, "auto".
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace fabflow::advice {

// Where `fabflow advise FAMILY` keeps its profile unless told otherwise:
// $XDG_CACHE_HOME/fabflow/advise-FAMILY.json, or ~/.cache/fabflow/... without it.
std::filesystem::path default_profile(std::string_view family);

struct Query {
  std::string family;    // "queue", "rr", "kv", "bulk"
  std::string provider;  // the provider whose ranking is wanted ("local", "tcp", ...)
  // The workload's item or message size in bytes (advise's -S); 0 for a family whose bench
  // takes no -S (kv), whose profiles then carry none.
  std::size_t size = 0;
  std::vector<std::string> objectives{"throughput"};  // any of these
  std::string profile;  // the file to read; empty: default_profile(family)
};

struct RankedDesign {
  std::string design;
  double median = 0;
  bool tied = false;  // tied with the profile's winner
};

// What a profile says for a query: the provider's designs best first, or why it cannot say.
struct ProfileAnswer {
  std::vector<RankedDesign> ranked;  // empty when the profile is not used
  std::string why_not;               // set when it is not used
  std::string source;                // "profile PATH (created)"
  std::string unit;                  // of the medians
};
ProfileAnswer read_profile(const Query& q);

// A profile's answer and the caller's rule made into one choice. `allowed(design)` returns ""
// when the object can open that design here, else why not: the profile's best allowed design
// wins; without one, the first allowed design of `rule_order` (the rule, described by
// `rule`). `design` is empty when nothing is allowed (`why` then says why for each).
struct Choice {
  std::string design;
  std::string why;  // "profile P (date): median 8.1 M items/s, next X 7.9 M items/s (tied)"
  bool from_profile = false;
};
Choice choose(const ProfileAnswer& profile, const std::vector<std::string>& rule_order,
              std::string_view rule,
              const std::function<std::string(const std::string& design)>& allowed);

// A measured value with its unit: times in ns, us or ms; rates and sizes with k, M, G.
std::string value_text(double v, std::string_view unit);

}  // namespace fabflow::advice
