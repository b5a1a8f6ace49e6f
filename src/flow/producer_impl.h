// The producer end of a flow queue, one instantiation per design point and transport type.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "common/cldemote.h"
#include "flow/end_base.h"

namespace fabflow::flow::detail {

// Whether a producer's pump round refreshes the consumer's head only when the cached free space
// fell below the lazy threshold, or now (the caller is out of room).
enum class HeadRefresh { lazy, now };

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
    one_tail_ = s_.options.one_notification_in_flight;
    // Direct stores: where the transport maps its peers (local), a compact-slot producer that moves
    // each item itself (no data mover, no batching, no write with immediate data) builds items in
    // the consumer's ring, where its write would have copied them; the word's release store
    // publishes them. Setup decided it (stores_directly) and told the consumer: the slots carry
    // their word first.
    if constexpr (always_maps_peers<Tr> && D == DataFlow::push1 && T != TransferNotify::imm) {
      if (L_.word_first) {
        peer_ring_ = t.map_peer(s_.peer, s_.remote, 0, L_.ring_bytes);
        if (!peer_ring_) throw PeerError(s_.peer, "flow: " + t.last_error());
        demote_ = t.caps().stores_demoted;
        // ... and with watermark transfer and space pull it reads the consumer's head cell
        // with a load where it would have posted a read of it (pump_direct).
        if constexpr (T == TransferNotify::watermark && S == SpaceNotify::pull) {
          peer_head_ = n.map_peer(s_.peer, s_.nremote, L_.cell(kOwnCell), 8);
          if (!peer_head_) throw PeerError(s_.peer, "flow: " + n.last_error());
        }
      }
    }
    if (L_.word_first && !peer_ring_)  // setup and this instantiation disagree: a bug
      throw Error("flow: word-first slots without direct stores");
    // The data mover's whole job is moving batches: it keeps several coalesced writes in
    // flight so the fabric never idles between one write's completion and the next post.
    if (active_) max_inflight_ = kMoverWrites;
    if (active_)
      B::start_helper([this](bool* moved, bool* outstanding) {
        return try_pump(HeadRefresh::lazy, moved, outstanding);
      });
  }
  ~ProducerImpl() override {
    B::stop_helper();
    // A head read or batched write still in flight would land in (or read from) the region
    // freed next: reap them first, bounded by peer_timeout (and a tracked tail write, whose
    // completion a later queue on this transport would otherwise take for its own). A peer
    // the bootstrap reports dead or stopped will not answer them: the wait ends then.
    BoundedWait wait(s_.options.peer_timeout, &s_.boot, {&t_}, 1);
    while ((read_pending_ || inflight_ > 0 || tail_pending_) && !failed() &&
           wait.spin() == BoundedWait::State::waiting) {
      B::progress_notify();
      reap_tx();
    }
  }

  Status try_enqueue(std::span<const std::byte> item) noexcept override {
    std::span<std::byte> dst;
    Status st = reserve(item.size(), &dst);
    if (st != Status::ok) return st;
    const std::size_t n = item.size();
    if (L_.word_first && n > kCompactHead) {
      // The payload's head shares the word's line: store it last, just before the word, so
      // that line is written once, in one go, not again after the rest.
      std::memcpy(dst.data() + kCompactHead, item.data() + kCompactHead, n - kCompactHead);
      std::memcpy(dst.data(), item.data(), kCompactHead);
    } else if (n) {
      std::memcpy(dst.data(), item.data(), n);
    }
    return commit();
  }

  Status enqueue(std::span<const std::byte> item,
                 std::chrono::milliseconds timeout) noexcept override {
    return blocking(timeout, [&] { return try_enqueue(item); });
  }

  Status reserve(std::size_t len, std::span<std::byte>* out) noexcept override {
    if (failed()) return Status::failed;
    if (closed_ || closing_) return Status::closed;
    if (len > L_.item_bytes) [[unlikely]]
      return too_big(len);
    if (B::check_peer_sometimes() != Status::ok) return Status::failed;
    if (!room()) [[unlikely]] {
      if (Status st = make_room(); st != Status::ok) return st;
    }
    reserved_len_ = static_cast<std::uint32_t>(len);
    reserved_n_ = 1;
    *out = std::span<std::byte>(staging(staged_) + L_.payload_at(len), len);
    return Status::ok;
  }

  Status commit() noexcept override {
    if (reserved_n_ == 0) [[unlikely]]
      return B::fail_with("flow: commit() without reserve()");
    return commit_reserved(1);
  }

  Status reserve_many(std::size_t len, std::span<std::span<std::byte>> slots,
                      std::size_t* granted) noexcept override {
    *granted = 0;
    if (slots.empty()) [[unlikely]]
      return B::fail_with("flow: reserve_many() with no room for a slot");
    std::span<std::byte> first;
    if (Status st = reserve(len, &first); st != Status::ok) return st;
    // Every free slot up to slots.size(), as the head was last known (reserve made room for
    // one; no further refresh: the batch takes what is free now).
    const std::uint64_t free_slots = L_.capacity - (staged_ - head_view());
    const std::size_t n =
        static_cast<std::size_t>(std::min<std::uint64_t>(slots.size(), free_slots));
    slots[0] = first;
    // Locals: a store into `slots` could alias the members as far as the compiler knows.
    std::byte* const ring = (peer_ring_ ? peer_ring_ : base_) + L_.payload_at(len);
    const std::size_t stride = L_.stride, mask = L_.mask, capacity = L_.capacity;
    for (std::uint64_t i = 1, index = staged_ + 1; i < n; ++i, ++index)
      slots[i] =
          std::span<std::byte>(ring + (mask ? index & mask : index % capacity) * stride, len);
    reserved_n_ = n;
    *granted = n;
    return Status::ok;
  }

  Status commit_many(std::size_t n) noexcept override {
    if (n > reserved_n_) [[unlikely]]
      return B::fail_with("flow: commit_many() of more slots than reserve_many() granted");
    if (n == 0) {
      reserved_n_ = 0;
      return failed() ? Status::failed : Status::ok;
    }
    return commit_reserved(n);
  }

  Status flush(std::chrono::milliseconds timeout) noexcept override {
    if (failed()) return Status::failed;
    // Flushing needs nothing from the consumer: no early head refresh.
    return wait_until(timeout, HeadRefresh::lazy,
                      [&] { return done_pub_.load(std::memory_order_acquire) >= staged_; });
  }

  Status close(std::chrono::milliseconds timeout) noexcept override {
    if (failed()) return Status::failed;
    if (closed_) return Status::closed;
    if (!closing_) {
      reserved_n_ = 0;  // the end of stream takes the next slot: a reservation lapses
      Status st = wait_until(timeout, HeadRefresh::now, [&] { return room(); });
      if (st != Status::ok) return st;
      mark_visible(staged_ + 1);
      publish(nullptr, 0, kFlagClose);
      stage_done();
      closing_ = true;
      closing_pub_.store(true, std::memory_order_release);
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    Status st = wait_until(timeout, HeadRefresh::now, [&] { return head_view() >= staged_; });
    if (st != Status::ok) return st;
    if constexpr (S == SpaceNotify::pull) {
      // The consumer cannot tell when this end has read its head (a one-sided read), so it
      // waits for a second marker that says so, and may stop as soon as it has it.
      if (!second_marker_) {
        // No more head reads, and the one in flight answered first: the consumer may drop
        // its ring as soon as it has the second marker.
        second_marker_pub_.store(true, std::memory_order_release);
        st = wait_until(left_of(deadline), HeadRefresh::lazy,
                        [&] { return !head_read_pub_.load(std::memory_order_acquire); });
        if (st != Status::ok) return st;
        second_marker_ = true;
        mark_visible(staged_ + 1);
        publish(nullptr, 0, kFlagClose);
        stage_done();
      }
      st = wait_until(left_of(deadline), HeadRefresh::lazy,
                      [&] { return done_pub_.load(std::memory_order_acquire) >= staged_; });
      if (st != Status::ok) return st;
    }
    closed_ = true;
    return Status::ok;
  }

  const QueueStats& stats() const noexcept override { return B::snapshot(stats_); }
  const std::string& error() const noexcept override { return B::error_; }

 private:
  static std::chrono::milliseconds left_of(std::chrono::steady_clock::time_point deadline) {
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now()),
                    std::chrono::milliseconds(0));
  }
  // Publishes the first n reserved slots (n >= 1), then one pump round for all of them.
  // The loop keeps what it needs in locals: each slot's release store would otherwise make the
  // compiler load the members again for the next slot.
  [[gnu::always_inline]] Status commit_reserved(std::size_t n) noexcept {
    reserved_n_ = 0;
    const std::uint32_t len = reserved_len_;
    const std::size_t at = L_.payload_at(len), word_at = L_.word_at();
    const std::uint64_t end = staged_ + n;
    mark_visible(end);
    std::byte* const ring = peer_ring_ ? peer_ring_ : base_;
    const std::size_t stride = L_.stride, mask = L_.mask, capacity = L_.capacity;
    const bool compact = L_.compact;
    for (std::uint64_t index = staged_; index < end; ++index) {
      std::byte* sl = ring + (mask ? index & mask : index % capacity) * stride;
      if (compact) {
        write_compact(sl, word_at, at, index, sl + at, len, 0);  // the payload is in place
        demote_slot(sl, len);
      } else
        write_slot(sl, index, sl + at, len, 0, L_.sum);
    }
    staged_ = end;
    if (active_) staged_pub_.store(end, std::memory_order_release);
    stats_.items += n;
    if (direct_pump())
      pump_direct(HeadRefresh::lazy);
    else if (!active_)
      pump(HeadRefresh::lazy);
    return failed() ? Status::failed : Status::ok;
  }
  [[gnu::always_inline]] std::uint64_t head_view() const noexcept {
    return active_ ? head_pub_.load(std::memory_order_acquire) : head_known_;
  }
  [[gnu::always_inline]] bool room() const noexcept { return staged_ - head_view() < L_.capacity; }
  // Out of room: try to make some now. Active: the owner helps the data mover (one pump round
  // when the mover is not in one), so a mover that the scheduler keeps off the core, which it
  // usually shares with this thread, does not stall the stream; if the mover is busy, give it
  // the core before saying full.
  [[gnu::noinline]] Status make_room() noexcept {
    help(HeadRefresh::now);
    if (failed()) return Status::failed;
    if (room()) return Status::ok;
    stats_.full++;
    return Status::full;
  }
  [[gnu::cold, gnu::noinline]] Status too_big(std::size_t len) noexcept {
    return fail("flow: item of " + std::to_string(len) + " bytes exceeds item_bytes " +
                std::to_string(L_.item_bytes));
  }
  // Whether pump rounds are pump_direct's (known at construction; a compile-time false for
  // the design points it does not serve).
  [[gnu::always_inline]] bool direct_pump() const noexcept {
    if constexpr (T == TransferNotify::watermark && S == SpaceNotify::pull)
      return peer_head_ != nullptr;
    else
      return false;
  }
  // Direct stores where the transport demotes them (Capabilities::stores_demoted): the
  // compact slot's lines, its word and its payload (word first), go to the shared cache, where
  // the consumer's misses on them are served.
  [[gnu::always_inline]] void demote_slot(const std::byte* sl, std::uint32_t len) const noexcept {
    if (demote_ && len <= kDemoteMax) demote_lines(sl, kCompactWord + round8(len));
  }
  // Where item `index` is built: this end's ring, or with direct stores the consumer's.
  [[gnu::always_inline]] std::byte* staging(std::uint64_t index) const noexcept {
    return peer_ring_ ? peer_ring_ + L_.slot(index) : B::slot(index);
  }
  // Writes the staged slot's sequence number, length and flags around its payload (at `data`,
  // or copied there): the slot is then complete in this end's ring.
  [[gnu::always_inline]] void publish(const std::byte* data, std::uint32_t len,
                                      std::uint32_t flags) noexcept {
    std::byte* sl = staging(staged_);
    if (L_.compact) {
      write_compact(sl, L_.word_at(), L_.payload_at(len), staged_, data, len, flags);
      demote_slot(sl, len);
    } else
      write_slot(sl, staged_, data, len, flags, L_.sum);
  }
  [[gnu::always_inline]] void stage_done() noexcept {
    ++staged_;
    if (active_) staged_pub_.store(staged_, std::memory_order_release);
  }
  // Pull data: the consumer reads the ring itself, so it may take a slot in (and count it in
  // its head) from the moment the slot's header is written, before stage_done publishes it.
  // Active producers publish that bound first, for the mover's range check of the head:
  // write_slot's release store of the header orders this store before it, so whoever saw the
  // header (and then the consumer's head) finds the bound here.
  // `through`: the slots up to there are about to be written (a batch publishes its end once).
  [[gnu::always_inline]] void mark_visible(std::uint64_t through) noexcept {
    if constexpr (D == DataFlow::pull) {
      if (active_) visible_pub_.store(through, std::memory_order_release);
    }
  }
  // The most slots the consumer can have seen (read by the pump): pull data, every slot
  // written or being written; direct stores, every slot staged; otherwise what was sent.
  [[gnu::always_inline]] std::uint64_t visible() const noexcept {
    if constexpr (D == DataFlow::pull)
      return active_ ? visible_pub_.load(std::memory_order_acquire) : staged_;
    else  // direct stores: an item is visible from its word's store on (owner thread only)
      return peer_ring_ ? staged_ : sent_;
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

  // HeadRefresh::now: the wait is for space, so refresh the consumer's head even above the lazy
  // threshold.
  template <class Pred>
  Status wait_until(std::chrono::milliseconds timeout, HeadRefresh need, Pred&& done) noexcept {
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
  void help(HeadRefresh need) noexcept {
    bool moved, outstanding;
    if (!active_)
      pump(need);
    else if (!try_pump(need, &moved, &outstanding))
      std::this_thread::yield();
  }

  // Active producer: one pump round unless the other thread (mover or owner) is in one.
  // *moved: what pump() returned; *outstanding: work is pending (in-flight writes or reads,
  // staged items not yet sent, a close), read under the same exclusion.
  bool try_pump(HeadRefresh need, bool* moved, bool* outstanding) noexcept {
    return B::try_round([&] {
      *moved = pump(need);
      *outstanding = inflight_ > 0 || read_pending_ ||
                     staged_pub_.load(std::memory_order_acquire) != sent_ ||
                     closing_pub_.load(std::memory_order_acquire) ||
                     (T == TransferNotify::push && (tail_pending_ || notified_ != sent_));
    });
  }

  // One round of the data path: reap completions, take in space notifications, move staged
  // slots, notify the consumer, refresh the consumer's head when space runs low (or `need`,
  // says the caller is out of room). Returns whether anything moved.
  bool pump(HeadRefresh need) noexcept {
    if (direct_pump()) return pump_direct(need);
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
      if (peer_ring_) {
        data_ops_.inc(staged - sent_);  // each item's stores were its write
        sent_ = staged;
      } else if (!move_data(staged)) {
        return false;
      }
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
        const bool answered = second_marker_pub_.load(std::memory_order_acquire);
        if (!answered && (need == HeadRefresh::now || free_slots == 0 || early ||
                          (closing && head_known_ < staged))) {
          refreshed_at_ = staged;
          if (!post_head_read()) return false;
        }
      }
    }
    if (inflight_ == 0 && (T != TransferNotify::push || notified_ == sent_))
      done_pub_.store(sent_, std::memory_order_release);
    if constexpr (S == SpaceNotify::pull)
      head_read_pub_.store(read_pending_, std::memory_order_release);
    if (active_) head_pub_.store(head_known_, std::memory_order_release);
    return sent_ != before_sent || head_known_ != before_head;
  }

  // The pump of direct stores with watermark transfer and space pull (local; owner thread
  // only): every staged item is already in the consumer's ring, the consumer polls it, and the
  // head refresh is a load of the consumer's head cell, taken in under the same lazy rule and
  // range check as a read's result. Nothing completes, so the transport is polled only every
  // 256 rounds, for its check that the peer is alive.
  [[gnu::always_inline]] bool pump_direct(HeadRefresh need) noexcept {
    if (failed()) return false;
    if ((++direct_rounds_ & 255u) == 0 && !reap_tx()) return false;
    bool moved = sent_ != staged_;
    data_ops_.inc(staged_ - sent_);  // each item's stores were its write
    sent_ = staged_;
    const std::uint64_t free_slots = L_.capacity - (staged_ - head_known_);
    const bool early = free_slots < refresh_below_ && staged_ - refreshed_at_ >= refresh_gap_;
    if ((need == HeadRefresh::now || free_slots == 0 || early ||
         (closing_ && head_known_ < staged_)) &&
        !second_marker_) [[unlikely]] {
      const std::uint64_t before = head_known_;
      refreshed_at_ = staged_;
      space_ops_.inc();
      if (!take_head(load_acquire(peer_head_))) return false;
      moved = moved || head_known_ != before;
    }
    done_pub_.store(sent_, std::memory_order_release);
    return moved;
  }

  bool move_data(std::uint64_t staged) noexcept {
    while (sent_ < staged) {
      if (s_.options.batching) {
        if (inflight_ >= max_inflight_) return true;
        const std::uint64_t wrap = L_.capacity - L_.ring_pos(sent_);
        std::uint64_t n = std::min<std::uint64_t>(staged - sent_, wrap);
        // Compact slots polled by the consumer (watermark): a write publishes only the slot
        // whose word is its last 8 bytes (memcpy stores the rest in no set order), so each
        // slot goes in a write of its own.
        if (L_.compact && T == TransferNotify::watermark) n = 1;
        const std::size_t begin = L_.wire_begin(slot_len(sent_));
        const std::size_t bytes =
            (n - 1) * L_.stride + L_.wire_end(slot_len(sent_ + n - 1)) - begin;
        // Every write costs the provider a fixed overhead (about 40 us on tcp here), so a write
        // joins one already in flight only when it is big enough to be worth it; small items
        // keep coalescing meanwhile.
        if (inflight_ > 0 && bytes < kMoverPipelineBytes) return true;
        Status st = post_data(sent_, begin, bytes, kSignal, n);
        if (st == Status::again) return true;
        if (st != Status::ok) return fail_transport();
        ++inflight_;
        sent_ += n;
      } else {
        const std::uint32_t len = slot_len(sent_);
        const std::size_t begin = L_.wire_begin(len);
        const std::size_t bytes = L_.wire_end(len) - begin;
        unsigned flags = 0;
        if (++ops_ == s_.options.signal_every) {  // a completion every signal_every writes
          ops_ = 0;
          flags = kSignal;
        }
        if (s_.options.inline_small && bytes <= t_.caps().inject_size) flags |= kInject;
        Status st = post_data(sent_, begin, bytes, flags, 1);
        if (st == Status::again) {
          ops_ = flags ? s_.options.signal_every - 1 : ops_ - 1;
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

  // Writes (or sends) `bytes` from `begin` within slot `index` onwards: one slot, or n in a row.
  Status post_data(std::uint64_t index, std::size_t begin, std::size_t bytes, unsigned flags,
                   std::uint64_t n) noexcept {
    const std::size_t off = L_.slot(index) + begin;
    if constexpr (D == DataFlow::push2) {
      return t_.post_send(s_.peer, base_ + off, bytes, desc_, kCtxData, flags);
    } else if constexpr (T == TransferNotify::imm) {
      return t_.post_write(s_.peer, base_ + off, bytes, desc_, s_.remote, off, kCtxData, flags, n);
    } else {
      return t_.post_write(s_.peer, base_ + off, bytes, desc_, s_.remote, off, kCtxData, flags);
    }
  }

  // The length of staged item `index` (this end wrote it).
  std::uint32_t slot_len(std::uint64_t index) const noexcept {
    std::uint64_t m;
    if (L_.compact) {
      std::memcpy(&m, B::slot(index) + L_.word_at(), 8);
      return static_cast<std::uint32_t>((m >> 32) & 0x7fff'ffffu);
    }
    std::memcpy(&m, B::slot(index) + 8, 8);
    return static_cast<std::uint32_t>(m);
  }

  // Pushes the tail (sent_) into the consumer's cell. one_notification_in_flight: only when no
  // earlier push is in flight, as a signalled write (reap_tx takes its completion in); until
  // then the tail is deferred, and the round after that completion pushes the latest one. The
  // value is injected either way (copied at post time: tail_value_ may change at once).
  bool notify_tail() noexcept {
    if (tail_pending_) return true;
    tail_value_ = sent_;
    Status st =
        n_.post_write(s_.peer, &tail_value_, 8, nullptr, s_.nremote, L_.cell(kPeerCell),
                      one_tail_ ? kCtxNotify : kCtxData, one_tail_ ? kInject | kSignal : kInject);
    if (st == Status::again) return true;
    if (st != Status::ok) return B::fail_notify();
    notified_ = sent_;
    tail_pending_ = one_tail_;
    transfer_ops_.inc();
    return true;
  }

  bool post_head_read() noexcept {
    Status st = n_.post_read(s_.peer, B::cell(kLandingCell), 8, B::ndesc_, s_.nremote,
                             L_.cell(kOwnCell), kCtxRead, kSignal);
    if (st == Status::again) return true;  // the transport is busy: the next round retries
    if (st != Status::ok) return B::fail_notify();
    read_pending_ = true;
    read_posted_ = SteadyClock::now();
    read_polls_ = 0;
    space_ops_.inc();
    return reap_tx();  // providers that complete at once (local) need no second round
  }

  // A head read that stays unanswered beyond peer_timeout fails the queue (clock read every
  // 64 rounds).
  bool read_in_time() noexcept {
    if ((++read_polls_ & 63u) != 0) return true;
    if (SteadyClock::now() - read_posted_ <= s_.options.peer_timeout) return true;
    fail("flow: the consumer's head counter could not be read within " +
         std::to_string(s_.options.peer_timeout.count()) + " ms");
    return false;
  }

  // Range-checks a head value the consumer wrote or sent: it can never pass what it could
  // see (what was sent; pull data: what was written into the ring).
  [[gnu::always_inline]] bool take_head(std::uint64_t v) noexcept {
    if (v <= head_known_) return true;
    if (const std::uint64_t limit = visible(); v > limit) [[unlikely]]
      return head_beyond(v, limit);
    head_known_ = v;
    return true;
  }
  [[gnu::cold, gnu::noinline]] bool head_beyond(std::uint64_t v, std::uint64_t limit) noexcept {
    fail("flow: the consumer's head counter " + std::to_string(v) + " is beyond the " +
         std::to_string(limit) + " items " + (D == DataFlow::pull ? "written" : "sent") +
         " (protocol violation)");
    return false;
  }

  // Data completions come from t_, the head read's from n_ (the same CQ unless separate).
  bool reap_tx() noexcept {
    if (!reap_tx_of(t_)) return false;
    return !B::separate_ || reap_tx_of(n_);
  }

  bool reap_tx_of(Tr& tr) noexcept {
    auto& c = B::polled_;
    for (;;) {
      int n = tr.poll_tx(c);
      if (n < 0) return &tr == &t_ ? fail_transport() : B::fail_notify();
      for (int i = 0; i < n; ++i) {
        if (c[i].context == kCtxData && inflight_ > 0) --inflight_;
        if (c[i].context == kCtxNotify) tail_pending_ = false;
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
    auto& c = B::polled_;
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
  std::byte* peer_ring_ = nullptr;        // direct stores: the consumer's ring, mapped here
  const std::byte* peer_head_ = nullptr;  // ... and its head cell (watermark, space pull)
  bool demote_ = false;                   // ... and demotes what it stores there
  unsigned direct_rounds_ = 0;
  // Owner thread.
  std::uint64_t staged_ = 0;
  std::size_t reserved_n_ = 0;  // slots reserved and not yet committed (reserve: 1)
  std::uint32_t reserved_len_ = 0;
  bool closing_ = false;
  bool closed_ = false;
  bool second_marker_ = false;  // space pull: close() staged its second end-of-stream marker
  QueueStats stats_;
  // Pump (owner thread, or the mover thread when active).
  std::uint64_t sent_ = 0;
  std::uint64_t head_known_ = 0;
  std::uint64_t notified_ = 0;
  std::uint64_t ops_ = 0;
  std::uint64_t tail_value_ = 0;
  unsigned inflight_ = 0;      // batched writes awaiting their completion
  bool one_tail_ = false;      // one_notification_in_flight
  bool tail_pending_ = false;  // ... and a tail write is in flight
  unsigned max_inflight_ = 1;  // batching: 1 (the thesis' batching queue); data mover: more
  bool read_pending_ = false;  // a head read is in flight (space pull)
  unsigned read_polls_ = 0;
  SteadyClock::time_point read_posted_{};
  // Between the two.
  std::atomic<std::uint64_t> staged_pub_{0};
  std::atomic<std::uint64_t> visible_pub_{0};  // pull data: slots written or being written
  std::atomic<std::uint64_t> head_pub_{0};
  std::atomic<std::uint64_t> done_pub_{0};
  std::atomic<bool> closing_pub_{false};
  std::atomic<bool> second_marker_pub_{false};  // close(): no more head reads (data mover)
  std::atomic<bool> head_read_pub_{false};      // read_pending_ as of the last pump round
};

}  // namespace fabflow::flow::detail
