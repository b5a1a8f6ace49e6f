// What identifies this machine to a measurement kept for later: the CPU model, the number of
// online CPUs and the kernel release, read once per process.
#pragma once

#include <string>

namespace fabflow {

struct MachineIdentity {
  std::string cpu_model;  // /proc/cpuinfo's first "model name" ("n/a" when absent)
  unsigned cores = 0;     // online CPUs
  std::string kernel;     // uname's release ("n/a" when it fails)
};

const MachineIdentity& machine_identity();

}  // namespace fabflow
