// The registration cache's eyes: a userfaultfd on which cached ranges are registered in
// write-protect mode (never write-protecting anything), so the kernel reports unmap, remove
// (madvise DONTNEED/FREE/REMOVE) and remap events for them without intercepting a single page
// fault. A monitor thread reads the events as they come (the thread that unmapped is blocked in
// the kernel until its event is read) into a fixed ring; the cache takes them from the ring
// under its own lock before every lookup. docs/registration-cache.md has the race argument.
//
// The monitor thread never allocates or frees memory: a free() that trims the heap or unmaps
// a cached range would block it on its own event. Thread-safe.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fabflow::bulk {

struct ChangedRange {
  std::uintptr_t start = 0;
  std::uintptr_t end = 0;
};

class UffdMonitor {
 public:
  // Opens a userfaultfd with the unmap, remove and remap events and starts the thread; null
  // (with *reason set to one line) where the kernel or the environment refuses, or where
  // FABFLOW_NO_USERFAULTFD=1 asks to behave as if it did.
  static std::unique_ptr<UffdMonitor> open(std::string* reason);
  ~UffdMonitor();
  UffdMonitor(const UffdMonitor&) = delete;
  UffdMonitor& operator=(const UffdMonitor&) = delete;

  // Registers the page-aligned [a, b); false where the kernel refuses it (a file mapping, a
  // hole): the caller must not cache that range.
  bool watch(std::uintptr_t a, std::uintptr_t b) noexcept;
  // Unregisters [a, b); errors (the range is already gone) are ignored.
  void unwatch(std::uintptr_t a, std::uintptr_t b) noexcept;

  // Appends the ranges changed since the last call to `out`; false when the ring overflowed and
  // some were lost (treat every range as changed).
  bool take(std::vector<ChangedRange>& out);

 private:
  UffdMonitor(int uffd, int wake);
  void run() noexcept;
  void read_events() noexcept;  // with ring_mu_ held

  static constexpr std::size_t kRing = 512;

  int uffd_;
  int wake_;  // eventfd that stops the thread
  std::atomic<bool> stop_{false};
  std::mutex ring_mu_;
  std::array<ChangedRange, kRing> ring_{};
  std::size_t count_ = 0;
  bool overflow_ = false;
  std::thread thread_;
};

}  // namespace fabflow::bulk
