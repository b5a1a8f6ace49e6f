// Keeps idle CPUs polling instead of halting while a benchmark runs: a PM QoS CPU-latency
// request of 0 us through /dev/cpu_dma_latency, held as long as the file stays open (the kernel
// drops the request when it closes, also when the process dies). In a virtual machine a halted
// vCPU leaves its host core, and the host may resume it on another: the cross-core latency of
// the pinned pair then changes between one phase of a run and the next (docs/flow-queues.md,
// "Measuring on this VM"). Needs write access to the file (root, as a rule).
#pragma once

#include <string>

#include "common/fd.h"

namespace fabflow {

// Not copyable or movable; not thread-safe. The request is process-wide: any thread may hold it.
class IdlePolling {
 public:
  IdlePolling();  // never throws: a request that cannot be made is reported by held()
  ~IdlePolling();
  IdlePolling(const IdlePolling&) = delete;
  IdlePolling& operator=(const IdlePolling&) = delete;
  bool held() const noexcept { return fd_.get() >= 0; }
  const std::string& why_not() const noexcept { return why_not_; }  // empty when held

 private:
  Fd fd_;
  std::string why_not_;
};

// What idle CPUs of this process' host do during this run, for the benchmark's environment
// record: "poll" while an IdlePolling of this process is held, else "default"; and why not
// (empty when none was tried). Set by the latest IdlePolling constructed or destroyed.
std::string cpu_idle_state();
std::string cpu_idle_why_not();

}  // namespace fabflow
