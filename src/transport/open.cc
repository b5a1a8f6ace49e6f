// Transport selection by provider name: "local" (or "auto" when every rank shares this host,
// TransportOptions::same_host) opens the native shared-memory transport, anything else
// libfabric; a profile (TransportOptions::profile) wraps either in its envelope.
#include <fabflow/bootstrap.h>
#include <fabflow/local.h>
#include <fabflow/node.h>
#include <fabflow/profile.h>
#include <fabflow/transport.h>

#include <algorithm>
#include <span>
#include <string>

namespace fabflow {
namespace {

bool wants_local(const TransportOptions& options) {
  // "auto" never picks local for an unreliable endpoint: local has none (libfabric's udp has).
  return options.provider == "local" || (options.provider == "auto" && options.same_host &&
                                         options.endpoint != EndpointType::dgram);
}

// A peer's provider name made safe to print.
std::string printable_name(std::string s) {
  for (char& c : s)
    if (c < 0x20 || c > 0x7e) c = '?';
  return s;
}

}  // namespace

std::unique_ptr<Transport> open_transport(const TransportOptions& options) {
  if (options.profile.empty()) {
    if (wants_local(options)) return open_local(options);
    return open_libfabric(options);
  }
  const ProviderProfile profile = load_profile(options.profile);
  TransportOptions bare = options;
  bare.profile.clear();
  return make_profile_transport(open_transport(bare), profile, options.ops);
}

TransportOptions for_ranks_of(TransportOptions options, Bootstrap& boot) {
  if (options.provider == "auto") options.same_host = ranks_share_this_host(boot);
  if (options.node.empty()) options.node = boot.local_address();
  return options;
}

namespace {

// Collective: every rank asks for the same provider (and so takes part in the same collectives
// after this one), else UsageError naming both.
void agree_on_provider(Bootstrap& boot, const std::string& provider) {
  const auto mine = std::as_bytes(std::span(provider.data(), provider.size()));
  const auto asked = boot.allgather(mine);
  for (std::size_t r = 0; r < asked.size(); ++r) {
    const std::string theirs(reinterpret_cast<const char*>(asked[r].data()),
                             std::min<std::size_t>(asked[r].size(), 64));
    if (theirs != provider)
      throw UsageError("transport: rank " + std::to_string(r) + " asked for provider '" +
                       printable_name(theirs) + "', rank " + std::to_string(boot.rank()) +
                       " for '" + provider + "': every rank must name the same one");
  }
}

}  // namespace

std::unique_ptr<Transport> connect_transport(TransportOptions given, Bootstrap& boot,
                                             std::string* choice) {
  const bool automatic = given.provider == "auto";
  agree_on_provider(boot, given.provider);
  const TransportOptions options = for_ranks_of(std::move(given), boot);
  auto transport = open_transport(options);
  transport->connect(boot);
  if (choice) {
    const Capabilities& caps = transport->caps();
    std::string what = caps.provider;
    if (caps.provider != "local") what += " " + std::string(to_string(caps.endpoint));
    if (!automatic)
      *choice = what + " (as asked)";
    else if (options.same_host && caps.provider == "local")
      *choice = "auto: local (every rank shares this host)";
    else if (options.same_host)
      *choice = "auto: " + what + " (every rank shares this host, but local has no " +
                std::string(to_string(options.endpoint)) + " endpoint)";
    else
      *choice = "auto: " + what + " (the ranks do not all share this host)";
  }
  return transport;
}

TransportOptions with_needs(TransportOptions options, const std::vector<Op>& ops,
                            std::size_t rx_depth) {
  for (Op op : ops)
    if (std::ranges::find(options.ops, op) == options.ops.end()) options.ops.push_back(op);
  options.rx_depth = std::max(options.rx_depth, rx_depth);
  return options;
}

Connected connect_transport(const TransportOptions& options, Peer& peer, int rank) {
  Connected c;
  c.session = &peer.bootstrap_as(rank);
  c.peer = 1 - rank;
  c.transport = connect_transport(options, *c.session, &c.provider);
  return c;
}

// Under a profile: what the profile transport would report, or its refusal as a UsageError.
Capabilities probe_transport(const TransportOptions& options) {
  const Capabilities caps =
      wants_local(options) ? local_capabilities(options) : probe_libfabric(options);
  if (options.profile.empty()) return caps;
  const ProviderProfile profile = load_profile(options.profile);
  if (std::string why = profile_refusal(caps, profile, options.ops); !why.empty())
    throw UsageError(why);
  return apply_profile(caps, profile);
}

}  // namespace fabflow
