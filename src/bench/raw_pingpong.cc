// The raw bench's ping-pong latency loops (send, write, writedata): the closed loop, the open
// loop at a given rate (params.rate), and WRITE-like send/recv (params.reap_every).
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/raw_runner.h"

namespace fabflow::raw_detail {

// Pings that may be in flight without outrunning the receives the peer keeps posted.
template <class T>
std::uint64_t RawRunner<T>::in_flight_cap() const noexcept {
  switch (p_.recv_post) {
    case RecvPost::one: return kRxDepth;
    case RecvPost::list: return kRxDepth - p_.recv_batch + 1;
    case RecvPost::multi: return p_.recv_batch;
  }
  return 1;
}

template <class T>
void RawRunner<T>::post_ping(std::size_t size, std::uint64_t seq, std::uint64_t i) {
  post_ping_from(src(), size, seq, i);
}

template <class T>
void RawRunner<T>::post_ping_from(const std::byte* from, std::size_t size, std::uint64_t seq,
                                  std::uint64_t i) {
  const bool inject = injecting(size);
  const bool signal = !inject && (i + 1) % p_.signal_every == 0;
  unsigned flags = (inject ? kInject : 0) | (signal ? kSignal : 0);
  // Unsignalled non-inject posts are retired by later signalled ones: context = span.
  std::uint64_t ctx = signal ? (p_.signal_every) : 0;
  Watchdog dog(liveness_, p_.target.timeout_ms, "posting");
  for (;;) {
    Status s;
    switch (p_.op) {
      case Op::send: s = t_.post_send(peer_, from, size, desc(), ctx, flags); break;
      case Op::write:
        s = t_.post_write(peer_, src(), size, desc(), remote(), rx_offset(), ctx, flags);
        break;
      default:
        s = t_.post_write(peer_, src(), size, desc(), remote(), rx_offset(), ctx, flags, seq);
        break;
    }
    if (s == Status::ok) break;
    check(s, "post");
    reap_tx();
    dog.idle();
  }
  if (!inject) reap_tx();
}

template <class T>
void RawRunner<T>::pingpong(std::size_t size, std::uint64_t count, std::vector<double>* samples) {
  if (unreliable()) return pingpong_unreliable(size, count, samples);
  if (write_like()) return pingpong_write_like(size, count, samples);
  if (p_.rate > 0) return open_loop(size, count, samples);
  RecvPool pool = recv_pool(count);
  top_up(pool, size);
  // The receive that completes the first message must be in place before the peer sends.
  wait_all_light();

  std::uint64_t prev = clock_.now();
  for (std::uint64_t i = 0; i < count; ++i) {
    std::uint64_t seq = ++seq_;
    if (initiator_) {
      stamp(src(), size, seq);
      post_ping(size, seq, i);
      wait_reply(size, seq, pool);
      std::uint64_t now = clock_.now();
      if (samples) samples->push_back(clock_.to_ns(now - prev) / 2);
      prev = now;
    } else {
      wait_reply(size, seq, pool);
      stamp(src(), size, seq);
      post_ping(size, seq, i);
    }
  }
  settle_multi(pool);
  drain_tx();
}

// Waits for message `seq`, then keeps the receive pool topped up.
template <class T>
void RawRunner<T>::wait_reply(std::size_t size, std::uint64_t seq, RecvPool& pool) {
  Watchdog dog(liveness_, p_.target.timeout_ms, "waiting for the peer's message");
  if (p_.op == Op::write) {
    while (!stamped(rx(), size, seq)) {
      if (inline_progress_) t_.progress();
      dog.idle();
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    return;
  }
  Completion c[1];
  for (;;) {
    int n = t_.poll_rx(c);
    if (n < 0) throw Error("raw bench: " + t_.last_error());
    if (n == 0) {
      dog.idle();
      continue;
    }
    if (p_.op == Op::writedata && (!c[0].has_data || c[0].data != seq))
      throw PeerError(peer_, "raw bench: write-with-data carried sequence " +
                                 std::to_string(c[0].data) + ", expected " + std::to_string(seq));
    if (multi() && !consume_multi(c[0], size, pool)) continue;  // a release, no message
    if (p_.op == Op::send && c[0].length != size)
      throw PeerError(peer_, "raw bench: received " + std::to_string(c[0].length) +
                                 " bytes, expected " + std::to_string(size));
    if (c[0].kind == CompletionKind::recv) {
      --pool.outstanding;
      top_up(pool, size);
    }
    return;
  }
}

// A receive completion from a multi-receive buffer: notes a release (and posts the buffer
// again once the message is counted); false when it carries no message. The place the
// provider names must be a whole message inside the buffers.
template <class T>
bool RawRunner<T>::consume_multi(const Completion& c, std::size_t size, RecvPool& pool) {
  if (c.released) {
    if (pool.buffers == 0)
      throw Error("raw bench: the provider released a multi-receive buffer twice");
    --pool.buffers;
  }
  if (c.buf == nullptr) {
    top_up(pool, size);
    return false;
  }
  const auto* at = static_cast<const std::byte*>(c.buf);
  const std::byte* lo = multi_buffer(0);
  const std::size_t span = 2 * std::size_t{p_.recv_batch} * slot_len_;
  if (at < lo || static_cast<std::size_t>(at - lo) > span ||
      std::size_t{c.length} > span - static_cast<std::size_t>(at - lo))
    throw Error("raw bench: a multi-receive completion names memory outside its buffers");
  return true;
}

// A provider may report a multi-receive buffer's release after its last message, in a
// completion of its own: wait for it, so that nothing of this phase is left for the next.
template <class T>
void RawRunner<T>::settle_multi(RecvPool& pool) {
  if (!multi()) return;
  Watchdog dog(liveness_, p_.target.timeout_ms, "waiting for a multi-receive buffer's release");
  Completion c[1];
  while (pool.buffers > 0) {
    const int n = t_.poll_rx(c);
    if (n < 0) throw Error("raw bench: " + t_.last_error());
    if (n == 0) {
      dog.idle();
      continue;
    }
    if (!c[0].released || c[0].buf != nullptr)
      throw PeerError(peer_, "raw bench: a message arrived after the phase's last one");
    --pool.buffers;
  }
}

// Open loop (params.rate > 0): rank 0 sends ping i at schedule.due(i), whether or not the
// earlier replies are back, and times each reply from its ping's due time; rank 1 answers
// every ping as it arrives. Each ping in flight has its own source slot.
template <class T>
void RawRunner<T>::open_loop(std::size_t size, std::uint64_t count, std::vector<double>* samples) {
  RecvPool pool = recv_pool(count);
  top_up(pool, size);
  wait_all_light();
  if (!initiator_) {
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::uint64_t seq = ++seq_;
      wait_reply(size, seq, pool);
      stamp(src_slot(i), size, seq);
      post_ping_from(src_slot(i), size, seq, i);
    }
    settle_multi(pool);
    drain_tx();
    return;
  }
  const double ticks_per_ns = 1 / clock_.to_ns(1);
  OpenLoopSchedule schedule{clock_.now(), 1e9 / p_.rate * ticks_per_ns};
  const double slack = 50e6 * ticks_per_ns;  // a pause of up to 50 ms is not an overload
  const std::uint64_t cap = in_flight_cap();
  const std::uint64_t first_seq = seq_ + 1;
  std::uint64_t sent = 0, answered = 0, last_sent_at = schedule.start;
  Watchdog dog(liveness_, p_.target.timeout_ms, "waiting for the peer's answers in the open loop");
  while (answered < count) {
    // A ping is due: it goes out unless the peer's receive window is full (then replies are
    // reaped first; the ping's sample still counts from its due time).
    if (sent < count && sent - answered < cap &&
        (!overloaded_.empty() || clock_.now() >= schedule.due(sent))) {
      const std::uint64_t now = clock_.now();
      // Behind a rate this run cannot hold: the rest goes out unscheduled, so that the peer
      // finishes the phase, and both ranks stop with the reason at the phase's end.
      if (samples && overloaded_.empty() && !schedule.on_time(sent, now, slack))
        overloaded_ = report_unsustainable(sent, now, schedule);
      stamp(src_slot(sent), size, first_seq + sent);
      post_ping_from(src_slot(sent), size, first_seq + sent, sent);
      last_sent_at = now;
      ++sent;
      continue;
    }
    Completion c[1];
    const int n = t_.poll_rx(c);
    if (n < 0) throw Error("raw bench: " + t_.last_error());
    if (n == 0) {
      if (inline_progress_) t_.progress();
      // With nothing in flight this rank waits for the schedule, not for the peer (a ping
      // period may be longer than the timeout).
      if (sent == answered)
        dog.reset();
      else
        dog.idle();
      continue;
    }
    dog.reset();
    if (multi() && !consume_multi(c[0], size, pool)) continue;
    if (c[0].length != size)
      throw PeerError(peer_, "raw bench: received " + std::to_string(c[0].length) +
                                 " bytes, expected " + std::to_string(size));
    --pool.outstanding;
    top_up(pool, size);
    const std::uint64_t now = clock_.now();
    if (samples && overloaded_.empty())
      samples->push_back(clock_.to_ns(now - schedule.due(answered)) / 2);
    ++answered;
  }
  // A run too short for the lag to pass 50 ms still has to have kept the rate: its last ping
  // may be at most max(1 ms, a tenth of the run) late. Only measured phases are judged (the
  // warm-up may include connection setup).
  if (samples && overloaded_.empty() && count > 0 &&
      !schedule.on_time(count - 1, last_sent_at, 1e6 * ticks_per_ns))
    overloaded_ = report_unsustainable(count - 1, last_sent_at, schedule);
  seq_ += count;
  settle_multi(pool);
  drain_tx();
}

template <class T>
std::string RawRunner<T>::report_unsustainable(std::uint64_t sent, std::uint64_t now,
                                               const OpenLoopSchedule& s) const {
  const double elapsed_s = clock_.to_ns(now - s.start) / 1e9;
  return "open loop: this run cannot sustain " + report_number(p_.rate) + " pings/s (ping " +
         std::to_string(sent) + " was due " + report_number(clock_.to_ns(now - s.due(sent)) / 1e6) +
         " ms ago, " + report_number(elapsed_s > 0 ? static_cast<double>(sent) / elapsed_s : 0) +
         "/s so far): lower --rate";
}

// WRITE-like send/recv: receives posted reap_every at a time, each into its own slot; a
// message is seen in its slot's memory (its sequence number stamped as for write), and the
// receive completions are reaped only after every reap_every messages, before the answer
// (or the next ping) goes out, so that every message finds its receive posted.
template <class T>
void RawRunner<T>::pingpong_write_like(std::size_t size, std::uint64_t count,
                                       std::vector<double>* samples) {
  const std::uint64_t n = p_.reap_every;
  std::uint64_t posted = 0, reaped = 0;
  auto post_batch = [&] {
    while (posted < count && posted - reaped < n) {
      std::byte* slot = rx() + (posted % n) * slot_len_;
      Watchdog dog(liveness_, p_.target.timeout_ms, "posting a receive");
      Status s;
      while ((s = t_.post_recv(peer_, slot, size, desc(), 0)) == Status::again) dog.idle();
      check(s, "post_recv");
      ++posted;
    }
  };
  auto wait_slot = [&](std::uint64_t i, std::uint64_t seq) {
    const std::byte* slot = rx() + (i % n) * slot_len_;
    Watchdog dog(liveness_, p_.target.timeout_ms, "waiting for the peer's message in memory");
    while (!stamped(slot, size, seq)) {
      t_.progress();
      dog.idle();
    }
    std::atomic_thread_fence(std::memory_order_acquire);
  };
  auto reap = [&](std::uint64_t upto) {
    Watchdog dog(liveness_, p_.target.timeout_ms, "reaping receive completions");
    Completion c[kPollBatch];
    while (reaped < upto) {
      const int got = t_.poll_rx(std::span(c).first(
          static_cast<std::size_t>(std::min<std::uint64_t>(kPollBatch, upto - reaped))));
      if (got < 0) throw Error("raw bench: " + t_.last_error());
      for (int k = 0; k < got; ++k)
        if (c[k].kind != CompletionKind::recv || c[k].length != size)
          throw PeerError(peer_, "raw bench: a receive completed with " +
                                     std::to_string(c[k].length) + " bytes, expected " +
                                     std::to_string(size));
      reaped += static_cast<std::uint64_t>(got);
      if (got == 0) dog.idle();
    }
    post_batch();
  };
  post_batch();
  wait_all_light();
  std::uint64_t prev = clock_.now();
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t seq = ++seq_;
    const bool last_of_batch = (i + 1) % n == 0 || i + 1 == count;
    if (initiator_) {
      stamp(src(), size, seq);
      post_ping(size, seq, i);
      wait_slot(i, seq);
      const std::uint64_t now = clock_.now();
      if (samples) samples->push_back(clock_.to_ns(now - prev) / 2);
      // The reaping delays the next ping: it belongs to the next round trip, the outlier
      // the seed reports (Fig. 28).
      if (last_of_batch) reap(i + 1);
      prev = now;
    } else {
      wait_slot(i, seq);
      if (last_of_batch) reap(i + 1);
      stamp(src(), size, seq);
      post_ping(size, seq, i);
    }
  }
  drain_tx();
}

// ---- unreliable endpoints (dgram) ----
// Every rx slot keeps a receive of its own posted, for the largest size (the context names the
// slot): a message is read where it landed and the slot's receive posted again, so nothing is
// ever left unposted and no late message lands on another's bytes.
template <class T>
void RawRunner<T>::post_dgram_receives() {
  if (dgram_posted_) return;
  Watchdog dog(liveness_, p_.target.timeout_ms, "posting datagram receives");
  for (std::size_t k = 0; k < kRxDepth;) {
    Status s = t_.post_recv(peer_, rx() + k * slot_len_, slot_len_, desc(), k);
    if (s == Status::again) {
      dog.idle();
      continue;
    }
    check(s, "post_recv");
    ++k;
  }
  dgram_posted_ = true;
}

// Reads what arrived: on_message(bytes, length) for each message, then posts its slot's
// receive again. Returns after one poll.
template <class T>
template <class OnMessage>
void RawRunner<T>::take_dgram(OnMessage&& on_message) {
  Completion c[kPollBatch];
  const int n = t_.poll_rx(c);
  if (n < 0) throw Error("raw bench: " + t_.last_error());
  for (int i = 0; i < n; ++i) {
    const std::uint64_t k = c[i].context;
    if (c[i].kind != CompletionKind::recv || k >= kRxDepth)
      throw Error("raw bench: a datagram completion for no posted slot");
    std::byte* slot = rx() + k * slot_len_;
    on_message(slot, std::size_t{c[i].length});
    Watchdog dog(liveness_, p_.target.timeout_ms, "posting a datagram receive again");
    for (;;) {
      Status s = t_.post_recv(peer_, slot, slot_len_, desc(), k);
      if (s == Status::ok) break;
      check(s, "post_recv");
      dog.idle();
    }
  }
}

// Rank 0 sends a ping and waits for its answer up to loss_timeout_ms(); then it is lost (the
// ping or its answer was dropped), and the next ping goes out. An answer that comes later
// carries an older sequence number and is dropped. A sample is half the round trip of one
// answered ping. Rank 1 answers every ping it gets (an echo of its bytes) until rank 0 is done,
// inside the barrier that ends the phase.
template <class T>
void RawRunner<T>::pingpong_unreliable(std::size_t size, std::uint64_t count,
                                       std::vector<double>* samples) {
  post_dgram_receives();
  wait_all_light();
  std::uint64_t answers = 0;
  if (!initiator_) {
    boot_.barrier([&] {
      take_dgram([&](const std::byte* bytes, std::size_t len) {
        if (len != size) return;  // a late ping of an earlier size
        std::memcpy(src(), bytes, size);
        post_ping(size, 0, answers++);
      });
    });
    drain_tx();
    return;
  }
  const std::uint64_t loss_ns = loss_timeout_ms() * 1000000;
  const std::uint64_t silence_ns = p_.target.timeout_ms * 1000000;
  std::uint64_t last_answer = clock_.now();
  std::uint64_t lost_in_a_row = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t seq = ++seq_;
    stamp(src(), size, seq);
    const std::uint64_t sent = clock_.now();
    post_ping(size, seq, i);
    bool answered = false;
    std::uint64_t now = sent;
    while (!answered) {
      take_dgram([&](const std::byte* bytes, std::size_t len) {
        if (len == size && stamped(bytes, size, seq)) answered = true;  // else a late answer
      });
      now = clock_.now();
      if (!answered && clock_.to_ns(now - sent) > static_cast<double>(loss_ns)) break;
    }
    if (answered) {
      if (samples) samples->push_back(clock_.to_ns(now - sent) / 2);
      last_answer = now;
      lost_in_a_row = 0;
      continue;
    }
    ++lost_;
    ++lost_in_a_row;
    if (liveness_ && liveness_->peer_failed())
      throw peer_failure_error(liveness_, "raw bench", "waiting for a datagram answer");
    if (clock_.to_ns(now - last_answer) > static_cast<double>(silence_ns))
      throw Error("raw bench: no answer on the unreliable endpoint for " +
                  std::to_string(p_.target.timeout_ms) + " ms (" + std::to_string(lost_in_a_row) +
                  " pings lost in a row): the peer's datagrams do not arrive");
  }
  // Late answers still arriving are read (and dropped) while rank 1 finishes.
  boot_.barrier([&] { take_dgram([](const std::byte*, std::size_t) {}); });
  drain_tx();
}

// phase() (raw.cc) enters these loops through pingpong(); the rest is instantiated from it.
#define FABFLOW_RAW_PINGPONG(T) \
  template void RawRunner<T>::pingpong(std::size_t, std::uint64_t, std::vector<double>*);
FABFLOW_CONCRETE_TRANSPORTS(FABFLOW_RAW_PINGPONG)
#undef FABFLOW_RAW_PINGPONG

}  // namespace fabflow::raw_detail
