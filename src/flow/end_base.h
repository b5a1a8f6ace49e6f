// What both flow queue ends share: the setup result (Shared), the setup calls, the constants of
// the data path and EndBase, the state and failure handling of one end. The ends themselves are
// templates over the design point and the concrete transport type (producer_impl.h,
// consumer_impl.h): every `if constexpr` there is resolved at compile time, so the data path of
// one design point contains only its own operations.
#pragma once

#include <fabflow/bootstrap.h>
#include <fabflow/flow.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "common/backoff.h"
#include "common/bounded_wait.h"
#include "flow/layout.h"

namespace fabflow::flow::detail {

using SteadyClock = std::chrono::steady_clock;

// What setup hands to a queue end: the transports, the regions and the peer's regions.
// Without separate_notify_endpoint `notify` is `transport`, there is no notify region and
// `nremote` is `remote`. Move-only (owns the regions); used by one thread.
struct Shared {
  Transport& transport;
  Transport& notify;
  Bootstrap& boot;
  int peer;
  QueueOptions options;
  Layout layout;
  std::unique_ptr<MemoryRegion> mr;
  RemoteMemory remote;
  std::unique_ptr<MemoryRegion> nmr;  // counter cells (and the head receive pool), separate only
  RemoteMemory nremote;
};

std::size_t effective_capacity(const QueueOptions& o) noexcept;

// Which end; the number is the hello's `role` byte.
enum class EndRole : std::uint8_t { producer = 0, consumer = 1 };

// Which transport (and region) a receive is posted on.
enum class RecvOn { data, notify };

// The pool of 8-byte receive cells an end keeps posted, and what they receive: notifications
// (posted on the notify transport, in the notify region) or part of the data flow.
struct RecvPool {
  std::size_t cells = 0;
  RecvOn on = RecvOn::data;
};

// Allocates the region(s), runs `before_exchange` (posting receives), all-gathers the hellos
// and imports the peer's key(s). `n` is the notify transport (`t` itself without
// separate_notify_endpoint). Throws.
Shared setup_end(Transport& t, Transport& n, Bootstrap& boot, int peer, const QueueOptions& o,
                 EndRole role, RecvPool pool, const std::function<void(Shared&)>& before_exchange);
// Whether a producer end stores its slots itself into the consumer's ring, mapped in its
// process (local's direct stores), instead of writing them through the transport: compact
// slots, push1 data, transfer notification other than immediate data, no coalescing (batching,
// data mover), on the local transport. Such slots carry their word first (Layout::word_first).
bool stores_directly(Transport& t, const QueueOptions& o, const Layout& l) noexcept;
// Posts a receive of `len` bytes at `offset` of the data region (RecvOn::notify: of the notify
// transport's region holding the pool).
void post_setup_recv(Shared& s, RecvOn on, std::size_t offset, std::size_t len, std::uint64_t ctx);

std::unique_ptr<Producer> make_producer_impl(Transport& t, Transport& n, Bootstrap& boot, int peer,
                                             const QueueOptions& o);
std::unique_ptr<Consumer> make_consumer_impl(Transport& t, Transport& n, Bootstrap& boot, int peer,
                                             const QueueOptions& o);

inline constexpr std::uint64_t kCtxData = 1;
inline constexpr std::uint64_t kCtxRead = 2;
// A notification tracked to its completion (one_notification_in_flight): the producer's tail
// write, the consumer's head write or send.
inline constexpr std::uint64_t kCtxNotify = 3;
inline constexpr std::uint64_t kCtxRecv = std::uint64_t{1} << 32;  // | slot or pool cell
inline constexpr std::size_t kCounterPool = 64;
inline constexpr std::size_t kPollBatch = 16;
inline constexpr unsigned kMoverWrites = 4;  // batched writes the data mover keeps in flight
inline constexpr std::size_t kMoverPipelineBytes = 64 * 1024;  // ... when each carries this much

// A counter that one thread writes and others may read (stats of the data-mover thread).
// Single writer: the increment is a plain load and store.
struct Counter {
  std::atomic<std::uint64_t> v{0};
  [[gnu::always_inline]] void inc(std::uint64_t n = 1) noexcept {
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  std::uint64_t get() const noexcept { return v.load(std::memory_order_relaxed); }
};

// State and failure handling shared by both ends. Not copyable; the data-mover thread may call
// fail() concurrently with the owner thread (the first failure wins). `t_` carries the data,
// `n_` the notifications: the same transport unless separate_notify_endpoint (then a second one
// of the same concrete type, so neither costs a virtual call).
template <class Tr>
class EndBase {
 public:
  EndBase(Tr& t, Tr& n, Shared s)
      : t_(t),
        n_(n),
        s_(std::move(s)),
        L_(s_.layout),
        base_(s_.mr->data()),
        desc_(s_.mr->desc()),
        nbase_(s_.nmr ? s_.nmr->data() : base_),
        ndesc_(s_.nmr ? s_.nmr->desc() : desc_),
        separate_(s_.nmr != nullptr) {}
  EndBase(const EndBase&) = delete;
  EndBase& operator=(const EndBase&) = delete;

 protected:
  // Out of line (cold): the data path's callers stay small.
  [[gnu::cold, gnu::noinline]] Status fail(const std::string& why) noexcept {
    bool expected = false;
    if (failing_.compare_exchange_strong(expected, true)) {
      error_ = why;
      failed_.store(true, std::memory_order_release);
    }
    return Status::failed;
  }
  // fail() with a fixed message, built out of line too (a caller building the std::string
  // itself would carry its construction).
  [[gnu::cold, gnu::noinline]] Status fail_with(const char* why) noexcept { return fail(why); }
  [[gnu::always_inline]] bool failed() const noexcept {
    return failed_.load(std::memory_order_acquire);
  }
  // Asks the bootstrap whether the peer is gone: every 256 calls of a try_* operation.
  [[gnu::always_inline]] Status check_peer_sometimes() noexcept {
    if ((++calls_ & 255u) != 0) return Status::ok;
    return check_peer();
  }
  [[gnu::noinline]] Status check_peer() noexcept {
    bool gone = false;
    try {
      gone = s_.boot.peer_failed();
    } catch (...) {
      gone = true;
    }
    if (gone) {
      return fail(
          peer_failure_error(&s_.boot, "flow", "connected to rank " + std::to_string(s_.peer))
              .what());
    }
    return Status::ok;
  }
  // One idle spin of a bounded wait as the queue's status: ok while waiting; a vanished peer
  // fails the queue.
  Status waited(BoundedWait& wait) noexcept {
    switch (wait.spin()) {
      case BoundedWait::State::waiting: return Status::ok;
      case BoundedWait::State::peer_failed: check_peer(); return Status::failed;
      case BoundedWait::State::timed_out: return Status::timeout;
    }
    return Status::failed;
  }
  // A bounded wait for this end's calls: the clock read on every spin (the callers pause
  // between spins), the peer asked at most once a millisecond.
  BoundedWait bounded_wait(std::chrono::milliseconds timeout, Transport* drive = nullptr) noexcept {
    return BoundedWait(timeout, &s_.boot, {drive}, 1);
  }
  // Posts until the transport takes the operation (driving progress on `again`), bounded by
  // the peer timeout.
  template <class Post>
  Status post_retry(Post&& post) noexcept {
    Status st = post();
    if (st != Status::again) return st;
    BoundedWait wait = bounded_wait(s_.options.peer_timeout, &t_);
    while ((st = post()) == Status::again) {
      const Status w = waited(wait);
      if (w == Status::timeout) {
        fail("flow: the transport stayed busy for " +
             std::to_string(s_.options.peer_timeout.count()) + " ms");
        return Status::failed;
      }
      if (w != Status::ok) return Status::failed;
    }
    return st;
  }
  [[gnu::always_inline]] std::byte* slot(std::uint64_t index) const noexcept {
    return base_ + L_.slot(index);
  }
  [[gnu::always_inline]] std::byte* cell(int i) const noexcept { return nbase_ + L_.cell(i); }

  // The notify endpoint's share of progress where it is its own endpoint (software providers
  // place inbound RMA only while the target drives progress, and send queued operations only
  // while the initiator does): at once, or every 16th call on a busy path.
  void progress_notify() noexcept {
    if (separate_) n_.progress();
  }
  [[gnu::always_inline]] void progress_notify_sometimes() noexcept {
    if (separate_ && (++notify_polls_ & 15u) == 0) n_.progress();
  }
  // An end with nothing to do drives both endpoints where they are two: each may carry what the
  // other waits for (a push1 consumer waiting for a tail counter on n_ must still progress t_,
  // or rdm providers never finish connecting the producer's first data write: no data, no tail).
  [[gnu::always_inline]] void progress_idle() noexcept {
    if (separate_) {
      t_.progress();
      n_.progress();
    }
  }
  // A failed notification operation: the notify transport's error, named as such.
  bool fail_notify() noexcept {
    if (!failed())
      fail(std::string("flow: ") + (separate_ ? "notify endpoint: " : "") + n_.last_error());
    return false;
  }

  // Active ends (data mover, active consumer): the helper thread and the owner thread take
  // turns in the end's pump rounds. `round(&moved, &outstanding)` runs one round unless the
  // other thread is in one (false then, at once). The flag's acquire / release hands the
  // transport and the pump state from one thread to the other, so the transport still sees
  // one thread at a time.
  template <class Round>
  bool try_round(Round&& round) noexcept {
    if (pumping_.exchange(true, std::memory_order_acquire)) return false;
    round();
    pumping_.store(false, std::memory_order_release);
    return true;
  }
  // Starts the helper thread: it runs `try_pump(&moved, &outstanding)` while there is work,
  // yields the core while waiting (for a completion, a read, room or items: the owner thread
  // usually shares the core), and sleeps only when it has had nothing at all to do for a
  // while, so a stream never waits on a timer. It inherits the creating thread's affinity.
  template <class TryPump>
  void start_helper(TryPump try_pump) {
    helper_ = std::thread([this, try_pump] {
      unsigned idle = 0;
      while (!stop_.load(std::memory_order_acquire) && !failed()) {
        bool moved = false, outstanding = true;  // the owner is pumping: work is going on
        try_pump(&moved, &outstanding);
        if (moved || outstanding) {
          idle = 0;
          if (!moved) std::this_thread::yield();
        } else if (++idle > 4096) {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        } else {
          std::this_thread::yield();
        }
      }
    });
  }
  // The owner's counts plus the operation counts, which the pump (perhaps the helper thread)
  // keeps.
  const QueueStats& snapshot(const QueueStats& own) const noexcept {
    snapshot_ = own;
    snapshot_.data_ops = data_ops_.get();
    snapshot_.transfer_ops = transfer_ops_.get();
    snapshot_.space_ops = space_ops_.get();
    return snapshot_;
  }
  void stop_helper() noexcept {
    stop_.store(true, std::memory_order_release);
    if (helper_.joinable()) helper_.join();
  }

  Tr& t_;
  Tr& n_;
  Shared s_;
  const Layout L_;  // a copy of s_.layout: the data path reads it without an indirection
  std::byte* base_;
  void* desc_;
  std::byte* nbase_;  // the region holding the counter cells (base_ unless separate)
  void* ndesc_;
  bool separate_;
  unsigned notify_polls_ = 0;
  std::string error_;
  std::atomic<bool> failing_{false};
  std::atomic<bool> failed_{false};
  unsigned calls_ = 0;
  Counter data_ops_, transfer_ops_, space_ops_;  // written by the pump
  // The pump's completions, polled into a member: a local array of them would be
  // value-initialized on every poll, most of which find nothing.
  Completion polled_[kPollBatch];
  mutable QueueStats snapshot_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> pumping_{false};  // active: a thread is in a pump round
  std::thread helper_;
};

}  // namespace fabflow::flow::detail
