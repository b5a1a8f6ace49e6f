// The child processes of a local launch: the signal routing of one launch, the plan a forked
// child follows up to exec, and the running child the launcher supervises.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/fd.h"
#include "launcher/relay.h"

namespace fabflow::launcher {

using SteadyClock = std::chrono::steady_clock;

inline constexpr std::chrono::milliseconds kReapBound{5000};  // SIGKILL -> giving up on a child

// Routes SIGINT/SIGTERM/SIGHUP to a self-pipe, ignores SIGPIPE and defaults SIGCHLD (so that no
// handler of the caller reaps our children) for one launch, restoring the previous dispositions
// on destruction; at most one per process (a second one throws).
class SignalGuard {
 public:
  SignalGuard();
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

  int fd() const noexcept { return read_.get(); }
  // The first signal received during the launch, or 0.
  int received() const noexcept;
  // Puts the caller's dispositions back; async-signal-safe (a forked child calls it).
  void restore() const noexcept;
  void drain() const noexcept;

 private:
  static constexpr std::array kSignals{SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD};
  Fd read_, write_;
  std::array<struct sigaction, kSignals.size()> previous_{};
};

// What a forked child needs, all prepared before fork (the child only makes
// async-signal-safe calls).
struct ChildPlan {
  std::string program;  // argv[0], /proc/self/exe resolved (see resolved_program)
  std::vector<std::string> env_text;
  std::vector<char*> envp;
  std::vector<char*> argv;
  int netns_fd = -1;
  int coord_fd = -1;
  int stdin_fd = -1;
  int stdout_fd = -1;  // -1: the launcher's own stdout
  int stderr_fd = -1;
  int cpu = -1;        // the one CPU the child runs on (sched_setaffinity); -1: not pinned
  int report_fd = -1;  // the child writes {stage, errno} here when it cannot exec
};

enum class Stage : int { pdeathsig, setns, affinity, dup2, coord_fd, exec };

const char* stage_text(Stage s);

// The forked child's side: joins its namespace, wires its streams and execs plan.argv; on
// failure writes {stage, errno} to plan.report_fd and exits 127.
[[noreturn]] void run_child(const ChildPlan& plan, pid_t launcher_pid, const SignalGuard& signals);

// One running rank: owns its process group (killed and reaped on destruction if still
// running), a pidfd and the read ends of its stderr pipe and, when its output is labelled, of
// its stdout pipe. Move-only, not thread-safe.
class Child {
 public:
  Child(int rank, pid_t pid, Fd pidfd, Fd err, Fd out)
      : rank_(rank),
        pid_(pid),
        pidfd_(std::move(pidfd)),
        err_(std::move(err)),
        out_(std::move(out)) {}
  Child(Child&& o) noexcept
      : rank_(o.rank_),
        pid_(std::exchange(o.pid_, -1)),
        pidfd_(std::move(o.pidfd_)),
        err_(std::move(o.err_)),
        out_(std::move(o.out_)),
        status_(o.status_),
        wrote_stderr_(o.wrote_stderr_) {}
  Child& operator=(Child&&) = delete;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  int rank() const noexcept { return rank_; }
  pid_t pid() const noexcept { return pid_; }
  bool running() const noexcept { return pid_ > 0 && pidfd_; }
  int pidfd() const noexcept { return pidfd_.get(); }
  int err() const noexcept { return err_.get(); }
  int out() const noexcept { return out_.get(); }  // -1 when stdout is not piped
  int status() const noexcept { return status_; }
  bool wrote_stderr() const noexcept { return wrote_stderr_; }

  // True while the child is stopped (SIGSTOP, SIGTSTP, a debugger): it cannot exit by itself,
  // not even on SIGTERM, until something continues it.
  bool stopped() const;
  // Signals the child's whole process group (it and whatever it started).
  void signal(int sig) const noexcept {
    if (running()) ::kill(-pid_, sig);
  }
  // Called once the pidfd is readable: the child is a zombie, so its group id cannot be
  // reused yet; stragglers in the group are killed, then the child is reaped.
  void reap();
  // Relay what is readable on the stderr / stdout pipe; each closes its pipe at end of file.
  void read_stderr(LineRelay& relay);
  void read_stdout(LineRelay& relay);

 private:
  // Reads `pipe` until it would block, feeding the relay; closes it at end of file.
  void read_pipe(Fd& pipe, LineRelay& relay);

  int rank_;
  pid_t pid_;
  Fd pidfd_;
  Fd err_;
  Fd out_;
  int status_ = 0;
  bool wrote_stderr_ = false;

 public:
  std::optional<SteadyClock::time_point> stopped_since;  // Launch's bookkeeping
};

}  // namespace fabflow::launcher
