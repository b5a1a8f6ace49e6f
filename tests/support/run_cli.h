// Runs the fabflow CLI (or any program) as a child process with a time bound and captures its
// output, for multi-process tests.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
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

// An on_start callback for run_cli: waits (up to 4 s) until the launcher's child with rank
// `victim` runs, lets it work for `after`, then SIGKILLs it. `ranks`, when given, receives the
// launcher's children as they were just before the kill.
std::function<void(pid_t)> kill_rank_after(int victim, std::chrono::milliseconds after,
                                           std::vector<pid_t>* ranks = nullptr);

// Lines of `text` that are non-empty.
std::vector<std::string> lines(const std::string& text);

}  // namespace fabflow::testing
