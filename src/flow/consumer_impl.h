// The consumer end of a flow queue, one instantiation per design point and transport type.
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

  // Pump: slot `index` was consumed. push2: re-post its receive; space pull: publish the
  // head for the producer's reads. False when the transport did not take the receive (the
  // caller retries; passive ends retry here, bounded by peer_timeout).
  [[gnu::always_inline]] bool retire(std::uint64_t index) noexcept {
    if constexpr (D == DataFlow::push2) {
      auto post = [&] {
        return t_.post_recv(s_.peer, base_ + L_.slot(index), L_.stride, desc_,
                            kCtxRecv + L_.ring_pos(index));
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
      // Space pull ends with two markers (see peek_generic): validate up to the second.
      if (pump_flags_ & kFlagClose) close_seen_ = S != SpaceNotify::pull || ++markers_seen_ == 2;
      ready_pub_.store(++next_, std::memory_order_release);
    }
    if (failed()) return false;
    if (next_ == before_next)
      B::progress_idle();
    else
      B::progress_notify_sometimes();
    // Idle and behind: tell the producer now rather than wait for notify_every_ more items.
    notify_head(next_ == before_next && seen_ != head_sent_ ? HeadNotice::now
                                                            : HeadNotice::when_due);
    return next_ != before_next || seen_ != before_seen;
  }

  // Space notification of the pump's head: push / push2 every notify_every_ items, or now.
  [[gnu::always_inline]] void notify_head(HeadNotice when) noexcept {
    if constexpr (S == SpaceNotify::pull) {
      return;
    } else {
      if (when == HeadNotice::when_due && seen_ - head_sent_ < notify_every_) return;
      if (seen_ == head_sent_) return;
      // one_notification_in_flight: not while one is in flight (a later call sends the head
      // as it is then); the last one waits for it.
      if (head_pending_ && !reap_head()) return;
      if (head_pending_ && (when != HeadNotice::last || !wait_head())) return;
      head_value_ = seen_;
      const std::uint64_t ctx = one_head_ ? kCtxNotify : kCtxData;
      const unsigned flags = one_head_ ? kInject | kSignal : kInject;
      Status st;
      if constexpr (S == SpaceNotify::push) {
        st = n_.post_write(s_.peer, &head_value_, 8, nullptr, s_.nremote, L_.cell(kPeerCell), ctx,
                           flags);
      } else {
        st = n_.post_send(s_.peer, &head_value_, 8, nullptr, ctx, flags);
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
      head_pending_ = one_head_;
      space_ops_.inc();
    }
  }

  // A send completion of this end (reads, tracked head notifications): whose it is.
  [[gnu::always_inline]] void take_tx(const Completion& c) noexcept {
    if (c.context == kCtxRead) read_done_ = true;
    if (c.context == kCtxNotify) head_pending_ = false;
  }

  // Reaps the notify transport's send completions (the head notification's, and a tail read's
  // that comes with it, kept for reap_read). False on a transport error.
  bool reap_head() noexcept {
    auto& c = B::polled_;
    for (;;) {
      int n = n_.poll_tx(c);
      if (n < 0) return B::fail_notify();
      for (int i = 0; i < n; ++i) take_tx(c[i]);
      if (n < static_cast<int>(kPollBatch)) return true;
    }
  }

  // Waits, driving progress, until the head notification in flight completed: false (the queue
  // failed) on a transport error or after peer_timeout.
  [[gnu::noinline]] bool wait_head() noexcept {
    const auto since = SteadyClock::now();
    while (head_pending_) {
      if (!reap_head()) return false;
      if (!head_pending_) break;
      t_.progress();
      B::progress_notify();
      if (SteadyClock::now() - since > s_.options.peer_timeout) {
        fail("flow: a space notification did not complete within " +
             std::to_string(s_.options.peer_timeout.count()) + " ms");
        return false;
      }
    }
    return true;
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
        const std::uint64_t wrap = L_.capacity - L_.ring_pos(next_);
        const std::uint64_t room = L_.capacity - (next_ - seen_);
        n = std::max<std::uint64_t>(1, std::min({n, wrap, room}));
        if (probe_worth(n)) {  // empty while the probe is in flight; done: post the batch now
          if (Status ps = probe(next_ + n - 1); ps != Status::ok) return ps;
        }
        const std::size_t off = L_.slot(next_);
        read_trust_ = std::clamp(published_, next_, next_ + n);
        read_last_ = next_ + n - 1;
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
        if (st == SlotState::absent && L_.compact)
          __builtin_prefetch(B::slot(next_) + L_.stride - 2 * kCellBytes);
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
  // in a row is a producer whose sums are wrong. False: the queue failed. Push1 data: each
  // check looks at the same memory while the provider's copy may still be placing the slot, so
  // the bound is the time the slot stays torn (peer_timeout), not a count of checks.
  bool note_torn() noexcept {
    if constexpr (D == DataFlow::push1) {
      const auto now = std::chrono::steady_clock::now();
      if (torn_++ == 0) torn_since_ = now;
      if (now - torn_since_ <= s_.options.peer_timeout) return true;
      fail("flow: slot " + std::to_string(next_) + " failed its payload sum for " +
           std::to_string(s_.options.peer_timeout.count()) +
           " ms in a row (protocol violation by the producer)");
      return false;
    }
    if (++torn_ <= kMaxTorn) return true;
    fail("flow: slot " + std::to_string(next_) + " failed its payload sum " +
         std::to_string(torn_) + " times in a row (protocol violation by the producer)");
    return false;
  }

  [[gnu::always_inline]] SlotState local_state() noexcept {
    if (L_.compact)
      return check_compact(B::slot(next_), L_.word_at(), next_, L_.item_bytes, &pump_len_,
                           &pump_flags_);
    return check_slot(B::slot(next_), next_, L_.item_bytes, &pump_len_, &pump_flags_, L_.sum,
                      next_ >= trusted_end_);
  }

  // Trusted reads (pull data, watermark transfer). A read that starts after the producer
  // published a slot cannot catch it mid-write: the producer stores the header last, so a read
  // that saw the header saw a slot whose writes were all done, and any later read gets them.
  // Before a large batch the consumer reads the batch's last header alone (the probe; the
  // producer publishes in order, so that header covers the whole batch): slots below
  // published_ were seen published so, and a slot read posted after that is checked without
  // recomputing its sum. One small read instead of a sum over every slot, and no copy of slots
  // not yet written (a speculative batch read copies the whole batch, published or not).
  // Worth it where the sums the probe saves take longer than the probe (both measured here:
  // the sum at setup, the probe's round trip as it goes; where they come within 8x, every
  // kProbeRetry-th batch probes anyway, so the estimate follows the fabric) and the producer
  // was ahead at the last read (its last slot valid); otherwise the batch is read
  // speculatively, with its sums.
  bool probe_worth(std::uint64_t n) noexcept {
    if constexpr (T != TransferNotify::watermark) {
      return false;
    } else {
      if (!L_.sum || !ahead_ || n < 2 || published_ >= next_ + n ||
          n * L_.item_bytes < kProbeMinBytes)
        return false;
      const double saved = sum_ns_per_byte_ * static_cast<double>(n * L_.item_bytes);
      if (saved > probe_ns_) return true;
      return saved * 8 > probe_ns_ && ++batches_unprobed_ >= kProbeRetry;
    }
  }

  // The sum's cost per byte on this CPU: the best of three sums over 64 KiB of scratch memory.
  void measure_sum() {
    constexpr std::uint32_t len = 64 << 10;
    const std::vector<std::byte> scratch(len);
    std::int64_t best = INT64_MAX;
    for (std::uint64_t i = 0; i < 3; ++i) {
      const auto t0 = SteadyClock::now();
      sum_sink_ ^= payload_sum(i, len, scratch.data());
      best = std::min<std::int64_t>(best, (SteadyClock::now() - t0).count());
    }
    sum_ns_per_byte_ =
        static_cast<double>(std::chrono::nanoseconds(SteadyClock::duration(best)).count()) /
        static_cast<double>(len);
  }

  // Reads the header of slot `index` into its place in the local ring: the batch read that
  // follows overwrites it, and until then nothing checks that slot (index > next_; a header
  // alone, without its trailer, is never taken for a valid slot).
  Status probe(std::uint64_t index) noexcept {
    probe_index_ = index;
    const std::size_t off = L_.slot(index);
    return start_read(Read::probe, base_ + off, 8, off);
  }

  void take_probe() noexcept {
    const double ns =
        static_cast<double>(std::chrono::nanoseconds(SteadyClock::now() - read_posted_).count());
    probe_ns_ = probe_ns_ == 0 ? ns : 0.75 * probe_ns_ + 0.25 * ns;
    batches_unprobed_ = 0;
    if (load_acquire(B::slot(probe_index_)) == probe_index_ + 1)
      published_ = std::max(published_, probe_index_ + 1);
    else
      ahead_ = false;  // not yet: read the batch now, with its sums
  }

  // Whether the producer was ahead: the batch's last slot came whole. Only probes raise
  // published_: a slot whose sum failed is read again with its sum (a producer writing wrong
  // sums still fails, FlowMisbehaving.PayloadSumNeverMatches), unless a probe since saw it
  // published.
  void take_slots_read() noexcept { ahead_ = load_acquire(B::slot(read_last_)) == read_last_ + 1; }

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
    // Before the post: a provider may do the whole read inside it (shm's cross-memory
    // attach), and a probe's round trip (take_probe) must count that.
    const SteadyClock::time_point posted = SteadyClock::now();
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
    if (what == Read::slots) trusted_end_ = read_trust_;  // the ring now holds this read's slots
    read_posted_ = posted;
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
    auto& c = B::polled_;
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
      for (int i = 0; i < n; ++i) take_tx(c[i]);
      if (n < static_cast<int>(kPollBatch)) break;
    }
    // The read's completion, taken here or by reap_head before.
    if (!read_done_) {
      if ((++read_polls_ & 63u) == 0 &&
          SteadyClock::now() - read_posted_ > s_.options.peer_timeout) {
        fail("flow: a read from the producer did not complete within " +
             std::to_string(s_.options.peer_timeout.count()) + " ms");
        return Status::failed;
      }
      return Status::empty;
    }
    const Read what = pending_;
    pending_ = Read::none;
    read_done_ = false;
    if (what == Read::tail && !take_tail(load_acquire(B::cell(kLandingCell))))
      return Status::failed;
    if (what == Read::probe) take_probe();
    if (what == Read::slots) take_slots_read();
    return Status::ok;
  }

  // Reaps receive completions: push2 data receives (counted as items for event), writes with
  // immediate data (their value is an item count) and the receives imm may consume.
  bool drain_rx() noexcept {
    auto& c = B::polled_;
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
