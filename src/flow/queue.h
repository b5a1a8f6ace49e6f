// The flow queue ends as templates over the design point and the concrete transport type:
// every `if constexpr` below is resolved at compile time, so the data path of one design point
// contains only its own operations.
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

using Clock = std::chrono::steady_clock;

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
// Allocates the region(s), runs `before_exchange` (posting receives), all-gathers the hellos
// and imports the peer's key(s). role: 0 producer, 1 consumer. `n` is the notify transport
// (`t` itself without separate_notify_endpoint); `pool_notify`: the pool's receives are for
// notifications (posted on `n`, in the notify region). Throws.
Shared setup_end(Transport& t, Transport& n, Bootstrap& boot, int peer, const QueueOptions& o,
                 int role, std::size_t pool, bool pool_notify,
                 const std::function<void(Shared&)>& before_exchange);
// Posts a receive of `len` bytes at `offset` of the data region (notify: of the notify
// transport's region holding the pool).
void post_setup_recv(Shared& s, bool notify, std::size_t offset, std::size_t len,
                     std::uint64_t ctx);

std::unique_ptr<Producer> make_producer_impl(Transport& t, Transport& n, Bootstrap& boot, int peer,
                                             const QueueOptions& o);
std::unique_ptr<Consumer> make_consumer_impl(Transport& t, Transport& n, Bootstrap& boot, int peer,
                                             const QueueOptions& o);

inline constexpr std::uint64_t kCtxData = 1;
inline constexpr std::uint64_t kCtxRead = 2;
inline constexpr std::uint64_t kCtxRecv = std::uint64_t{1} << 32;  // | slot or pool cell
inline constexpr std::size_t kCounterPool = 64;
inline constexpr std::size_t kPollBatch = 16;
inline constexpr unsigned kMoverWrites = 4;  // batched writes the data mover keeps in flight
inline constexpr std::size_t kMoverPipelineBytes = 64 * 1024;  // ... when each carries this much

// A counter that one thread writes and others may read (stats of the data-mover thread).
// Single writer: the increment is a plain load and store.
struct Counter {
  std::atomic<std::uint64_t> v{0};
  void inc(std::uint64_t n = 1) noexcept {
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
  Status fail(const std::string& why) noexcept {
    bool expected = false;
    if (failing_.compare_exchange_strong(expected, true)) {
      error_ = why;
      failed_.store(true, std::memory_order_release);
    }
    return Status::failed;
  }
  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  // Asks the bootstrap whether the peer is gone: every 256 calls of a try_* operation.
  Status check_peer_sometimes() noexcept {
    if ((++calls_ & 255u) != 0) return Status::ok;
    return check_peer();
  }
  Status check_peer() noexcept {
    bool gone = false;
    try {
      gone = s_.boot.peer_failed();
    } catch (...) {
      gone = true;
    }
    if (gone) return fail("flow: peer rank " + std::to_string(s_.peer) + " failed or vanished");
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
  std::byte* slot(std::uint64_t index) const noexcept { return base_ + L_.slot(index); }
  std::byte* cell(int i) const noexcept { return nbase_ + L_.cell(i); }

  // The notify endpoint's share of progress where it is its own endpoint (software providers
  // place inbound RMA only while the target drives progress, and send queued operations only
  // while the initiator does): at once, or every 16th call on a busy path.
  void progress_notify() noexcept {
    if (separate_) n_.progress();
  }
  void progress_notify_sometimes() noexcept {
    if (separate_ && (++notify_polls_ & 15u) == 0) n_.progress();
  }
  // An end with nothing to do drives both endpoints where they are two: each may carry what the
  // other waits for (a push1 consumer waiting for a tail counter on n_ must still progress t_,
  // or rdm providers never finish connecting the producer's first data write: no data, no tail).
  void progress_idle() noexcept {
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
  const Layout& L_;
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
  mutable QueueStats snapshot_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> pumping_{false};  // active: a thread is in a pump round
  std::thread helper_;
};

// ---------------------------------------------------------------------------------------------
// Producer. The owner thread stages items into its ring; pump() moves them (inline, or on the
// data-mover thread when active_producer is set: then only that thread touches the transport).
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
class ProducerImpl final : public Producer, private EndBase<Tr> {
  using B = EndBase<Tr>;
  static constexpr bool kSum = needs_sum(D, T);
  using B::base_;
  using B::desc_;
  using B::failed;
  using B::fail;
  using B::L_;
  using B::n_;
  using B::s_;
  using B::t_;
  using B::data_ops_;
  using B::space_ops_;
  using B::transfer_ops_;

 public:
  ProducerImpl(Tr& t, Tr& n, Shared s) : B(t, n, std::move(s)) {
    const double lazy = s_.options.lazy_refresh;
    refresh_below_ = static_cast<std::uint64_t>(lazy * static_cast<double>(L_.capacity));
    if (refresh_below_ == 0) refresh_below_ = 1;
    refresh_gap_ = std::max<std::uint64_t>(1, refresh_below_ / 4);
    active_ = s_.options.active_producer;
    // The data mover's whole job is moving batches: it keeps several coalesced writes in
    // flight so the fabric never idles between one write's completion and the next post.
    if (active_) max_inflight_ = kMoverWrites;
    if (active_)
      B::start_helper(
          [this](bool* moved, bool* outstanding) { return try_pump(false, moved, outstanding); });
  }
  ~ProducerImpl() override {
    B::stop_helper();
    // A head read or batched write still in flight would land in (or read from) the region
    // freed next: reap them first, bounded by peer_timeout.
    BoundedWait wait(s_.options.peer_timeout, nullptr, {&t_}, 1);
    while ((read_pending_ || inflight_ > 0) && !failed() &&
           wait.spin() == BoundedWait::State::waiting) {
      B::progress_notify();
      reap_tx();
    }
  }

  Status try_enqueue(std::span<const std::byte> item) noexcept override {
    std::span<std::byte> dst;
    Status st = reserve(item.size(), &dst);
    if (st != Status::ok) return st;
    if (!item.empty()) std::memcpy(dst.data(), item.data(), item.size());
    return commit();
  }

  Status enqueue(std::span<const std::byte> item,
                 std::chrono::milliseconds timeout) noexcept override {
    return blocking(timeout, [&] { return try_enqueue(item); });
  }

  Status reserve(std::size_t len, std::span<std::byte>* out) noexcept override {
    if (failed()) return Status::failed;
    if (closed_ || closing_) return Status::closed;
    if (len > L_.item_bytes)
      return fail("flow: item of " + std::to_string(len) + " bytes exceeds item_bytes " +
                  std::to_string(L_.item_bytes));
    if (B::check_peer_sometimes() != Status::ok) return Status::failed;
    if (!room()) {
      // Try to make room now. Active: the owner helps the data mover (one pump round when
      // the mover is not in one), so a mover that the scheduler keeps off the core, which it
      // usually shares with this thread, does not stall the stream; if the mover is busy,
      // give it the core before saying full.
      help(true);
      if (failed()) return Status::failed;
      if (!room()) {
        stats_.full++;
        return Status::full;
      }
    }
    reserved_len_ = static_cast<std::uint32_t>(len);
    reserved_ = true;
    *out = std::span<std::byte>(B::slot(staged_) + kSlotHeader, len);
    return Status::ok;
  }

  Status commit() noexcept override {
    if (!reserved_) return fail("flow: commit() without reserve()");
    reserved_ = false;
    std::byte* sl = B::slot(staged_);
    mark_visible();
    write_slot(sl, staged_, sl + kSlotHeader, reserved_len_, 0, kSum);
    stage_done();
    stats_.items++;
    if (!active_) pump(false);
    return failed() ? Status::failed : Status::ok;
  }

  Status flush(std::chrono::milliseconds timeout) noexcept override {
    if (failed()) return Status::failed;
    // Flushing needs nothing from the consumer: no head refresh (`need` false).
    return wait_until(timeout, false,
                      [&] { return done_pub_.load(std::memory_order_acquire) >= staged_; });
  }

  Status close(std::chrono::milliseconds timeout) noexcept override {
    if (failed()) return Status::failed;
    if (closed_) return Status::closed;
    if (!closing_) {
      Status st = wait_until(timeout, true, [&] { return room(); });
      if (st != Status::ok) return st;
      mark_visible();
      write_slot(B::slot(staged_), staged_, nullptr, 0, kFlagClose, kSum);
      stage_done();
      closing_ = true;
      closing_pub_.store(true, std::memory_order_release);
    }
    Status st = wait_until(timeout, true, [&] { return head_view() >= staged_; });
    if (st == Status::ok) closed_ = true;
    return st;
  }

  const QueueStats& stats() const noexcept override { return B::snapshot(stats_); }
  const std::string& error() const noexcept override { return B::error_; }

 private:
  std::uint64_t head_view() const noexcept {
    return active_ ? head_pub_.load(std::memory_order_acquire) : head_known_;
  }
  bool room() const noexcept { return staged_ - head_view() < L_.capacity; }
  void stage_done() noexcept {
    ++staged_;
    if (active_) staged_pub_.store(staged_, std::memory_order_release);
  }
  // Pull data: the consumer reads the ring itself, so it may take a slot in (and count it in
  // its head) from the moment the slot's header is written, before stage_done publishes it.
  // Active producers publish that bound first, for the mover's range check of the head:
  // write_slot's release store of the header orders this store before it, so whoever saw the
  // header (and then the consumer's head) finds the bound here.
  void mark_visible() noexcept {
    if constexpr (D == DataFlow::pull) {
      if (active_) visible_pub_.store(staged_ + 1, std::memory_order_release);
    }
  }
  // The most slots the consumer can have seen (read by the pump): pull data, every slot
  // written or being written; otherwise what was sent.
  std::uint64_t visible() const noexcept {
    if constexpr (D == DataFlow::pull)
      return active_ ? visible_pub_.load(std::memory_order_acquire) : staged_;
    else
      return sent_;
  }

  template <class Try>
  Status blocking(std::chrono::milliseconds timeout, Try&& attempt) noexcept {
    BoundedWait wait = B::bounded_wait(timeout);
    Backoff backoff;
    for (;;) {
      Status st = attempt();
      if (st != Status::full) return st;
      if ((st = B::waited(wait)) != Status::ok) return st;
      backoff.pause();
    }
  }

  // `need`: the wait is for space, so refresh the consumer's head even above the lazy threshold.
  template <class Pred>
  Status wait_until(std::chrono::milliseconds timeout, bool need, Pred&& done) noexcept {
    // The common flush is done after one round: read no clock for it.
    help(need);
    if (failed()) return Status::failed;
    if (done()) return Status::ok;
    BoundedWait wait = B::bounded_wait(timeout);
    Backoff backoff;
    for (;;) {
      help(need);
      if (failed()) return Status::failed;
      if (done()) return Status::ok;
      if (Status st = B::waited(wait); st != Status::ok) return st;
      backoff.pause();
    }
  }

  // The owner thread's share of the data path: inline, one pump round; active, one round if
  // the data mover is not in one (else the core goes to the mover).
  void help(bool need) noexcept {
    bool moved, outstanding;
    if (!active_)
      pump(need);
    else if (!try_pump(need, &moved, &outstanding))
      std::this_thread::yield();
  }

  // Active producer: one pump round unless the other thread (mover or owner) is in one.
  // *moved: what pump() returned; *outstanding: work is pending (in-flight writes or reads,
  // staged items not yet sent, a close), read under the same exclusion.
  bool try_pump(bool need, bool* moved, bool* outstanding) noexcept {
    return B::try_round([&] {
      *moved = pump(need);
      *outstanding = inflight_ > 0 || read_pending_ ||
                     staged_pub_.load(std::memory_order_acquire) != sent_ ||
                     closing_pub_.load(std::memory_order_acquire);
    });
  }

  // One round of the data path: reap completions, take in space notifications, move staged
  // slots, notify the consumer, refresh the consumer's head when space runs low (or `need`
  // says the caller is out of room). Returns whether anything moved.
  bool pump(bool need) noexcept {
    if (failed()) return false;
    const std::uint64_t before_sent = sent_, before_head = head_known_;
    if (!reap_tx()) return false;
    const std::uint64_t staged = active_ ? staged_pub_.load(std::memory_order_acquire) : staged_;
    if constexpr (D == DataFlow::pull)
      sent_ = staged;  // the ring itself is what the consumer reads
    if constexpr (S == SpaceNotify::push2) {
      if (!reap_rx()) return false;
    }
    if constexpr (S == SpaceNotify::push) {
      n_.progress();  // the consumer's head write lands in our cell
      if (!take_head(load_acquire(B::cell(kPeerCell)))) return false;
    }
    if constexpr (D == DataFlow::pull) {
      if constexpr (T == TransferNotify::pull) store_release(B::cell(kOwnCell), sent_);
      t_.progress();
      if constexpr (T == TransferNotify::pull) B::progress_notify();  // tail reads
    } else {
      if (!move_data(staged)) return false;
      if constexpr (T == TransferNotify::pull) store_release(B::cell(kOwnCell), sent_);
    }
    if constexpr (T == TransferNotify::push) {
      if (notified_ != sent_ && !notify_tail()) return false;
    }
    if constexpr (S == SpaceNotify::pull) {
      // At most one head read in flight; reap_tx takes in its result. Never waited for here,
      // so the data path keeps moving while the read crosses the fabric.
      if (read_pending_) {
        if (!read_in_time()) return false;
      } else {
        // Lazy refresh: early (below the threshold) at most once per refresh_gap_ staged
        // items, so a consumer that stays behind is not also asked after every item; at once
        // when out of room, when the caller needs room, or to finish a close.
        const bool closing = closing_pub_.load(std::memory_order_acquire);
        // (Pull data: the head may count a slot the owner is still publishing.)
        const std::uint64_t free_slots =
            L_.capacity - (staged > head_known_ ? staged - head_known_ : 0);
        const bool early = free_slots < refresh_below_ && staged - refreshed_at_ >= refresh_gap_;
        if (need || free_slots == 0 || early || (closing && head_known_ < staged)) {
          refreshed_at_ = staged;
          if (!post_head_read()) return false;
        }
      }
    }
    if (inflight_ == 0 && (T != TransferNotify::push || notified_ == sent_))
      done_pub_.store(sent_, std::memory_order_release);
    if (active_) head_pub_.store(head_known_, std::memory_order_release);
    return sent_ != before_sent || head_known_ != before_head;
  }

  bool move_data(std::uint64_t staged) noexcept {
    while (sent_ < staged) {
      if (s_.options.batching) {
        if (inflight_ >= max_inflight_) return true;
        const std::uint64_t wrap = L_.capacity - sent_ % L_.capacity;
        const std::uint64_t n = std::min<std::uint64_t>(staged - sent_, wrap);
        const std::size_t bytes = (n - 1) * L_.stride + slot_used(slot_len(sent_ + n - 1));
        // Every write costs the provider a fixed overhead (about 40 us on tcp here), so a write
        // joins one already in flight only when it is big enough to be worth it; small items
        // keep coalescing meanwhile.
        if (inflight_ > 0 && bytes < kMoverPipelineBytes) return true;
        Status st = post_data(sent_, bytes, kSignal, n);
        if (st == Status::again) return true;
        if (st != Status::ok) return fail_transport();
        ++inflight_;
        sent_ += n;
      } else {
        const std::size_t bytes = slot_used(slot_len(sent_));
        unsigned flags = (++ops_ % s_.options.signal_every == 0) ? kSignal : 0u;
        if (s_.options.inline_small && bytes <= t_.caps().inject_size) flags |= kInject;
        Status st = post_data(sent_, bytes, flags, 1);
        if (st == Status::again) {
          --ops_;
          reap_tx();
          return true;
        }
        if (st != Status::ok) return fail_transport();
        ++sent_;
      }
      data_ops_.inc();
    }
    return true;
  }

  Status post_data(std::uint64_t index, std::size_t bytes, unsigned flags,
                   std::uint64_t n) noexcept {
    const std::size_t off = L_.slot(index);
    if constexpr (D == DataFlow::push2) {
      return t_.post_send(s_.peer, base_ + off, bytes, desc_, kCtxData, flags);
    } else if constexpr (T == TransferNotify::imm) {
      return t_.post_write(s_.peer, base_ + off, bytes, desc_, s_.remote, off, kCtxData, flags, n);
    } else {
      return t_.post_write(s_.peer, base_ + off, bytes, desc_, s_.remote, off, kCtxData, flags);
    }
  }

  std::uint32_t slot_len(std::uint64_t index) const noexcept {
    std::uint64_t m;
    std::memcpy(&m, B::slot(index) + 8, 8);
    return static_cast<std::uint32_t>(m);
  }

  bool notify_tail() noexcept {
    tail_value_ = sent_;
    Status st = n_.post_write(s_.peer, &tail_value_, 8, nullptr, s_.nremote, L_.cell(kPeerCell),
                              kCtxData, kInject);
    if (st == Status::again) return true;
    if (st != Status::ok) return B::fail_notify();
    notified_ = sent_;
    transfer_ops_.inc();
    return true;
  }

  bool post_head_read() noexcept {
    Status st = n_.post_read(s_.peer, B::cell(kLandingCell), 8, B::ndesc_, s_.nremote,
                             L_.cell(kOwnCell), kCtxRead, kSignal);
    if (st == Status::again) return true;  // the transport is busy: the next round retries
    if (st != Status::ok) return B::fail_notify();
    read_pending_ = true;
    read_posted_ = Clock::now();
    read_polls_ = 0;
    space_ops_.inc();
    return reap_tx();  // providers that complete at once (local) need no second round
  }

  // A head read that stays unanswered beyond peer_timeout fails the queue (clock read every
  // 64 rounds).
  bool read_in_time() noexcept {
    if ((++read_polls_ & 63u) != 0) return true;
    if (Clock::now() - read_posted_ <= s_.options.peer_timeout) return true;
    fail("flow: the consumer's head counter could not be read within " +
         std::to_string(s_.options.peer_timeout.count()) + " ms");
    return false;
  }

  // Range-checks a head value the consumer wrote or sent: it can never pass what it could
  // see (what was sent; pull data: what was written into the ring).
  bool take_head(std::uint64_t v) noexcept {
    if (v <= head_known_) return true;
    if (const std::uint64_t limit = visible(); v > limit) {
      fail("flow: the consumer's head counter " + std::to_string(v) + " is beyond the " +
           std::to_string(limit) + " items " + (D == DataFlow::pull ? "written" : "sent") +
           " (protocol violation)");
      return false;
    }
    head_known_ = v;
    return true;
  }

  // Data completions come from t_, the head read's from n_ (the same CQ unless separate).
  bool reap_tx() noexcept {
    if (!reap_tx_of(t_)) return false;
    return !B::separate_ || reap_tx_of(n_);
  }

  bool reap_tx_of(Tr& tr) noexcept {
    Completion c[kPollBatch];
    for (;;) {
      int n = tr.poll_tx(c);
      if (n < 0) return &tr == &t_ ? fail_transport() : B::fail_notify();
      for (int i = 0; i < n; ++i) {
        if (c[i].context == kCtxData && inflight_ > 0) --inflight_;
        if (c[i].context == kCtxRead && read_pending_) {
          read_pending_ = false;
          if (!take_head(load_acquire(B::cell(kLandingCell)))) return false;
        }
      }
      if (n < static_cast<int>(kPollBatch)) return true;
    }
  }

  // Pushed head counters (space push2): receives on the notify transport, in its region.
  bool reap_rx() noexcept {
    Completion c[kPollBatch];
    for (;;) {
      int n = n_.poll_rx(c);
      if (n < 0) return B::fail_notify();
      for (int i = 0; i < n; ++i) {
        const std::uint64_t idx = c[i].context - kCtxRecv;
        if (idx >= L_.pool) continue;
        std::byte* cellp = B::nbase_ + L_.pool_cell(idx);
        std::uint64_t v;
        std::memcpy(&v, cellp, 8);
        if (!take_head(v)) return false;
        Status st = n_.post_recv(s_.peer, cellp, 8, B::ndesc_, c[i].context);
        if (st != Status::ok) return B::fail_notify();
      }
      if (n < static_cast<int>(kPollBatch)) return true;
    }
  }

  bool fail_transport() noexcept {
    if (!failed()) fail("flow: " + t_.last_error());
    return false;
  }

  std::uint64_t refresh_below_ = 1;
  std::uint64_t refresh_gap_ = 1;
  std::uint64_t refreshed_at_ = 0;  // staged count at the last head refresh (pump's thread)
  bool active_ = false;
  // Owner thread.
  std::uint64_t staged_ = 0;
  bool reserved_ = false;
  std::uint32_t reserved_len_ = 0;
  bool closing_ = false;
  bool closed_ = false;
  QueueStats stats_;
  // Pump (owner thread, or the mover thread when active).
  std::uint64_t sent_ = 0;
  std::uint64_t head_known_ = 0;
  std::uint64_t notified_ = 0;
  std::uint64_t ops_ = 0;
  std::uint64_t tail_value_ = 0;
  unsigned inflight_ = 0;      // batched writes awaiting their completion
  unsigned max_inflight_ = 1;  // batching: 1 (the thesis' batching queue); data mover: more
  bool read_pending_ = false;  // a head read is in flight (space pull)
  unsigned read_polls_ = 0;
  Clock::time_point read_posted_{};
  // Between the two.
  std::atomic<std::uint64_t> staged_pub_{0};
  std::atomic<std::uint64_t> visible_pub_{0};  // pull data: slots written or being written
  std::atomic<std::uint64_t> head_pub_{0};
  std::atomic<std::uint64_t> done_pub_{0};
  std::atomic<bool> closing_pub_{false};
};

// ---------------------------------------------------------------------------------------------
// Consumer. The owner thread peeks at and releases the slot at head_. The pump makes slots
// valid ahead of it at next_: it posts reads (pull data, pull transfer notifications), takes
// in transfer notifications, drives progress, re-posts receives (push2) and tells the
// producer about freed space. Passive (the default): the owner runs the pump from its own
// calls and next_ == head_. Active consumer: a helper thread runs it, validating up to a
// ring ahead of the owner and publishing how far (ready_pub_); the owner then touches only
// local memory, or runs one pump round itself when the helper is not in one.
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
class ConsumerImpl final : public Consumer, private EndBase<Tr> {
  using B = EndBase<Tr>;
  static constexpr bool kSum = needs_sum(D, T);
  using B::base_;
  using B::desc_;
  using B::failed;
  using B::fail;
  using B::L_;
  using B::n_;
  using B::s_;
  using B::t_;
  using B::data_ops_;
  using B::space_ops_;
  using B::transfer_ops_;

 public:
  ConsumerImpl(Tr& t, Tr& n, Shared s) : B(t, n, std::move(s)) {
    notify_every_ =
        static_cast<std::uint64_t>(s_.options.lazy_refresh * static_cast<double>(L_.capacity));
    if (notify_every_ == 0) notify_every_ = 1;
    if (notify_every_ > L_.capacity) notify_every_ = L_.capacity;
    active_ = s_.options.active_consumer;
    if (active_)
      B::start_helper(
          [this](bool* moved, bool* outstanding) { return try_pump(moved, outstanding); });
  }
  // A read still in flight would land in the region freed next: reap it first, bounded by
  // peer_timeout (reap_read fails the queue then).
  ~ConsumerImpl() override {
    B::stop_helper();
    while (pending_ != Read::none && !failed() && reap_read() == Status::empty) {
      t_.progress();
      B::progress_notify();
    }
  }

  Status try_dequeue(std::span<std::byte> out, std::size_t* len) noexcept override {
    std::span<const std::byte> item;
    Status st = peek(&item);
    if (st != Status::ok) return st;
    if (out.size() < item.size())
      return fail("flow: dequeue buffer of " + std::to_string(out.size()) +
                  " bytes is smaller than the item (" + std::to_string(item.size()) + ")");
    if (!item.empty()) std::memcpy(out.data(), item.data(), item.size());
    *len = item.size();
    return release();
  }

  Status dequeue(std::span<std::byte> out, std::size_t* len,
                 std::chrono::milliseconds timeout) noexcept override {
    BoundedWait wait = B::bounded_wait(timeout);
    Backoff backoff;
    for (;;) {
      Status st = try_dequeue(out, len);
      if (st != Status::empty) return st;
      if ((st = B::waited(wait)) != Status::ok) return st;
      backoff.pause();
    }
  }

  Status peek(std::span<const std::byte>* item) noexcept override {
    if (failed()) return Status::failed;
    if (closed_) {
      // Keep serving the producer's last head update (the helper does that when active).
      if (!active_) {
        t_.progress();
        B::progress_notify();
        if (seen_ != head_sent_) notify_head(true);
      }
      return failed() ? Status::failed : Status::closed;
    }
    if (!peeked_) {
      if (B::check_peer_sometimes() != Status::ok) return Status::failed;
      Status st = active_ ? ready() : advance();
      if (st != Status::ok) {
        if (st == Status::empty) {
          stats_.empty++;
          if (!active_) {
            B::progress_idle();
            if (seen_ != head_sent_) notify_head(true);
          }
        }
        return failed() ? Status::failed : st;
      }
      if (!active_) {
        cur_len_ = pump_len_;
        cur_flags_ = pump_flags_;
      }
      peeked_ = true;
    }
    if (cur_flags_ & kFlagClose) {
      peeked_ = false;
      closed_ = true;
      consume_slot();
      if (!active_) notify_head(true);
      return failed() ? Status::failed : Status::closed;
    }
    *item = std::span<const std::byte>(B::slot(head_) + kSlotHeader, cur_len_);
    return Status::ok;
  }

  Status release() noexcept override {
    if (failed()) return Status::failed;
    if (!peeked_) return fail("flow: release() without a peeked item");
    peeked_ = false;
    consume_slot();
    stats_.items++;
    if (!active_) notify_head(false);
    return failed() ? Status::failed : Status::ok;
  }

  const QueueStats& stats() const noexcept override { return B::snapshot(stats_); }
  const std::string& error() const noexcept override { return B::error_; }

 private:
  enum class Read : std::uint8_t { none, tail, slots };

  // Active: the slot at head_ is ready once the helper has validated it; if not yet, run one
  // pump round here when the helper is not in one, else give it the core.
  Status ready() noexcept {
    if (head_ == ready_pub_.load(std::memory_order_acquire)) {
      bool moved, outstanding;
      if (!try_pump(&moved, &outstanding)) std::this_thread::yield();
      if (failed()) return Status::failed;
      if (head_ == ready_pub_.load(std::memory_order_acquire)) return Status::empty;
    }
    // Validated by the pump, and nothing writes the slot before we release it: read its
    // length and flags from the header.
    const std::byte* sl = B::slot(head_);
    if (load_acquire(sl) != head_ + 1) {
      fail("flow: slot " + std::to_string(head_) + " changed after it was validated");
      return Status::failed;
    }
    std::uint64_t m;
    std::memcpy(&m, sl + 8, 8);
    cur_len_ = static_cast<std::uint32_t>(m);
    cur_flags_ = static_cast<std::uint32_t>(m >> 32);
    return Status::ok;
  }

  // The owner is done with the slot at head_.
  void consume_slot() noexcept {
    ++head_;
    if (active_) {
      head_pub_.store(head_, std::memory_order_release);
      return;
    }
    next_ = head_;
    if (retire(seen_))
      ++seen_;
    else
      B::fail("flow: could not re-post a receive: " + t_.last_error());
    B::progress_notify_sometimes();  // serve head reads, send queued head updates while busy
  }

  // Pump: slot `index` was consumed. push2: re-post its receive; space pull: publish the
  // head for the producer's reads. False when the transport did not take the receive (the
  // caller retries; passive ends retry here, bounded by peer_timeout).
  bool retire(std::uint64_t index) noexcept {
    if constexpr (D == DataFlow::push2) {
      auto post = [&] {
        return t_.post_recv(s_.peer, base_ + L_.slot(index), L_.stride, desc_,
                            kCtxRecv + index % L_.capacity);
      };
      // The helper thread must not ask the bootstrap (one thread only): it retries next round.
      Status st = active_ ? post() : B::post_retry(post);
      if (st == Status::again) return false;
      if (st != Status::ok) {
        fail_transport();
        return false;
      }
    }
    if constexpr (S == SpaceNotify::pull) store_release(B::cell(kOwnCell), index + 1);
    return true;
  }

  // Active: one pump round unless the other thread is in one. *moved: a slot was validated or
  // released; *outstanding: a read is in flight or releases are not yet taken in.
  bool try_pump(bool* moved, bool* outstanding) noexcept {
    return B::try_round([&] {
      *moved = pump();
      *outstanding = pending_ != Read::none || head_pub_.load(std::memory_order_acquire) != seen_ ||
                     (S != SpaceNotify::pull && seen_ != head_sent_);
    });
  }

  // Active: takes in the owner's releases, validates slots ahead (at most a ring beyond the
  // owner's head, never past an end-of-stream slot) and notifies space: every notify_every_
  // items, or at once when no new slot arrived this round (the producer may be waiting).
  bool pump() noexcept {
    if (failed()) return false;
    const std::uint64_t before_next = next_, before_seen = seen_;
    const std::uint64_t released = head_pub_.load(std::memory_order_acquire);
    while (seen_ < released && retire(seen_)) ++seen_;
    if (failed()) return false;
    while (!close_seen_ && next_ - seen_ < L_.capacity) {
      if (advance() != Status::ok) break;
      if (pump_flags_ & kFlagClose) close_seen_ = true;
      ready_pub_.store(++next_, std::memory_order_release);
    }
    if (failed()) return false;
    if (next_ == before_next)
      B::progress_idle();
    else
      B::progress_notify_sometimes();
    notify_head(next_ == before_next && seen_ != head_sent_);
    return next_ != before_next || seen_ != before_seen;
  }

  // Space notification of the pump's head: push / push2 every notify_every_ items, or now
  // when `force`.
  void notify_head(bool force) noexcept {
    if constexpr (S == SpaceNotify::pull) {
      return;
    } else {
      if (!force && seen_ - head_sent_ < notify_every_) return;
      if (seen_ == head_sent_) return;
      head_value_ = seen_;
      Status st;
      if constexpr (S == SpaceNotify::push) {
        st = n_.post_write(s_.peer, &head_value_, 8, nullptr, s_.nremote, L_.cell(kPeerCell),
                           kCtxData, kInject);
      } else {
        st = n_.post_send(s_.peer, &head_value_, 8, nullptr, kCtxData, kInject);
      }
      if (st == Status::again) {
        n_.progress();
        return;
      }
      if (st != Status::ok) {
        B::fail_notify();
        return;
      }
      head_sent_ = seen_;
      space_ops_.inc();
    }
  }

  // Makes the slot at next_ available locally and valid: Status::ok, empty or failed.
  // Never waits for the fabric: a read (tail counter or slots) is posted and its completion
  // reaped by a later call, so try_dequeue stays non-blocking and a thread that waits on
  // several queues keeps driving all of them.
  Status advance() noexcept {
    if (pending_ != Read::none) {
      if (Status st = reap_read(); st != Status::ok) return st;
    }
    if constexpr (T == TransferNotify::imm || T == TransferNotify::event || D == DataFlow::push2) {
      if (!drain_rx()) return Status::failed;
    }
    if constexpr (T == TransferNotify::push) {
      if (next_ == tail_known_) {
        n_.progress();
        if (!take_tail(load_acquire(B::cell(kPeerCell)))) return Status::failed;
      }
    } else if constexpr (T == TransferNotify::pull) {
      if (next_ == tail_known_ && pending_ == Read::none) {
        if (Status st = start_read(Read::tail, B::cell(kLandingCell), 8, L_.cell(kOwnCell));
            st != Status::ok)
          return st;
      }
    }
    if constexpr (T != TransferNotify::watermark) {
      if (next_ == tail_known_) return Status::empty;
    }
    SlotState st = local_state();
    if (st == SlotState::torn && !note_torn()) return Status::failed;
    if constexpr (D == DataFlow::pull) {
      if (st == SlotState::absent || st == SlotState::torn) {
        if (pending_ != Read::none) return Status::empty;
        std::uint64_t n = 1;
        if (s_.options.batching)
          n = T == TransferNotify::watermark ? std::min<std::uint64_t>(kBatchRead, L_.capacity)
                                             : tail_known_ - next_;
        // Within the ring's end and within the slots the owner has released.
        const std::uint64_t wrap = L_.capacity - next_ % L_.capacity;
        const std::uint64_t room = L_.capacity - (next_ - seen_);
        n = std::max<std::uint64_t>(1, std::min({n, wrap, room}));
        const std::size_t off = L_.slot(next_);
        if (Status rs = start_read(Read::slots, base_ + off, n * L_.stride, off); rs != Status::ok)
          return rs;
        st = local_state();
        if (st == SlotState::torn && !note_torn()) return Status::failed;
      }
    } else if constexpr (D == DataFlow::push1) {
      // Inbound writes land only while this end drives progress, but a slot that is already
      // valid needs no fabric call: progress when the slot is absent, and every 16 items so
      // the producer's reads of our counters are served while we are busy.
      if (st == SlotState::absent) {
        t_.progress();
        st = local_state();
      } else if ((++valid_polls_ & 15u) == 0) {
        t_.progress();
      }
    }
    if (st == SlotState::valid) {
      torn_ = 0;
      return Status::ok;
    }
    if (st == SlotState::torn) return Status::empty;  // read again
    if (st == SlotState::bad) {
      fail("flow: slot " + std::to_string(next_) + " carries length " + std::to_string(pump_len_) +
           " / flags " + std::to_string(pump_flags_) + " beyond item_bytes " +
           std::to_string(L_.item_bytes) + " (protocol violation by the producer)");
      return Status::failed;
    }
    return Status::empty;
  }

  // A read that caught the producer mid-write is read again; the same slot torn many times
  // in a row is a producer whose sums are wrong. False: the queue failed.
  bool note_torn() noexcept {
    if (++torn_ <= kMaxTorn) return true;
    fail("flow: slot " + std::to_string(next_) + " failed its payload sum " +
         std::to_string(torn_) + " times in a row (protocol violation by the producer)");
    return false;
  }

  SlotState local_state() noexcept {
    return check_slot(B::slot(next_), next_, L_.item_bytes, &pump_len_, &pump_flags_, kSum);
  }

  // Range-checks a tail value: the producer can never be more than capacity ahead of the
  // head it can know of (seen_: what the pump has published or sent).
  bool take_tail(std::uint64_t v) noexcept {
    if (v <= tail_known_) return true;
    if (v - seen_ > L_.capacity) {
      fail("flow: the producer's tail counter " + std::to_string(v) + " is out of range (head " +
           std::to_string(seen_) + ", capacity " + std::to_string(L_.capacity) +
           ", protocol violation)");
      return false;
    }
    tail_known_ = v;
    return true;
  }

  // Posts the one read this end keeps in flight (the producer's tail counter into the landing
  // cell, or slots into the local ring) and reaps once: Status::ok when it completed already
  // (the local transport completes at post time), empty while it is in flight, failed.
  Status start_read(Read what, std::byte* dst, std::size_t len, std::size_t remote_off) noexcept {
    const bool tail = what == Read::tail;  // a notification: over n_, into the notify region
    Tr& tr = tail ? n_ : t_;
    Status st = tr.post_read(s_.peer, dst, len, tail ? B::ndesc_ : desc_,
                             tail ? s_.nremote : s_.remote, remote_off, kCtxRead, kSignal);
    if (st == Status::again) {
      tr.progress();
      return Status::empty;
    }
    if (st != Status::ok) {
      if (tail)
        B::fail_notify();
      else
        fail_transport();
      return Status::failed;
    }
    pending_ = what;
    read_posted_ = Clock::now();
    read_polls_ = 0;
    if (what == Read::tail)
      transfer_ops_.inc();
    else
      data_ops_.inc();
    return reap_read();
  }

  // Reaps the read in flight: ok once it completed (a tail value taken in and range-checked),
  // empty while it is pending, failed after peer_timeout or on a transport error.
  Status reap_read() noexcept {
    Completion c[kPollBatch];
    bool done = false;
    const bool tail = pending_ == Read::tail;
    for (;;) {
      int n = (tail ? n_ : t_).poll_tx(c);
      if (n < 0) {
        if (tail)
          B::fail_notify();
        else
          fail_transport();
        return Status::failed;
      }
      for (int i = 0; i < n; ++i)
        if (c[i].context == kCtxRead) done = true;
      if (n < static_cast<int>(kPollBatch)) break;
    }
    if (!done) {
      if ((++read_polls_ & 63u) == 0 && Clock::now() - read_posted_ > s_.options.peer_timeout) {
        fail("flow: a read from the producer did not complete within " +
             std::to_string(s_.options.peer_timeout.count()) + " ms");
        return Status::failed;
      }
      return Status::empty;
    }
    const Read what = pending_;
    pending_ = Read::none;
    if (what == Read::tail && !take_tail(load_acquire(B::cell(kLandingCell))))
      return Status::failed;
    return Status::ok;
  }

  // Reaps receive completions: push2 data receives (counted as items for event), writes with
  // immediate data (their value is an item count) and the receives imm may consume.
  bool drain_rx() noexcept {
    Completion c[kPollBatch];
    for (;;) {
      int n = t_.poll_rx(c);
      if (n < 0) return fail_transport();
      for (int i = 0; i < n; ++i) {
        if constexpr (T == TransferNotify::imm) {
          if (c[i].kind == CompletionKind::remote_write || c[i].has_data) {
            if (!take_tail(tail_known_ + c[i].data)) return false;
          }
          if (c[i].kind == CompletionKind::recv && c[i].context >= kCtxRecv &&
              c[i].context - kCtxRecv < L_.pool) {
            const std::size_t idx = c[i].context - kCtxRecv;
            Status st = t_.post_recv(s_.peer, base_ + L_.pool_cell(idx), 8, desc_, c[i].context);
            if (st != Status::ok) return fail_transport();
          }
        } else if constexpr (T == TransferNotify::event) {
          if (!take_tail(tail_known_ + 1)) return false;
        }
      }
      if (n < static_cast<int>(kPollBatch)) return true;
    }
  }

  bool fail_transport() noexcept {
    if (!failed()) fail("flow: " + t_.last_error());
    return false;
  }

  static constexpr std::uint64_t kBatchRead = 16;
  static constexpr unsigned kMaxTorn = 16;
  bool active_ = false;
  // Owner thread.
  std::uint64_t head_ = 0;     // slots released
  std::uint32_t cur_len_ = 0;  // the peeked slot's length and flags
  std::uint32_t cur_flags_ = 0;
  bool peeked_ = false;
  bool closed_ = false;
  QueueStats stats_;
  // Pump (the owner thread when passive, the helper or the owner in turn when active).
  std::uint64_t next_ = 0;  // the slot being made valid; passive: == head_
  std::uint64_t seen_ = 0;  // releases taken in (and published or sent); passive: == head_
  std::uint64_t tail_known_ = 0;
  std::uint64_t head_sent_ = 0;
  std::uint64_t head_value_ = 0;
  std::uint64_t notify_every_ = 1;
  std::uint32_t pump_len_ = 0;  // length and flags of the slot at next_ (local_state)
  std::uint32_t pump_flags_ = 0;
  bool close_seen_ = false;    // active: validation stops at the end-of-stream slot
  Read pending_ = Read::none;  // the one read in flight
  unsigned read_polls_ = 0;
  Clock::time_point read_posted_{};
  unsigned valid_polls_ = 0;
  unsigned torn_ = 0;  // consecutive torn reads of the slot at next_
  // Between the two (active).
  std::atomic<std::uint64_t> ready_pub_{0};  // slots below this are valid
  std::atomic<std::uint64_t> head_pub_{0};   // the owner's head_
};

}  // namespace fabflow::flow::detail
