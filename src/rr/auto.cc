// auto: which pattern a channel opens when its options name none (rr.h, choose_pattern;
// docs/advise.md, "auto").
#include <fabflow/advice.h>
#include <fabflow/rr.h>

#include "rr/endpoint.h"

namespace fabflow::rr {

namespace {

// The request size `bench rr` sends unless told otherwise, and so what a profile measured.
constexpr std::size_t kProfiledRequestBytes = 64;

}  // namespace

AutoPattern choose_pattern(const Capabilities& caps, const ChannelOptions& o) {
  const advice::Query q{"rr", caps.provider, o.response_bytes, {o.objective}, o.profile};
  advice::ProfileAnswer profile = advice::read_profile(q);
  if (!profile.ranked.empty() && o.request_bytes != kProfiledRequestBytes) {
    profile.ranked.clear();
    profile.why_not = "it measured " + std::to_string(kProfiledRequestBytes) +
                      "-byte requests, not " + std::to_string(o.request_bytes);
  }
  std::vector<std::string> rule;
  for (Pattern p : kAllPatterns) rule.push_back(std::string(to_string(p)) + "/private");
  auto allowed = [&](const std::string& design) -> std::string {
    const auto slash = design.find('/');
    if (slash == std::string::npos || design.substr(slash + 1) != "private")
      return "auto opens private connections (the dispatcher is the program's choice)";
    const auto pattern = parse_pattern(design.substr(0, slash));
    if (!pattern) return "not a pattern of this fabflow";
    ChannelOptions one = o;
    one.automatic = false;
    one.pattern = *pattern;
    return why_unsupported(caps, one);
  };
  const advice::Choice c = advice::choose(
      profile, rule,
      "WriteWrite, as seed 000 finds WRITE responses ahead of SEND ones, else the first pattern "
      "the transport runs",
      allowed);
  return {c.design.substr(0, c.design.find('/')), c.why};
}

namespace detail {

ChannelOptions resolve_auto(const Capabilities& caps, const ChannelOptions& o, std::string* why) {
  if (std::string refused = why_unsupported(caps, o); !refused.empty())
    throw UsageError("rr: " + refused);
  const AutoPattern c = choose_pattern(caps, o);
  ChannelOptions out = o;
  out.automatic = false;
  out.pattern = parse_pattern(c.name).value();
  *why = "auto on " + caps.provider + ": " + c.name + " (" + c.why + ")";
  return out;
}

}  // namespace detail

}  // namespace fabflow::rr
