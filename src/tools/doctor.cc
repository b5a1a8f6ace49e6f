#include "tools/doctor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fabflow/bench/common.h>
#include <fabflow/transport.h>
#include <fabflow/version.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/affinity.h"
#include "common/shm_regions.h"

namespace fabflow::tools {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return line;
}

Check check_libfabric() {
  std::vector<Capabilities> all;
  try {
    all = discover_libfabric();
  } catch (const std::exception& e) {
    return {"libfabric", "fail", e.what(), "install libfabric 1.17 or later (libfabric1)"};
  }
  if (all.empty())
    return {"libfabric", "fail", "libfabric " + libfabric_version() + " found no provider",
            "check FI_PROVIDER and FI_PROVIDER_PATH; `fi_info` lists what libfabric sees"};
  std::vector<std::string> names;
  for (const auto& c : all)
    if (std::find(names.begin(), names.end(), c.provider) == names.end())
      names.push_back(c.provider);
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return {"libfabric", "ok", "libfabric " + libfabric_version() + ": " + list, ""};
}

Check check_hardware_providers() {
  const auto& env = machine_environment();
  std::string found;
  for (const auto& p : env.providers_found)
    for (const char* hw : {"verbs", "efa", "cxi", "psm3", "opx", "psm2", "usnic"})
      if (p == hw) found += (found.empty() ? "" : ", ") + p;
  if (!found.empty()) return {"rdma providers", "ok", found, ""};
  return {"rdma providers", "warn",
          "none (software providers only: tcp, shm, udp, and fabflow's local)",
          "expected without an RDMA NIC; `--profile verbs|efa|cxi` shows which designs would run "
          "there"};
}

std::vector<Check> check_devices() {
  namespace fs = std::filesystem;
  const fs::path root = "/sys/class/infiniband";
  std::error_code ec;
  if (!fs::exists(root, ec) || fs::is_empty(root, ec))
    return {
        {"rdma devices", "n/a", "no RDMA device (/sys/class/infiniband is empty or absent)", ""}};
  std::vector<Check> out;
  for (const auto& dev : fs::directory_iterator(root, ec)) {
    const std::string name = dev.path().filename();
    for (const auto& port : fs::directory_iterator(dev.path() / "ports", ec)) {
      const std::string p = port.path().string();
      const std::string state = read_line(p + "/state");  // "4: ACTIVE"
      const std::string link = read_line(p + "/link_layer");
      const std::string gid0 = read_line(p + "/gids/0");
      const bool active = state.find("ACTIVE") != std::string::npos;
      Check c{"device " + name + " port " + port.path().filename().string(), active ? "ok" : "fail",
              "state " + (state.empty() ? "n/a" : state) + ", link layer " +
                  (link.empty() ? "n/a" : link) + ", GID 0 " + (gid0.empty() ? "n/a" : gid0),
              active ? "" : "bring the port up (cable, subnet manager, `ip link`)"};
      if (active && link == "Ethernet" &&
          (gid0.empty() || gid0 == "0000:0000:0000:0000:0000:0000:0000:0000")) {
        c.status = "warn";
        c.fix = "RoCE needs an IP address on the interface for a usable GID";
      }
      out.push_back(std::move(c));
    }
  }
  if (out.empty()) out.push_back({"rdma devices", "n/a", "devices without ports", ""});
  return out;
}

// Registration pins memory on RDMA providers (and --mr-pin does here): a flow ring at its
// default capacity registers up to 4 MiB, a bulk transfer its whole buffer.
Check check_memlock() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return {"memlock", "n/a", "getrlimit failed", ""};
  if (rl.rlim_cur == RLIM_INFINITY) return {"memlock", "ok", "unlimited", ""};
  const std::string fix =
      "raise it: `ulimit -l unlimited`, or `* - memlock unlimited` in "
      "/etc/security/limits.conf (LimitMEMLOCK=infinity for services)";
  const unsigned long long cur = rl.rlim_cur;
  if (cur < (4ull << 20))
    return {"memlock", "fail",
            "RLIMIT_MEMLOCK " + std::to_string(cur / 1024) +
                " KiB: too small to register one flow ring (4 MiB) on an RDMA provider",
            fix};
  if (cur < (1ull << 30))
    return {"memlock", "warn",
            "RLIMIT_MEMLOCK " + mib(cur) +
                ": enough for the software providers, small for RDMA registration of large "
                "buffers",
            fix};
  return {"memlock", "ok", "RLIMIT_MEMLOCK " + mib(cur), ""};
}

// The shm provider and the local transport keep their rings in /dev/shm (16 MiB a rank pair).
Check check_dev_shm() {
  struct statvfs s {};
  if (::statvfs("/dev/shm", &s) != 0)
    return {"/dev/shm", "fail", "not mounted", "mount a tmpfs on /dev/shm (shm, local need it)"};
  const unsigned long long avail = static_cast<unsigned long long>(s.f_bavail) * s.f_frsize;
  const std::string detail = mib(avail) + " free";
  if (avail < (64ull << 20))
    return {"/dev/shm", "fail", detail + ": less than one run of a few ranks needs",
            "free space or enlarge it: `mount -o remount,size=1G /dev/shm`"};
  if (avail < (1ull << 30))
    return {"/dev/shm", "warn", detail, "many ranks per host need more: remount with size=1G+"};
  return {"/dev/shm", "ok", detail, ""};
}

// Regions of shm endpoints whose ranks died without closing them (killed under mpirun, by
// hand, or with their launcher): each start sweeps those of exited owners; this check also
// finds those whose pid was reused since.
Check check_shm_leftovers() {
  const auto left = find_shm_leftovers();
  if (left.empty()) return {"/dev/shm leftovers", "ok", "none", ""};
  std::uint64_t bytes = 0;
  for (const auto& l : left) bytes += l.bytes;
  return {"/dev/shm leftovers", "warn",
          std::to_string(left.size()) + " region(s) of dead ranks, " + mib(bytes),
          "`fabflow clean` removes them (only those whose owner is gone)"};
}

// A warning that the kernel refused `call` with `err`, saying what fabflow falls back to.
Check refused(const std::string& name, const std::string& call, int err,
              const std::string& fallback, const std::string& fix) {
  return {name, "warn", call + " refused: " + std::strerror(err) + " (" + fallback + ")", fix};
}

Check check_userfaultfd() {
  int fd = static_cast<int>(
      ::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | 1 /* UFFD_USER_MODE_ONLY */));
  if (fd < 0) fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd >= 0) {
    ::close(fd);
    return {"userfaultfd", "ok", "a userfaultfd opened (the registration cache sees unmaps)", ""};
  }
  const int err = errno;
  return refused("userfaultfd", "userfaultfd", err,
                 "the registration cache falls back to checking ranges at each hit",
                 "sysctl vm.unprivileged_userfaultfd=1, or run with CAP_SYS_PTRACE");
}

// Reads a child's memory as the local transport's bulk path does (process_vm_readv).
Check check_cross_memory_attach() {
  static volatile std::uint64_t marker = 0;
  marker = 0x6661626677ull;
  int ready[2];
  if (::pipe(ready) != 0) return {"cross-memory attach", "n/a", "pipe failed", ""};
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(ready[0]);
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  (void)!::read(ready[0], &c, 1);
  ::close(ready[0]);
  std::uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{const_cast<std::uint64_t*>(&marker), sizeof marker};
  const ssize_t n = child > 0 ? ::process_vm_readv(child, &local, 1, &remote, 1, 0) : -1;
  const int err = errno;
  if (child > 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  if (n == static_cast<ssize_t>(sizeof got) && got == marker)
    return {"cross-memory attach", "ok", "process_vm_readv of another process works", ""};
  return refused("cross-memory attach", "process_vm_readv", err,
                 "local's bulk transfers fall back to copies through the ring",
                 "sysctl kernel.yama.ptrace_scope=0, or run the ranks as one user with "
                 "CAP_SYS_PTRACE");
}

Check check_huge_pages() {
  std::ifstream in("/proc/meminfo");
  std::string line, total = "0", size = "n/a";
  while (std::getline(in, line)) {
    if (line.rfind("HugePages_Total:", 0) == 0) total = line.substr(line.find_last_of(' ') + 1);
    if (line.rfind("Hugepagesize:", 0) == 0)
      size = line.substr(line.find_first_not_of(' ', line.find(':') + 1));
  }
  std::string thp = read_line("/sys/kernel/mm/transparent_hugepage/enabled");
  const std::string detail =
      total + " reserved huge pages (size" + size + "), transparent " + (thp.empty() ? "n/a" : thp);
  if (total != "0" || thp.find("[never]") == std::string::npos)
    return {"huge pages", "ok", detail, ""};
  return {"huge pages", "warn", detail,
          "large registrations need fewer translations with huge pages: echo madvise > "
          "/sys/kernel/mm/transparent_hugepage/enabled"};
}

std::vector<Check> check_cpus() {
  const auto& env = machine_environment();
  std::vector<Check> out;
  if (env.governor.empty() || env.governor == "n/a")
    out.push_back({"cpu governor", "n/a", "no cpufreq (a VM, or fixed frequency)", ""});
  else
    out.push_back({"cpu governor", env.governor == "performance" ? "ok" : "warn", env.governor,
                   env.governor == "performance" ? "" : "cpupower frequency-set -g performance"});
  out.push_back({"smt", env.smt == "on" ? "warn" : (env.smt == "off" ? "ok" : "n/a"), env.smt,
                 env.smt == "on" ? "pinned ranks avoid sibling threads; or disable SMT for "
                                   "latency runs"
                                 : ""});
  out.push_back(
      {"invariant tsc", env.tsc_invariant ? "ok" : "warn",
       env.tsc_invariant ? "constant and nonstop" : "not both constant_tsc and nonstop_tsc",
       env.tsc_invariant ? "" : "timings fall back to CLOCK_MONOTONIC"});
  const std::string idle = read_line("/sys/devices/system/cpu/cpuidle/current_driver");
  out.push_back({"idle states", idle.empty() ? "n/a" : "ok",
                 idle.empty() ? "no cpuidle driver" : "driver " + idle, ""});
  const std::string isolated = read_line("/sys/devices/system/cpu/isolated");
  const auto cpus = allowed_cpus();
  std::string pin;
  for (std::size_t i = 0; i < cpus.size() && i < 2; ++i)
    pin += (pin.empty() ? "" : ",") + std::to_string(cpus[i]);
  out.push_back({"isolated cpus", "ok", isolated.empty() ? "none" : isolated, ""});
  std::uint64_t irqs = 0;
  for (std::size_t i = 0; i < cpus.size() && i < 2; ++i) {
    const auto c = static_cast<std::size_t>(cpus[i]);
    if (c < env.device_irqs_start.size()) irqs += env.device_irqs_start[c];
  }
  out.push_back(
      {"interrupts on pinned cpus", irqs == 0 ? "ok" : "warn",
       "device interrupts so far on cpus " + pin +
           " (where two ranks pin): " + std::to_string(irqs),
       irqs == 0 ? "" : "steer device interrupts away (irqbalance --banirq, smp_affinity)"});
  return out;
}

Check check_launcher() {
  const auto& env = machine_environment();
  const std::string l = env.launcher.empty() ? "fabflow" : env.launcher;
  return {"launcher", "ok",
          l == "fabflow" ? "none found: fabflow starts its own ranks (bench, examples)"
                         : l + " environment found: ranks bootstrap from it",
          ""};
}

// The bootstrap listens on TCP: a loopback listener and a connection to it.
Check check_bootstrap_port() {
  const int ls = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bool ok = ls >= 0 && ::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            ::listen(ls, 1) == 0 && ::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  int cs = -1;
  if (ok) {
    cs = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ok = cs >= 0 && ::connect(cs, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  const int err = errno;
  if (cs >= 0) ::close(cs);
  if (ls >= 0) ::close(ls);
  if (ok)
    return {"bootstrap port", "ok",
            "a TCP listener on loopback port " + std::to_string(ntohs(a.sin_port)) +
                " accepted a connection",
            ""};
  return {"bootstrap port", "fail", std::string("loopback TCP failed: ") + std::strerror(err),
          "the bootstrap needs TCP between ranks: check firewall rules for loopback"};
}

}  // namespace

std::string mib(unsigned long long bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

std::vector<Check> check_host() {
  std::vector<Check> checks;
  checks.push_back(check_libfabric());
  checks.push_back(check_hardware_providers());
  for (auto& c : check_devices()) checks.push_back(std::move(c));
  checks.push_back(check_memlock());
  checks.push_back(check_dev_shm());
  checks.push_back(check_shm_leftovers());
  checks.push_back(check_userfaultfd());
  checks.push_back(check_cross_memory_attach());
  checks.push_back(check_huge_pages());
  for (auto& c : check_cpus()) checks.push_back(std::move(c));
  checks.push_back(check_launcher());
  checks.push_back(check_bootstrap_port());
  return checks;
}

}  // namespace fabflow::tools
