// Ranks killed outside fabflow's launcher leave the shm provider's regions in /dev/shm;
// `fabflow clean` and the next shm start remove them (issue 44, item 2).
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../support/run_cli.h"

namespace fabflow {
namespace {

using namespace std::chrono_literals;
using testing::CliResult;
using testing::run_cli;

using testing::free_loopback_port;
using testing::shm_regions_of;

// Two shm ranks started by hand (as mpirun or a user would, no fabflow launcher), both
// SIGKILLed once their regions exist. Returns their pids; their regions are still there.
std::vector<pid_t> kill_a_pair_started_by_hand() {
  const std::map<std::string, std::string> env0{
      {"FABFLOW_RANK", "0"},
      {"FABFLOW_SIZE", "2"},
      {"FABFLOW_COORD", "127.0.0.1:" + std::to_string(free_loopback_port())},
      {"FABFLOW_SECRET", "clean-test"},
      {"FABFLOW_BOOTSTRAP_TIMEOUT_MS", "10000"}};
  auto env1 = env0;
  env1["FABFLOW_RANK"] = "1";
  const std::vector<std::string> args{"fabflow", "bench", "raw", "-p", "shm",       "-o",
                                      "send",    "-t",    "lat", "-I", "2000000000"};
  std::atomic<pid_t> pids[2] = {0, 0};
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r)
    ranks[r] = std::thread(
        [&, r] { run_cli(args, 30s, r == 0 ? env0 : env1, [&](pid_t pid) { pids[r] = pid; }); });
  // A rank's setup opens and closes a short-lived endpoint before the one it runs on: wait for
  // the regions it keeps (the same names for 300 ms), not the first ones seen.
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  std::vector<std::string> seen[2];
  auto stable_since = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    if (pids[0] == 0 || pids[1] == 0) continue;
    std::vector<std::string> now[2] = {shm_regions_of(pids[0]), shm_regions_of(pids[1])};
    if (now[0].empty() || now[1].empty() || now[0] != seen[0] || now[1] != seen[1]) {
      seen[0] = now[0];
      seen[1] = now[1];
      stable_since = std::chrono::steady_clock::now();
      continue;
    }
    if (std::chrono::steady_clock::now() - stable_since >= 300ms) break;
  }
  for (auto& p : pids)
    if (p) ::kill(p, SIGKILL);
  for (auto& t : ranks) t.join();
  return {pids[0], pids[1]};
}

TEST(CleanCli, RegionsOfRanksKilledOutsideTheLauncherAreListedThenRemoved) {
  const std::vector<pid_t> dead = kill_a_pair_started_by_hand();
  for (pid_t pid : dead) ASSERT_FALSE(shm_regions_of(pid).empty()) << "pid " << pid;

  const CliResult dry = run_cli({"fabflow", "clean", "--dry-run", "--json"}, 20s);
  ASSERT_EQ(dry.status, 0) << dry.err;
  const auto j = nlohmann::json::parse(dry.out);
  for (pid_t pid : dead) {
    const std::string region = "/dev/shm/" + shm_regions_of(pid).front();
    bool listed = false;
    for (const auto& r : j["regions"])
      listed = listed || (r["path"] == region && r["owner"] == pid && r["why"] == "owner exited");
    EXPECT_TRUE(listed) << region << " not in " << dry.out;
    EXPECT_FALSE(shm_regions_of(pid).empty()) << "a dry run removed " << region;
  }

  const CliResult clean = run_cli({"fabflow", "clean"}, 20s);
  ASSERT_EQ(clean.status, 0) << clean.err;
  EXPECT_NE(clean.out.find("freed "), std::string::npos) << clean.out;
  for (pid_t pid : dead) EXPECT_EQ(shm_regions_of(pid), std::vector<std::string>{});
}

TEST(CleanCli, TheNextShmStartSweepsTheRegionsOfExitedRanks) {
  const std::vector<pid_t> dead = kill_a_pair_started_by_hand();
  for (pid_t pid : dead) ASSERT_FALSE(shm_regions_of(pid).empty()) << "pid " << pid;
  const CliResult next = run_cli({"fabflow", "bench", "raw", "-p", "shm", "-I", "100"}, 60s);
  ASSERT_EQ(next.status, 0) << next.err;
  for (pid_t pid : dead) EXPECT_EQ(shm_regions_of(pid), std::vector<std::string>{});
}

TEST(CleanCli, DoctorReportsLeftoversAndCleanRefusesArguments) {
  const CliResult doctor = run_cli({"fabflow", "doctor", "--json"}, 60s);
  const auto j = nlohmann::json::parse(doctor.out);
  bool row = false;
  for (const auto& c : j["checks"]) row = row || c["check"] == "/dev/shm leftovers";
  EXPECT_TRUE(row) << doctor.out;
  testing::expect_usage_line(run_cli({"fabflow", "clean", "now"}, 20s), "now");
}

}  // namespace
}  // namespace fabflow
