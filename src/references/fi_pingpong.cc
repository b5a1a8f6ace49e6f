#include "references/fi_pingpong.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>
#include <vector>

namespace fabflow::references {
namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

std::string find_fi_pingpong() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    std::string p = std::string(dir) + "/fi_pingpong";
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return {};
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// Starts argv pinned to `cpu` with stdout+stderr into a pipe; returns pid and read end.
pid_t spawn(const std::vector<std::string>& args, int cpu, int* out_fd) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    if (cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      sched_setaffinity(0, sizeof set, &set);
    }
    dup2(p[1], 1);
    dup2(p[1], 2);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(p[1]);
  *out_fd = p[0];
  return pid;
}

// Reads everything from fd until EOF or the deadline; false on timeout.
bool drain(int fd, std::string* out, std::chrono::steady_clock::time_point deadline) {
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return true;
    out->append(buf, static_cast<std::size_t>(n));
  }
}

int reap(pid_t pid, bool kill_it) {
  if (kill_it) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The result row of fi_pingpong: "bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec".
std::optional<double> parse_usec(const std::string& text, std::size_t size) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::vector<std::string> col;
    for (std::string c; f >> c;) col.push_back(c);
    if (col.size() == 8 && col[0] == std::to_string(size)) {
      try {
        return std::stod(col[6]);
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ReferenceRun> run_fi_pingpong(const std::string& provider,
                                            const std::string& endpoint, std::size_t size,
                                            std::uint64_t iterations, int cpu_server,
                                            int cpu_client, std::string* why) {
  std::string exe = find_fi_pingpong();
  if (exe.empty()) {
    *why = "fi_pingpong not found (Debian package libfabric-bin)";
    return std::nullopt;
  }
  int port = free_port();
  if (port < 0) {
    *why = "no free port for fi_pingpong";
    return std::nullopt;
  }
  std::vector<std::string> common{exe,
                                  "-p",
                                  provider,
                                  "-e",
                                  endpoint,
                                  "-I",
                                  std::to_string(iterations),
                                  "-S",
                                  std::to_string(size)};
  auto server_args = common;
  server_args.insert(server_args.end(), {"-B", std::to_string(port)});
  auto client_args = common;
  client_args.insert(client_args.end(), {"-P", std::to_string(port), "127.0.0.1"});

  auto deadline = std::chrono::steady_clock::now() + kTimeout;
  int server_out = -1, client_out = -1;
  pid_t server = spawn(server_args, cpu_server, &server_out);
  if (server < 0) {
    *why = "cannot start fi_pingpong";
    return std::nullopt;
  }
  // The client retries nothing: give the server a moment to listen.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  pid_t client = spawn(client_args, cpu_client, &client_out);
  std::string client_text, server_text;
  bool ok = client >= 0 && drain(client_out, &client_text, deadline);
  if (client >= 0) {
    close(client_out);
    ok = reap(client, !ok) == 0 && ok;
  }
  bool server_done =
      drain(server_out, &server_text, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  close(server_out);
  reap(server, !server_done);
  auto usec = parse_usec(client_text, size);
  if (!ok || !usec) {
    *why = "fi_pingpong failed: " + client_text.substr(0, 200);
    for (char& c : *why)
      if (c == '\n') c = ' ';
    return std::nullopt;
  }
  std::string cmd;
  for (std::size_t i = 0; i < client_args.size(); ++i)
    cmd += (i ? " " : "") + (i == 0 ? std::string("fi_pingpong") : client_args[i]);
  return ReferenceRun{*usec, cmd};
}

}  // namespace fabflow::references
