// The flow queue consumer's pump (ConsumerImpl, declared in consumer_impl.h): taking in the
// owner's releases (retire), making the slot at next_ valid (advance, torn slots) and telling the
// producer about freed space (notify_head and its completions). Included at the end of
// consumer_impl.h, not on its own.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>

namespace fabflow::flow::detail {

// Pump: slot `index` was consumed. push2: re-post its receive; space pull: publish the
// head for the producer's reads. False when the transport did not take the receive (the
// caller retries; passive ends retry here, bounded by peer_timeout).
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
bool ConsumerImpl<D, T, S, Tr>::retire(std::uint64_t index) noexcept {
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
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
bool ConsumerImpl<D, T, S, Tr>::try_pump(bool* moved, bool* outstanding) noexcept {
  return B::try_round([&] {
    *moved = pump();
    *outstanding = pending_ != Read::none || head_pub_.load(std::memory_order_acquire) != seen_ ||
                   (S != SpaceNotify::pull && seen_ != head_sent_);
  });
}

// Active: takes in the owner's releases, validates slots ahead (at most a ring beyond the
// owner's head, never past an end-of-stream slot) and notifies space: every notify_every_
// items, or at once when no new slot arrived this round (the producer may be waiting).
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
bool ConsumerImpl<D, T, S, Tr>::pump() noexcept {
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
  notify_head(next_ == before_next && seen_ != head_sent_ ? HeadNotice::now : HeadNotice::when_due);
  return next_ != before_next || seen_ != before_seen;
}

// Space notification of the pump's head: push / push2 every notify_every_ items, or now.
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
void ConsumerImpl<D, T, S, Tr>::notify_head(HeadNotice when) noexcept {
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

// Reaps the notify transport's send completions (the head notification's, and a tail read's
// that comes with it, kept for reap_read). False on a transport error.
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
bool ConsumerImpl<D, T, S, Tr>::reap_head() noexcept {
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
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
bool ConsumerImpl<D, T, S, Tr>::wait_head() noexcept {
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
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
Status ConsumerImpl<D, T, S, Tr>::advance() noexcept {
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
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
bool ConsumerImpl<D, T, S, Tr>::note_torn() noexcept {
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
  fail("flow: slot " + std::to_string(next_) + " failed its payload sum " + std::to_string(torn_) +
       " times in a row (protocol violation by the producer)");
  return false;
}

}  // namespace fabflow::flow::detail
