// Busy-waiting that stays polite when threads outnumber cores.
#pragma once

#include <thread>

namespace fabflow {

// A waiter spins first (the lowest latency when each side has its own core), then yields the
// CPU on every further round, so that a peer sharing the core (two ranks as threads on a
// loaded machine, a progress thread, a data mover) runs instead of waiting for a time slice
// to expire. One Backoff per wait.
class Backoff {
 public:
  void pause() noexcept {
    if (spins_ < kSpins) {
      ++spins_;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }

 private:
  static constexpr unsigned kSpins = 4096;
  unsigned spins_ = 0;
};

}  // namespace fabflow
