// Provider "auto" picks the local transport whenever every rank shares this host, whatever
// started them: here two ranks started by hand with the bootstrap's environment, as mpirun or
// srun on one node would (no FABFLOW_SAME_HOST, which only fabflow's launcher sets).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "fabflow/bootstrap.h"
#include "fabflow/launcher.h"
#include "support/run_cli.h"

namespace fabflow {
namespace {

using namespace std::chrono_literals;

TEST(AutoProviderCli, RanksStartedOutsideTheLauncherOnOneHostGetTheLocalTransport) {
  const std::map<std::string, std::string> env0{
      {"FABFLOW_RANK", "0"},
      {"FABFLOW_SIZE", "2"},
      {"FABFLOW_COORD", "127.0.0.1:" + std::to_string(testing::free_loopback_port())},
      {"FABFLOW_SECRET", "auto-test"}};
  auto env1 = env0;
  env1["FABFLOW_RANK"] = "1";
  const std::vector<std::string> args{"fabflow", "bench", "raw", "-p", "auto", "-o", "write",
                                      "-t",      "lat",   "-S",  "64", "-I",   "200"};
  testing::CliResult results[2];
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r)
    ranks[r] = std::thread([&, r] { results[r] = testing::run_cli(args, 60s, r ? env1 : env0); });
  for (auto& t : ranks) t.join();
  for (const auto& res : results) ASSERT_EQ(res.status, 0) << res.err;
  EXPECT_NE(results[0].out.find("# provider local"), std::string::npos) << results[0].out;
}

// Ranks in network namespaces of their own share the host but not its network: "auto" does not
// pick the local transport for them.
TEST(AutoProviderCli, RanksInNamespacesOfTheirOwnDoNotGetTheLocalTransport) {
  std::string why;
  if (!netns_available(&why)) GTEST_SKIP() << why;
  const auto res = testing::run_cli({"fabflow", "bench", "raw", "-p", "auto", "--netns", "-o",
                                     "send", "-t", "lat", "-S", "64", "-I", "200"},
                                    60s);
  ASSERT_EQ(res.status, 0) << res.err;
  EXPECT_NE(res.out.find("# provider "), std::string::npos) << res.out;
  EXPECT_EQ(res.out.find("# provider local"), std::string::npos) << res.out;
}

TEST(RanksShareThisHost, ThreadsOfOneProcessDo) {
  auto boots = make_thread_bootstraps(3);
  bool shared[3] = {false, false, false};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] { shared[r] = ranks_share_this_host(*boots[r]); });
  for (auto& t : threads) t.join();
  for (bool s : shared) EXPECT_TRUE(s);
}

}  // namespace
}  // namespace fabflow
