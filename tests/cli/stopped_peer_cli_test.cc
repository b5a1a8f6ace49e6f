// A rank stopped with SIGSTOP mid-run (alive, but silent: a debugger, a suspended job) ends the
// run within the peer timeout plus a small margin, with one error line naming the stopped rank,
// for every family and on local, shm and tcp (docs/launcher.md, "Stuck and dead ranks").
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "support/run_cli.h"

// A namespace of its own: the unity build puts this file beside others with a kTimeout.
namespace fabflow::stopped_peer {
namespace {

using namespace std::chrono_literals;

constexpr auto kTimeout = 1000ms;  // --timeout: the peer timeout and the bootstrap's silence bound
// The promise is the timeout plus 1 s; the assertion allows 2 s more for a loaded test machine
// (the figure is printed).
constexpr double kBound = 1.0 + 1.0 + 2.0;

struct Family {
  const char* name;
  std::vector<std::string> args;  // long enough to be stopped mid-run
};

const std::vector<Family>& families() {
  static const std::vector<Family> all = {
      {"kv", {"kv", "--design", "herd", "-I", "1000000000000"}},
      {"seq", {"seq", "--design", "rpc", "-I", "100000000"}},
      {"queue", {"queue", "--design", "push1-watermark-pull", "--items", "1000000000000"}},
      {"rr", {"rr", "-I", "1000000000000"}},
      {"bulk", {"bulk", "--protocol", "rndv-write", "-S", "64M", "--bytes", "64G"}},
  };
  return all;
}

class StoppedPeer : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(StoppedPeer, EndsWithinTheTimeoutNamingTheStoppedRank) {
  const auto& [family_name, provider] = GetParam();
  const Family* family = nullptr;
  for (const auto& f : families())
    if (family_name == f.name) family = &f;
  ASSERT_NE(family, nullptr);
  // Each family stops rank 0 on some transports and rank 1 on the others: both roles, each
  // transport, within the test command's time.
  const int victim =
      static_cast<int>((family - families().data()) + (provider == "shm" ? 1 : 0)) % 2;
  {
    SCOPED_TRACE("rank " + std::to_string(victim) + " stopped");
    std::vector<std::string> args = {"fabflow", "bench"};
    args.insert(args.end(), family->args.begin(), family->args.end());
    args.insert(args.end(), {"-p", provider, "--timeout", std::to_string(kTimeout.count())});
    const auto run = testing::kill_rank_mid_run(args, {victim, 500ms, {}, SIGSTOP});
    const double after_stop =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - run.killed).count();
    for (pid_t pid : run.ranks) ::kill(pid, SIGKILL);  // none is left, unless the test failed
    ASSERT_NE(run.killed, std::chrono::steady_clock::time_point{}) << "no rank was stopped";
    std::printf("%s on %s, rank %d stopped: the run ended %.2f s later\n", family_name.c_str(),
                provider.c_str(), victim, after_stop);
    ASSERT_NO_FATAL_FAILURE(testing::expect_one_error_line(run.result));
    EXPECT_NE(run.result.err.find("rank " + std::to_string(victim) + " stopped answering"),
              std::string::npos)
        << run.result.err;
    EXPECT_LT(after_stop, kBound) << run.result.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Cli, StoppedPeer,
                         ::testing::Combine(::testing::Values("kv", "seq", "queue", "rr", "bulk"),
                                            ::testing::Values("local", "shm", "tcp")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace fabflow::stopped_peer
