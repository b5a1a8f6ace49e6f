// The environment every benchmark result carries: what the machine and the build are, read
// once per process from /proc, /sys and libfabric.
#include <fabflow/bench/common.h>
#include <fabflow/bootstrap.h>
#include <fabflow/version.h>

#include <rdma/fabric.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

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

// Each provider libfabric reports, once, in its order.
std::vector<std::string> providers_found() {
  std::vector<std::string> out;
  fi_info* info = nullptr;
  if (fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, nullptr, &info) != 0) return out;
  for (fi_info* i = info; i; i = i->next) {
    if (!i->fabric_attr || !i->fabric_attr->prov_name) continue;
    std::string name = i->fabric_attr->prov_name;
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  fi_freeinfo(info);
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
}

void finish_environment(RunEnvironment& env) { env.load_end = load_average(); }

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
  return out;
}

}  // namespace fabflow
