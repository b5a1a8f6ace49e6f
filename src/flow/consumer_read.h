// What the flow queue consumer (ConsumerImpl, declared in consumer_impl.h) takes from the
// producer: the one read in flight (tail counter, slots, or a batch's probe) and its completion,
// whether a probe is worth its round trip, range-checked tail values and receive completions.
// Included at the end of consumer_impl.h, not on its own.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace fabflow::flow::detail {

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
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
bool ConsumerImpl<D, T, S, Tr>::probe_worth(std::uint64_t n) noexcept {
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
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
void ConsumerImpl<D, T, S, Tr>::measure_sum() {
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
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
Status ConsumerImpl<D, T, S, Tr>::probe(std::uint64_t index) noexcept {
  probe_index_ = index;
  const std::size_t off = L_.slot(index);
  return start_read(Read::probe, base_ + off, 8, off);
}

template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
void ConsumerImpl<D, T, S, Tr>::take_probe() noexcept {
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
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
void ConsumerImpl<D, T, S, Tr>::take_slots_read() noexcept {
  ahead_ = load_acquire(B::slot(read_last_)) == read_last_ + 1;
}

// Range-checks a tail value: the producer can never be more than capacity ahead of the
// head it can know of (seen_: what the pump has published or sent).
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
bool ConsumerImpl<D, T, S, Tr>::take_tail(std::uint64_t v) noexcept {
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
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
Status ConsumerImpl<D, T, S, Tr>::start_read(Read what, std::byte* dst, std::size_t len,
                                             std::size_t remote_off) noexcept {
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
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
Status ConsumerImpl<D, T, S, Tr>::reap_read() noexcept {
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
    if ((++read_polls_ & 63u) == 0 && SteadyClock::now() - read_posted_ > s_.options.peer_timeout) {
      fail("flow: a read from the producer did not complete within " +
           std::to_string(s_.options.peer_timeout.count()) + " ms");
      return Status::failed;
    }
    return Status::empty;
  }
  const Read what = pending_;
  pending_ = Read::none;
  read_done_ = false;
  if (what == Read::tail && !take_tail(load_acquire(B::cell(kLandingCell)))) return Status::failed;
  if (what == Read::probe) take_probe();
  if (what == Read::slots) take_slots_read();
  return Status::ok;
}

// Reaps receive completions: push2 data receives (counted as items for event), writes with
// immediate data (their value is an item count) and the receives imm may consume.
template <DataFlow D, TransferNotify T, SpaceNotify S, class Tr>
bool ConsumerImpl<D, T, S, Tr>::drain_rx() noexcept {
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

}  // namespace fabflow::flow::detail
