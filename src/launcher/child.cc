#include "launcher/child.h"

#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <string_view>

#include "common/shm_regions.h"
#include "fabflow/status.h"

namespace fabflow::launcher {
namespace {

std::atomic<bool> g_launch_active{false};
std::atomic<int> g_signal_pipe{-1};
std::atomic<int> g_first_signal{0};

extern "C" void on_launcher_signal(int sig) {
  const int saved = errno;
  int none = 0;
  g_first_signal.compare_exchange_strong(none, sig);
  if (const int fd = g_signal_pipe.load(); fd >= 0) {
    const char byte = static_cast<char>(sig);
    [[maybe_unused]] const ssize_t n = ::write(fd, &byte, 1);
  }
  errno = saved;
}

[[noreturn]] void fail_in_child(int report_fd, Stage stage) {
  const int report[2] = {static_cast<int>(stage), errno};
  [[maybe_unused]] const ssize_t n = ::write(report_fd, report, sizeof report);
  ::_exit(127);
}

}  // namespace

SignalGuard::SignalGuard() {
  if (g_launch_active.exchange(true)) {
    throw Error("launcher: another launch is already running in this process");
  }
  try {
    Pipe p = make_pipe();
    for (int fd : {p.read.get(), p.write.get()}) ::fcntl(fd, F_SETFL, O_NONBLOCK);
    read_ = std::move(p.read);
    write_ = std::move(p.write);
  } catch (...) {
    g_launch_active = false;
    throw;
  }
  g_first_signal = 0;
  g_signal_pipe = write_.get();
  for (std::size_t i = 0; i < kSignals.size(); ++i) {
    struct sigaction sa {};
    sigemptyset(&sa.sa_mask);
    switch (kSignals[i]) {
      case SIGPIPE: sa.sa_handler = SIG_IGN; break;
      case SIGCHLD: sa.sa_handler = SIG_DFL; break;
      default: sa.sa_handler = on_launcher_signal; break;
    }
    ::sigaction(kSignals[i], &sa, &previous_[i]);
  }
}

SignalGuard::~SignalGuard() {
  restore();
  g_signal_pipe = -1;
  g_launch_active = false;
}

int SignalGuard::received() const noexcept { return g_first_signal.load(); }

void SignalGuard::restore() const noexcept {
  for (std::size_t i = 0; i < kSignals.size(); ++i) {
    ::sigaction(kSignals[i], &previous_[i], nullptr);
  }
}

void SignalGuard::drain() const noexcept {
  char buf[64];
  while (::read(read_.get(), buf, sizeof buf) > 0) {
  }
}

const char* stage_text(Stage s) {
  switch (s) {
    case Stage::pdeathsig: return "prctl(PR_SET_PDEATHSIG)";
    case Stage::setns: return "setns into its network namespace";
    case Stage::affinity: return "sched_setaffinity to its CPU";
    case Stage::dup2: return "dup2";
    case Stage::coord_fd: return "fcntl on the coordinator socket";
    case Stage::exec: return "execv";
  }
  return "?";
}

void run_child(const ChildPlan& plan, pid_t launcher_pid, const SignalGuard& signals) {
  ::setpgid(0, 0);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail_in_child(plan.report_fd, Stage::pdeathsig);
  if (::getppid() != launcher_pid) ::_exit(127);
  signals.restore();
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (plan.netns_fd >= 0 && ::setns(plan.netns_fd, CLONE_NEWNET) != 0) {
    fail_in_child(plan.report_fd, Stage::setns);
  }
  if (plan.cpu >= 0) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    CPU_SET(plan.cpu, &cpus);
    if (::sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
      fail_in_child(plan.report_fd, Stage::affinity);
    }
  }
  if (::dup2(plan.stdin_fd, 0) < 0 || ::dup2(plan.stderr_fd, 2) < 0 ||
      (plan.stdout_fd >= 0 && ::dup2(plan.stdout_fd, 1) < 0)) {
    fail_in_child(plan.report_fd, Stage::dup2);
  }
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  if (plan.coord_fd >= 0 && ::fcntl(plan.coord_fd, F_SETFD, 0) != 0) {
    fail_in_child(plan.report_fd, Stage::coord_fd);
  }
  ::execve(plan.argv[0], plan.argv.data(), plan.envp.data());
  fail_in_child(plan.report_fd, Stage::exec);
}

Child::~Child() {
  if (!running()) return;
  signal(SIGKILL);
  pollfd p{pidfd_.get(), POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(kReapBound.count())) > 0) reap();
}

bool Child::stopped() const {
  if (!running()) return false;
  std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto comm_end = line.rfind(')');  // the command name may hold spaces and parentheses
  return comm_end != std::string::npos && comm_end + 2 < line.size() &&
         (line[comm_end + 2] == 'T' || line[comm_end + 2] == 't');
}

void Child::reap() {
  ::kill(-pid_, SIGKILL);
  remove_shm_regions_of(pid_);  // a zombie still: its pid cannot have been reused
  while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
  }
  pidfd_.reset();
}

void Child::read_stderr(LineRelay& relay) {
  if (err_) read_pipe(err_, relay);
}

void Child::read_stdout(LineRelay& relay) {
  if (out_) read_pipe(out_, relay);
}

void Child::read_pipe(Fd& pipe, LineRelay& relay) {
  char buf[16 * 1024];
  while (pipe) {
    const ssize_t n = ::read(pipe.get(), buf, sizeof buf);
    if (n > 0) {
      if (&pipe == &err_) wrote_stderr_ = true;
      relay.feed(rank_, std::string_view(buf, static_cast<std::size_t>(n)));
      // The launcher's stdout is gone (its reader exited): the rank's next writes fail as they
      // would into that pipe itself (SIGPIPE, or EPIPE where it ignores the signal).
      if (&pipe == &out_ && relay.output_gone()) {
        pipe.reset();
        return;
      }
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return;
    } else {
      relay.finish(rank_);
      pipe.reset();
    }
  }
}

}  // namespace fabflow::launcher
