// One rank of this executable, and its launches once per provider.
#include "tools/ranks.h"

#include <unistd.h>

#include <fabflow/status.h>

#include <algorithm>
#include <iostream>
#include <optional>

#include "common/affinity.h"
#include "common/idle_poll.h"

namespace fabflow::tools {

int run_rank(const RankRequest& request, const std::function<void(Rank&)>& body) {
  BootstrapConfig cfg;
  cfg.secret_file = request.secret_file;
  cfg.fill_from_env();
  cfg.timeout = std::max(cfg.timeout, request.min_timeout);
  // A rank silent for the bound (stopped, hung) fails the run, naming it, even where the others
  // wait without a bound of their own (barriers beside long phases).
  if (cfg.silence.count() == 0) cfg.silence = request.silence;
  auto boot = make_tcp_bootstrap(cfg);
  try {
    Rank rank{*boot, request.target};
    bench::Target& t = rank.target;
    t.same_host = ranks_share_this_host(*boot);  // under mpirun and srun too
    t.cpus = allowed_cpus();  // the host's CPUs, read before pinning narrows the view
    t.pin = request.pin;
    // A pinned rank busy-polls; idle CPUs poll too while it runs, where the kernel lets us
    // ask (common/idle_poll.h): no halted vCPU moves to another host core mid-run.
    std::optional<IdlePolling> idle;
    if (t.pin) {
      t.cpu = cpu_for_local_rank(boot->local_rank());
      if (!pin_current_thread(t.cpu)) t.cpu = -1;
      idle.emplace();
    }
    body(rank);
    boot->barrier();
    return 0;
  } catch (const std::exception& e) {
    boot->abort(e.what());
    throw;
  }
}

LaunchConfig self_launch(const std::vector<std::string>& argv, bool netns,
                         std::chrono::milliseconds silence, const std::vector<std::string>& extra) {
  LaunchConfig lc;
  lc.nprocs = 2;
  lc.netns = netns;
  // A stopped rank's peers say so within the silence bound; the launcher steps in only where
  // they cannot (trapped on a lock the stopped rank holds).
  lc.stopped_bound = silence + std::chrono::milliseconds(500);
  lc.argv = argv;
  lc.argv[0] = "/proc/self/exe";
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) lc.argv[0].assign(exe, static_cast<std::size_t>(n));
  lc.argv.insert(lc.argv.end(), extra.begin(), extra.end());
  return lc;
}

int launch_each_provider(const ProviderLaunches& l) {
  for (const auto& p : l.providers) {  // an unknown provider is a usage error before anything
    TransportOptions o;
    o.provider = p;
    o.endpoint = l.endpoint;
    probe_transport(o);
  }
  std::string why;
  if (l.netns && !netns_available(&why)) throw UsageError("--netns: " + why);
  int status = 0;
  for (std::size_t i = 0; i < l.providers.size() && status == 0; ++i) {
    LaunchConfig lc = l.launch(l.providers[i]);
    if (i > 0 && l.blank_between) std::cout << "\n" << std::flush;
    status = launch_local(lc);
  }
  return status;
}

}  // namespace fabflow::tools
