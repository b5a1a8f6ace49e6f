#include <fabflow/progress.h>

#include "common/affinity.h"

namespace fabflow {

bool needs_progress_thread(ProgressMode mode, const Capabilities& caps, bool passive) noexcept {
  switch (mode) {
    case ProgressMode::thread: return true;
    case ProgressMode::inline_only: return false;
    case ProgressMode::automatic: return passive && caps.data_progress_manual;
  }
  return false;
}

ProgressEngine::ProgressEngine(Transport& transport, int cpu)
    : transport_(transport), thread_([this, cpu] { run(cpu); }) {}

ProgressEngine::~ProgressEngine() { stop(); }

double ProgressEngine::stop() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
  return cpu_seconds_.load();
}

void ProgressEngine::run(int cpu) {
  if (cpu >= 0) pin_current_thread(cpu);
  double start = thread_cpu_seconds();
  std::uint64_t n = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    transport_.progress();
    if ((++n & 1023) == 0) {
      iterations_.store(n, std::memory_order_relaxed);
      cpu_seconds_.store(thread_cpu_seconds() - start, std::memory_order_relaxed);
    }
  }
  iterations_.store(n, std::memory_order_relaxed);
  cpu_seconds_.store(thread_cpu_seconds() - start, std::memory_order_relaxed);
}

}  // namespace fabflow
