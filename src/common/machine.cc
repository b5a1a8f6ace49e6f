#include "common/machine.h"

#include <sys/utsname.h>

#include <fstream>
#include <thread>

namespace fabflow {
namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos || line.compare(0, 10, "model name") != 0) continue;
    return colon + 2 <= line.size() ? line.substr(colon + 2) : "";
  }
  return "n/a";
}

MachineIdentity read_identity() {
  MachineIdentity m;
  m.cpu_model = cpu_model_name();
  m.cores = std::thread::hardware_concurrency();
  utsname u{};
  m.kernel = uname(&u) == 0 ? std::string(u.release) : "n/a";
  return m;
}

}  // namespace

const MachineIdentity& machine_identity() {
  static const MachineIdentity m = read_identity();
  return m;
}

}  // namespace fabflow
