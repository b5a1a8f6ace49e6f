#include "support/run_cli.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace fabflow::testing {

CliResult run_cli(std::vector<std::string> args, std::chrono::milliseconds timeout,
                  const std::map<std::string, std::string>& env,
                  const std::function<void(pid_t)>& on_start) {
  if (!args.empty() && args[0] == "fabflow") args[0] = FABFLOW_BIN;
  CliResult r;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return r;
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  setpgid(pid, pid);
  if (on_start) on_start(pid);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  auto deadline = start + timeout;
  char buf[4096];
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    if (poll(fds, 2, static_cast<int>(left)) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  waitpid(pid, &status, 0);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (r.timed_out)
    r.status = -1;
  else if (WIFEXITED(status))
    r.status = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    r.status = 128 + WTERMSIG(status);
  return r;
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  std::ifstream f("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) +
                  "/children");
  pid_t p;
  while (f >> p) out.push_back(p);
  return out;
}

int rank_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string var;
  while (std::getline(f, var, '\0'))
    if (var.rfind("FABFLOW_RANK=", 0) == 0) return std::stoi(var.substr(13));
  return -1;
}

KilledRun kill_rank_mid_run(std::vector<std::string> args, const RankKill& kill) {
  KilledRun run;
  run.result = run_cli(std::move(args), std::chrono::seconds(30), {}, [&](pid_t launcher) {
    for (int i = 0; i < 500; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      pid_t target = -1;
      const std::vector<pid_t> children = children_of(launcher);
      for (pid_t child : children)
        if (rank_of(child) == kill.victim) target = child;
      if (target < 0 || (kill.ready && !kill.ready(children))) continue;
      std::this_thread::sleep_for(kill.after);
      run.ranks = children_of(launcher);
      run.killed = std::chrono::steady_clock::now();
      ::kill(target, kill.signal);
      return;
    }
  });
  return run;
}

void expect_one_error_line(const CliResult& r) {
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.status, 0);
  const auto err = lines(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
}

void expect_usage_line(const CliResult& r, const std::string& needle) {
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 2) << r.err;
  const auto err = lines(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
  EXPECT_NE(err[0].find(needle), std::string::npos) << err[0];
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

std::vector<nlohmann::json> run_bench_json(const std::string& bench, std::vector<std::string> args,
                                           std::chrono::seconds bound,
                                           const std::map<std::string, std::string>& env) {
  args.insert(args.begin(), {"fabflow", "bench", bench});
  args.insert(args.end(), {"--json", "--timeout", "10000"});
  const CliResult r = run_cli(args, bound, env);
  EXPECT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 0) << r.err;
  // A busy machine is reported on stderr with both load averages, the end one measured.
  EXPECT_EQ(r.err.find("-1.00 at end"), std::string::npos) << r.err;
  std::vector<nlohmann::json> out;
  for (const auto& l : lines(r.out)) out.push_back(nlohmann::json::parse(l));
  return out;
}

int free_loopback_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

std::vector<std::string> shm_regions_of(pid_t pid) {
  std::vector<std::string> out;
  const std::string prefix = "fabflow_" + std::to_string(pid) + "_";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::string_view(e->d_name).starts_with(prefix)) out.emplace_back(e->d_name);
    closedir(d);
  }
  return out;
}

}  // namespace fabflow::testing
