// `fabflow bench connect`: checks the counts in the launching process, then starts two ranks per
// provider, a client (rank 0, which reports) and a server that listens with a Node.
#include <fabflow/bench/connect.h>
#include <fabflow/launcher.h>

#include <iostream>

#include "bench/report.h"
#include "cli/bench_shell.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace fabflow::cli {
namespace {

struct ConnectFlags : CommonFlags {
  std::uint64_t connections = 200;
  std::uint64_t warmup = 20;
  std::string peers = "1,100,1000";
};

Checked<ConnectParams> validate(const ConnectFlags& f) {
  Checked<ConnectParams> v;
  if (!f.sizes.empty()) throw UsageError("bench connect times 64-byte calls: -S does not apply");
  v.params.connections = f.connections;
  v.params.warmup = f.warmup;
  v.params.peers.clear();
  for (const std::string& item : split(f.peers, ',')) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(item.c_str(), &end, 10);
    if (*end != '\0' || item[0] == '-' || n < 1 || n > 5000)
      throw UsageError("--peers: '" + item + "' is not a count of peers in 1..5000");
    v.params.peers.push_back(static_cast<std::size_t>(n));
  }
  if (v.params.peers.empty()) throw UsageError("--peers: give at least one count (e.g. 1,100)");
  v.params.target = flags_target(f);
  v.providers = providers_to_run(f);
  return v;
}

int run_connect_rank(const ConnectFlags& flags, const Checked<ConnectParams>& v) {
  return run_family_rank(flags, v.params, [&](Rank& rank, const ConnectParams& params) {
    RowPrinter<ConnectResult, ConnectRow> print(flags.json, print_connect_header,
                                                print_connect_json, print_connect_row);
    ConnectResult last = run_connect(params, rank.boot, print);
    if (rank.boot.rank() != 0) return;
    finish_environment(last.env);
    if (flags.json) report::warn_stderr(last.env);
  });
}

}  // namespace

Runner add_bench_connect(CLI::App* app, const Invocation& self) {
  auto f = add_bench_flags<ConnectFlags>(*app, "not used: the calls are 64 bytes",
                                         "not used: both ends drive their own progress");
  add_number<std::uint64_t>(*app, "--connections", f->connections, 1, 100000,
                            "connections timed, one after another");
  add_number<std::uint64_t>(*app, "--warmup", f->warmup, 0, 100000,
                            "connections made first and not timed");
  app->add_option("--peers", f->peers,
                  "idle peers held at once, comma-separated counts (one row each, 1..5000)");
  return rank_or_launch(
      f, self, run_connect_rank,
      [](LaunchConfig& lc, const ConnectFlags&, const Checked<ConnectParams>&) { lc.nprocs = 2; });
}

}  // namespace fabflow::cli
