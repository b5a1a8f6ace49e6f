// The raw microbenchmarks: ping-pong latency and streaming bandwidth of one fabric operation
// between two ranks, in perftest / fabtests terms. The loops are templates over the concrete
// transport so the data path is bound statically.
#include <fabflow/bench/raw.h>
#include <fabflow/bootstrap.h>
#include <fabflow/progress.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/affinity.h"
#include "common/bounded_wait.h"
#include "transport/dispatch.h"

namespace fabflow {
namespace {

constexpr std::size_t kRxDepth = 64;  // receives kept posted
constexpr std::size_t kPollBatch = 16;
constexpr unsigned kMaxReapEvery = 256;       // WRITE-like receives posted at once
constexpr unsigned kMaxRecvBatch = kRxDepth;  // receives per list, messages per multi buffer

// Ping-pong ops measure a round trip and report half of it; the others time one operation.
bool is_pingpong(Op op) { return op == Op::send || op == Op::write || op == Op::writedata; }
// Ops whose target only has to keep the provider progressing (it never polls for anything).
bool target_passive(Op op, RawTest test) {
  if (op == Op::read || is_atomic(op)) return true;
  return op == Op::write && test == RawTest::bandwidth;
}

inline void compiler_barrier() { asm volatile("" ::: "memory"); }

// Sequence marks written into ping-pong payloads so the poller never accepts a torn write:
// sizes >= 16 carry the sequence number in their first and last 8 bytes (header + trailer);
// smaller ones are filled with one sequence byte, and every byte is checked.
void stamp(std::byte* p, std::size_t size, std::uint64_t seq) {
  if (size >= 16) {
    std::memcpy(p, &seq, 8);
    std::memcpy(p + size - 8, &seq, 8);
  } else {
    std::memset(p, static_cast<int>(seq % 255 + 1), size);
  }
}

bool stamped(const std::byte* p, std::size_t size, std::uint64_t seq) {
  compiler_barrier();
  if (size >= 16) {
    std::uint64_t head, tail;
    std::memcpy(&head, p, 8);
    std::memcpy(&tail, p + size - 8, 8);
    return head == seq && tail == seq;
  }
  auto b = static_cast<std::byte>(seq % 255 + 1);
  for (std::size_t i = 0; i < size; ++i)
    if (p[i] != b) return false;
  return true;
}

// A bounded wait of the raw bench (common/bounded_wait.h) that names what it waits for.
class Watchdog {
 public:
  Watchdog(Bootstrap& boot, std::uint64_t timeout_ms, const char* what)
      : wait_(std::chrono::milliseconds(timeout_ms), &boot), what_(what) {}
  void reset() noexcept { wait_.reset(); }
  void idle() { wait_.idle("raw bench", what_); }

 private:
  BoundedWait wait_;
  const char* what_;
};

// The queue post i of a bandwidth test goes to, and the number of `count` posts queue `q`
// gets: batches of `batch` posts rotate over `queues` queues.
std::size_t queue_of(std::uint64_t i, std::uint64_t batch, std::uint64_t queues) {
  return static_cast<std::size_t>((i / batch) % queues);
}
std::uint64_t queue_share(std::uint64_t count, std::uint64_t batch, std::uint64_t queues,
                          std::uint64_t q) {
  const std::uint64_t cycle = batch * queues;
  const std::uint64_t rest = count % cycle;
  const std::uint64_t before = q * batch;
  return count / cycle * batch + (rest > before ? std::min(rest - before, batch) : 0);
}
// The index of the next post after post i that goes to the same queue.
std::uint64_t next_on_queue(std::uint64_t i, std::uint64_t batch, std::uint64_t queues) {
  return (i + 1) % batch != 0 ? i + 1 : i + 1 + (queues - 1) * batch;
}

// One rank's state for one run. T is the concrete transport type.
template <class T>
class RawRunner {
 public:
  RawRunner(std::span<T* const> queues, Bootstrap& boot, const RawParams& p, const Clock& clock,
            bool progress_thread)
      : t_(*queues.front()),
        boot_(boot),
        p_(p),
        clock_(clock),
        inline_progress_(!progress_thread),
        peer_(1 - boot.rank()),
        initiator_(boot.rank() == 0) {
    max_size_ = *std::max_element(p.sizes.begin(), p.sizes.end());
    if (is_atomic(p.op)) max_size_ = 8;
    // Layout: the source slots (one, or one per ping in flight in the open loop) / atomic
    // result, then the target of the peer's operations: one slot, reap_every slots for the
    // WRITE-like receives, or two multi-receive buffers of recv_batch slots each.
    slot_len_ = std::max<std::size_t>(max_size_, 64);
    src_slots_ = p.rate > 0 ? kRxDepth : 1;
    std::size_t rx_slots = 1;
    if (write_like()) rx_slots = p.reap_every;
    if (multi()) rx_slots = 2 * std::size_t{p.recv_batch};
    rx_len_ = slot_len_ * rx_slots;
    buf_len_ = slot_len_ * src_slots_ + rx_len_;
    for (T* t : queues) {
      Queue q{t, t->allocate(buf_len_, kAllAccess), {}};
      auto keys = boot_.allgather(t->export_key(*q.mr));
      q.remote = t->import_key(peer_, keys[static_cast<std::size_t>(peer_)]);
      if (!q.remote.contains(rx_offset(), rx_len_))
        throw PeerError(peer_, "raw bench: peer registered a region too small for the run");
      queues_.push_back(std::move(q));
    }
  }

  // Runs warm-up and measurement for one size and test; rank 0 returns the row.
  std::optional<RawRow> run(RawTest test, std::size_t size) {
    const bool passive_me = !initiator_ && target_passive(p_.op, test);
    wait_all();
    phase(test, size, p_.warmup, nullptr);
    wait_all();

    std::uint64_t iters = p_.duration_s > 0 ? calibrate(test, size) : p_.iterations;

    std::vector<double> samples;
    if (initiator_ && test == RawTest::latency) samples.reserve(iters);
    double cpu0 = process_cpu_seconds();
    double seconds = 0;
    if (passive_me)
      wait_all();
    else
      seconds = phase(test, size, iters, &samples);
    double cpu = process_cpu_seconds() - cpu0;
    if (!passive_me) wait_all();

    // Rank 1 tells rank 0 its CPU time for the measured phase; rank 0 tells rank 1 whether
    // the open loop fell behind its rate (then both stop with the same line).
    const PhaseReport mine{cpu, overloaded_.empty() ? 0u : 1u};
    const auto reports = allgather_value(boot_, mine, "raw bench: phase report");
    const double cpu_target = reports[1].cpu;
    if (!(cpu_target >= 0 && cpu_target < 1e6))
      throw PeerError(1, "raw bench: rank 1 reported an impossible CPU time");
    if (reports[0].overloaded > 1) throw PeerError(0, "raw bench: malformed phase report");
    if (reports[0].overloaded)
      throw UsageError(!overloaded_.empty()
                           ? overloaded_
                           : "open loop: this run cannot sustain " + report_number(p_.rate) +
                                 " pings/s (rank 0 fell behind): lower --rate");
    if (!initiator_) return std::nullopt;

    RawRow row;
    row.test = test;
    row.op = p_.op;
    row.size = size;
    row.iterations = iters;
    row.injected = injecting(size);
    row.one_way = is_pingpong(p_.op);
    row.recv_post = p_.recv_post;
    row.rate = p_.rate;
    row.cpu.initiator_ns_per_msg = cpu * 1e9 / static_cast<double>(iters);
    row.cpu.target_ns_per_msg = cpu_target * 1e9 / static_cast<double>(iters);
    if (test == RawTest::latency) {
      if (p_.keep_samples) row.samples = samples;  // in measurement order, before sorting
      row.latency = summarize(samples);
      row.seconds = seconds;
    } else {
      row.seconds = seconds;
      row.mbps = static_cast<double>(size) * static_cast<double>(iters) / seconds / 1e6;
      row.msgs_per_s = static_cast<double>(iters) / seconds;
    }
    return row;
  }

 private:
  struct PhaseReport {
    double cpu;                // CPU seconds of the measured phase
    std::uint64_t overloaded;  // rank 0: 1 when the open loop fell behind its rate
  };
  // One endpoint: its transport, its registered buffer and the peer's.
  struct Queue {
    T* t;
    std::unique_ptr<MemoryRegion> mr;
    RemoteMemory remote;
  };

  std::size_t rx_offset() const noexcept { return slot_len_ * src_slots_; }
  bool write_like() const noexcept { return p_.op == Op::send && p_.reap_every > 0; }
  bool multi() const noexcept { return p_.op == Op::send && p_.recv_post == RecvPost::multi; }
  std::byte* src(std::size_t q = 0) const noexcept { return queues_[q].mr->data(); }
  std::byte* src_slot(std::uint64_t i) const noexcept {
    return src() + (i % src_slots_) * slot_len_;
  }
  std::byte* rx(std::size_t q = 0) const noexcept { return queues_[q].mr->data() + rx_offset(); }
  void* desc(std::size_t q = 0) const noexcept { return queues_[q].mr->desc(); }
  void progress_all() {
    for (auto& q : queues_) q.t->progress();
  }
  bool injecting(std::size_t size) const noexcept {
    return p_.inject && !is_atomic(p_.op) && p_.op != Op::read && size <= t_.caps().inject_size;
  }

  // A barrier during which this rank keeps the provider progressing (its peer may still need
  // it to complete operations aimed at this rank).
  void wait_all() {
    // Many progress calls per check of the bootstrap socket: a passive target's progress
    // rate bounds the initiator's bandwidth.
    if (inline_progress_)
      boot_.barrier([this] {
        for (int i = 0; i < 256; ++i) progress_all();
      });
    else
      boot_.barrier([] { std::this_thread::sleep_for(std::chrono::microseconds(50)); });
  }

  // Picks the iteration count that fills the requested duration: unmeasured pilot phases,
  // four times longer each, until one lasts a tenth of the duration; rank 0 decides and
  // tells rank 1 (a count with kFinal set ends the search).
  std::uint64_t calibrate(RawTest test, std::size_t size) {
    constexpr std::uint64_t kFinal = 1ull << 63;
    constexpr std::uint64_t kMaxIters = 1ull << 34;
    std::uint64_t n = std::max<std::uint64_t>(p_.warmup, 1);
    double seconds = last_phase_seconds_;
    for (;;) {
      std::uint64_t decision = 0;
      if (initiator_) {
        double per_op = seconds / static_cast<double>(n);
        if (seconds >= p_.duration_s / 10 || n >= kMaxIters / 4 || per_op <= 0)
          decision =
              kFinal | std::clamp<std::uint64_t>(
                           per_op > 0 ? static_cast<std::uint64_t>(p_.duration_s / per_op) : n, 100,
                           kMaxIters);
        else
          decision = n * 4;
      }
      decision = allgather_value(boot_, decision, "raw bench: iteration count")[0];
      std::uint64_t value = decision & ~kFinal;
      if (value == 0 || value > kMaxIters)
        throw PeerError(0, "raw bench: rank 0 sent an iteration count out of range");
      if (decision & kFinal) return value;
      n = value;
      phase(test, size, n, nullptr);
      wait_all();
      seconds = last_phase_seconds_;
    }
  }

  // One phase (warm-up when samples == nullptr) of `count` iterations; returns seconds.
  double phase(RawTest test, std::size_t size, std::uint64_t count, std::vector<double>* samples) {
    if (count == 0) return 0;
    auto t0 = std::chrono::steady_clock::now();
    if (test == RawTest::latency) {
      if (is_pingpong(p_.op))
        pingpong(size, count, samples);
      else if (initiator_)
        one_sided_latency(size, count, samples);
    } else {
      if (initiator_)
        stream(size, count);
      else if (!target_passive(p_.op, test))
        sink(count);
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    last_phase_seconds_ = s;
    return s;
  }

  void check(Status s, const char* what) {
    if (s == Status::failed)
      throw Error(std::string("raw bench: ") + what + ": " + t_.last_error());
  }

  // Reaps transmit completions of every queue; each carries in its context how many posts of
  // its queue it retires.
  std::uint64_t reap_tx() {
    std::uint64_t retired = 0;
    for (auto& q : queues_) {
      Completion c[kPollBatch];
      int n = q.t->poll_tx(c);
      if (n < 0) throw Error("raw bench: " + q.t->last_error());
      for (int i = 0; i < n; ++i) retired += c[i].context;
    }
    return retired;
  }

  // ---- ping-pong: send, write, writedata ----

  // Keeps receives posted for `total` expected messages, never more (a leftover receive would
  // swallow a later size's message), and at most kRxDepth at a time.
  // With multi-receive buffers a receive is a message's room in a buffer: each buffer is
  // posted for exactly the messages it will take (recv_batch, or what the phase has left), so
  // it is released by its last one and nothing is left posted for the next size.
  struct RecvPool {
    std::uint64_t total = 0;        // receives this phase will consume
    std::uint64_t posted = 0;       // receives posted so far
    std::uint64_t outstanding = 0;  // posted and not yet consumed
    unsigned buffers = 0;           // multi: buffers posted and not yet released
    unsigned next_buffer = 0;       // multi: which of the two is posted next
  };
  void top_up(RecvPool& pool, std::size_t len, std::size_t q = 0) {
    if (multi()) return top_up_multi(pool, len, q);
    // One receive per call, or (list) whole batches only, each as one list.
    const std::uint64_t batch =
        p_.op == Op::send && p_.recv_post == RecvPost::list ? std::uint64_t{p_.recv_batch} : 1;
    while (pool.posted < pool.total && pool.outstanding < kRxDepth) {
      const std::uint64_t left = pool.total - pool.posted;
      const std::uint64_t n = std::min({batch, kRxDepth - pool.outstanding, left});
      if (n < batch && n < left) break;  // a list waits until a whole batch has room
      if (batch == 1) {
        Status s = queues_[q].t->post_recv(peer_, rx(q), len, desc(q), 0);
        if (s == Status::again) break;
        check(s, "post_recv");
        ++pool.posted;
        ++pool.outstanding;
        continue;
      }
      std::array<void*, kMaxRecvBatch> bufs;
      bufs.fill(rx(q));
      const int got = queues_[q].t->post_recvs(peer_, std::span(bufs).first(n), len, desc(q), 0);
      if (got < 0) check(Status::failed, "post_recvs");
      pool.posted += static_cast<std::uint64_t>(got);
      pool.outstanding += static_cast<std::uint64_t>(got);
      if (static_cast<std::uint64_t>(got) < n) break;
    }
  }
  std::byte* multi_buffer(unsigned b, std::size_t q = 0) const noexcept {
    return rx(q) + std::size_t{b} * p_.recv_batch * slot_len_;
  }
  void top_up_multi(RecvPool& pool, std::size_t len, std::size_t q) {
    while (pool.posted < pool.total && pool.buffers < 2) {
      const std::uint64_t n = std::min<std::uint64_t>(p_.recv_batch, pool.total - pool.posted);
      // Exactly n messages of len bytes fit: the n-th leaves less than len free and releases it.
      Status s = queues_[q].t->post_recv_multi(peer_, multi_buffer(pool.next_buffer, q), n * len,
                                               desc(q), len, pool.next_buffer);
      if (s == Status::again) break;
      check(s, "post_recv_multi");
      pool.posted += n;
      pool.outstanding += n;
      ++pool.buffers;
      pool.next_buffer ^= 1;
    }
  }
  // Pings that may be in flight without outrunning the receives the peer keeps posted.
  std::uint64_t in_flight_cap() const noexcept {
    switch (p_.recv_post) {
      case RecvPost::one: return kRxDepth;
      case RecvPost::list: return kRxDepth - p_.recv_batch + 1;
      case RecvPost::multi: return p_.recv_batch;
    }
    return 1;
  }
  RecvPool recv_pool(std::uint64_t messages) const {
    const bool needs_recv =
        p_.op == Op::send || (p_.op == Op::writedata && t_.caps().rx_cq_data_consumes_recv);
    return RecvPool{needs_recv ? messages : 0, 0, 0};
  }

  void post_ping(std::size_t size, std::uint64_t seq, std::uint64_t i) {
    post_ping_from(src(), size, seq, i);
  }
  void post_ping_from(const std::byte* from, std::size_t size, std::uint64_t seq, std::uint64_t i) {
    const bool inject = injecting(size);
    const bool signal = !inject && (i + 1) % p_.signal_every == 0;
    unsigned flags = (inject ? kInject : 0) | (signal ? kSignal : 0);
    // Unsignalled non-inject posts are retired by later signalled ones: context = span.
    std::uint64_t ctx = signal ? (p_.signal_every) : 0;
    Watchdog dog(boot_, p_.target.timeout_ms, "posting");
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

  void pingpong(std::size_t size, std::uint64_t count, std::vector<double>* samples) {
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
  void wait_reply(std::size_t size, std::uint64_t seq, RecvPool& pool) {
    Watchdog dog(boot_, p_.target.timeout_ms, "waiting for the peer's message");
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
  bool consume_multi(const Completion& c, std::size_t size, RecvPool& pool) {
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
  void settle_multi(RecvPool& pool) {
    if (!multi()) return;
    Watchdog dog(boot_, p_.target.timeout_ms, "waiting for a multi-receive buffer's release");
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
  void open_loop(std::size_t size, std::uint64_t count, std::vector<double>* samples) {
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
    Watchdog dog(boot_, p_.target.timeout_ms, "waiting for the peer's answers in the open loop");
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
  std::string report_unsustainable(std::uint64_t sent, std::uint64_t now,
                                   const OpenLoopSchedule& s) const {
    const double elapsed_s = clock_.to_ns(now - s.start) / 1e9;
    return "open loop: this run cannot sustain " + report_number(p_.rate) + " pings/s (ping " +
           std::to_string(sent) + " was due " +
           report_number(clock_.to_ns(now - s.due(sent)) / 1e6) + " ms ago, " +
           report_number(elapsed_s > 0 ? static_cast<double>(sent) / elapsed_s : 0) +
           "/s so far): lower --rate";
  }
  static std::string report_number(double v) {
    char text[64];
    std::snprintf(text, sizeof text, "%.0f", v);
    return text;
  }

  // WRITE-like send/recv: receives posted reap_every at a time, each into its own slot; a
  // message is seen in its slot's memory (its sequence number stamped as for write), and the
  // receive completions are reaped only after every reap_every messages, before the answer
  // (or the next ping) goes out, so that every message finds its receive posted.
  void pingpong_write_like(std::size_t size, std::uint64_t count, std::vector<double>* samples) {
    const std::uint64_t n = p_.reap_every;
    std::uint64_t posted = 0, reaped = 0;
    auto post_batch = [&] {
      while (posted < count && posted - reaped < n) {
        std::byte* slot = rx() + (posted % n) * slot_len_;
        Watchdog dog(boot_, p_.target.timeout_ms, "posting a receive");
        Status s;
        while ((s = t_.post_recv(peer_, slot, size, desc(), 0)) == Status::again) dog.idle();
        check(s, "post_recv");
        ++posted;
      }
    };
    auto wait_slot = [&](std::uint64_t i, std::uint64_t seq) {
      const std::byte* slot = rx() + (i % n) * slot_len_;
      Watchdog dog(boot_, p_.target.timeout_ms, "waiting for the peer's message in memory");
      while (!stamped(slot, size, seq)) {
        t_.progress();
        dog.idle();
      }
      std::atomic_thread_fence(std::memory_order_acquire);
    };
    auto reap = [&](std::uint64_t upto) {
      Watchdog dog(boot_, p_.target.timeout_ms, "reaping receive completions");
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

  // A barrier used inside a phase: both sides progress while waiting.
  void wait_all_light() {
    boot_.barrier([this] { progress_all(); });
  }

  void drain_tx() {
    // Signalled sends still in flight complete once the peer has answered; collect them so
    // the completion queue starts empty for the next phase.
    for (int i = 0; i < 64; ++i) reap_tx();
  }

  // ---- one-sided latency: read, fadd, cswap (completion time of one operation) ----
  void one_sided_latency(std::size_t size, std::uint64_t count, std::vector<double>* samples) {
    auto* result = reinterpret_cast<std::uint64_t*>(src());
    for (std::uint64_t i = 0; i < count; ++i) {
      Watchdog dog(boot_, p_.target.timeout_ms, "waiting for a one-sided completion");
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

  Status post_one_sided(std::size_t qi, std::size_t size, std::uint64_t* result,
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
  const RemoteMemory& remote() const noexcept { return queues_.front().remote; }

  // ---- streaming bandwidth ----
  // Batches of p_.batch posts (FI_MORE on all but the last of each) rotate over the queues;
  // unsignalled posts are retired by the next signalled one of their queue.
  void stream(std::size_t size, std::uint64_t count) {
    const bool inject = injecting(size);
    const std::uint64_t window = std::max(1u, p_.window);
    const std::uint64_t every = is_atomic(p_.op) ? 1 : std::max(1u, p_.signal_every);
    const std::uint64_t batch = std::max(1u, p_.batch);
    const std::uint64_t nq = queues_.size();
    std::uint64_t posted = 0, retired = 0;
    std::vector<std::uint64_t> since_signal(nq, 0);
    Watchdog dog(boot_, p_.target.timeout_ms, "streaming");
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
  void sink(std::uint64_t count) {
    const std::uint64_t batch = std::max(1u, p_.batch);
    const std::uint64_t nq = queues_.size();
    std::vector<RecvPool> pools;
    const std::size_t len = std::max<std::size_t>(max_size_, 1);
    for (std::size_t q = 0; q < nq; ++q) {
      pools.push_back(recv_pool(queue_share(count, batch, nq, q)));
      top_up(pools[q], len, q);
    }
    wait_all_light();
    Watchdog dog(boot_, p_.target.timeout_ms, "receiving the stream");
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

  T& t_;
  Bootstrap& boot_;
  const RawParams& p_;
  const Clock& clock_;
  const bool inline_progress_;
  const int peer_;
  const bool initiator_;
  std::size_t max_size_ = 0;
  std::size_t buf_len_ = 0;
  std::size_t slot_len_ = 0;   // source length, and each receive slot's
  std::size_t src_slots_ = 1;  // source slots: one per ping in flight in the open loop
  std::size_t rx_len_ = 0;     // the target area: one slot, or reap_every of them
  std::vector<Queue> queues_;
  std::uint64_t seq_ = 0;
  double last_phase_seconds_ = 0;
  std::string overloaded_;  // rank 0: why the open loop could not keep its rate
};

}  // namespace

bool raw_progress_thread(const RawParams& params, const Capabilities& caps, int rank) {
  // A rank is passive if it is a passive target in every test it takes part in.
  const bool lat = params.test != RawTest::bandwidth;
  const bool bw = params.test != RawTest::latency;
  bool passive = rank != 0 && (!lat || target_passive(params.op, RawTest::latency)) &&
                 (!bw || target_passive(params.op, RawTest::bandwidth));
  return needs_progress_thread(params.progress, caps, passive);
}

std::string more_hint(const Capabilities& caps, const std::string& libfabric_version) {
  if (caps.api_version == 0) return "ignored by transport (no doorbell)";  // not libfabric
  // The providers of libfabric 1.17 whose transmit paths read FI_MORE (git grep FI_MORE
  // v1.17.0 -- prov): efa, usnic and gni defer the doorbell; tcp, shm, ofi_rxm (it sets the
  // flag only on receive completions), verbs (only in its datagram address vector) and the
  // rest never look at it.
  for (const char* user : {"efa", "usnic", "gni"})
    if (caps.provider.rfind(user, 0) == 0) return "used";
  if (libfabric_version == "1.17" || libfabric_version.rfind("1.17.", 0) == 0)
    return "ignored by provider";
  return "unknown";
}

RawResult run_raw(const RawParams& params, Bootstrap& boot) {
  TransportOptions opts = params.target.transport({params.op}, boot.local_address());
  opts.multi_recv = params.recv_post == RecvPost::multi;
  // Only a passive target may need a progress thread (rank 0 always polls).
  opts.thread_safe = raw_progress_thread(params, probe_transport(opts), boot.rank());
  std::vector<std::unique_ptr<Transport>> owned;
  std::vector<Transport*> queues;
  for (unsigned q = 0; q < params.queues; ++q) {
    owned.push_back(open_transport(opts));
    owned.back()->connect(boot);
    queues.push_back(owned.back().get());
  }
  return run_raw(params, queues, boot);
}

RawResult run_raw(const RawParams& params, Transport& transport, Bootstrap& boot) {
  Transport* one[] = {&transport};
  RawParams p = params;
  p.queues = 1;
  return run_raw(p, one, boot);
}

RawResult run_raw(const RawParams& params, std::span<Transport* const> queues, Bootstrap& boot) {
  if (queues.empty() || queues.size() != params.queues)
    throw UsageError("raw bench: " + std::to_string(params.queues) + " queues asked for, " +
                     std::to_string(queues.size()) + " transports given");
  Transport& transport = *queues.front();
  if (boot.size() != 2)
    throw UsageError("raw bench needs exactly 2 processes, got " + std::to_string(boot.size()));
  if (params.sizes.empty()) throw UsageError("no sizes given");
  const Capabilities& caps = transport.caps();
  if (!caps.supports(params.op)) throw UsageError(caps.why_not(params.op));
  for (std::size_t s : params.sizes) {
    if (s > caps.max_msg_size)
      throw UsageError("size " + std::to_string(s) + " is above " + caps.provider +
                       "'s max_msg_size " + std::to_string(caps.max_msg_size));
    if (is_atomic(params.op) && s != 8)
      throw UsageError("atomics operate on 8-byte words: use -S 8 with -o " +
                       std::string(to_string(params.op)));
  }
  if (params.signal_every == 0 || params.window == 0 || params.batch == 0)
    throw UsageError("window, signal interval and batch must be at least 1");
  if (params.reap_every > 0) {
    if (params.op != Op::send)
      throw UsageError("WRITE-like receives (reap every n) are for -o send only");
    if (params.reap_every > kMaxReapEvery)
      throw UsageError("WRITE-like receives: at most " + std::to_string(kMaxReapEvery) +
                       " posted at once");
    const std::size_t largest = *std::max_element(params.sizes.begin(), params.sizes.end());
    if (largest > (std::size_t{256} << 20) / params.reap_every)
      throw UsageError("WRITE-like receives: " + std::to_string(params.reap_every) + " x " +
                       std::to_string(largest) + " bytes of receive buffers is above 256 MiB");
    if (caps.rx_lands_on_poll)
      throw UsageError("WRITE-like send/recv is not possible on " + caps.provider +
                       ": it places a message in the posted buffer only when the receiver "
                       "polls its completions");
  }
  if (params.recv_post != RecvPost::one || params.rate > 0) {
    if (params.op != Op::send || params.test != RawTest::latency)
      throw UsageError("receive posting and the open loop are for the send ping-pong only");
    if (params.reap_every > 0)
      throw UsageError("WRITE-like receives post their own batches: use --recv-post one");
  }
  if (params.recv_batch == 0 || params.recv_batch > kMaxRecvBatch)
    throw UsageError("receives per batch: 1.." + std::to_string(kMaxRecvBatch) + ", got " +
                     std::to_string(params.recv_batch));
  if (params.recv_post == RecvPost::multi) {
    if (!caps.multi_recv)
      throw UsageError(caps.provider + " (" + std::string(to_string(caps.endpoint)) +
                       ") has no multi-receive buffers (FI_MULTI_RECV)");
    for (std::size_t s : params.sizes)
      if (s == 0)
        throw UsageError("size 0 with multi-receive buffers: a message of no bytes takes no room");
  }
  if (params.rate < 0 || params.rate > 1e9 || params.rate != params.rate)
    throw UsageError("open-loop rate: 0 (closed loop) or up to 10^9 pings per second");
  // The answering rank waits a whole ping period for the next ping.
  if (params.rate > 0 && 1000 / params.rate >= static_cast<double>(params.target.timeout_ms) / 2) {
    char period[32];
    std::snprintf(period, sizeof period, "%g", 1000 / params.rate);
    throw UsageError("open loop: a ping every " + std::string(period) +
                     " ms needs a --timeout above twice that (" +
                     std::to_string(params.target.timeout_ms) + " ms now)");
  }
  for (std::size_t s : params.sizes)
    if (s == 0 && params.op != Op::send && params.op != Op::writedata)
      throw UsageError("size 0 (header-only) is for -o send and -o writedata only");

  Clock clock;
  RawResult result;
  result.env = machine_environment();
  note_cpu_idle(result.env);
  result.params = params;
  result.env.caps = caps;
  result.env.clock = clock.name();
  result.more_hint = more_hint(caps, result.env.libfabric_version);

  const bool lat = params.test != RawTest::bandwidth;
  const bool bw = params.test != RawTest::latency;
  const bool thread = raw_progress_thread(params, caps, boot.rank());
  std::vector<std::unique_ptr<ProgressEngine>> engines;  // one per queue
  if (thread)
    for (Transport* q : queues)
      engines.push_back(std::make_unique<ProgressEngine>(*q, params.target.cpu));

  with_concrete(transport, [&](auto& t) {
    using T = std::remove_reference_t<decltype(t)>;
    std::vector<T*> typed;
    for (Transport* q : queues) {
      auto* same = dynamic_cast<T*>(q);
      if (!same) throw UsageError("raw bench: the queues are transports of different kinds");
      typed.push_back(same);
    }
    RawRunner<T> runner(typed, boot, params, clock, thread);
    for (RawTest test : {RawTest::latency, RawTest::bandwidth}) {
      if ((test == RawTest::latency && !lat) || (test == RawTest::bandwidth && !bw)) continue;
      for (std::size_t size : params.sizes)
        if (auto row = runner.run(test, size)) result.rows.push_back(*row);
    }
  });

  double progress_cpu = 0;
  for (auto& e : engines) progress_cpu += e->stop();
  struct Summary {
    double progress_cpu;
    int cpu;
    int thread;
  } mine{progress_cpu, params.target.cpu, thread ? 1 : 0};
  const auto all = allgather_value(boot, mine, "raw bench: summary");
  const Summary& s0 = all[0];
  const Summary& s1 = all[1];
  result.env.pinned = s0.cpu >= 0 && s1.cpu >= 0;
  result.env.cpu_initiator = s0.cpu;
  result.env.cpu_target = s1.cpu;
  result.env.progress_thread_initiator = s0.thread != 0;
  result.env.progress_thread_target = s1.thread != 0;
  for (auto& row : result.rows) row.cpu.progress_thread_s = s0.progress_cpu + s1.progress_cpu;
  return result;
}

}  // namespace fabflow
