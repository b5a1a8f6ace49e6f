// Bounded waiting for request-response loops: a wait fails when nothing happened for the
// peer timeout, or soon after the bootstrap learns that a peer process vanished.
#pragma once

#include <fabflow/bootstrap.h>
#include <fabflow/status.h>

#include <chrono>
#include <string>
#include <thread>

namespace fabflow::rr::detail {

// Not thread-safe: one per waiting thread. `boot` may be null (no liveness channel).
class Watch {
 public:
  Watch(Bootstrap* boot, std::chrono::milliseconds timeout, bool yield)
      : boot_(boot), timeout_(timeout), yield_(yield) {}
  void reset() noexcept { spins_ = 0; since_ = {}; }
  // Call on every idle spin; throws PeerError / Error when the wait is over.
  void idle(const char* what) {
    // Oversubscribed CPUs: a spinning thread would starve the one it waits for.
    if (yield_) std::this_thread::yield();
    if ((++spins_ & 255) != 0) return;
    auto now = std::chrono::steady_clock::now();
    if (since_ == std::chrono::steady_clock::time_point{}) since_ = now;
    if (boot_ && now - last_check_ > std::chrono::milliseconds(1)) {
      last_check_ = now;
      if (boot_->peer_failed()) throw PeerError(-1, std::string("rr: a peer vanished while ") + what);
    }
    if (now - since_ > timeout_)
      throw Error("rr: no progress for " + std::to_string(timeout_.count()) + " ms while " + what);
  }

 private:
  Bootstrap* boot_;
  std::chrono::milliseconds timeout_;
  bool yield_;
  unsigned spins_ = 0;
  std::chrono::steady_clock::time_point since_{}, last_check_{};
};

}  // namespace fabflow::rr::detail
