#include "fabflow/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include "fabflow/status.h"
#include "launcher/child.h"
#include "launcher/fd.h"
#include "launcher/netns.h"
#include "launcher/relay.h"

extern char** environ;

namespace fabflow {
namespace {

using launcher::Child;
using launcher::ChildPlan;
using launcher::ErrorLines;
using launcher::LineRelay;
using launcher::Fd;
using launcher::kReapBound;
using launcher::run_child;
using launcher::SignalGuard;
using launcher::Stage;
using launcher::stage_text;
using launcher::SteadyClock;
using std::chrono::milliseconds;

constexpr milliseconds kKillDelay{1000};   // SIGTERM -> SIGKILL
constexpr milliseconds kDrainBound{1000};  // last children gone -> giving up on their pipes

std::string make_secret() {
  unsigned char bytes[16];
  for (std::size_t got = 0; got < sizeof bytes;) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(launcher::errno_text("launcher: getrandom"));
    got += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string secret;
  for (unsigned char b : bytes) {
    secret.push_back(kHex[b >> 4]);
    secret.push_back(kHex[b & 15]);
  }
  return secret;
}

// A TCP socket listening on 127.0.0.1 with a kernel-chosen port.
Fd listen_loopback(int backlog, int* port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw Error(launcher::errno_text("launcher: socket"));
  fd = launcher::above_stdio(std::move(fd));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    throw Error(launcher::errno_text("launcher: bind 127.0.0.1:0"));
  }
  if (::listen(fd.get(), backlog) != 0) throw Error(launcher::errno_text("launcher: listen"));
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw Error(launcher::errno_text("launcher: getsockname"));
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string seconds_text(milliseconds ms) {
  if (ms.count() % 1000 == 0) return std::to_string(ms.count() / 1000);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ms.count()) / 1000.0);
  std::string text = buf;
  while (text.back() == '0') text.pop_back();
  return text;
}

}  // namespace

std::string resolved_program(const std::string& argv0) {
  if (argv0 != "/proc/self/exe") return argv0;
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return argv0;
  std::string path(exe, static_cast<std::size_t>(n));
  // A binary replaced or removed since it started: only /proc/self/exe still reaches it.
  if (path.ends_with(" (deleted)") || ::access(path.c_str(), X_OK) != 0) return argv0;
  return path;
}

namespace {

// One launch from spawning to the last child reaped; not thread-safe.
class Launch {
 public:
  Launch(const LaunchConfig& config, SignalGuard& signals, SteadyClock::time_point start)
      : config_(config),
        signals_(signals),
        relay_(STDERR_FILENO, config.nprocs,
               config.label_output ? ErrorLines::every : ErrorLines::first_of_run),
        out_relay_(STDOUT_FILENO, config.nprocs, ErrorLines::every) {
    if (config.deadline.count() > 0) deadline_at_ = start + config.deadline;
    children_.reserve(static_cast<std::size_t>(config.nprocs));
    for (int rank = 0; config.label_output && rank < config.nprocs; ++rank) {
      std::string label(1, '[');  // "[3] "
      label.append(std::to_string(rank)).append("] ");
      relay_.set_label(rank, label);
      out_relay_.set_label(rank, label);
    }
  }

  void spawn(int rank, const std::vector<std::string>& extra_env, int netns_fd, int coord_fd);
  int supervise();

 private:
  // SIGTERM at `term_at` (or earlier if already planned), SIGKILL kKillDelay later.
  void start_teardown(SteadyClock::time_point term_at);
  // SIGKILL now.
  void escalate(SteadyClock::time_point now);
  void on_exit(Child& child);
  // Fails the run on a child stopped for config_.stopped_bound.
  void check_stopped(SteadyClock::time_point now);
  void signal_all(int sig);
  void final_drain();
  int wait_ms(SteadyClock::time_point now) const;

  const LaunchConfig& config_;
  SignalGuard& signals_;
  LineRelay relay_;      // the children's stderr
  LineRelay out_relay_;  // their stdout, when label_output pipes it
  std::vector<Child> children_;
  std::optional<int> result_;
  std::optional<SteadyClock::time_point> deadline_at_, term_at_, kill_at_, give_up_at_;
  bool term_sent_ = false;
  bool kill_sent_ = false;
};

void Launch::spawn(int rank, const std::vector<std::string>& extra_env, int netns_fd,
                   int coord_fd) {
  ChildPlan plan;
  plan.netns_fd = netns_fd;
  plan.coord_fd = coord_fd;
  for (char** e = environ; *e; ++e) {
    const std::string_view entry = *e;
    const std::string_view key = entry.substr(0, entry.find('='));
    const bool ours = key == "FABFLOW_RANK" || key == "FABFLOW_SIZE" ||
                      key == "FABFLOW_LOCAL_RANK" || key == "FABFLOW_SECRET" ||
                      key == "FABFLOW_COORD" || key == "FABFLOW_COORD_FD" ||
                      key == "FABFLOW_SAME_HOST";
    if (!ours) plan.env_text.emplace_back(entry);
  }
  plan.env_text.insert(plan.env_text.end(), extra_env.begin(), extra_env.end());
  for (auto& e : plan.env_text) plan.envp.push_back(e.data());
  plan.envp.push_back(nullptr);
  plan.program = resolved_program(config_.argv[0]);
  plan.argv.push_back(plan.program.data());
  for (std::size_t i = 1; i < config_.argv.size(); ++i)
    plan.argv.push_back(const_cast<char*>(config_.argv[i].c_str()));
  plan.argv.push_back(nullptr);

  Fd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!null) throw Error(launcher::errno_text("launcher: open /dev/null"));
  null = launcher::above_stdio(std::move(null));
  launcher::Pipe err = launcher::make_pipe();
  launcher::Pipe report = launcher::make_pipe();
  launcher::Pipe out;
  if (config_.label_output) out = launcher::make_pipe();
  plan.stdin_fd = null.get();
  plan.stdout_fd = out.write.get();
  plan.stderr_fd = err.write.get();
  plan.report_fd = report.write.get();
  if (!config_.cpus.empty()) {
    plan.cpu = config_.cpus[static_cast<std::size_t>(rank) % config_.cpus.size()];
  }

  std::fflush(nullptr);
  const pid_t self = ::getpid();
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &old);
  const pid_t pid = ::fork();
  if (pid == 0) run_child(plan, self, signals_);
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) throw Error(launcher::errno_text("launcher: fork", fork_errno));
  ::setpgid(pid, pid);

  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));  // glibc 2.36 lacks C++ linkage
  if (!pidfd) {
    const int e = errno;
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    throw Error(launcher::errno_text("launcher: pidfd_open", e));
  }
  ::fcntl(err.read.get(), F_SETFL, O_NONBLOCK);
  if (out.read) ::fcntl(out.read.get(), F_SETFL, O_NONBLOCK);
  children_.emplace_back(rank, pid, std::move(pidfd), std::move(err.read), std::move(out.read));

  err.write.reset();
  out.write.reset();
  report.write.reset();
  int failure[2];
  ssize_t n;
  while ((n = ::read(report.read.get(), failure, sizeof failure)) < 0 && errno == EINTR) {
  }
  if (n == static_cast<ssize_t>(sizeof failure) &&
      failure[0] == static_cast<int>(Stage::affinity)) {
    throw Error("launcher: rank " + std::to_string(rank) + ": cannot pin to CPU " +
                std::to_string(plan.cpu) + ": " + std::strerror(failure[1]));
  }
  if (n == static_cast<ssize_t>(sizeof failure)) {
    throw Error("launcher: rank " + std::to_string(rank) + ": " +
                stage_text(static_cast<Stage>(failure[0])) + " " + config_.argv[0] + ": " +
                std::strerror(failure[1]));
  }
}

void Launch::signal_all(int sig) {
  for (auto& c : children_) c.signal(sig);
}

void Launch::start_teardown(SteadyClock::time_point term_at) {
  if (!term_sent_ && (!term_at_ || term_at < *term_at_)) term_at_ = term_at;
}

void Launch::escalate(SteadyClock::time_point now) {
  term_at_.reset();
  term_sent_ = true;
  if (!kill_sent_) kill_at_ = now;
}

void Launch::on_exit(Child& child) {
  child.reap();
  child.read_stderr(relay_);
  child.read_stdout(out_relay_);
  const int status = child.status();
  if (exit_code(status) == 0 || result_) return;
  result_ = exit_code(status);
  // A rank killed in silence is named; with labelled output (any program) every first failure,
  // but for SIGPIPE once the launcher's stdout is gone, which a shell pipeline shows quietly.
  const bool killed = WIFSIGNALED(status);
  const bool reader_gone = killed && WTERMSIG(status) == SIGPIPE && out_relay_.output_gone();
  const std::string who = "fabflow: error: rank " + std::to_string(child.rank()) + " (pid " +
                          std::to_string(child.pid());
  if (killed && !reader_gone && (config_.label_output || !child.wrote_stderr())) {
    const int sig = WTERMSIG(status);
    const char* desc = ::sigdescr_np(sig);
    relay_.emit(who + ") killed by signal " + std::to_string(sig) + " (" +
                (desc ? desc : "unknown") + ")");
  } else if (!killed && config_.label_output) {
    relay_.emit(who + ") exited with status " + std::to_string(*result_));
  }
  // A stopped rank would hold the run for the whole grace and SIGTERM delay, and its peers
  // have already said that it stopped answering: it is killed now.
  for (auto& c : children_) {
    if (c.stopped()) c.signal(SIGKILL);
  }
  start_teardown(SteadyClock::now() + config_.grace);
}

void Launch::check_stopped(SteadyClock::time_point now) {
  for (auto& c : children_) {
    if (!c.stopped()) {
      c.stopped_since.reset();
      continue;
    }
    if (!c.stopped_since) c.stopped_since = now;
    if (now - *c.stopped_since < config_.stopped_bound || result_) continue;
    result_ = 1;
    relay_.emit("fabflow: error: rank " + std::to_string(c.rank()) +
                " stopped answering: its process (pid " + std::to_string(c.pid()) +
                ") has been stopped (SIGSTOP or a debugger) for " +
                seconds_text(std::chrono::duration_cast<milliseconds>(now - *c.stopped_since)) +
                " s");
    c.signal(SIGKILL);
    start_teardown(now);
  }
}

int Launch::wait_ms(SteadyClock::time_point now) const {
  std::optional<SteadyClock::time_point> next;
  for (const auto& t : {deadline_at_, term_at_, kill_at_, give_up_at_}) {
    if (t && (!next || *t < *next)) next = t;
  }
  if (!next) return -1;
  const auto left = std::chrono::ceil<milliseconds>(*next - now).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

int Launch::supervise() {
  std::vector<pollfd> fds;
  std::vector<Child*> owners;
  for (;;) {
    const bool any_running =
        std::any_of(children_.begin(), children_.end(), [](const Child& c) { return c.running(); });
    if (!any_running) break;

    const auto now = SteadyClock::now();
    if (deadline_at_ && now >= *deadline_at_) {
      deadline_at_.reset();
      if (!result_) {
        result_ = 124;
        relay_.emit("fabflow: error: run exceeded its deadline of " +
                    seconds_text(config_.deadline) + " s");
      }
      start_teardown(now);
    }
    if (term_at_ && now >= *term_at_) {
      term_at_.reset();
      term_sent_ = true;
      signal_all(SIGTERM);
      kill_at_ = now + kKillDelay;
    }
    if (kill_at_ && now >= *kill_at_) {
      kill_at_.reset();
      kill_sent_ = true;
      signal_all(SIGKILL);
      give_up_at_ = now + kReapBound;
    }
    if (give_up_at_ && now >= *give_up_at_) {
      for (const auto& c : children_) {
        if (c.running()) {
          relay_.emit("fabflow: error: rank " + std::to_string(c.rank()) + " (pid " +
                      std::to_string(c.pid()) + ") did not exit after SIGKILL");
        }
      }
      break;
    }

    fds.assign(1, pollfd{signals_.fd(), POLLIN, 0});
    owners.assign(1, nullptr);
    for (auto& c : children_) {
      if (c.running()) {
        fds.push_back({c.pidfd(), POLLIN, 0});
        owners.push_back(&c);
      }
      for (const int pipe : {c.err(), c.out()}) {
        if (pipe >= 0) {
          fds.push_back({pipe, POLLIN, 0});
          owners.push_back(&c);
        }
      }
    }
    int timeout = wait_ms(now);
    if (config_.stopped_bound.count() > 0) {
      check_stopped(now);
      constexpr int kStopCheckMs = 50;
      timeout = timeout < 0 ? kStopCheckMs : std::min(timeout, kStopCheckMs);
    }
    const int ready = ::poll(fds.data(), fds.size(), timeout);
    if (ready < 0 && errno != EINTR) throw Error(launcher::errno_text("launcher: poll"));
    if (ready <= 0) continue;

    if (fds[0].revents != 0) {
      signals_.drain();
      if (const int sig = signals_.received(); sig != 0) {
        if (!result_ || *result_ != 128 + sig) {
          result_ = 128 + sig;
          start_teardown(SteadyClock::now());
        } else {
          escalate(SteadyClock::now());  // a second signal: no more patience
        }
      }
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Child& c = *owners[i];
      if (fds[i].fd == c.pidfd()) {
        on_exit(c);
      } else if (fds[i].fd == c.err()) {
        c.read_stderr(relay_);
      } else if (fds[i].fd == c.out()) {
        c.read_stdout(out_relay_);
      }
    }
  }
  final_drain();
  return result_.value_or(0);
}

// Relays what the children left in their pipes; a pipe held open by an escaped grandchild is
// abandoned after a bound.
void Launch::final_drain() {
  const auto give_up = SteadyClock::now() + kDrainBound;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Child*> owners;
    for (auto& c : children_) {
      for (const int pipe : {c.err(), c.out()}) {
        if (pipe >= 0) {
          fds.push_back({pipe, POLLIN, 0});
          owners.push_back(&c);
        }
      }
    }
    const auto left = std::chrono::ceil<milliseconds>(give_up - SteadyClock::now()).count();
    if (fds.empty() || left <= 0) break;
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(left));
    if (ready < 0 && errno != EINTR) break;
    for (std::size_t i = 0; ready > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Child& c = *owners[i];
      if (fds[i].fd == c.err()) c.read_stderr(relay_);
      if (fds[i].fd == c.out()) c.read_stdout(out_relay_);
    }
  }
  for (auto& c : children_) {
    if (c.err() >= 0) relay_.finish(c.rank());
    if (c.out() >= 0) out_relay_.finish(c.rank());
  }
}

}  // namespace

int launch_local(const LaunchConfig& config) {
  const auto start = SteadyClock::now();
  if (config.nprocs < 1) throw Error("launcher: nprocs must be at least 1");
  if (config.argv.empty() || config.argv[0].empty()) {
    throw Error("launcher: no program to run");
  }
  for (const int cpu : config.cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      throw Error("launcher: CPU " + std::to_string(cpu) + " is out of range 0.." +
                  std::to_string(CPU_SETSIZE - 1));
    }
  }
  if (config.netns && config.nprocs > launcher::VirtualNetwork::kMaxRanks) {
    throw Error("launcher: at most " + std::to_string(launcher::VirtualNetwork::kMaxRanks) +
                " processes with network namespaces");
  }
  SignalGuard signals;
  const pid_t self = ::getpid();

  std::optional<launcher::VirtualNetwork> network;
  Fd coord;
  std::string coord_addr;
  if (config.netns) {
    try {
      cleanup_stale_netns();
      network.emplace(self, config.nprocs);
    } catch (const Error&) {
      if (signals.received() != 0) return 128 + signals.received();
      throw;
    }
    coord_addr =
        launcher::VirtualNetwork::address(0) + ":" + std::to_string(launcher::kNetnsCoordPort);
  } else {
    int port = 0;
    coord = listen_loopback(config.nprocs + 8, &port);
    coord_addr = "127.0.0.1:" + std::to_string(port);
  }
  if (signals.received() != 0) return 128 + signals.received();

  const std::string secret = make_secret();
  Launch launch(config, signals, start);
  for (int rank = 0; rank < config.nprocs; ++rank) {
    std::vector<std::string> env{
        "FABFLOW_RANK=" + std::to_string(rank),
        "FABFLOW_SIZE=" + std::to_string(config.nprocs),
        "FABFLOW_LOCAL_RANK=" + std::to_string(rank),
        "FABFLOW_SECRET=" + secret,
        "FABFLOW_COORD=" + coord_addr,
    };
    int coord_fd = -1;
    if (rank == 0 && coord) {
      coord_fd = coord.get();
      env.push_back("FABFLOW_COORD_FD=" + std::to_string(coord_fd));
    }
    // Every rank shares this host's memory: `-p auto` may pick the local transport.
    if (!network) env.push_back("FABFLOW_SAME_HOST=1");
    Fd netns_fd = network ? network->rank(rank).open() : Fd();
    launch.spawn(rank, env, netns_fd.get(), coord_fd);
    if (rank == 0) coord.reset();
  }
  return launch.supervise();
}

bool started_by_launcher() {
  const auto set = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && value[0] != '\0';
  };
  return set("FABFLOW_RANK") || (set("SLURM_PROCID") && set("SLURM_NTASKS")) ||
         set("OMPI_COMM_WORLD_RANK") || set("PMI_RANK") || set("PMIX_RANK");
}

bool launched_on_one_host() {
  const char* v = std::getenv("FABFLOW_SAME_HOST");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace fabflow
