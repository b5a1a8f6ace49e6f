// The local transport across processes through the CLI: `fabflow bench raw -p local` for every
// operation with the JSON fields of the libfabric runs, `-p auto` under the launcher, and a
// SIGKILL of either rank: the survivor fails within the bound and nothing is left behind
// (no /dev/shm entry, no temporary file; sockets are abstract and die with their process).
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::lines;
using testing::run_cli;
using namespace std::chrono_literals;

bool atomic(const std::string& op) { return op == "fadd" || op == "cswap"; }

class LocalCli : public ::testing::TestWithParam<const char*> {};

TEST_P(LocalCli, RawBenchRunsEveryOp) {
  const std::string op = GetParam();
  CliResult r = run_cli(
      {"fabflow", "bench", "raw", "-p", "local", "-o", op, "-I", "300", "-w", "50", "--json"}, 60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  for (const auto& line : out) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["provider"], "local");
    EXPECT_EQ(j["endpoint"], "rdm");
    EXPECT_EQ(j["op"], op);
    EXPECT_EQ(j["size_bytes"], atomic(op) ? 8 : 64);
    EXPECT_EQ(j["iterations"], 300);
    EXPECT_TRUE(j["stores_demoted"].is_boolean()) << line;
    if (j["type"] == "latency") {
      EXPECT_GT(j["latency_ns"]["mean"].get<double>(), 0);
    } else {
      EXPECT_EQ(j["type"], "bandwidth");
      EXPECT_GT(j["msgs_per_s"].get<double>(), 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, LocalCli,
                         ::testing::Values("send", "write", "writedata", "read", "fadd", "cswap"));

TEST(LocalCliSelection, AutoPicksLocalUnderTheLauncher) {
  CliResult r = run_cli({"fabflow", "bench", "raw", "-o", "write", "-t", "lat", "-S", "4096,65536",
                         "-I", "200", "-w", "20", "--json"},
                        60s);
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  for (const auto& line : out) EXPECT_EQ(nlohmann::json::parse(line)["provider"], "local");
}

// FABFLOW_LOCAL_DEMOTE takes 0 or 1; 0 is reported in the JSON row.
TEST(LocalCliSelection, DemoteSwitchIsCheckedAndReported) {
  CliResult r = run_cli({"fabflow", "bench", "raw", "-p", "local", "-o", "write", "-I", "100"}, 60s,
                        {{"FABFLOW_LOCAL_DEMOTE", "yes"}});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find("FABFLOW_LOCAL_DEMOTE must be 0 or 1, not 'yes'"), std::string::npos)
      << r.err;
  r = run_cli(
      {"fabflow", "bench", "raw", "-p", "local", "-o", "write", "-t", "lat", "-I", "100", "--json"},
      60s, {{"FABFLOW_LOCAL_DEMOTE", "0"}});
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 1u) << r.out;
  EXPECT_EQ(nlohmann::json::parse(out[0])["stores_demoted"], false) << r.out;
}

// Ranks in separate network namespaces cannot reach each other's abstract sockets: refused
// up front with the reason, not a connection error.
TEST(LocalCliSelection, RefusesRanksInOtherNamespaces) {
  if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  CliResult r = run_cli(
      {"fabflow", "bench", "raw", "-p", "local", "-o", "send", "-I", "100", "--netns"}, 60s);
  if (r.status == 2 && r.err.find("--netns") != std::string::npos &&
      r.err.find("local") == std::string::npos)
    GTEST_SKIP() << "namespaces unavailable here: " << r.err;
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("another network namespace"), std::string::npos) << r.err;
  EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
}

std::set<std::string> dir_entries(const std::string& dir) {
  std::set<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) out.insert(e->d_name);
    closedir(d);
  }
  return out;
}

// True once `pid` maps a memfd segment (the transport is connected).
bool maps_memfd(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(f, line))
    if (line.find("/memfd:fabflow-local") != std::string::npos) return true;
  return false;
}

void kill_local_rank_mid_run(int victim, const char* op) {
  const auto shm_before = dir_entries("/dev/shm");
  const auto tmp_before = dir_entries("/tmp");
  // Killed once both ranks map a segment (the transport is connected).
  const auto connected = [](const std::vector<pid_t>& ranks) {
    return std::ranges::count_if(ranks, maps_memfd) == 2;
  };
  const auto run = testing::kill_rank_mid_run(
      {"fabflow", "bench", "raw", "-p", "local", "-o", op, "-t", "lat", "-I", "2000000000"},
      {victim, 200ms, connected});
  const CliResult& r = run.result;
  const std::vector<pid_t>& ranks = run.ranks;
  auto after_kill =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run.killed).count();
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_NE(run.killed, std::chrono::steady_clock::time_point{})
      << "ranks never connected: " << r.err;
  EXPECT_LT(after_kill, 2.5) << r.err;
  ASSERT_NO_FATAL_FAILURE(testing::expect_one_error_line(r));
  // Other tests run beside this one (ctest -j2) and may create /dev/shm entries meanwhile, named
  // fabflow_<their pid>_<id> when they open libfabric's shm provider (CI once saw three of
  // another test process's): only entries that carry one of our ranks' pids would be ours.
  for (const auto& dir : {std::string("/dev/shm"), std::string("/tmp")}) {
    const auto& before = dir == "/tmp" ? tmp_before : shm_before;
    for (const auto& e : dir_entries(dir)) {
      if (before.count(e)) continue;
      for (pid_t pid : ranks)
        EXPECT_EQ(e.find(std::to_string(pid)), std::string::npos) << dir << "/" << e;
    }
  }
}

TEST(LocalCliDeath, TargetKilledDuringSends) { kill_local_rank_mid_run(1, "send"); }
TEST(LocalCliDeath, InitiatorKilledDuringSends) { kill_local_rank_mid_run(0, "send"); }
TEST(LocalCliDeath, TargetKilledDuringWrites) { kill_local_rank_mid_run(1, "write"); }

}  // namespace
}  // namespace fabflow
