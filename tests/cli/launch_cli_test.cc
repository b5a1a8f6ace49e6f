// `fabflow launch` starts N ranks of any program with fabflow's bootstrap environment: every
// output line labelled with its rank on its own stream, the first failure's exit status, the
// other ranks torn down, --pin one CPU per rank, and one error line for a program that cannot
// run (issue 47, item 1; docs/launcher.md, "fabflow launch").
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "support/launcher_test_util.h"
#include "support/run_cli.h"

namespace fabflow::launch_cli_test {
namespace {

using namespace std::chrono_literals;
using launcher_test::process_gone;
using launcher_test::read_pid;
using launcher_test::TempDir;
using testing::CliResult;
using testing::lines;
using testing::run_cli;

// `fabflow launch -n N [flags] -- /bin/sh -c script sh DIR`: in the script, $1 is `dir`.
CliResult launch_sh(int n, const std::string& script, const TempDir& dir,
                    std::vector<std::string> flags = {},
                    const std::function<void(pid_t)>& on_start = {}) {
  std::vector<std::string> args = {"fabflow", "launch", "-n", std::to_string(n)};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"--", "/bin/sh", "-c", script, "sh", dir.path()});
  return run_cli(args, 60s, {}, on_start);
}

std::vector<std::string> sorted_lines(const std::string& text) {
  auto out = lines(text);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(LaunchCli, EveryRanksLinesAppearOnceLabelledOnTheirOwnStream) {
  TempDir dir;
  const CliResult r = launch_sh(3, "echo out $FABFLOW_RANK; echo err $FABFLOW_RANK >&2", dir);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(sorted_lines(r.out), (std::vector<std::string>{"[0] out 0", "[1] out 1", "[2] out 2"}))
      << r.out;
  EXPECT_EQ(sorted_lines(r.err), (std::vector<std::string>{"[0] err 0", "[1] err 1", "[2] err 2"}))
      << r.err;
}

TEST(LaunchCli, LinesWrittenInPiecesAreNeverInterleaved) {
  TempDir dir;
  // Every rank starts its line, waits while the others start theirs, then ends it.
  const CliResult r = launch_sh(3,
                                "printf 'start-'; sleep 0.3; echo end-$FABFLOW_RANK; printf "
                                "'e-'>&2; sleep 0.3; echo $FABFLOW_RANK >&2",
                                dir);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(sorted_lines(r.out),
            (std::vector<std::string>{"[0] start-end-0", "[1] start-end-1", "[2] start-end-2"}))
      << r.out;
  EXPECT_EQ(sorted_lines(r.err), (std::vector<std::string>{"[0] e-0", "[1] e-1", "[2] e-2"}))
      << r.err;
}

TEST(LaunchCli, EveryErrorLineOfEveryRankIsShown) {
  TempDir dir;
  const CliResult r = launch_sh(
      2, "echo \"fabflow: error: one from $FABFLOW_RANK\" >&2; echo 'fabflow: error: two' >&2",
      dir);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(sorted_lines(r.err),
            (std::vector<std::string>{"[0] fabflow: error: one from 0", "[0] fabflow: error: two",
                                      "[1] fabflow: error: one from 1", "[1] fabflow: error: two"}))
      << r.err;
}

TEST(LaunchCli, TheFirstFailingRanksStatusEndsTheRunAndTheOthersAreTornDown) {
  TempDir dir;
  // Ranks 0 and 2 record their pid and sleep; rank 1 fails with 3 once they have.
  const std::string script =
      "if [ $FABFLOW_RANK = 1 ]; then while [ ! -s \"$1/pid.0\" ] || [ ! -s \"$1/pid.2\" ]; do "
      "sleep 0.05; done; echo giving up >&2; exit 3; fi; echo $$ > \"$1/pid.$FABFLOW_RANK.tmp\"; "
      "mv \"$1/pid.$FABFLOW_RANK.tmp\" \"$1/pid.$FABFLOW_RANK\"; exec sleep 60";
  const CliResult r = launch_sh(3, script, dir);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_LT(r.seconds, 20.0);
  EXPECT_NE(r.err.find("[1] giving up"), std::string::npos) << r.err;
  for (int rank : {0, 2}) {
    const pid_t pid = read_pid(dir.file("pid." + std::to_string(rank)));
    ASSERT_GT(pid, 0) << "rank " << rank;
    EXPECT_TRUE(process_gone(pid)) << "rank " << rank << " (pid " << pid << ") still runs";
  }
}

TEST(LaunchCli, ARankKilledBySignalGives128PlusTheSignal) {
  TempDir dir;
  const CliResult r =
      launch_sh(2, "if [ $FABFLOW_RANK = 0 ]; then kill -KILL $$; fi; exec sleep 60", dir);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 128 + SIGKILL) << r.err;
  EXPECT_NE(r.err.find("rank 0"), std::string::npos) << r.err;
}

TEST(LaunchCli, SigtermToTheLauncherStopsEveryRank) {
  TempDir dir;
  const CliResult r = launch_sh(
      2,
      "echo $$ > \"$1/pid.$FABFLOW_RANK.tmp\"; mv \"$1/pid.$FABFLOW_RANK.tmp\" "
      "\"$1/pid.$FABFLOW_RANK\"; exec sleep 60",
      dir, {}, [&](pid_t launcher) {
        launcher_test::wait_until(
            [&] { return read_pid(dir.file("pid.0")) > 0 && read_pid(dir.file("pid.1")) > 0; },
            20s);
        ::kill(launcher, SIGTERM);
      });
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 128 + SIGTERM) << r.err;
  for (int rank : {0, 1}) {
    const pid_t pid = read_pid(dir.file("pid." + std::to_string(rank)));
    ASSERT_GT(pid, 0) << "rank " << rank;
    EXPECT_TRUE(process_gone(pid)) << "rank " << rank << " (pid " << pid << ") still runs";
  }
}

// `fabflow launch ... | head`: once the reader exits, the ranks' writes fail as they would into
// that pipe (SIGPIPE), and the launch ends with the status a shell shows, without a word.
TEST(LaunchCli, AReaderThatExitsEndsRanksThatWriteForever) {
  const CliResult r = run_cli({"/bin/bash", "-c",
                               "\"$0\" launch -n 2 -- yes | head -c 100 >/dev/null; "
                               "echo \"status ${PIPESTATUS[0]}\"",
                               FABFLOW_BIN},
                              30s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.out, "status " + std::to_string(128 + SIGPIPE) + "\n") << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_LT(r.seconds, 10.0);
}

TEST(LaunchCli, TimeoutStopsTheRunWith124) {
  TempDir dir;
  const CliResult r = launch_sh(2, "exec sleep 60", dir, {"--timeout", "0.5"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 124) << r.err;
  EXPECT_LT(r.seconds, 10.0);
  ASSERT_NO_FATAL_FAILURE(testing::expect_one_error_line(r));
  EXPECT_NE(r.err.find("deadline of 0.5 s"), std::string::npos) << r.err;
}

TEST(LaunchCli, ProgramsThatCannotRunGiveOneErrorLine) {
  TempDir dir;
  const std::string plain_file = dir.file("not-executable");
  std::FILE* f = std::fopen(plain_file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  struct Case {
    std::vector<std::string> program;
    int status;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{dir.file("missing")}, 127, "No such file"},
      {{"fabflow-no-such-program"}, 127, "not found in PATH"},
      {{plain_file}, 126, "not executable"},
      {{dir.path()}, 126, "is a directory"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"fabflow", "launch", "-n", "2", "--"};
    args.insert(args.end(), c.program.begin(), c.program.end());
    const CliResult r = run_cli(args, 20s);
    SCOPED_TRACE(c.program[0]);
    ASSERT_NO_FATAL_FAILURE(testing::expect_one_error_line(r));
    EXPECT_EQ(r.status, c.status) << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << r.err;
    EXPECT_LT(r.seconds, 5.0);
  }
}

TEST(LaunchCli, BadRequestsAreUsageErrors) {
  testing::expect_usage_line(run_cli({"fabflow", "launch", "-n", "2", "--"}, 20s),
                             "no program to run");
  testing::expect_usage_line(run_cli({"fabflow", "launch", "-n", "2"}, 20s), "no program to run");
  testing::expect_usage_line(run_cli({"fabflow", "launch", "-n", "0", "--", "/bin/true"}, 20s),
                             "1..256");
  testing::expect_usage_line(run_cli({"fabflow", "launch", "-n", "257", "--", "/bin/true"}, 20s),
                             "1..256");
  testing::expect_usage_line(run_cli({"fabflow", "launch", "--", "/bin/true"}, 20s), "-n");
  testing::expect_usage_line(
      run_cli({"fabflow", "launch", "-n", "2", "--timeout", "-1", "--", "/bin/true"}, 20s),
      "--timeout");
  // Without "--", an option after the program would be taken as the launcher's own.
  testing::expect_usage_line(
      run_cli({"fabflow", "launch", "-n", "2", "/bin/echo", "x", "-n", "3"}, 20s), "after --");
  testing::expect_usage_line(
      run_cli({"fabflow", "launch", "-n", "255", "--netns", "--", "/bin/true"}, 20s), "254");
}

TEST(LaunchCli, AProgramWithoutDashArgumentsNeedsNoSeparator) {
  const CliResult r = run_cli({"fabflow", "launch", "-n", "2", "echo", "hi"}, 20s);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(sorted_lines(r.out), (std::vector<std::string>{"[0] hi", "[1] hi"})) << r.out;
}

// CPUs this test process may use (the launcher it starts inherits them).
std::vector<int> own_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

TEST(LaunchCli, PinPutsEachRankOnOneCpuRoundRobin) {
  TempDir dir;
  const std::string script = "grep Cpus_allowed_list /proc/self/status | tr -d ' \\t'";
  const CliResult r = launch_sh(3, script, dir, {"--pin"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<int> cpus = own_cpus();
  ASSERT_FALSE(cpus.empty());
  std::vector<std::string> want;
  for (int rank = 0; rank < 3; ++rank) {
    want.push_back("[" + std::to_string(rank) + "] Cpus_allowed_list:" +
                   std::to_string(cpus[static_cast<std::size_t>(rank) % cpus.size()]));
  }
  EXPECT_EQ(sorted_lines(r.out), want) << r.out;

  if (cpus.size() < 2) GTEST_SKIP() << "one CPU: unpinned ranks look pinned";
  const CliResult unpinned = launch_sh(1, script, dir);
  ASSERT_EQ(unpinned.status, 0) << unpinned.err;
  EXPECT_NE(sorted_lines(unpinned.out), std::vector<std::string>{want[0]}) << unpinned.out;
}

TEST(LaunchCli, RanksGetFabflowsBootstrapEnvironment) {
  TempDir dir;
  const CliResult r =
      launch_sh(2,
                "echo \"$FABFLOW_RANK/$FABFLOW_SIZE/$FABFLOW_LOCAL_RANK ${FABFLOW_COORD:+coord} "
                "${FABFLOW_SECRET:+secret}\"",
                dir);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(sorted_lines(r.out),
            (std::vector<std::string>{"[0] 0/2/0 coord secret", "[1] 1/2/1 coord secret"}))
      << r.out;
}

// fabflow's own rank program under `fabflow launch`: the bench acts as one rank of two.
TEST(LaunchCli, FabflowBenchRunsAsTheLaunchedRanks) {
  const CliResult r =
      run_cli({"fabflow", "launch", "-n", "2", "--", FABFLOW_BIN, "bench", "raw", "-p", "tcp", "-o",
               "send", "-t", "lat", "-S", "64", "-I", "200", "--json"},
              120s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 0) << r.err;
  bool result_line = false;
  for (const auto& line : lines(r.out)) {
    EXPECT_TRUE(line.starts_with("[0] ") || line.starts_with("[1] ")) << line;
    result_line = result_line || (line.starts_with("[0] {") || line.starts_with("[1] {"));
  }
  EXPECT_TRUE(result_line) << r.out;
}

}  // namespace
}  // namespace fabflow::launch_cli_test
