#include "tools/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fabflow/status.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace fabflow::tools {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr std::chrono::seconds kKillDelay{5};  // SIGTERM -> SIGKILL after a timeout

std::atomic<pid_t> g_child{0};
std::atomic<int> g_signal{0};

// The child sits in its own process group (so a timeout can take its ranks with it), which
// also keeps the terminal's Ctrl-C from reaching it: pass it on.
extern "C" void on_runner_signal(int sig) {
  const int saved = errno;
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);
  if (const pid_t pid = g_child.load(); pid > 0) ::kill(-pid, SIGTERM);
  errno = saved;
}

// Installs on_runner_signal for SIGINT and SIGTERM while one child runs.
class SignalForward {
 public:
  SignalForward() {
    struct sigaction sa {};
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_runner_signal;
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalForward() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalForward(const SignalForward&) = delete;
  SignalForward& operator=(const SignalForward&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

[[noreturn]] void exec_child(const ChildOptions& o, int out_fd, int err_fd, pid_t parent) {
  ::setpgid(0, 0);
  // A runner killed outright must not leave a bench running; SIGTERM lets the bench's own
  // launcher stop its ranks.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(127);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGINT, &dfl, nullptr);
  ::sigaction(SIGTERM, &dfl, nullptr);
  ::dup2(out_fd, 1);
  if (err_fd >= 0) ::dup2(err_fd, 2);
  for (const auto& [k, v] : o.env) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  ::_exit(127);
}

}  // namespace

int interrupted() { return g_signal.load(); }

std::string child_error(const std::string& err) {
  std::istringstream in(err);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.rfind("fabflow: error: ", 0) == 0) return line.substr(16);
    if (!line.empty()) last = line;
  }
  return last.empty() ? "no message" : last;
}

ChildResult run_child(const ChildOptions& o,
                      const std::function<void(const std::string&)>& on_line) {
  int out[2], err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0 || (o.capture_stderr && ::pipe2(err, O_CLOEXEC) != 0))
    throw Error(std::string("pipe: ") + std::strerror(errno));
  SignalForward forward;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) exec_child(o, out[1], err[1], parent);
  ::setpgid(pid, pid);  // also here, so that a kill right away reaches the group
  g_child = pid;
  ::close(out[1]);
  if (err[1] >= 0) ::close(err[1]);

  ChildResult r;
  const auto start = SteadyClock::now();
  SteadyClock::time_point term_at =
      o.timeout.count() > 0 ? start + o.timeout : SteadyClock::time_point::max();
  SteadyClock::time_point kill_at = SteadyClock::time_point::max();
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = err[0] >= 0 ? 2 : 1;
  std::string pending;
  char buf[16 * 1024];
  while (open_fds > 0) {
    const auto now = SteadyClock::now();
    if (now >= term_at) {
      r.timed_out = true;
      ::kill(-pid, SIGTERM);
      term_at = SteadyClock::time_point::max();
      kill_at = now + kKillDelay;
    }
    if (now >= kill_at) {
      ::kill(-pid, SIGKILL);
      break;  // a grandchild may hold the pipe; the child itself is gone
    }
    const auto next = std::min(term_at, kill_at);
    int wait_ms = 1000;
    if (next != SteadyClock::time_point::max())
      wait_ms = static_cast<int>(std::clamp<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1, 1, 1000));
    if (::poll(fds, 2, wait_ms) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      if (i == 1) {
        r.err.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      pending.append(buf, static_cast<std::size_t>(n));
      for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1))
        on_line(pending.substr(0, nl));
    }
  }
  if (!pending.empty()) on_line(pending);
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  // Wait for the exit without reaping: while the child is a zombie its group id cannot be
  // reused, so stragglers of its group can be killed safely.
  siginfo_t info{};
  while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  if (WIFEXITED(status))
    r.status = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    r.status = 128 + WTERMSIG(status);
  return r;
}

void print_error(const std::string& msg) {
  std::string m = msg;
  for (char& ch : m)
    if (ch == '\n') ch = ' ';
  std::fputs(("fabflow: error: " + m + "\n").c_str(), stderr);
}

std::string find_binary(const std::string& name, const std::string& also) {
  auto executable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) return executable(name) ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(std::string(path ? path : "/usr/local/bin:/usr/bin:/bin") + ":" + also);
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && executable(dir + "/" + name)) return dir + "/" + name;
  return "";
}

}  // namespace fabflow::tools
