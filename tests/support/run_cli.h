// Runs the fabflow CLI (or any program) as a child process with a time bound and captures its
// output, for multi-process tests.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace fabflow::testing {

struct CliResult {
  int status = -1;  // exit code, 128+signal, or -1 when it had to be killed
  bool timed_out = false;
  std::string out;
  std::string err;
  double seconds = 0;
};

// Runs `args` (args[0] is the program; "fabflow" means the CLI under test) with extra
// environment variables; kills the whole process group after `timeout`.
// `on_start` runs (on the calling thread) right after the child started, with its pid.
CliResult run_cli(std::vector<std::string> args, std::chrono::milliseconds timeout,
                  const std::map<std::string, std::string>& env = {},
                  const std::function<void(pid_t)>& on_start = {});

// Pids of the direct children of `parent`.
std::vector<pid_t> children_of(pid_t parent);

// The FABFLOW_RANK of process `pid` (a launched rank), or -1.
int rank_of(pid_t pid);

// Which rank kill_rank_mid_run SIGKILLs, and when: `after` past the moment the launcher's child
// with rank `victim` runs and `ready` (when given) holds for the launcher's children (both
// polled every 10 ms for at most 5 s; the victim is left alone when that never happens).
struct RankKill {
  int victim = 1;
  std::chrono::milliseconds after{700};
  std::function<bool(const std::vector<pid_t>&)> ready;
  int signal = SIGKILL;  // SIGSTOP: the rank stays alive but silent
};

// A run of which kill_rank_mid_run killed one rank.
struct KilledRun {
  CliResult result;
  std::vector<pid_t> ranks;                        // the launcher's children just before the kill
  std::chrono::steady_clock::time_point killed{};  // when; the epoch when no rank was killed
};

// Runs `args` (a launch of several ranks, bounded at 30 s) and SIGKILLs (or stops) one rank
// mid-run, the one way every peer-death test of the CLI kills a rank. Checks nothing: see
// expect_one_error_line.
KilledRun kill_rank_mid_run(std::vector<std::string> args, const RankKill& kill);

// What a run that lost a rank (or failed on bad input) shows: it ended by itself, with a
// non-zero status and exactly one stderr line, "fabflow: error: ...". Uses gtest's assertions:
// call as ASSERT_NO_FATAL_FAILURE(expect_one_error_line(r)).
void expect_one_error_line(const CliResult& r);

// A usage error: exit status 2 and one stderr line, "fabflow: error: ..." containing `needle`.
void expect_usage_line(const CliResult& r, const std::string& needle);

// A loopback TCP port free at the time of the call (for FABFLOW_COORD in ranks started by hand).
int free_loopback_port();

// The /dev/shm entries of the shm regions fabflow process `pid` named (fabflow_<pid>_...).
std::vector<std::string> shm_regions_of(pid_t pid);

// Lines of `text` that are non-empty.
std::vector<std::string> lines(const std::string& text);

// Runs `fabflow bench <bench> args... --json --timeout 10000` (these tests are not about the
// peer timeout: a loaded machine must not trip it), bounded at `bound`; expects exit status 0
// and no unmeasured end load on stderr, and returns the JSON lines of its output.
std::vector<nlohmann::json> run_bench_json(const std::string& bench, std::vector<std::string> args,
                                           std::chrono::seconds bound = std::chrono::seconds(150),
                                           const std::map<std::string, std::string>& env = {});

}  // namespace fabflow::testing
