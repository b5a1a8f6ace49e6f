// The consumer end of a flow queue, one instantiation per design point and transport type.
// One class template, declared here with the owner thread's calls (peek, dequeue, release, the
// end of stream) and defined by concern: the pump in consumer_pump.h, what it reads and receives
// from the producer in consumer_read.h, both included at the end of this file. The members
// defined there are declared inline here, as those defined in the class are implicitly, so the
// data path's calls to them can be inlined.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "flow/end_base.h"

namespace fabflow::flow::detail {

// Whether the consumer tells the producer about freed slots once notify_every_ have gathered,
// now, or now and for the last time (end of stream: with one_notification_in_flight it waits,
// bounded, for the one in flight rather than leave the final head to a later call).
enum class HeadNotice { when_due, now, last };

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
    one_head_ = s_.options.one_notification_in_flight;
    in_place_ = L_.compact && !active_ && D == DataFlow::push1 && T == TransferNotify::watermark;
    if constexpr (D == DataFlow::pull && T == TransferNotify::watermark) {
      // Only where a batch can be worth a probe: the measurement runs the library's widest
      // vector code (AVX-512 here), which slowed a queue of 64 B items that never runs it by
      // 20% on shm when it ran once at setup.
      if (L_.sum &&
          L_.item_bytes * std::min<std::size_t>(kBatchRead, L_.capacity) >= kProbeMinBytes)
        measure_sum();
    }
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
    // A tracked head notification's completion would otherwise reach a later queue on this
    // transport.
    if (head_pending_ && !failed()) wait_head();
  }

  Status try_dequeue(std::span<std::byte> out, std::size_t* len) noexcept override {
    const std::byte* p;
    switch (in_place(&p)) {
      case InPlace::item:
        if (out.size() < cur_len_) break;  // peek() below reports it
        if (cur_len_) std::memcpy(out.data(), p, cur_len_);
        *len = cur_len_;
        return finish_release();
      case InPlace::empty: return empty_now();
      case InPlace::other: break;
    }
    std::span<const std::byte> item;
    Status st = peek_generic(&item);
    if (st != Status::ok) return st;
    if (out.size() < item.size()) [[unlikely]]
      return too_small(out.size(), item.size());
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
      // Waiting for the producer's second end-of-stream marker: every item has arrived, so
      // the end of the caller's wait (or of the producer) is the end of the stream.
      if ((st = B::waited(wait)) != Status::ok)
        return awaiting_second_ ? end_after_first_marker() : st;
      backoff.pause();
    }
  }

  Status peek(std::span<const std::byte>* item) noexcept override {
    const std::byte* p;
    switch (in_place(&p)) {
      case InPlace::item:
        peeked_ = true;
        *item = std::span<const std::byte>(p, cur_len_);
        return Status::ok;
      case InPlace::empty: return empty_now();
      case InPlace::other: break;
    }
    return peek_generic(item);
  }

  Status release() noexcept override {
    if (failed()) return Status::failed;
    if (!peeked_) [[unlikely]]
      return B::fail_with("flow: release() without a peeked item");
    peeked_ = false;
    peeked_n_ = 0;
    return finish_release();
  }

  // The first item as peek() finds it, then the slots behind it while they are valid in this
  // end's memory (and below the tail counter where the transfer notification is one; active:
  // validated by the helper), stopping before an end-of-stream slot or anything peek would
  // have to report.
  Status peek_many(std::span<std::span<const std::byte>> items, std::size_t* n) noexcept override {
    *n = 0;
    if (items.empty()) [[unlikely]]
      return B::fail_with("flow: peek_many() with no room for an item");
    std::span<const std::byte> first;
    if (Status st = peek(&first); st != Status::ok) return st;
    items[0] = first;
    const std::uint64_t head = head_;
    const std::uint64_t limit = std::min<std::uint64_t>(
        head + items.size(), active_ ? ready_pub_.load(std::memory_order_acquire) : ahead_limit());
    // As commit_many's loop: locals, so the slots' acquire loads do not reload the members.
    const std::size_t stride = L_.stride, mask = L_.mask, capacity = L_.capacity;
    const std::size_t item_bytes = L_.item_bytes, word_at = L_.word_at();
    const std::byte* const ring = base_;
    const bool compact = L_.compact, word_first = L_.word_first, active = active_;
    std::uint64_t index = head + 1;
    for (std::uint32_t len, flags; index < limit; ++index) {
      const std::byte* sl = ring + (mask ? index & mask : index % capacity) * stride;
      bool ok;
      if (compact)  // the word (active: validated by the helper, checked again the same way)
        ok = check_compact(sl, word_at, index, item_bytes, &len, &flags) == SlotState::valid;
      else if (active)
        ok = validated(index, &len, &flags);
      else  // as advance() checks the slot at next_ (a sum that fails: not yet, read it again)
        ok = check_slot(sl, index, item_bytes, &len, &flags, L_.sum, index >= trusted_end_) ==
             SlotState::valid;
      if (!ok || flags) break;
      items[index - head] = std::span<const std::byte>(
          sl + (compact ? compact_payload_at(word_first, stride, len) : kSlotHeader), len);
    }
    peeked_n_ = static_cast<std::size_t>(index - head);
    *n = peeked_n_;
    return Status::ok;
  }

  Status release_many(std::size_t k) noexcept override {
    if (failed()) return Status::failed;
    const std::size_t peeked = peeked_ ? std::max<std::size_t>(peeked_n_, 1) : 0;
    if (k > peeked) [[unlikely]]
      return B::fail_with("flow: release_many() of more items than peek_many() gave");
    peeked_n_ = 0;
    if (k == 0) return Status::ok;  // still peeked: the next peek gives the same items
    peeked_ = false;
    consume_slots(k);
    stats_.items += k;
    if (!active_) notify_head(HeadNotice::when_due);
    return failed() ? Status::failed : Status::ok;
  }

  const QueueStats& stats() const noexcept override { return B::snapshot(stats_); }
  const std::string& error() const noexcept override { return B::error_; }

 private:
  enum class Read : std::uint8_t { none, tail, slots, probe };

  Status peek_generic(std::span<const std::byte>* item) noexcept {
    if (quiet_end_) return Status::closed;
    if (failed()) return awaiting_second_ ? end_after_first_marker() : Status::failed;
    if (closed_) {
      // Keep serving the producer's last head update (the helper does that when active).
      if (!active_) {
        t_.progress();
        B::progress_notify();
        if (seen_ != head_sent_) notify_head(HeadNotice::now);
      }
      return failed() ? Status::failed : Status::closed;
    }
    if (!peeked_) {
      if (!awaiting_second_ && B::check_peer_sometimes() != Status::ok) return Status::failed;
      Status st = active_ ? ready() : advance();
      if (st == Status::empty) {
        if (awaiting_second_ && std::chrono::steady_clock::now() >= second_deadline_)
          return end_after_first_marker();
        return empty_now();
      }
      if (st != Status::ok) {
        if (awaiting_second_) return end_after_first_marker();
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
      consume_slot();
      if constexpr (S == SpaceNotify::pull) {
        if (!awaiting_second_) {
          // The first marker: released, so the producer's close reads a head that covers
          // it; its second marker, which says it has, may already be here.
          awaiting_second_ = true;
          second_deadline_ = std::chrono::steady_clock::now() + s_.options.peer_timeout;
          return peek_generic(item);
        }
        return end_after_first_marker();
      }
      closed_ = true;
      if (!active_) notify_head(HeadNotice::last);
      return failed() ? Status::failed : Status::closed;
    }
    if (awaiting_second_) [[unlikely]] {
      awaiting_second_ = false;
      return B::fail_with("flow: the producer sent an item after its end of stream");
    }
    *item = std::span<const std::byte>(B::slot(head_) + L_.payload_at(cur_len_), cur_len_);
    return Status::ok;
  }

  // Space pull: the end of stream once the first marker is released and the second has come,
  // or peer_timeout passed, or the transport failed meanwhile (every item has arrived: the
  // producer's answer is all that is missing). Nothing is owed to the producer after it.
  Status end_after_first_marker() noexcept {
    awaiting_second_ = false;
    closed_ = quiet_end_ = true;
    return Status::closed;
  }

  // Nothing to dequeue now. Passive: the idle end drives its endpoints and sends a head update
  // it holds back (the producer may be waiting for room).
  Status empty_now() noexcept {
    stats_.empty++;
    if (!active_) {
      B::progress_idle();
      if (seen_ != head_sent_) notify_head(HeadNotice::now);
    }
    return failed() ? Status::failed : Status::empty;
  }

  [[gnu::cold, gnu::noinline]] Status too_small(std::size_t have, std::size_t need) noexcept {
    return fail("flow: dequeue buffer of " + std::to_string(have) +
                " bytes is smaller than the item (" + std::to_string(need) + ")");
  }

  [[gnu::always_inline]] Status finish_release() noexcept {
    consume_slot();
    stats_.items++;
    if (!active_) notify_head(HeadNotice::when_due);
    return failed() ? Status::failed : Status::ok;
  }

  // The common case of compact slots polled in place (push1, watermark transfer, no helper
  // thread), decided by one check of the word of the slot at head_: item (its payload in
  // *payload, its length in cur_len_, no pump round), empty (the word is not there yet), or
  // other: end of stream, a bad word, a failed queue, a peeked item, any other design point;
  // the generic path then repeats the checks and reports. A consumer that runs right behind
  // its producer is bound by its instructions per item, and a polling one reacts sooner the
  // shorter its poll (docs/measurements/flow-queues.md, "Intra-host figures").
  enum class InPlace : std::uint8_t { item, empty, other };
  [[gnu::always_inline]] InPlace in_place(const std::byte** payload) noexcept {
    if (!in_place_ || peeked_ || closed_ || awaiting_second_ || failed()) return InPlace::other;
    if (B::check_peer_sometimes() != Status::ok) return InPlace::other;
    const std::byte* sl = B::slot(head_);
    std::uint32_t len, flags;
    SlotState st = check_compact(sl, L_.word_at(), head_, L_.item_bytes, &len, &flags);
    if (st == SlotState::absent) {
      // As advance(): inbound writes land while this end drives progress (a no-op on local);
      // the payload's line next to the word's (after it, word first; else before it) is
      // fetched early.
      t_.progress();
      st = check_compact(sl, L_.word_at(), head_, L_.item_bytes, &len, &flags);
      if (st == SlotState::absent) {
        if (L_.stride >= 2 * kCellBytes)
          __builtin_prefetch(sl + (L_.word_first ? kCellBytes : L_.stride - 2 * kCellBytes));
        return InPlace::empty;
      }
    }
    if (st != SlotState::valid || flags != 0) return InPlace::other;
    if ((++valid_polls_ & 15u) == 0) t_.progress();  // as advance() does for a valid slot
    cur_len_ = pump_len_ = len;
    cur_flags_ = pump_flags_ = 0;
    *payload = sl + L_.payload_at(len);
    return InPlace::item;
  }

  // Active: the slot at head_ is ready once the helper has validated it; if not yet, run one
  // pump round here when the helper is not in one, else give it the core.
  Status ready() noexcept {
    if (head_ == ready_pub_.load(std::memory_order_acquire)) {
      bool moved, outstanding;
      if (!try_pump(&moved, &outstanding)) std::this_thread::yield();
      if (failed()) return Status::failed;
      if (head_ == ready_pub_.load(std::memory_order_acquire)) return Status::empty;
    }
    if (!validated(head_, &cur_len_, &cur_flags_)) {
      fail("flow: slot " + std::to_string(head_) + " changed after it was validated");
      return Status::failed;
    }
    return Status::ok;
  }

  // Active: slot `index`, validated by the pump, and nothing writes it before the owner
  // releases it: its length and flags from the header (compact: the word). False: the slot no
  // longer carries its sequence number.
  bool validated(std::uint64_t index, std::uint32_t* len, std::uint32_t* flags) const noexcept {
    const std::byte* sl = B::slot(index);
    if (L_.compact)
      return check_compact(sl, L_.word_at(), index, L_.item_bytes, len, flags) == SlotState::valid;
    const bool same = load_acquire(sl) == index + 1;
    std::uint64_t m;
    std::memcpy(&m, sl + 8, 8);
    *len = static_cast<std::uint32_t>(m);
    *flags = static_cast<std::uint32_t>(m >> 32);
    return same;
  }

  // Passive: how far peek_many may look past head_: where the transfer notification is a
  // counter (or receive completions), the tail it last took in; watermark: the slots' own
  // checks decide, within the ring.
  std::uint64_t ahead_limit() const noexcept {
    if constexpr (T == TransferNotify::watermark)
      return head_ + L_.capacity;
    else
      return tail_known_;
  }

  // The owner is done with the slot at head_.
  [[gnu::always_inline]] void consume_slot() noexcept {
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

  // The owner is done with the k slots from head_ on: consume_slot k times, with one publication
  // of the new head where nothing is done per slot (every data flow but push2, which re-posts
  // each slot's receive).
  [[gnu::always_inline]] void consume_slots(std::size_t k) noexcept {
    if constexpr (D == DataFlow::push2) {
      for (std::size_t i = 0; i < k; ++i) consume_slot();
    } else {
      head_ += k;
      if (active_) {
        head_pub_.store(head_, std::memory_order_release);
        return;
      }
      next_ = head_;
      seen_ = head_;
      if constexpr (S == SpaceNotify::pull) store_release(B::cell(kOwnCell), seen_);
      B::progress_notify_sometimes();
    }
  }

  // The pump (consumer_pump.h): takes in the owner's releases, makes the slot at next_ valid
  // and notifies space.
  [[gnu::always_inline]] inline bool retire(std::uint64_t index) noexcept;
  inline bool try_pump(bool* moved, bool* outstanding) noexcept;
  inline bool pump() noexcept;
  [[gnu::always_inline]] inline void notify_head(HeadNotice when) noexcept;
  inline bool reap_head() noexcept;
  [[gnu::noinline]] inline bool wait_head() noexcept;
  inline Status advance() noexcept;
  inline bool note_torn() noexcept;

  // A send completion of this end (reads, tracked head notifications): whose it is.
  [[gnu::always_inline]] void take_tx(const Completion& c) noexcept {
    if (c.context == kCtxRead) read_done_ = true;
    if (c.context == kCtxNotify) head_pending_ = false;
  }

  [[gnu::always_inline]] SlotState local_state() noexcept {
    if (L_.compact)
      return check_compact(B::slot(next_), L_.word_at(), next_, L_.item_bytes, &pump_len_,
                           &pump_flags_);
    return check_slot(B::slot(next_), next_, L_.item_bytes, &pump_len_, &pump_flags_, L_.sum,
                      next_ >= trusted_end_);
  }

  // What comes from the producer (consumer_read.h): the one read in flight (tail counter,
  // slots, probe) and the probe's cost estimate, tail values, receive completions.
  inline bool probe_worth(std::uint64_t n) noexcept;
  inline void measure_sum();
  inline Status probe(std::uint64_t index) noexcept;
  inline void take_probe() noexcept;
  inline void take_slots_read() noexcept;
  inline bool take_tail(std::uint64_t v) noexcept;
  inline Status start_read(Read what, std::byte* dst, std::size_t len,
                           std::size_t remote_off) noexcept;
  inline Status reap_read() noexcept;
  inline bool drain_rx() noexcept;

  bool fail_transport() noexcept {
    if (!failed()) fail("flow: " + t_.last_error());
    return false;
  }

  static constexpr std::uint64_t kBatchRead = 16;
  static constexpr unsigned kMaxTorn = 16;
  static constexpr unsigned kProbeRetry = 64;
  // Below this a batch's sums take less than any read's round trip (XXH3 hashes 16 KiB in
  // about 0.4 us here): no probe, not even the first one that measures its cost.
  static constexpr std::size_t kProbeMinBytes = std::size_t{16} << 10;
  bool active_ = false;
  bool in_place_ = false;  // in_place() applies
  // Owner thread.
  std::uint64_t head_ = 0;     // slots released
  std::uint32_t cur_len_ = 0;  // the peeked slot's length and flags
  std::uint32_t cur_flags_ = 0;
  bool peeked_ = false;
  std::size_t peeked_n_ = 0;  // items peek_many gave (0: none, or peek's one)
  bool closed_ = false;
  // Space pull's end of stream (peek_generic): the first marker released, the second awaited
  // until second_deadline_; quiet_end_ once it ended that way.
  bool awaiting_second_ = false;
  bool quiet_end_ = false;
  unsigned markers_seen_ = 0;  // active: end-of-stream markers the helper validated
  std::chrono::steady_clock::time_point second_deadline_{};
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
  bool read_done_ = false;     // ... and its completion was reaped
  bool one_head_ = false;      // one_notification_in_flight
  bool head_pending_ = false;  // ... and a head notification is in flight
  unsigned read_polls_ = 0;
  SteadyClock::time_point read_posted_{};
  unsigned valid_polls_ = 0;
  // Trusted reads: slots below published_ were seen published by a completed probe; slots
  // below trusted_end_ in the ring came from a read posted after that (read_trust_: the bound
  // of the read being posted). read_last_: the last slot of the slot read; probe_index_: the
  // slot whose header the probe reads; ahead_: the last read's batch was whole.
  std::uint64_t published_ = 0;
  std::uint64_t trusted_end_ = 0;
  std::uint64_t read_trust_ = 0;
  std::uint64_t read_last_ = 0;
  std::uint64_t probe_index_ = 0;
  bool ahead_ = true;
  double sum_ns_per_byte_ = 0;  // measure_sum
  double probe_ns_ = 0;         // a probe's round trip, a moving average
  unsigned batches_unprobed_ = 0;
  std::uint32_t sum_sink_ = 0;  // keeps measure_sum's sums
  unsigned torn_ = 0;           // consecutive torn reads of the slot at next_
  std::chrono::steady_clock::time_point torn_since_{};  // push1: the first of them
  // Between the two (active).
  std::atomic<std::uint64_t> ready_pub_{0};  // slots below this are valid
  std::atomic<std::uint64_t> head_pub_{0};   // the owner's head_
};

}  // namespace fabflow::flow::detail

#include "flow/consumer_pump.h"
#include "flow/consumer_read.h"
