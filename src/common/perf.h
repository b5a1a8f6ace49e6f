// Hardware instruction and cycle counters of the calling thread, via perf_event_open. Many
// VMs expose none: then available() is false and callers report "n/a", never a guess.
#pragma once

#include <cstdint>
#include <optional>

namespace fabflow {

struct CounterValues {
  std::uint64_t instructions = 0;
  std::uint64_t cycles = 0;
};

// Counts the user-space work of the thread that constructed it (pid 0, any CPU), from
// construction until read(). Owns two perf fds. Not thread-safe; move-only.
class ThreadCounters {
 public:
  ThreadCounters();
  ~ThreadCounters();
  ThreadCounters(const ThreadCounters&) = delete;
  ThreadCounters& operator=(const ThreadCounters&) = delete;

  bool available() const noexcept { return instructions_fd_ >= 0 && cycles_fd_ >= 0; }
  // Counts so far; nullopt when the counters are unavailable or a read failed.
  std::optional<CounterValues> read() const noexcept;

 private:
  int instructions_fd_ = -1;
  int cycles_fd_ = -1;
};

}  // namespace fabflow
