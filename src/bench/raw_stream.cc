// The raw bench's loops driven by the initiator alone: one-sided latency (read, fadd, cswap:
// the completion time of one operation) and streaming bandwidth, with the stream's sink on the
// target of sends and writedata.
#include <algorithm>
#include <vector>

#include "bench/raw_runner.h"

namespace fabflow::raw_detail {

// ---- one-sided latency: read, fadd, cswap (completion time of one operation) ----
template <class T>
void RawRunner<T>::one_sided_latency(std::size_t size, std::uint64_t count,
                                     std::vector<double>* samples) {
  auto* result = reinterpret_cast<std::uint64_t*>(src());
  for (std::uint64_t i = 0; i < count; ++i) {
    Watchdog dog(liveness_, p_.target.timeout_ms, "waiting for a one-sided completion");
    std::uint64_t t0 = clock_.now();
    Status s;
    do {
      s = post_one_sided(0, size, result, 1);
      check(s, "post");
      if (s == Status::again) dog.idle();
    } while (s == Status::again);
    while (reap_tx() == 0) dog.idle();
    std::uint64_t t1 = clock_.now();
    if (samples) samples->push_back(clock_.to_ns(t1 - t0));
  }
}

template <class T>
Status RawRunner<T>::post_one_sided(std::size_t qi, std::size_t size, std::uint64_t* result,
                                    std::uint64_t ctx) {
  Queue& q = queues_[qi];
  switch (p_.op) {
    case Op::read:
      return q.t->post_read(peer_, src(qi), size, desc(qi), q.remote, rx_offset(), ctx, kSignal);
    case Op::fadd:
      return q.t->post_atomic(peer_, AtomicOp::fetch_add, 1, 0, result, desc(qi), q.remote,
                              rx_offset(), ctx, kSignal);
    case Op::cswap:
      return q.t->post_atomic(peer_, AtomicOp::compare_swap, ++seq_, *result, result, desc(qi),
                              q.remote, rx_offset(), ctx, kSignal);
    default: return Status::failed;
  }
}

// ---- streaming bandwidth ----
// Batches of p_.batch posts (FI_MORE on all but the last of each) rotate over the queues;
// unsignalled posts are retired by the next signalled one of their queue.
template <class T>
void RawRunner<T>::stream(std::size_t size, std::uint64_t count) {
  const bool inject = injecting(size);
  const std::uint64_t window = std::max(1u, p_.window);
  const std::uint64_t every = is_atomic(p_.op) ? 1 : std::max(1u, p_.signal_every);
  const std::uint64_t batch = std::max(1u, p_.batch);
  const std::uint64_t nq = queues_.size();
  std::uint64_t posted = 0, retired = 0;
  std::vector<std::uint64_t> since_signal(nq, 0);
  Watchdog dog(liveness_, p_.target.timeout_ms, "streaming");
  // An active target (send, writedata) posts its receives first; see sink().
  if (!target_passive(p_.op, RawTest::bandwidth)) wait_all_light();
  while (retired < count) {
    bool progressed = false;
    // The rest of the current batch, all on its queue.
    const std::size_t qi = queue_of(posted, batch, nq);
    Queue& q = queues_[qi];
    auto* results = reinterpret_cast<std::uint64_t*>(src(qi));
    while (posted < count && posted - retired < window) {
      const bool batch_end = (posted + 1) % batch == 0;
      const bool queue_last = next_on_queue(posted, batch, nq) >= count;
      const bool signal =
          is_atomic(p_.op) || p_.op == Op::read || since_signal[qi] + 1 == every || queue_last;
      const bool more = !batch_end && posted + 1 < count && posted + 1 - retired < window;
      unsigned flags = (signal ? kSignal : 0) | (inject ? kInject : 0) | (more ? kMore : 0);
      std::uint64_t ctx = signal ? since_signal[qi] + 1 : 0;
      Status s;
      switch (p_.op) {
        case Op::send: s = q.t->post_send(peer_, src(qi), size, desc(qi), ctx, flags); break;
        case Op::write:
          s = q.t->post_write(peer_, src(qi), size, desc(qi), q.remote, rx_offset(), ctx, flags);
          break;
        case Op::writedata:
          s = q.t->post_write(peer_, src(qi), size, desc(qi), q.remote, rx_offset(), ctx, flags,
                              posted);
          break;
        default: s = post_one_sided(qi, size, results, ctx); break;
      }
      if (s == Status::again) break;
      if (s == Status::failed) throw Error("raw bench: post: " + q.t->last_error());
      ++posted;
      since_signal[qi] = signal ? 0 : since_signal[qi] + 1;
      progressed = true;
      if (batch_end) break;
    }
    std::uint64_t r = reap_tx();
    retired += r;
    if (r || progressed)
      dog.reset();
    else
      dog.idle();
  }
}

// The target of streamed sends / writedata: counts arrivals on every queue, keeps each
// queue's receives posted (as many as the initiator's rotation sends there).
template <class T>
void RawRunner<T>::sink(std::uint64_t count) {
  const std::uint64_t batch = std::max(1u, p_.batch);
  const std::uint64_t nq = queues_.size();
  std::vector<RecvPool> pools;
  const std::size_t len = std::max<std::size_t>(max_size_, 1);
  for (std::size_t q = 0; q < nq; ++q) {
    pools.push_back(recv_pool(queue_share(count, batch, nq, q)));
    top_up(pools[q], len, q);
  }
  wait_all_light();
  Watchdog dog(liveness_, p_.target.timeout_ms, "receiving the stream");
  Completion c[kPollBatch];
  std::uint64_t got = 0;
  while (got < count) {
    bool any = false;
    for (std::size_t q = 0; q < nq; ++q) {
      int n = queues_[q].t->poll_rx(c);
      if (n < 0) throw Error("raw bench: " + queues_[q].t->last_error());
      if (n == 0) continue;
      any = true;
      for (int i = 0; i < n; ++i)
        if (c[i].kind == CompletionKind::recv) --pools[q].outstanding;
      got += static_cast<std::uint64_t>(n);
      top_up(pools[q], len, q);
    }
    if (any)
      dog.reset();
    else
      dog.idle();
  }
  if (got > count) throw PeerError(peer_, "raw bench: peer sent more messages than expected");
}

// phase() (raw.cc) enters these loops through one_sided_latency(), stream() and sink().
#define FABFLOW_RAW_STREAM(T)                                                                      \
  template void RawRunner<T>::one_sided_latency(std::size_t, std::uint64_t, std::vector<double>*); \
  template void RawRunner<T>::stream(std::size_t, std::uint64_t);                                  \
  template void RawRunner<T>::sink(std::uint64_t);
FABFLOW_CONCRETE_TRANSPORTS(FABFLOW_RAW_STREAM)
#undef FABFLOW_RAW_STREAM

}  // namespace fabflow::raw_detail
