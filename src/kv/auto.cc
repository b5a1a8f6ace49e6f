// auto: which design a key-value store opens when its options name none (kv.h, choose_design;
// docs/advise.md, "auto"), and the first step of every store's setup: all ranks open the same
// design.
#include <fabflow/advice.h>
#include <fabflow/bootstrap.h>
#include <fabflow/kv.h>

#include <iterator>

#include "kv/internal.h"

namespace fabflow::kv {

namespace {

// The value size `bench kv` stores unless told otherwise, and so what a profile measured.
constexpr std::size_t kProfiledValueBytes = 32;

// Empty when the provider `to` names runs `design` for `o`, else why not.
std::string why_not_on(const TransportOptions& to, const Options& o, Design design) {
  TransportOptions probe = to;
  probe.ops = required_ops(design);
  Options one = o;
  one.automatic = false;
  one.design = design;
  try {
    return why_unsupported(probe_transport(probe), one);
  } catch (const UsageError& e) {
    return e.what();
  }
}

}  // namespace

AutoDesign choose_design(const TransportOptions& to, const Options& o) {
  TransportOptions probe = to;
  probe.ops = required_ops(Design::herd);  // every design's operations include herd's
  // bench kv takes no -S: size 0.
  const advice::Query q{"kv", probe_transport(probe).provider, 0, {o.objective}, o.profile};
  advice::ProfileAnswer profile = advice::read_profile(q);
  if (!profile.ranked.empty() && o.value_bytes != kProfiledValueBytes) {
    profile.ranked.clear();
    profile.why_not = "it measured " + std::to_string(kProfiledValueBytes) + "-byte values, not " +
                      std::to_string(o.value_bytes);
  }
  std::vector<std::string> rule;
  for (Design d : kAllDesigns) rule.emplace_back(to_string(d));
  auto allowed = [&](const std::string& name) -> std::string {
    const auto d = parse_design(name);
    return d ? why_not_on(to, o, *d) : "not a design of this fabflow";
  };
  const advice::Choice c = advice::choose(
      profile, rule,
      "herd, as seed 001 finds RPCs over RDMA the best design for a networked key-value store, "
      "else the first design the provider runs",
      allowed);
  return {c.design, c.why};
}

namespace detail {

Options resolve_auto(const TransportOptions& to, const Options& o, std::string* why) {
  if (o.objective != "throughput" && o.objective != "p50" && o.objective != "p99")
    throw UsageError("kv: auto: objective '" + o.objective + "' is not throughput, p50 or p99");
  const AutoDesign c = choose_design(to, o);
  if (c.name.empty()) throw UsageError("kv: auto: " + c.why);
  Options out = o;
  out.automatic = false;
  out.design = parse_design(c.name).value();
  TransportOptions probe = to;
  probe.ops = required_ops(out.design);
  *why = "auto on " + probe_transport(probe).provider + ": " + c.name + " (" + c.why + ")";
  return out;
}

void agree_on_design(Bootstrap& boot, Design mine) {
  const auto all =
      allgather_value(boot, static_cast<std::uint8_t>(mine), "kv: the design a rank opens");
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r] == static_cast<std::uint8_t>(mine)) continue;
    const int rank = static_cast<int>(r);
    if (all[r] >= std::size(kAllDesigns))
      throw PeerError(rank, "kv: rank " + std::to_string(r) + " announced an unknown design");
    throw PeerError(rank, "kv: rank " + std::to_string(r) + " opened " +
                              std::string(to_string(Design{all[r]})) + ", this rank " +
                              std::string(to_string(mine)) +
                              " (every rank must open the same design; with auto each rank "
                              "chooses from its own profile and provider)");
  }
}

}  // namespace detail

}  // namespace fabflow::kv
