// The environment every benchmark result carries: what the machine and the build are, read
// once per process from /proc, /sys and libfabric.
#include <fabflow/bench/common.h>
#include <fabflow/bootstrap.h>
#include <fabflow/version.h>

#include <rdma/fabric.h>
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/idle_poll.h"
#include "transport/libfabric/loader.h"

#ifndef FABFLOW_GIT_REVISION
#define FABFLOW_GIT_REVISION "unknown"
#endif

namespace fabflow {
namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line) || line.empty()) return "n/a";
  return line;
}

double load_average() {
  double load = -1;
  if (::getloadavg(&load, 1) != 1) return -1;
  return load;
}

// The "model name" and "flags" lines of the first CPU in /proc/cpuinfo.
void read_cpuinfo(RunEnvironment& env) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  env.cpu_model = "n/a";
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && env.cpu_model == "n/a") env.cpu_model = value;
    if (key == "flags" && flags.empty()) flags = " " + value + " ";
  }
  env.tsc_invariant = flags.find(" constant_tsc ") != std::string::npos &&
                      flags.find(" nonstop_tsc ") != std::string::npos;
}

// The device interrupts (numbered lines of /proc/interrupts) each CPU has taken; empty when
// the file cannot be read.
std::vector<std::uint64_t> device_irqs() {
  std::ifstream in("/proc/interrupts");
  std::string header;
  if (!std::getline(in, header)) return {};
  std::size_t cpus = 0;
  for (std::istringstream h(header); h >> header;) ++cpus;
  std::vector<std::uint64_t> per_cpu(cpus, 0);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string label;
    fields >> label;
    if (label.empty() || label.back() != ':' ||
        label.find_first_not_of("0123456789") != label.size() - 1)
      continue;  // LOC (the timer), RES, CAL, ... are not devices
    for (std::size_t c = 0; c < cpus; ++c) {
      std::uint64_t n = 0;
      if (!(fields >> n)) break;
      per_cpu[c] += n;
    }
  }
  return per_cpu;
}

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Whether CPUs a and b are two hardware threads of one core.
bool smt_siblings(int a, int b) {
  if (a < 0 || b < 0 || a == b) return false;
  const std::string list = first_line(
      ("/sys/devices/system/cpu/cpu" + std::to_string(a) + "/topology/thread_siblings_list")
          .c_str());
  // "0,4" or "0-1": the CPUs of a's core.
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    const auto dash = item.find('-');
    try {
      const int lo = std::stoi(item.substr(0, dash));
      const int hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1));
      if (b >= lo && b <= hi) return true;
    } catch (const std::exception&) {
      return false;
    }
  }
  return false;
}

// Each provider libfabric reports, once, in its order.
std::vector<std::string> providers_found() {
  std::vector<std::string> out;
  fi_info* info = nullptr;
  if (!ofi::lib::available()) return out;
  if (ofi::lib::getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, nullptr, &info) != 0) return out;
  for (fi_info* i = info; i; i = i->next) {
    if (!i->fabric_attr || !i->fabric_attr->prov_name) continue;
    std::string name = i->fabric_attr->prov_name;
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  ofi::lib::freeinfo(info);
  return out;
}

RunEnvironment gather() {
  RunEnvironment env;
  read_cpuinfo(env);
  env.cores = std::thread::hardware_concurrency();
  env.governor = first_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor");
  std::string smt = first_line("/sys/devices/system/cpu/smt/active");
  env.smt = smt == "1" ? "on" : smt == "0" ? "off" : "n/a";
  utsname u{};
  env.kernel = uname(&u) == 0 ? std::string(u.release) : "n/a";
  env.load_start = load_average();
  env.fabflow_version = FABFLOW_VERSION;
  env.git_revision = FABFLOW_GIT_REVISION;
  env.libfabric_version = libfabric_version();
  env.providers_found = providers_found();
  env.build_type = FABFLOW_BUILD_TYPE;
  env.sanitizer = FABFLOW_SANITIZER;
  env.launcher = BootstrapConfig::detect_launcher();
  env.device_irqs_start = device_irqs();
  env.irq_window_start_s = monotonic_seconds();
  return env;
}

}  // namespace

bool RunEnvironment::busy() const noexcept {
  const double load = std::max(load_start, load_end);
  return cores > 0 && load > static_cast<double>(cores);
}

const RunEnvironment& machine_environment() {
  static const RunEnvironment env = gather();
  return env;
}

void note_cpu_idle(RunEnvironment& env) {
  env.cpu_idle = cpu_idle_state();
  env.cpu_idle_why_not = cpu_idle_why_not();
}

void gather_pinning(RunEnvironment& env, Bootstrap& boot, int cpu) {
  std::int32_t mine = cpu;
  std::vector<std::byte> blob(sizeof mine);
  std::memcpy(blob.data(), &mine, sizeof mine);
  auto all = boot.allgather(blob);
  env.pinned = true;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() != sizeof mine)
      throw PeerError(static_cast<int>(r),
                      "bench: malformed CPU number from rank " + std::to_string(r));
    std::int32_t c;
    std::memcpy(&c, all[r].data(), sizeof c);
    if (c < 0) env.pinned = false;
    if (r == 0) env.cpu_initiator = c;
    if (r == 1) env.cpu_target = c;
  }
  env.pinned_smt_siblings = smt_siblings(env.cpu_initiator, env.cpu_target);
  note_cpu_idle(env);
}

void finish_environment(RunEnvironment& env) {
  env.load_end = load_average();
  if (env.pinned && !env.pinned_smt_siblings)
    env.pinned_smt_siblings = smt_siblings(env.cpu_initiator, env.cpu_target);
  const auto now = device_irqs();
  if (!env.pinned || now.empty() || now.size() != env.device_irqs_start.size()) return;
  std::int64_t taken = 0;
  std::vector<int> cpus{env.cpu_initiator};
  if (env.cpu_target != env.cpu_initiator) cpus.push_back(env.cpu_target);
  for (int cpu : cpus) {
    if (cpu < 0 || static_cast<std::size_t>(cpu) >= now.size()) return;
    const auto c = static_cast<std::size_t>(cpu);
    taken += static_cast<std::int64_t>(now[c] - env.device_irqs_start[c]);
  }
  env.irqs_on_pinned = taken;
  const double seconds = monotonic_seconds() - env.irq_window_start_s;
  env.irqs_per_s_on_pinned = seconds > 0 ? static_cast<double>(taken) / seconds : 0;
}

std::vector<std::string> environment_warnings(const RunEnvironment& env) {
  std::vector<std::string> out;
  if (env.build_type != "Release" && env.build_type != "RelWithDebInfo")
    out.push_back(env.build_type + " build: numbers are not representative");
  if (!env.sanitizer.empty())
    out.push_back("sanitizer build (" + env.sanitizer + "): numbers are not representative");
  if (!env.pinned) out.push_back("threads are not pinned: busy-polling numbers may be far off");
  if (env.busy()) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "the machine was busy (load average %.2f at start, %.2f at end, %u cores): "
                  "numbers may be far off",
                  env.load_start, env.load_end, env.cores);
    out.push_back(buf);
  }
  if (!env.tsc_invariant)
    out.push_back("the TSC is not invariant here: samples use CLOCK_MONOTONIC");
  if (env.governor != "n/a" && env.governor != "performance")
    out.push_back("cpufreq governor '" + env.governor +
                  "': the CPU clock may change during the run (echo performance > "
                  "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)");
  if (env.pinned && env.cpu_idle == "default")
    out.push_back("idle CPUs may halt (" +
                  (env.cpu_idle_why_not.empty() ? std::string("no PM QoS request held")
                                                : env.cpu_idle_why_not) +
                  "): in a virtual machine a halted vCPU may resume on another host core, and "
                  "the cross-core latency then changes between phases of the run");
  if (env.pinned_smt_siblings)
    out.push_back("the ranks are pinned to cpu " + std::to_string(env.cpu_initiator) + " and cpu " +
                  std::to_string(env.cpu_target) +
                  ", two hardware threads of one core: they share its execution units");
  // About one device interrupt per 10 ms on a pinned CPU is enough to show in the far tail.
  if (env.irqs_on_pinned > 0 && env.irqs_per_s_on_pinned > 100) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "the pinned CPUs took %lld device interrupts during the run (%.0f/s): each "
                  "one stalls a busy-polling thread (see /proc/irq/*/smp_affinity)",
                  static_cast<long long>(env.irqs_on_pinned), env.irqs_per_s_on_pinned);
    out.push_back(buf);
  }
  return out;
}

}  // namespace fabflow
