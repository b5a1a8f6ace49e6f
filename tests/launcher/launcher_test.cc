#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>

#include "support/launcher_test_util.h"

namespace fabflow::launcher_test {
namespace {

// FABFLOW_* variables as a child wrote them with `env`.
std::map<std::string, std::string> read_env(const std::string& path) {
  std::map<std::string, std::string> env;
  std::istringstream lines(read_file(path).value_or(""));
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr const char* kDumpEnv = R"(env | grep '^FABFLOW_' > "$1/env.$FABFLOW_RANK")";

TEST(LauncherTest, ChildrenGetTheirRankSizeCoordinatorAndSecret) {
  ScopedEnv env;
  env.set("FABFLOW_COORD_FD", "99");
  env.set("FABFLOW_RANK", "7");
  env.set("FABFLOW_BOOTSTRAP_TIMEOUT_MS", "1234");
  TempDir dir;
  ASSERT_EQ(launch_local(sh_launch(3, kDumpEnv, dir)), 0);

  const std::regex coord(R"(127\.0\.0\.1:[0-9]{1,5})");
  const std::regex secret("[0-9a-f]{32}");
  const auto first = read_env(dir.file("env.0"));
  for (int rank = 0; rank < 3; ++rank) {
    auto child = read_env(dir.file("env." + std::to_string(rank)));
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(child["FABFLOW_RANK"], std::to_string(rank));
    EXPECT_EQ(child["FABFLOW_SIZE"], "3");
    EXPECT_EQ(child["FABFLOW_LOCAL_RANK"], std::to_string(rank));
    EXPECT_TRUE(std::regex_match(child["FABFLOW_COORD"], coord)) << child["FABFLOW_COORD"];
    EXPECT_TRUE(std::regex_match(child["FABFLOW_SECRET"], secret)) << child["FABFLOW_SECRET"];
    EXPECT_EQ(child["FABFLOW_COORD"], first.at("FABFLOW_COORD"));
    EXPECT_EQ(child["FABFLOW_SECRET"], first.at("FABFLOW_SECRET"));
    EXPECT_EQ(child["FABFLOW_BOOTSTRAP_TIMEOUT_MS"], "1234");
    if (rank == 0) {
      EXPECT_NE(child["FABFLOW_COORD_FD"], "");
      EXPECT_NE(child["FABFLOW_COORD_FD"], "99");
    } else {
      EXPECT_EQ(child.count("FABFLOW_COORD_FD"), 0u);
    }
  }

  TempDir again;
  ASSERT_EQ(launch_local(sh_launch(1, kDumpEnv, again)), 0);
  EXPECT_NE(read_env(again.file("env.0"))["FABFLOW_SECRET"], first.at("FABFLOW_SECRET"));
}

// Lines of /proc/net/tcp listening on 127.0.0.1:port, as "inode" strings.
std::set<std::string> loopback_listeners(const std::string& tcp_table, int port) {
  char local[32];
  std::snprintf(local, sizeof local, "0100007F:%04X", port);
  std::set<std::string> inodes;
  std::istringstream lines(tcp_table);
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string slot, addr, rem, st, queues, timer, retr, uid, timeout, inode;
    fields >> slot >> addr >> rem >> st >> queues >> timer >> retr >> uid >> timeout >> inode;
    if (addr == local && st == "0A") inodes.insert(inode);
  }
  return inodes;
}

TEST(LauncherTest, CoordinatorSocketIsListeningInRankZeroOnly) {
  TempDir dir;
  const std::string script = R"(
    port=${FABFLOW_COORD##*:}
    if [ "$FABFLOW_RANK" = 0 ]; then
      readlink /proc/$$/fd/$FABFLOW_COORD_FD > "$1/fdlink"
      cat /proc/net/tcp > "$1/tcp"
      echo $port > "$1/port"
      i=0
      while [ ! -f "$1/connected" ] && [ $i -lt 400 ]; do sleep 0.01; i=$((i+1)); done
    else
      ls -l /proc/$$/fd > "$1/fds1"
      bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" && touch "$1/connected"
    fi)";
  ASSERT_EQ(launch_local(sh_launch(2, script, dir)), 0);

  const auto link = read_file(dir.file("fdlink")).value_or("");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(link, match, std::regex(R"(socket:\[([0-9]+)\])"))) << link;
  const int port = std::stoi(read_file(dir.file("port")).value_or("0"));
  const auto tcp = read_file(dir.file("tcp")).value_or("");
  EXPECT_EQ(loopback_listeners(tcp, port).count(match[1].str()), 1u)
      << "rank 0's fd is not the socket listening on port " << port;
  EXPECT_TRUE(read_file(dir.file("connected"))) << "rank 1 could not connect to the coordinator";
  EXPECT_EQ(read_file(dir.file("fds1")).value_or("socket:").find("socket:"), std::string::npos)
      << "rank 1 inherited a socket";
  EXPECT_TRUE(loopback_listeners(read_file("/proc/net/tcp").value_or(""), port).empty())
      << "the coordinator socket outlived the run";
}

TEST(LauncherTest, ReturnsZeroWhenEveryRankSucceeds) {
  TempDir dir;
  EXPECT_EQ(launch_local(sh_launch(4, "exit 0", dir)), 0);
}

TEST(LauncherTest, ReturnsTheFailingRanksExitCode) {
  TempDir dir;
  EXPECT_EQ(launch_local(sh_launch(2, R"([ "$FABFLOW_RANK" = 1 ] && exit 3; exit 0)", dir)), 3);
}

TEST(LauncherTest, ReportsASilentRankKilledBySignal) {
  TempDir dir;
  CapturedFd err(2);
  const int rc = launch_local(sh_launch(
      2, R"([ "$FABFLOW_RANK" = 1 ] && { echo $$ > "$1/pid1"; kill -KILL $$; }; exit 0)", dir));
  const std::string text = err.finish();
  EXPECT_EQ(rc, 128 + SIGKILL);
  EXPECT_EQ(text, "fabflow: error: rank 1 (pid " + std::to_string(read_pid(dir.file("pid1"))) +
                      ") killed by signal 9 (Killed)\n");
}

// A rank stopped past stopped_bound fails the run in one line and is killed, with the ranks
// waiting on it (here: sleeping for a minute).
TEST(LauncherTest, AStoppedRankFailsTheRunAfterTheStoppedBound) {
  TempDir dir;
  CapturedFd err(2);
  LaunchConfig lc = sh_launch(
      2, R"([ "$FABFLOW_RANK" = 1 ] && { echo $$ > "$1/pid1"; kill -STOP $$; }; sleep 60)", dir);
  lc.stopped_bound = std::chrono::milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  const int rc = launch_local(lc);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string text = err.finish();
  std::printf("the launch ended %.2f s after it began\n", took);
  EXPECT_EQ(rc, 1);
  const std::string head = "fabflow: error: rank 1 stopped answering: its process (pid " +
                           std::to_string(read_pid(dir.file("pid1"))) +
                           ") has been stopped (SIGSTOP or a debugger) for ";
  EXPECT_EQ(text.rfind(head, 0), 0u) << text;
  EXPECT_LT(took, 30.0);  // far below the sleeping rank's minute
}

TEST(LauncherTest, StaysQuietAboutASignalledRankThatExplainedItself) {
  TempDir dir;
  CapturedFd err(2);
  const int rc = launch_local(sh_launch(1, "echo 'about to crash' >&2; kill -SEGV $$", dir));
  EXPECT_EQ(rc, 128 + SIGSEGV);
  EXPECT_EQ(err.finish(), "about to crash\n");
}

TEST(LauncherTest, SurvivorsAreKilledAfterTheGrace) {
  TempDir dir;
  const std::string script = R"(
    case $FABFLOW_RANK in
      0) sleep 30 & echo $! > "$1/bg0"; echo $$ > "$1/pid0"; wait ;;
      1) trap '' TERM; echo $$ > "$1/pid1"; while :; do sleep 0.05; done ;;
      2) i=0
         while { [ ! -f "$1/pid0" ] || [ ! -f "$1/pid1" ]; } && [ $i -lt 400 ]; do
           sleep 0.01; i=$((i+1))
         done
         exit 7 ;;
    esac)";
  auto config = sh_launch(3, script, dir);
  config.grace = 300ms;
  const auto start = Clock::now();
  EXPECT_EQ(launch_local(config), 7);
  const double took = seconds_since(start);
  EXPECT_GE(took, 0.3);
  EXPECT_LT(took, 3.5) << "grace 0.3 s + SIGTERM-to-SIGKILL 1 s should bound the teardown";
  for (const char* name : {"pid0", "bg0", "pid1"}) {
    const pid_t pid = read_pid(dir.file(name));
    ASSERT_GT(pid, 0) << name;
    EXPECT_TRUE(wait_until([&] { return process_gone(pid); }, 2s)) << name << " " << pid;
  }
}

TEST(LauncherTest, SurvivorsThatExitDuringTheGraceEndTheRunEarly) {
  TempDir dir;
  const std::string script = R"(
    if [ "$FABFLOW_RANK" = 0 ]; then
      i=0
      while [ ! -f "$1/failing" ] && [ $i -lt 400 ]; do sleep 0.01; i=$((i+1)); done
      exit 0
    fi
    touch "$1/failing"; exit 2)";
  auto config = sh_launch(2, script, dir);
  config.grace = 10s;
  const auto start = Clock::now();
  EXPECT_EQ(launch_local(config), 2);
  EXPECT_LT(seconds_since(start), 3.0);
}

TEST(LauncherTest, DeadlineStopsTheRun) {
  TempDir dir;
  auto config = sh_launch(2, R"(echo $$ > "$1/pid.$FABFLOW_RANK"; exec sleep 30)", dir);
  config.deadline = 500ms;
  CapturedFd err(2);
  const auto start = Clock::now();
  const int rc = launch_local(config);
  const double took = seconds_since(start);
  EXPECT_EQ(err.finish(), "fabflow: error: run exceeded its deadline of 0.5 s\n");
  EXPECT_EQ(rc, 124);
  EXPECT_GE(took, 0.5);
  EXPECT_LT(took, 3.0);
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = read_pid(dir.file("pid." + std::to_string(rank)));
    ASSERT_GT(pid, 0);
    EXPECT_TRUE(process_gone(pid)) << "rank " << rank;
  }
}

TEST(LauncherTest, RelaysOnlyTheFirstErrorLine) {
  TempDir dir;
  const std::string script = R"(
    if [ "$FABFLOW_RANK" = 0 ]; then
      echo 'hello from 0' >&2
      echo 'fabflow: error: first' >&2
      echo 'to stdout'
      touch "$1/done0"
      exit 1
    fi
    i=0
    while [ ! -f "$1/done0" ] && [ $i -lt 400 ]; do sleep 0.01; i=$((i+1)); done
    echo 'fabflow: error: second' >&2
    echo 'not an error' >&2
    printf 'unterminated' >&2
    exit 1)";
  CapturedFd out(1);
  CapturedFd err(2);
  const int rc = launch_local(sh_launch(2, script, dir));
  EXPECT_EQ(err.finish(), "hello from 0\nfabflow: error: first\nnot an error\nunterminated\n");
  EXPECT_EQ(out.finish(), "to stdout\n");
  EXPECT_EQ(rc, 1);
}

TEST(LauncherTest, SetupErrorsThrowOneLine) {
  TempDir dir;
  LaunchConfig none;
  none.argv = {};
  EXPECT_THROW(launch_local(none), Error);
  auto zero = sh_launch(0, "exit 0", dir);
  EXPECT_THROW(launch_local(zero), Error);
  LaunchConfig missing;
  missing.argv = {"/nonexistent/fabflow-test-program"};
  try {
    launch_local(missing);
    ADD_FAILURE() << "launching a missing program did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("/nonexistent/fabflow-test-program"), std::string::npos) << what;
    EXPECT_NE(what.find("No such file"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  auto too_many = sh_launch(300, "exit 0", dir);
  too_many.netns = true;
  EXPECT_THROW(launch_local(too_many), Error);
}

TEST(LauncherTest, SigintToTheLauncherStopsEveryRank) {
  TempDir dir;
  const pid_t launcher =
      fork_launch(sh_launch(2, R"(echo $$ > "$1/pid.$FABFLOW_RANK"; sleep 30; exit 0)", dir));
  ASSERT_GT(launcher, 0);
  const bool started = wait_until(
      [&] { return read_pid(dir.file("pid.0")) > 0 && read_pid(dir.file("pid.1")) > 0; }, 5s);
  ::kill(launcher, SIGINT);
  EXPECT_TRUE(started);
  EXPECT_EQ(wait_exit(launcher, 5s), 128 + SIGINT);
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = read_pid(dir.file("pid." + std::to_string(rank)));
    EXPECT_TRUE(pid > 0 && wait_until([&] { return process_gone(pid); }, 2s)) << "rank " << rank;
  }
}

TEST(LauncherTest, RanksDieWithAKilledLauncher) {
  TempDir dir;
  const pid_t launcher =
      fork_launch(sh_launch(2, R"(echo $$ > "$1/pid.$FABFLOW_RANK"; exec sleep 30)", dir));
  ASSERT_GT(launcher, 0);
  const bool started = wait_until(
      [&] { return read_pid(dir.file("pid.0")) > 0 && read_pid(dir.file("pid.1")) > 0; }, 5s);
  ::kill(launcher, SIGKILL);
  EXPECT_TRUE(started);
  EXPECT_EQ(wait_exit(launcher, 5s), 128 + SIGKILL);
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = read_pid(dir.file("pid." + std::to_string(rank)));
    EXPECT_TRUE(pid > 0 && wait_until([&] { return process_gone(pid); }, 2s)) << "rank " << rank;
  }
}

// Ranks of a program that launches itself through /proc/self/exe show under its own name in
// ps and top (their comm is the exec'd path's last part), not as "exe".
TEST(LauncherTest, ProcSelfExeIsExecedByItsRealPath) {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  ASSERT_GT(n, 0);
  const std::string self(exe, static_cast<std::size_t>(n));
  EXPECT_EQ(resolved_program("/proc/self/exe"), self);
  EXPECT_NE(self.substr(self.rfind('/') + 1), "exe");
  EXPECT_EQ(resolved_program("/bin/sh"), "/bin/sh");
  EXPECT_EQ(resolved_program("relative/prog"), "relative/prog");
}

TEST(LauncherTest, StartedByLauncherLooksAtEveryLaunchersRankVariable) {
  ScopedEnv env;
  for (const char* name : {"FABFLOW_RANK", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
                           "PMI_RANK", "PMIX_RANK"}) {
    env.unset(name);
  }
  EXPECT_FALSE(started_by_launcher());
  env.set("SLURM_PROCID", "0");
  EXPECT_FALSE(started_by_launcher()) << "SLURM_PROCID alone (an allocation, not a step)";
  env.set("SLURM_NTASKS", "2");
  EXPECT_TRUE(started_by_launcher());
  env.unset("SLURM_PROCID");
  for (const char* name : {"FABFLOW_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    ScopedEnv one;
    one.set(name, "1");
    EXPECT_TRUE(started_by_launcher()) << name;
  }
  EXPECT_FALSE(started_by_launcher());
}

}  // namespace
}  // namespace fabflow::launcher_test
