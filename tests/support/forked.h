// Multi-process test helpers: forked children that report lines to the parent over a pipe and
// exit with a status, plus a loopback listener for rank 0. The parent stays single-threaded
// (bootstraps are created in children only), which keeps fork safe under TSan.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/net.h"
#include "fabflow/bootstrap.h"

namespace fabflow::test {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// The child's side of the pipes. Not thread-safe.
class ChildIo {
 public:
  ChildIo(int report, int control) : report_(report), control_(control) {}
  // One line to the parent.
  void say(const std::string& line) const {
    const std::string out = line + "\n";
    for (std::size_t sent = 0; sent < out.size();) {
      const ssize_t n = ::write(report_, out.data() + sent, out.size() - sent);
      if (n <= 0) return;
      sent += static_cast<std::size_t>(n);
    }
  }
  // Waits for the parent's go(); false on timeout or when the parent closed the pipe.
  bool wait_go(milliseconds timeout) const {
    pollfd p{control_, POLLIN, 0};
    char c = 0;
    return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1 && ::read(control_, &c, 1) == 1;
  }

 private:
  int report_;
  int control_;
};

// The parent's handle on one forked child; kills and reaps it if still running when destroyed.
// Move-only.
class Child {
 public:
  // Forks; the child runs body and _exits with its result (99 after an exception, whose
  // message is reported as a line).
  static Child spawn(const std::function<int(const ChildIo&)>& body) {
    int report[2], control[2];
    if (::pipe2(report, O_CLOEXEC) != 0 || ::pipe2(control, O_CLOEXEC) != 0) std::abort();
    const pid_t pid = ::fork();
    if (pid < 0) std::abort();
    if (pid == 0) {
      ::close(report[0]);
      ::close(control[1]);
      const ChildIo io(report[1], control[0]);
      int rc = 99;
      try {
        rc = body(io);
      } catch (const std::exception& e) {
        io.say(std::string("exception: ") + e.what());
      }
      ::_exit(rc);
    }
    ::close(report[1]);
    ::close(control[0]);
    Child c;
    c.pid_ = pid;
    c.report_ = bootstrap_detail::Fd(report[0]);
    c.control_ = bootstrap_detail::Fd(control[1]);
    return c;
  }

  Child() = default;
  Child(Child&& o) noexcept
      : pid_(std::exchange(o.pid_, -1)),
        report_(std::move(o.report_)),
        control_(std::move(o.control_)),
        output_(std::move(o.output_)) {}
  Child& operator=(Child&&) = delete;
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  void go() const { [[maybe_unused]] auto n = ::write(control_.get(), "g", 1); }
  void kill(int sig) const { ::kill(pid_, sig); }

  // The next line the child reports, or nullopt on timeout or when the child is gone.
  std::optional<std::string> next_line(milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      if (auto nl = output_.find('\n', consumed_); nl != std::string::npos) {
        std::string line = output_.substr(consumed_, nl - consumed_);
        consumed_ = nl + 1;
        return line;
      }
      if (!read_some(deadline)) return std::nullopt;
    }
  }

  // Waits for the child to exit (killing it after `timeout`); returns its exit status, or
  // 128 + signal. Everything it reported is in output() afterwards.
  int finish(milliseconds timeout = milliseconds(10000)) {
    const auto deadline = Clock::now() + timeout;
    while (read_some(deadline)) {
    }
    if (Clock::now() >= deadline) ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  const std::string& output() const { return output_; }

 private:
  bool read_some(Clock::time_point deadline) {
    pollfd p{report_.get(), POLLIN, 0};
    if (::poll(&p, 1, bootstrap_detail::ms_until(deadline)) != 1) return false;
    char buf[4096];
    const ssize_t n = ::read(report_.get(), buf, sizeof buf);
    if (n <= 0) return false;
    output_.append(buf, static_cast<std::size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  bootstrap_detail::Fd report_;
  bootstrap_detail::Fd control_;
  std::string output_;
  std::size_t consumed_ = 0;
};

// A socket bound to 127.0.0.1 on a kernel-chosen port; listening unless told otherwise.
struct Loopback {
  bootstrap_detail::Fd fd;
  int port = 0;
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

inline Loopback loopback(bool listening = true) {
  Loopback l;
  l.fd = bootstrap_detail::Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(l.fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) std::abort();
  if (listening && ::listen(l.fd.get(), 64) != 0) std::abort();
  l.port = ntohs(bootstrap_detail::local_name(l.fd.get()).sin_port);
  return l;
}

inline BootstrapConfig rank_config(int rank, int size, const std::string& coordinator,
                                   milliseconds timeout = milliseconds(5000)) {
  BootstrapConfig c;
  c.rank = rank;
  c.size = size;
  c.local_rank = rank;
  c.coordinator = coordinator;
  c.secret = "test-secret";
  c.timeout = timeout;
  return c;
}

// Forks ranks 0..count-1 (default: all) of a run of `size`; rank 0 gets the listener, which the
// parent then closes. body(rank, io, config) runs in each child.
template <typename Body>
std::vector<Child> spawn_ranks(int size, Loopback listener, Body body,
                               milliseconds timeout = milliseconds(5000), int count = -1) {
  std::vector<Child> children;
  const std::string coord = listener.address();
  for (int r = 0; r < (count < 0 ? size : count); ++r) {
    BootstrapConfig config = rank_config(r, size, coord, timeout);
    if (r == 0) config.listen_fd = listener.fd.get();
    children.push_back(
        Child::spawn([&, config](const ChildIo& io) { return body(config.rank, io, config); }));
    if (r == 0) listener.fd.reset();
  }
  return children;
}

}  // namespace fabflow::test
