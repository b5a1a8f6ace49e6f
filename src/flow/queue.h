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
#include "flow/layout.h"

namespace fabflow::flow::detail {

using Clock = std::chrono::steady_clock;

// What setup hands to a queue end: the transport, the region and the peer's region.
// Move-only (owns the region); used by one thread.
struct Shared {
  Transport& transport;
  Bootstrap& boot;
  int peer;
  QueueOptions options;
  Layout layout;
  std::unique_ptr<MemoryRegion> mr;
  RemoteMemory remote;
};

std::size_t effective_capacity(const QueueOptions& o) noexcept;
// Allocates the region, runs `before_exchange` (posting receives), all-gathers the hellos and
// imports the peer's key. role: 0 producer, 1 consumer. Throws.
Shared setup_end(Transport& t, Bootstrap& boot, int peer, const QueueOptions& o, int role,
                 std::size_t pool, const std::function<void(Shared&)>& before_exchange);
void post_setup_recv(Shared& s, std::size_t offset, std::size_t len, std::uint64_t ctx);

std::unique_ptr<Producer> make_producer_impl(Transport& t, Bootstrap& boot, int peer,
                                             const QueueOptions& o);
std::unique_ptr<Consumer> make_consumer_impl(Transport& t, Bootstrap& boot, int peer,
                                             const QueueOptions& o);

inline constexpr std::uint64_t kCtxData = 1;
inline constexpr std::uint64_t kCtxRead = 2;
inline constexpr std::uint64_t kCtxRecv = std::uint64_t{1} << 32;  // | slot or pool cell
inline constexpr std::size_t kCounterPool = 64;
inline constexpr std::size_t kPollBatch = 16;

// A counter that one thread writes and others may read (stats of the data-mover thread).
// Single writer: the increment is a plain load and store.
struct Counter {
  std::atomic<std::uint64_t> v{0};
  void inc(std::uint64_t n = 1) noexcept { v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  std::uint64_t get() const noexcept { return v.load(std::memory_order_relaxed); }
};

// State and failure handling shared by both ends. Not copyable; the data-mover thread may call
// fail() concurrently with the owner thread (the first failure wins).
template <class Tr>
class EndBase {
 public:
  EndBase(Tr& t, Shared s) : t_(t), s_(std::move(s)), L_(s_.layout), base_(s_.mr->data()),
                             desc_(s_.mr->desc()) {}
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
  // Posts until the transport takes the operation (driving progress on `again`), bounded by
  // the peer timeout.
  template <class Post>
  Status post_retry(Post&& post) noexcept {
    Status st = post();
    if (st != Status::again) return st;
    const auto deadline = Clock::now() + s_.options.peer_timeout;
    auto next_check = Clock::now();
    while ((st = post()) == Status::again) {
      t_.progress();
      const auto now = Clock::now();
      if (now >= next_check) {
        if (check_peer() != Status::ok) return Status::failed;
        next_check = now + std::chrono::milliseconds(1);
      }
      if (now > deadline) {
        fail("flow: the transport stayed busy for " + std::to_string(s_.options.peer_timeout.count()) + " ms");
        return Status::failed;
      }
    }
    return st;
  }
  std::byte* slot(std::uint64_t index) const noexcept { return base_ + L_.slot(index); }
  std::byte* cell(int i) const noexcept { return base_ + L_.cell(i); }

  Tr& t_;
  Shared s_;
  const Layout& L_;
  std::byte* base_;
  void* desc_;
  std::string error_;
  std::atomic<bool> failing_{false};
  std::atomic<bool> failed_{false};
  unsigned calls_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Producer. The owner thread stages items into its ring; pump() moves them (inline, or on the
// data-mover thread when active_producer is set: then only that thread touches the transport).
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
class ProducerImpl final : public Producer, private EndBase<Tr> {
  using B = EndBase<Tr>;
  using B::base_;
  using B::desc_;
  using B::failed;
  using B::fail;
  using B::L_;
  using B::s_;
  using B::t_;

 public:
  ProducerImpl(Tr& t, Shared s) : B(t, std::move(s)) {
    const double lazy = s_.options.lazy_refresh;
    refresh_below_ = static_cast<std::uint64_t>(lazy * static_cast<double>(L_.capacity));
    if (refresh_below_ == 0) refresh_below_ = 1;
    active_ = s_.options.active_producer;
    if (active_) mover_ = std::thread([this] { run_mover(); });
  }
  ~ProducerImpl() override {
    stop_.store(true, std::memory_order_release);
    if (mover_.joinable()) mover_.join();
  }

  Status try_enqueue(std::span<const std::byte> item) noexcept override {
    std::span<std::byte> dst;
    Status st = reserve(item.size(), &dst);
    if (st != Status::ok) return st;
    if (!item.empty()) std::memcpy(dst.data(), item.data(), item.size());
    return commit();
  }

  Status enqueue(std::span<const std::byte> item, std::chrono::milliseconds timeout) noexcept override {
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
      if (!active_) pump(true);
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
    write_slot(sl, staged_, sl + kSlotHeader, reserved_len_, 0);
    stage_done();
    stats_.items++;
    if (!active_) pump(false);
    return failed() ? Status::failed : Status::ok;
  }

  Status flush(std::chrono::milliseconds timeout) noexcept override {
    if (failed()) return Status::failed;
    return wait_until(timeout, [&] { return done_pub_.load(std::memory_order_acquire) >= staged_; });
  }

  Status close(std::chrono::milliseconds timeout) noexcept override {
    if (failed()) return Status::failed;
    if (closed_) return Status::closed;
    if (!closing_) {
      Status st = wait_until(timeout, [&] { return room(); });
      if (st != Status::ok) return st;
      write_slot(B::slot(staged_), staged_, nullptr, 0, kFlagClose);
      stage_done();
      closing_ = true;
      closing_pub_.store(true, std::memory_order_release);
    }
    Status st = wait_until(timeout, [&] { return head_view() >= staged_; });
    if (st == Status::ok) closed_ = true;
    return st;
  }

  const QueueStats& stats() const noexcept override {
    snapshot_ = stats_;
    snapshot_.data_ops = data_ops_.get();
    snapshot_.transfer_ops = transfer_ops_.get();
    snapshot_.space_ops = space_ops_.get();
    return snapshot_;
  }
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

  template <class Try>
  Status blocking(std::chrono::milliseconds timeout, Try&& attempt) noexcept {
    const auto deadline = Clock::now() + timeout;
    auto next_check = Clock::now();
    Backoff backoff;
    for (;;) {
      Status st = attempt();
      if (st != Status::full) return st;
      const auto now = Clock::now();
      if (now >= next_check) {
        if (B::check_peer() != Status::ok) return Status::failed;
        next_check = now + std::chrono::milliseconds(1);
      }
      if (now >= deadline) return Status::timeout;
      backoff.pause();
    }
  }

  template <class Pred>
  Status wait_until(std::chrono::milliseconds timeout, Pred&& done) noexcept {
    const auto deadline = Clock::now() + timeout;
    auto next_check = Clock::now();
    Backoff backoff;
    for (;;) {
      if (!active_) pump(true);
      if (failed()) return Status::failed;
      if (done()) return Status::ok;
      const auto now = Clock::now();
      if (now >= next_check) {
        if (B::check_peer() != Status::ok) return Status::failed;
        next_check = now + std::chrono::milliseconds(1);
      }
      if (now >= deadline) return Status::timeout;
      backoff.pause();
    }
  }

  void run_mover() noexcept {
    unsigned idle = 0;
    while (!stop_.load(std::memory_order_acquire) && !failed()) {
      if (pump(false)) {
        idle = 0;
      } else if (++idle > 64) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      } else {
        std::this_thread::yield();
      }
    }
  }

  // One round of the data path: reap completions, take in space notifications, move staged
  // slots, notify the consumer, refresh the consumer's head when space runs low (or `need`
  // says the caller is out of room). Returns whether anything moved.
  bool pump(bool need) noexcept {
    if (failed()) return false;
    const std::uint64_t before_sent = sent_, before_head = head_known_;
    if (!reap_tx()) return false;
    const std::uint64_t staged = active_ ? staged_pub_.load(std::memory_order_acquire) : staged_;
    if constexpr (D == DataFlow::pull) sent_ = staged;  // the ring itself is what the consumer reads
    if constexpr (S == SpaceNotify::push2) {
      if (!reap_rx()) return false;
    }
    if constexpr (S == SpaceNotify::push) {
      t_.progress();
      if (!take_head(load_acquire(B::cell(kPeerCell)))) return false;
    }
    if constexpr (D == DataFlow::pull) {
      if constexpr (T == TransferNotify::pull) store_release(B::cell(kOwnCell), sent_);
      t_.progress();
    } else {
      if (!move_data(staged)) return false;
      if constexpr (T == TransferNotify::pull) store_release(B::cell(kOwnCell), sent_);
    }
    if constexpr (T == TransferNotify::push) {
      if (notified_ != sent_ && !notify_tail()) return false;
    }
    if constexpr (S == SpaceNotify::pull) {
      const bool closing = closing_pub_.load(std::memory_order_acquire);
      const std::uint64_t free_slots = L_.capacity - (staged - head_known_);
      if (need || free_slots < refresh_below_ || (closing && head_known_ < staged)) {
        if (!read_head()) return false;
      }
    }
    if (!inflight_ && (T != TransferNotify::push || notified_ == sent_))
      done_pub_.store(sent_, std::memory_order_release);
    if (active_) head_pub_.store(head_known_, std::memory_order_release);
    return sent_ != before_sent || head_known_ != before_head;
  }

  bool move_data(std::uint64_t staged) noexcept {
    while (sent_ < staged) {
      if (s_.options.batching) {
        if (inflight_) return true;
        const std::uint64_t wrap = L_.capacity - sent_ % L_.capacity;
        const std::uint64_t n = std::min<std::uint64_t>(staged - sent_, wrap);
        const std::size_t bytes = (n - 1) * L_.stride + slot_used(slot_len(sent_ + n - 1));
        Status st = post_data(sent_, bytes, kSignal, n);
        if (st == Status::again) return true;
        if (st != Status::ok) return fail_transport();
        inflight_ = true;
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

  Status post_data(std::uint64_t index, std::size_t bytes, unsigned flags, std::uint64_t n) noexcept {
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
    Status st = t_.post_write(s_.peer, &tail_value_, 8, nullptr, s_.remote, L_.cell(kPeerCell),
                              kCtxData, kInject);
    if (st == Status::again) return true;
    if (st != Status::ok) return fail_transport();
    notified_ = sent_;
    transfer_ops_.inc();
    return true;
  }

  bool read_head() noexcept {
    read_done_ = false;
    std::byte* landing = B::cell(kLandingCell);
    Status st = B::post_retry([&] {
      return t_.post_read(s_.peer, landing, 8, desc_, s_.remote, L_.cell(kOwnCell), kCtxRead, kSignal);
    });
    if (st != Status::ok) return st == Status::failed && failed() ? false : fail_transport();
    space_ops_.inc();
    const auto deadline = Clock::now() + s_.options.peer_timeout;
    auto next_check = Clock::now();
    while (!read_done_) {
      if (!reap_tx()) return false;
      const auto now = Clock::now();
      if (now >= next_check) {
        if (!active_ && B::check_peer() != Status::ok) return false;
        next_check = now + std::chrono::milliseconds(1);
      }
      if (now > deadline) {
        fail("flow: the consumer's head counter could not be read within " +
             std::to_string(s_.options.peer_timeout.count()) + " ms");
        return false;
      }
    }
    return take_head(load_acquire(landing));
  }

  // Range-checks a head value the consumer wrote or sent: it can never pass what was sent.
  bool take_head(std::uint64_t v) noexcept {
    if (v <= head_known_) return true;
    if (v > sent_) {
      fail("flow: the consumer's head counter " + std::to_string(v) + " is beyond the " +
           std::to_string(sent_) + " items sent (protocol violation)");
      return false;
    }
    head_known_ = v;
    return true;
  }

  bool reap_tx() noexcept {
    Completion c[kPollBatch];
    for (;;) {
      int n = t_.poll_tx(c);
      if (n < 0) return fail_transport();
      for (int i = 0; i < n; ++i) {
        if (c[i].context == kCtxData) inflight_ = false;
        if (c[i].context == kCtxRead) read_done_ = true;
      }
      if (n < static_cast<int>(kPollBatch)) return true;
    }
  }

  bool reap_rx() noexcept {
    Completion c[kPollBatch];
    for (;;) {
      int n = t_.poll_rx(c);
      if (n < 0) return fail_transport();
      for (int i = 0; i < n; ++i) {
        const std::uint64_t idx = c[i].context - kCtxRecv;
        if (idx >= L_.pool) continue;
        std::uint64_t v;
        std::memcpy(&v, base_ + L_.pool_cell(idx), 8);
        if (!take_head(v)) return false;
        Status st = t_.post_recv(s_.peer, base_ + L_.pool_cell(idx), 8, desc_, c[i].context);
        if (st != Status::ok) return fail_transport();
      }
      if (n < static_cast<int>(kPollBatch)) return true;
    }
  }

  bool fail_transport() noexcept {
    if (!failed()) fail("flow: " + t_.last_error());
    return false;
  }

  std::uint64_t refresh_below_ = 1;
  bool active_ = false;
  // Owner thread.
  std::uint64_t staged_ = 0;
  bool reserved_ = false;
  std::uint32_t reserved_len_ = 0;
  bool closing_ = false;
  bool closed_ = false;
  QueueStats stats_;
  mutable QueueStats snapshot_;
  // Pump (owner thread, or the mover thread when active).
  std::uint64_t sent_ = 0;
  std::uint64_t head_known_ = 0;
  std::uint64_t notified_ = 0;
  std::uint64_t ops_ = 0;
  std::uint64_t tail_value_ = 0;
  bool inflight_ = false;
  bool read_done_ = false;
  Counter data_ops_, transfer_ops_, space_ops_;
  // Between the two.
  std::atomic<std::uint64_t> staged_pub_{0};
  std::atomic<std::uint64_t> head_pub_{0};
  std::atomic<std::uint64_t> done_pub_{0};
  std::atomic<bool> closing_pub_{false};
  std::atomic<bool> stop_{false};
  std::thread mover_;
};

// ---------------------------------------------------------------------------------------------
// Consumer: one thread. Finds the slot at its head, validates header and trailer, hands out
// the payload, and tells the producer about freed space.
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
class ConsumerImpl final : public Consumer, private EndBase<Tr> {
  using B = EndBase<Tr>;
  using B::base_;
  using B::desc_;
  using B::failed;
  using B::fail;
  using B::L_;
  using B::s_;
  using B::t_;

 public:
  ConsumerImpl(Tr& t, Shared s) : B(t, std::move(s)) {
    notify_every_ = static_cast<std::uint64_t>(s_.options.lazy_refresh * static_cast<double>(L_.capacity));
    if (notify_every_ == 0) notify_every_ = 1;
    if (notify_every_ > L_.capacity) notify_every_ = L_.capacity;
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
    const auto deadline = Clock::now() + timeout;
    auto next_check = Clock::now();
    Backoff backoff;
    for (;;) {
      Status st = try_dequeue(out, len);
      if (st != Status::empty) return st;
      const auto now = Clock::now();
      if (now >= next_check) {
        if (B::check_peer() != Status::ok) return Status::failed;
        next_check = now + std::chrono::milliseconds(1);
      }
      if (now >= deadline) return Status::timeout;
      backoff.pause();
    }
  }

  Status peek(std::span<const std::byte>* item) noexcept override {
    if (failed()) return Status::failed;
    if (closed_) {
      t_.progress();
      if (head_ != head_sent_) notify_head(true);
      return failed() ? Status::failed : Status::closed;
    }
    if (!peeked_) {
      if (B::check_peer_sometimes() != Status::ok) return Status::failed;
      Status st = advance();
      if (st != Status::ok) {
        if (st == Status::empty) {
          stats_.empty++;
          if (head_ != head_sent_) notify_head(true);
        }
        return failed() ? Status::failed : st;
      }
      peeked_ = true;
    }
    if (cur_flags_ & kFlagClose) {
      peeked_ = false;
      closed_ = true;
      consume_slot();
      notify_head(true);
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
    notify_head(false);
    return failed() ? Status::failed : Status::ok;
  }

  const QueueStats& stats() const noexcept override { return stats_; }
  const std::string& error() const noexcept override { return B::error_; }

 private:
  void consume_slot() noexcept {
    const std::uint64_t index = head_++;
    if constexpr (D == DataFlow::push2) {
      const std::size_t off = L_.slot(index);
      Status st = B::post_retry([&] {
        return t_.post_recv(s_.peer, base_ + off, L_.stride, desc_, kCtxRecv + index % L_.capacity);
      });
      if (st != Status::ok) fail_transport();
    }
    if constexpr (S == SpaceNotify::pull) store_release(B::cell(kOwnCell), head_);
  }

  // Space notification: push / push2 every notify_every_ items, or now when `force`.
  void notify_head(bool force) noexcept {
    if constexpr (S == SpaceNotify::pull) {
      return;
    } else {
      if (!force && head_ - head_sent_ < notify_every_) return;
      head_value_ = head_;
      Status st;
      if constexpr (S == SpaceNotify::push) {
        st = t_.post_write(s_.peer, &head_value_, 8, nullptr, s_.remote, L_.cell(kPeerCell), kCtxData, kInject);
      } else {
        st = t_.post_send(s_.peer, &head_value_, 8, nullptr, kCtxData, kInject);
      }
      if (st == Status::again) {
        t_.progress();
        return;
      }
      if (st != Status::ok) {
        fail_transport();
        return;
      }
      head_sent_ = head_;
      stats_.space_ops++;
    }
  }

  // Makes the slot at head_ available locally and valid: Status::ok, empty or failed.
  Status advance() noexcept {
    if constexpr (T == TransferNotify::watermark) {
      if constexpr (D == DataFlow::pull) {
        if (local_state() == SlotState::valid) return Status::ok;
        const std::uint64_t n = s_.options.batching ? std::min<std::uint64_t>(kBatchRead, L_.capacity) : 1;
        if (!read_slots(n)) return Status::failed;
      } else {
        if constexpr (D == DataFlow::push2) {
          if (!drain_rx()) return Status::failed;
        } else {
          t_.progress();
        }
      }
    } else {
      if constexpr (T == TransferNotify::imm || T == TransferNotify::event) {
        if (!drain_rx()) return Status::failed;
      } else {
        if constexpr (D == DataFlow::push2) {
          if (!drain_rx()) return Status::failed;
        }
        if (head_ == tail_known_) {
          if (!refresh_tail()) return Status::failed;
        }
      }
      if (head_ == tail_known_) return Status::empty;
      if constexpr (D == DataFlow::pull) {
        if (local_state() != SlotState::valid) {
          const std::uint64_t n = s_.options.batching ? tail_known_ - head_ : 1;
          if (!read_slots(n)) return Status::failed;
        }
      } else if constexpr (T == TransferNotify::push || T == TransferNotify::pull) {
        t_.progress();
      }
    }
    const SlotState st = local_state();
    if (st == SlotState::valid) return Status::ok;
    if (st == SlotState::bad) {
      fail("flow: slot " + std::to_string(head_) + " carries length " + std::to_string(cur_len_) +
           " / flags " + std::to_string(cur_flags_) + " beyond item_bytes " +
           std::to_string(L_.item_bytes) + " (protocol violation by the producer)");
      return Status::failed;
    }
    return Status::empty;
  }

  SlotState local_state() noexcept {
    return check_slot(B::slot(head_), head_, L_.item_bytes, &cur_len_, &cur_flags_);
  }

  // Range-checks a tail value: the producer can never be more than capacity ahead of head.
  bool take_tail(std::uint64_t v) noexcept {
    if (v <= tail_known_) return true;
    if (v - head_ > L_.capacity) {
      fail("flow: the producer's tail counter " + std::to_string(v) + " is out of range (head " +
           std::to_string(head_) + ", capacity " + std::to_string(L_.capacity) + ", protocol violation)");
      return false;
    }
    tail_known_ = v;
    return true;
  }

  bool refresh_tail() noexcept {
    if constexpr (T == TransferNotify::push) {
      t_.progress();
      return take_tail(load_acquire(B::cell(kPeerCell)));
    } else if constexpr (T == TransferNotify::pull) {
      std::byte* landing = B::cell(kLandingCell);
      if (!read_sync(landing, 8, L_.cell(kOwnCell))) return false;
      stats_.transfer_ops++;
      return take_tail(load_acquire(landing));
    } else {
      return true;
    }
  }

  // Pull data flow: reads n slots from head_ (not past the ring's end) into the local ring.
  bool read_slots(std::uint64_t n) noexcept {
    const std::uint64_t wrap = L_.capacity - head_ % L_.capacity;
    if (n > wrap) n = wrap;
    if (n == 0) n = 1;
    const std::size_t off = L_.slot(head_);
    if (!read_sync(base_ + off, n * L_.stride, off)) return false;
    stats_.data_ops++;
    return true;
  }

  bool read_sync(std::byte* dst, std::size_t len, std::size_t remote_off) noexcept {
    read_done_ = false;
    Status st = B::post_retry([&] {
      return t_.post_read(s_.peer, dst, len, desc_, s_.remote, remote_off, kCtxRead, kSignal);
    });
    if (st != Status::ok) return failed() ? false : fail_transport();
    const auto deadline = Clock::now() + s_.options.peer_timeout;
    auto next_check = Clock::now();
    Completion c[kPollBatch];
    while (!read_done_) {
      int n = t_.poll_tx(c);
      if (n < 0) return fail_transport();
      for (int i = 0; i < n; ++i)
        if (c[i].context == kCtxRead) read_done_ = true;
      const auto now = Clock::now();
      if (now >= next_check) {
        if (B::check_peer() != Status::ok) return false;
        next_check = now + std::chrono::milliseconds(1);
      }
      if (now > deadline) {
        fail("flow: a read from the producer did not complete within " +
             std::to_string(s_.options.peer_timeout.count()) + " ms");
        return false;
      }
    }
    return true;
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
  std::uint64_t head_ = 0;
  std::uint64_t tail_known_ = 0;
  std::uint64_t head_sent_ = 0;
  std::uint64_t head_value_ = 0;
  std::uint64_t notify_every_ = 1;
  std::uint32_t cur_len_ = 0;
  std::uint32_t cur_flags_ = 0;
  bool peeked_ = false;
  bool closed_ = false;
  bool read_done_ = false;
  QueueStats stats_;
};

}  // namespace fabflow::flow::detail
