// The progress engine: a thread that drives a transport's provider so that data lands at a
// passive peer. Software providers (tcp, shm, rxm in libfabric 1.17) place inbound data only
// inside the target's fi_cq_read / fi_cntr_read calls, whatever they advertise.
#pragma once

#include <fabflow/transport.h>

#include <atomic>
#include <thread>

namespace fabflow {

// Whether a process in `role` needs a progress thread under `mode` on `caps`.
// Passive processes (targets of one-sided operations that never poll) need one on providers
// with manual data progress; active ones drive progress inline from their polling loops.
bool needs_progress_thread(ProgressMode mode, const Capabilities& caps, bool passive) noexcept;

// Runs transport.progress() in a loop on its own thread until stopped. The transport must
// have been opened with thread_safe. Owns the thread; not copyable or movable.
class ProgressEngine {
 public:
  // cpu < 0: unpinned.
  ProgressEngine(Transport& transport, int cpu);
  ~ProgressEngine();
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  // Stops the thread and returns the CPU seconds it consumed.
  double stop();
  double cpu_seconds() const noexcept { return cpu_seconds_.load(); }
  std::uint64_t iterations() const noexcept { return iterations_.load(); }

 private:
  void run(int cpu);

  Transport& transport_;
  std::atomic<bool> stop_{false};
  std::atomic<double> cpu_seconds_{0};
  std::atomic<std::uint64_t> iterations_{0};
  std::thread thread_;
};

}  // namespace fabflow
