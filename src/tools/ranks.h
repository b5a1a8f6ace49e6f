// This executable as the ranks of a launch: one rank run (meeting its peers, placed and pinned)
// and the launches of all ranks once per provider. What every bench subcommand and `bulk plan`
// do around their library entry point; the CLI turns its flags into these requests.
#pragma once

#include <fabflow/bench/common.h>
#include <fabflow/bootstrap.h>
#include <fabflow/launcher.h>
#include <fabflow/transport.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace fabflow::tools {

// One rank of a launched run, as run_rank hands it to its body.
struct Rank {
  Bootstrap& boot;
  // Where this rank's bench runs: the request's target, plus whether every rank shares this
  // host's memory (ranks_share_this_host()), the CPU this rank's thread is pinned to (-1: not
  // pinned) and the host's CPUs it may use (read before pinning).
  bench::Target target;
};

// How one rank meets its peers and where it runs.
struct RankRequest {
  bench::Target target;     // provider, endpoint type, timeout, profile
  bool pin = true;          // pin this rank's thread, and keep the idle CPUs polling meanwhile
  std::string secret_file;  // the bootstrap secret (empty: the launcher's)
  std::chrono::milliseconds min_timeout{};  // wait at least this long for the peers
  std::chrono::milliseconds silence{};      // a rank silent this long fails the run, naming it
};

// Meets the peers through the launcher's bootstrap, reads whether they all run on this host
// (Target::same_host travels on in TransportOptions), pins the thread where asked, runs `body`,
// waits for every rank at a barrier and returns 0. A failure is told to the peers (so they stop
// at once with this rank's error) and rethrown.
int run_rank(const RankRequest& request, const std::function<void(Rank&)>& body);

// Two ranks of this executable run again with `argv` (this process's) plus `extra`; in their
// own network namespaces when `netns`. A stopped rank's peers say so within `silence`; the
// launcher steps in half a second later.
LaunchConfig self_launch(const std::vector<std::string>& argv, bool netns,
                         std::chrono::milliseconds silence, const std::vector<std::string>& extra);

// The launches of a run over several providers.
struct ProviderLaunches {
  std::vector<std::string> providers;
  EndpointType endpoint = EndpointType::automatic;  // what each provider is probed with
  bool netns = false;                               // checked before anything starts
  bool blank_between = false;  // a blank line on stdout between two launches (tables)
  std::function<LaunchConfig(const std::string& provider)> launch;  // one provider's launch
};

// Probes every provider first (an unknown one is a usage error before anything starts) and
// checks --netns, then launches the ranks once per provider, in order, until a launch fails.
// Returns the exit status of the last launch.
int launch_each_provider(const ProviderLaunches& l);

}  // namespace fabflow::tools
