// `fabflow launch -n N [--netns] [--pin] [--timeout S] -- PROGRAM ARGS...`: N ranks of any
// program on this host under fabflow's local launcher (fabflow/launcher.h), with its bootstrap
// environment, every output line labelled with its rank.
#include <sys/stat.h>
#include <unistd.h>

#include <fabflow/launcher.h>
#include <fabflow/status.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/flags.h"
#include "common/affinity.h"
#include "launcher/netns.h"

namespace fabflow::cli {
namespace {

constexpr int kMaxLaunchRanks = 256;
constexpr const char* kLaunchUsage =
    "fabflow launch -n N [--netns] [--pin] [--timeout S] -- PROGRAM ARGS...";

struct LaunchFlags {
  int nprocs = 0;
  bool netns = false;
  bool pin = false;
  double timeout_s = 0;
  std::vector<std::string> command;  // the program and its arguments
};

// Why `path` cannot be executed ("" when it can) and the exit status that says so, as a shell
// would give it: 127 for a missing file, 126 for one that cannot run.
struct ExecCheck {
  std::string why;
  int status = 0;
};

ExecCheck check_executable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {std::strerror(errno), 127};
  if (S_ISDIR(st.st_mode)) return {"is a directory", 126};
  if (!S_ISREG(st.st_mode)) return {"not a regular file", 126};
  if (::access(path.c_str(), X_OK) != 0) return {"not executable", 126};
  return {};
}

// The file `program` names: itself when it holds a '/', else the first executable of that name
// in PATH (as execvp searches it); empty when there is none.
std::string find_in_path(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* env = std::getenv("PATH");
  const std::string path = env != nullptr ? env : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  for (;;) {
    const std::size_t colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? colon : colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + program;
    if (check_executable(candidate).why.empty()) return candidate;
    if (colon == std::string::npos) return {};
    start = colon + 1;
  }
}

// The program and its arguments as the user wrote them: what follows the first "--", else the
// words at the end of the command line. CLI11 takes options that follow a program given without
// "--" as the launcher's own, so the parsed command must match these words exactly.
std::vector<std::string> written_command(const Invocation& self, std::size_t words) {
  const auto& argv = self.argv;
  const auto mark = std::find(argv.begin(), argv.end(), "--");
  if (mark != argv.end()) return {mark + 1, argv.end()};
  if (words > argv.size()) return {};
  return {argv.end() - static_cast<std::ptrdiff_t>(words), argv.end()};
}

int run_launch(const Invocation& self, const LaunchFlags& f) {
  if (f.command.empty()) {
    throw UsageError(std::string("launch: no program to run: ") + kLaunchUsage);
  }
  if (written_command(self, f.command.size()) != f.command) {
    throw UsageError(std::string("launch: options after the program: put the program and its "
                                 "arguments after --: ") +
                     kLaunchUsage);
  }
  if (f.netns && f.nprocs > launcher::VirtualNetwork::kMaxRanks) {
    throw UsageError("launch: at most " + std::to_string(launcher::VirtualNetwork::kMaxRanks) +
                     " ranks with --netns, got " + std::to_string(f.nprocs));
  }
  std::string why;
  if (f.netns && !netns_available(&why)) throw UsageError("--netns: " + why);

  const std::string& program = f.command.front();
  const std::string path = find_in_path(program);
  if (path.empty()) {
    print_error("launch: " + program + ": not found in PATH");
    return 127;
  }
  if (const ExecCheck check = check_executable(path); !check.why.empty()) {
    print_error("launch: " + program + ": " + check.why);
    return check.status;
  }

  LaunchConfig lc;
  lc.nprocs = f.nprocs;
  lc.argv = f.command;
  lc.argv.front() = path;
  lc.netns = f.netns;
  lc.deadline = std::chrono::milliseconds(static_cast<long long>(f.timeout_s * 1000.0));
  lc.label_output = true;
  if (f.pin) lc.cpus = allowed_cpus();
  // The ranks get SIGPIPE's default, as from a shell (main ignores it for the CLI's sockets):
  // a rank writing to a reader that exited (`fabflow launch ... | head`) ends as it would there.
  std::signal(SIGPIPE, SIG_DFL);
  return launch_local(lc);
}

}  // namespace

void add_launch(CLI::App& app, const Invocation& self, Runner& run) {
  auto* c = app.add_subcommand(
      "launch", "start N ranks of any program on this host, their output labelled [rank]");
  auto f = std::make_shared<LaunchFlags>();
  // A repeated option is taken (the last one) so that run_launch can name the real mistake: an
  // option of the program written after it without "--".
  add_number<int>(*c, "-n,--np", f->nprocs, 1, kMaxLaunchRanks, "number of ranks")
      ->required()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  c->add_flag("--netns", f->netns,
              "run each rank in its own network namespace, joined by veth (root; at most " +
                  std::to_string(launcher::VirtualNetwork::kMaxRanks) + " ranks)");
  c->add_flag("--pin", f->pin,
              "pin rank r to one CPU: the r-th of the CPUs this launcher may use, round robin");
  add_real(*c, "--timeout", f->timeout_s, 0, 604800,
           "stop every rank after this many seconds, exit status 124 (0: no bound)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  c->add_option("program", f->command, "the program and its arguments, after --")->expected(-1);
  c->footer(
      "Everything after -- is the program's (the -- may be left out when no argument starts with "
      "-); PROGRAM is looked up in PATH. Each rank gets FABFLOW_RANK, FABFLOW_SIZE, "
      "FABFLOW_LOCAL_RANK, FABFLOW_COORD and FABFLOW_SECRET; stdin is /dev/null. Exit status: the "
      "first failing rank's (128+signal for a signal; the others are stopped 2 s later), 124 "
      "after --timeout, 127 for a program not found, 126 for one that cannot run.");
  c->callback([&run, &self, f] { run = [&self, f] { return run_launch(self, *f); }; });
}

}  // namespace fabflow::cli
