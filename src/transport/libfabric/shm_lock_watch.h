// Frees the survivors of a peer killed inside libfabric 1.17's shm provider.
//
// That provider guards each endpoint's region (the file /dev/shm/<name> every process on the
// endpoint's side maps) with a process-shared spin lock that lives in the region itself: a
// sender takes the receiver's lock to queue a command, the owner takes its own lock to progress.
// A process killed by a signal between lock and unlock leaves the lock held for good, and every
// later call that touches that region (fi_cq_read on the receiver, a post to the dead sender)
// spins inside libfabric forever, beyond the reach of any timeout of the caller's.
//
// A ShmLockWatch is one thread beside one shm endpoint. It waits on a pidfd of every peer whose
// region it maps; once a peer is gone it samples, every 100 ms, the locks of this endpoint's
// region and of the dead peers' regions, and releases a lock that has stayed held for a whole
// second. A live holder keeps a region's lock for microseconds, so after a second the holder is
// the dead process; the call spinning on it returns, and the caller's wait fails as for any
// vanished peer, naming it.
//
// A stopped peer (SIGSTOP, a debugger) holds a lock just as long. The watch looks at its peers'
// states four times a second; a lock held for a second while a peer has been stopped for longer
// than the bootstrap's silence bound is released too. By then the bootstrap has declared that
// peer failed, so the call that was spinning returns into a wait that fails naming it, and
// nothing goes on with the stopped peer if it resumes. While every peer runs the watch touches no
// lock.
//
// It reads the head of the region as libfabric 1.17 lays it out (region version 4), checked
// against the owner's pid before anything is armed; with any other libfabric, or a region that
// does not match, it watches nothing (start() returns nullptr) and says why in `why`.
// Thread-safety: owned by one transport; its thread touches only its own mappings.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace fabflow::ofi {

class ShmLockWatch {
 public:
  struct Region {
    int rank = -1;     // the rank whose endpoint owns it
    std::string name;  // the endpoint's shm name, as fi_getname gives it
  };

  // `own` is this process's endpoint; `peers` those it talks to (names as the peers sent them:
  // untrusted, and skipped when they are not fabflow's). `libfabric` is the loaded version.
  // `stopped_bound`: how long a peer may be stopped before a lock it holds is released (the
  // bootstrap's silence bound, after which the peer is declared failed); 0: never.
  static std::unique_ptr<ShmLockWatch> start(const Region& own, std::span<const Region> peers,
                                             const std::string& libfabric,
                                             std::chrono::milliseconds stopped_bound,
                                             std::string* why);
  ~ShmLockWatch();
  ShmLockWatch(const ShmLockWatch&) = delete;
  ShmLockWatch& operator=(const ShmLockWatch&) = delete;

  // Locks released so far (each one a dead peer's).
  std::uint64_t releases() const noexcept { return releases_.load(std::memory_order_relaxed); }

  struct Mapped;  // one region's head, mapped by the watch itself

 private:
  ShmLockWatch() = default;
  void run();

  std::vector<std::unique_ptr<Mapped>> regions_;  // [0]: own, then the peers
  std::chrono::milliseconds stopped_bound_{0};
  int stop_fd_ = -1;  // eventfd: the destructor's wake-up
  std::atomic<std::uint64_t> releases_{0};
  std::thread thread_;
};

}  // namespace fabflow::ofi
