// Helpers for the launcher tests: temporary directories, stderr capture, bounded polling and
// launches in a forked process.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "fabflow/launcher.h"
#include "fabflow/status.h"

namespace fabflow::launcher_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A fresh directory under /tmp, removed with its contents on destruction; move-less.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/fabflow-launcher-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Polls `done` every few milliseconds; false when it is still false after `bound`.
inline bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds bound) {
  const auto give_up = Clock::now() + bound;
  while (!done()) {
    if (Clock::now() >= give_up) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// True when `pid` no longer runs (gone, or a zombie waiting for its reaper).
inline bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  const auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  const auto paren = stat->rfind(')');
  return paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 2] == 'Z';
}

// Reads a pid a child wrote into `path`, or 0.
inline pid_t read_pid(const std::string& path) {
  const auto text = read_file(path);
  return text && !text->empty() ? static_cast<pid_t>(std::stol(*text)) : 0;
}

// A launch of `/bin/sh -c script sh dir`: in the script, $1 is the test's temporary directory.
inline LaunchConfig sh_launch(int nprocs, const std::string& script, const TempDir& dir) {
  LaunchConfig config;
  config.nprocs = nprocs;
  config.argv = {"/bin/sh", "-c", script, "sh", dir.path()};
  return config;
}

// Sends fd 1 or 2 to a file until finish() (or destruction) restores it; not thread-safe.
// Check expectations after finish(): gtest reports failures on stdout.
class CapturedFd {
 public:
  explicit CapturedFd(int fd) : fd_(fd), file_(dir_.file("captured")) {
    std::fflush(nullptr);
    saved_ = ::dup(fd_);
    const int out = ::open(file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ::dup2(out, fd_);
    ::close(out);
  }
  ~CapturedFd() { finish(); }
  CapturedFd(const CapturedFd&) = delete;
  CapturedFd& operator=(const CapturedFd&) = delete;

  std::string finish() {
    if (saved_ >= 0) {
      std::fflush(nullptr);
      ::dup2(saved_, fd_);
      ::close(saved_);
      saved_ = -1;
    }
    return read_file(file_).value_or("");
  }

 private:
  int fd_;
  TempDir dir_;
  std::string file_;
  int saved_ = -1;
};

// Runs launch_local in a forked process whose exit status is the launch's result (250 when it
// threw). The caller reaps it with wait_exit.
inline pid_t fork_launch(const LaunchConfig& config) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 250;
    try {
      rc = launch_local(config);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "launch threw: %s\n", e.what());
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  return pid;
}

// The exit code of `pid` (128+signal when killed), or nullopt after `bound` (it is then killed
// and reaped).
inline std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds bound) {
  int status = 0;
  const bool exited = wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, bound);
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return std::nullopt;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Sets or unsets environment variables for one scope, restoring the previous values.
class ScopedEnv {
 public:
  ScopedEnv() = default;
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) {
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        ::unsetenv(it->first.c_str());
      }
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  void set(const std::string& name, const std::string& value) {
    remember(name);
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  void unset(const std::string& name) {
    remember(name);
    ::unsetenv(name.c_str());
  }

 private:
  void remember(const std::string& name) {
    const char* old = std::getenv(name.c_str());
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace fabflow::launcher_test
