#include "launcher/netns.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "fabflow/launcher.h"

extern char** environ;

namespace fabflow::launcher {
namespace {

constexpr auto kIpTimeout = std::chrono::seconds(10);

const char* ip_path() {
  static const char* const path = [] {
    for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
      if (::access(p, X_OK) == 0) return p;
    }
    return "ip";
  }();
  return path;
}

std::string command_text(const std::vector<std::string>& args) {
  std::string text = "ip";
  for (const auto& a : args) text += " " + a;
  return text;
}

// ip's stderr as one line: trimmed, lines joined with "; ".
std::string one_line(std::string text) {
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line = std::string_view(text).substr(start, end - start);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
    if (!line.empty()) out += (out.empty() ? "" : "; ") + std::string(line);
    start = end + 1;
  }
  return out.empty() ? "no message" : out;
}

Fd input_fd(std::string_view batch) {
  if (batch.empty()) {
    Fd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!null) throw Error(errno_text("launcher: open /dev/null"));
    return above_stdio(std::move(null));
  }
  Fd mem(::memfd_create("fabflow-ip-batch", MFD_CLOEXEC));
  if (!mem) throw Error(errno_text("launcher: memfd_create"));
  for (std::string_view rest = batch; !rest.empty();) {
    const ssize_t n = ::write(mem.get(), rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(errno_text("launcher: writing an ip batch"));
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  if (::lseek(mem.get(), 0, SEEK_SET) != 0) throw Error(errno_text("launcher: lseek"));
  return above_stdio(std::move(mem));
}

// Owns posix_spawn's attribute objects; not thread-safe.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
};

bool pid_alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

bool netns_exists(const std::string& name) {
  struct stat st;
  return ::stat((std::string(kNetnsDir) + "/" + name).c_str(), &st) == 0;
}

// Runs ip; nullopt when it succeeded, else why not (one line).
std::optional<std::string> ip_failure(const std::vector<std::string>& args,
                                      std::string_view batch) {
  Fd in = input_fd(batch);
  Pipe err = make_pipe();

  SpawnSetup setup;
  posix_spawn_file_actions_adddup2(&setup.actions, in.get(), 0);
  posix_spawn_file_actions_addopen(&setup.actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&setup.actions, err.write.get(), 2);
  sigset_t defaults, empty;
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaddset(&defaults, sig);
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&setup.attr, &defaults);
  posix_spawnattr_setsigmask(&setup.attr, &empty);
  posix_spawnattr_setflags(&setup.attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::vector<std::string> argv_text{"ip"};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = -1;
  const char* path = ip_path();
  const int rc =
      path[0] == '/'
          ? ::posix_spawn(&pid, path, &setup.actions, &setup.attr, argv.data(), environ)
          : ::posix_spawnp(&pid, path, &setup.actions, &setup.attr, argv.data(), environ);
  if (rc != 0) return errno_text("cannot run " + std::string(path), rc);
  err.write.reset();
  in.reset();

  std::string message;
  const auto give_up = std::chrono::steady_clock::now() + kIpTimeout;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        give_up - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p{err.read.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(err.read.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    message.append(buf, static_cast<std::size_t>(n));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) return "did not finish in 10 s";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return std::nullopt;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && message.empty()) {
    return "cannot execute ip (is iproute2 installed?)";
  }
  return one_line(std::move(message));
}

}  // namespace

void run_ip(const std::vector<std::string>& args, std::string_view batch) {
  if (auto why = ip_failure(args, batch)) {
    throw Error("launcher: " + command_text(args) + " failed: " + *why);
  }
}

Netns::Netns(std::string name) {
  if (auto why = ip_failure({"netns", "add", name}, {})) {
    if (::geteuid() != 0) {
      throw Error("launcher: network namespaces need root (ip netns add: " + *why + ")");
    }
    throw Error("launcher: cannot create network namespace " + name + " (ip netns add: " + *why +
                ")");
  }
  name_ = std::move(name);
}

Netns::~Netns() {
  if (name_.empty()) return;
  try {
    run_ip({"netns", "del", name_});
  } catch (const Error& e) {
    if (netns_exists(name_)) std::fprintf(stderr, "fabflow: warning: %s\n", e.what());
  }
}

Fd Netns::open() const {
  const std::string path = std::string(kNetnsDir) + "/" + name_;
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw Error(errno_text("launcher: open " + path));
  return above_stdio(std::move(fd));
}

VirtualNetwork::VirtualNetwork(pid_t owner, int nprocs)
    : hub_(std::string(kNetnsPrefix) + std::to_string(owner) + "-hub") {
  if (nprocs > kMaxRanks) {
    throw Error("launcher: at most " + std::to_string(kMaxRanks) + " processes with namespaces");
  }
  const std::string prefix = std::string(kNetnsPrefix) + std::to_string(owner) + "-";
  ranks_.reserve(static_cast<std::size_t>(nprocs));
  for (int i = 0; i < nprocs; ++i) ranks_.emplace_back(prefix + std::to_string(i));

  std::string hub = "link add br0 type bridge\nlink set br0 up\n";
  for (int i = 0; i < nprocs; ++i) {
    const std::string v = "v" + std::to_string(i);
    hub += "link add " + v + " type veth peer name eth0 netns " + rank(i).name() + "\n";
    hub += "link set " + v + " master br0\nlink set " + v + " up\n";
  }
  run_ip({"-n", hub_.name(), "-batch", "-"}, hub);
  for (int i = 0; i < nprocs; ++i) {
    run_ip({"-n", rank(i).name(), "-batch", "-"},
           "addr add " + address(i) + "/24 dev eth0\nlink set eth0 up\nlink set lo up\n");
  }
}

}  // namespace fabflow::launcher

namespace fabflow {

void cleanup_stale_netns() {
  std::error_code ec;
  std::filesystem::directory_iterator it(launcher::kNetnsDir, ec);
  if (ec) return;
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(launcher::kNetnsPrefix)) continue;
    const char* first = name.data() + launcher::kNetnsPrefix.size();
    const char* last = name.data() + name.size();
    pid_t pid = 0;
    const auto [end, err] = std::from_chars(first, last, pid);
    if (err != std::errc() || end == first || end == last || *end != '-' || pid <= 0) continue;
    if (pid == ::getpid() || launcher::pid_alive(pid)) continue;
    try {
      launcher::run_ip({"netns", "del", name});
    } catch (const Error& e) {
      if (launcher::netns_exists(name)) std::fprintf(stderr, "fabflow: warning: %s\n", e.what());
    }
  }
}

bool netns_available(std::string* why) {
  static std::atomic<int> probes{0};
  const std::string name = std::string(launcher::kNetnsPrefix) + std::to_string(::getpid()) +
                           "-probe" + std::to_string(probes++);
  try {
    launcher::Netns probe(name);
    launcher::run_ip({"-n", name, "-batch", "-"},
                     "link add br0 type bridge\nlink add v0 type veth peer name v1\n"
                     "link set v0 master br0\n");
    return true;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
}

}  // namespace fabflow
