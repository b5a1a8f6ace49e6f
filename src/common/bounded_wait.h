// The one bounded wait of fabflow's loops (benchmarks, flow queues, request-response): a wait
// is over when nothing happened for `timeout` since the last reset(), or soon after the
// bootstrap learns that a peer process vanished. While waiting it keeps driving the transports
// it was given (a thread that waits on one endpoint may owe its peer progress on another).
#pragma once

#include <fabflow/bootstrap.h>
#include <fabflow/status.h>
#include <fabflow/transport.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace fabflow {

// The errors of a wait that ended, for every wait of fabflow's (BoundedWait's and those with a
// loop of their own).
//
// A peer failure the bootstrap reported: "<who>, <what>: <the bootstrap's reason>", a PeerError
// naming the rank it blames.
PeerError peer_failure_error(Bootstrap* boot, std::string_view who, std::string_view what);
// No progress for `timeout`: "<who>: no progress for <timeout> ms while <what>", and where the
// bootstrap knows a peer silent for half of it, ": rank R stopped answering (no sign of life for
// S s)", blaming R; else blaming `blame` (-1: nobody, which a caller may throw as a plain Error).
PeerError no_progress_error(Bootstrap* boot, std::chrono::milliseconds timeout,
                            std::string_view who, std::string_view what, int blame = -1);

// Not thread-safe: one per waiting thread. Reads the clock only every `spins_per_check` idle
// spins, so a wait that ends within them costs nothing; asks the bootstrap about its peers at
// most once a millisecond.
class BoundedWait {
 public:
  enum class State : std::uint8_t { waiting, timed_out, peer_failed };

  BoundedWait(std::chrono::milliseconds timeout, Bootstrap* liveness,
              std::initializer_list<Transport*> drive = {}, unsigned spins_per_check = 1024)
      : timeout_(timeout),
        liveness_(liveness),
        spins_per_check_(spins_per_check ? spins_per_check : 1),
        until_check_(spins_per_check_) {
    for (Transport* t : drive)
      if (t && drives_ < drive_.size()) drive_[drives_++] = t;
  }

  // Progress was made: the timeout counts from the next idle spin on.
  void reset() noexcept {
    until_check_ = spins_per_check_;
    since_ = {};
  }

  // Idle spins yield the CPU (threads sharing CPUs).
  void yield_when_idle(bool yield) noexcept { yield_ = yield; }

  // One idle spin: drives the transports, then tells whether the wait is over.
  State spin() noexcept {
    for (unsigned i = 0; i < drives_; ++i) drive_[i]->progress();
    if (yield_) std::this_thread::yield();
    // A countdown, not a modulo: a division per idle spin lengthened every poll loop.
    if (--until_check_ != 0) return State::waiting;
    until_check_ = spins_per_check_;
    const auto now = std::chrono::steady_clock::now();
    if (since_ == std::chrono::steady_clock::time_point{}) since_ = now;
    if (liveness_ && now - last_check_ >= std::chrono::milliseconds(1)) {
      last_check_ = now;
      try {
        if (liveness_->peer_failed()) return State::peer_failed;
      } catch (...) {
        return State::peer_failed;  // the liveness channel itself broke: the peer is gone
      }
    }
    return now - since_ > timeout_ ? State::timed_out : State::waiting;
  }

  // The throwing form for loops that report errors as exceptions: throws PeerError or Error
  // "<who>: no progress for <timeout> ms while <what>", naming the peer that stopped answering
  // where the bootstrap knows it.
  void idle(const char* who, const char* what) {
    switch (spin()) {
      case State::waiting: return;
      case State::peer_failed: throw failed(who, what);
      case State::timed_out: {
        PeerError e = timed_out(who, what);
        if (e.rank() < 0) throw Error(e.what());
        throw e;
      }
    }
  }

  PeerError failed(const char* who, const char* what) const {
    return peer_failure_error(liveness_, who, what);
  }
  PeerError timed_out(const char* who, const char* what) const {
    return no_progress_error(liveness_, timeout_, who, what);
  }

  std::chrono::milliseconds timeout() const noexcept { return timeout_; }

 private:
  std::chrono::milliseconds timeout_;
  Bootstrap* liveness_;
  unsigned spins_per_check_;
  std::array<Transport*, 2> drive_{};
  unsigned drives_ = 0;
  bool yield_ = false;
  unsigned until_check_;  // idle spins left before the next clock read
  std::chrono::steady_clock::time_point since_{}, last_check_{};
};

// One signalled operation of setup or teardown, done as a blocking call: posts it with
// `post()` (a Status) until the transport takes it, then polls transmit completions, dropping
// others, until the one with `context` (the context `post` gave the operation) arrives. Throws
// Error "<failed><the transport's last_error>" when the transport fails, and the watch's errors
// (`who`, `what`) after its timeout without progress, counted afresh once the operation is taken.
template <class Post>
void post_and_complete(Transport& t, BoundedWait& watch, std::uint64_t context, const char* who,
                       const char* what, std::string_view failed, Post&& post) {
  for (;;) {
    const Status s = post();
    if (s == Status::ok) break;
    if (s == Status::failed) throw Error(std::string(failed) + t.last_error());
    watch.idle(who, what);
  }
  watch.reset();
  for (;;) {
    Completion c;
    const int got = t.poll_tx({&c, 1});
    if (got < 0) throw Error(std::string(failed) + t.last_error());
    if (got == 1 && c.context == context) return;
    if (got == 0) watch.idle(who, what);
  }
}

}  // namespace fabflow
