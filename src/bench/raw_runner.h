// The raw bench's runner (RawRunner<T>): one rank's state for one run and the loops of its
// ping-pong latency and streaming bandwidth tests, over the concrete transport T. Internal to
// src/bench: raw.cc sets it up and runs its phases, raw_pingpong.cc and raw_stream.cc hold the
// loops; the helpers here are shared by those files (inline: the loops call them per message).
#pragma once

#include <fabflow/bench/raw.h>
#include <fabflow/bootstrap.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/bounded_wait.h"
#include "transport/dispatch.h"

namespace fabflow::raw_detail {

inline constexpr std::size_t kRxDepth = 64;  // receives kept posted
inline constexpr std::size_t kPollBatch = 16;
inline constexpr unsigned kMaxReapEvery = 256;       // WRITE-like receives posted at once
inline constexpr unsigned kMaxRecvBatch = kRxDepth;  // receives per list, messages per multi buffer

// Ping-pong ops measure a round trip and report half of it; the others time one operation.
inline bool is_pingpong(Op op) { return op == Op::send || op == Op::write || op == Op::writedata; }
// Ops whose target only has to keep the provider progressing (it never polls for anything).
inline bool target_passive(Op op, RawTest test) {
  if (op == Op::read || is_atomic(op)) return true;
  return op == Op::write && test == RawTest::bandwidth;
}

inline void compiler_barrier() { asm volatile("" ::: "memory"); }

// Sequence marks written into ping-pong payloads so the poller never accepts a torn write:
// sizes >= 16 carry the sequence number in their first and last 8 bytes (header + trailer);
// smaller ones are filled with one sequence byte, and every byte is checked.
inline void stamp(std::byte* p, std::size_t size, std::uint64_t seq) {
  if (size >= 16) {
    std::memcpy(p, &seq, 8);
    std::memcpy(p + size - 8, &seq, 8);
  } else {
    std::memset(p, static_cast<int>(seq % 255 + 1), size);
  }
}

inline bool stamped(const std::byte* p, std::size_t size, std::uint64_t seq) {
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

// A bounded wait of the raw bench (common/bounded_wait.h) that names what it waits for. It asks
// `liveness` about the peer (nullptr: a thread that must not touch the bootstrap; it still times
// out).
class Watchdog {
 public:
  Watchdog(Bootstrap* liveness, std::uint64_t timeout_ms, const char* what)
      : wait_(std::chrono::milliseconds(timeout_ms), liveness), what_(what) {}
  void reset() noexcept { wait_.reset(); }
  void idle() { wait_.idle("raw bench", what_); }

 private:
  BoundedWait wait_;
  const char* what_;
};

// The barrier of a rank's initiator (or sink) threads in a multi-threaded bandwidth test: the
// last thread to arrive runs `last` (the rank-wide barrier, which drives every thread's
// endpoints: the others are asleep here and do not touch them) and then releases them all. A
// thread that failed calls fail(): every waiting and later arrival throws its error instead of
// waiting for a thread that will not come.
class TeamBarrier {
 public:
  TeamBarrier(unsigned n, std::function<void()> last) : n_(n), last_(std::move(last)) {}
  void arrive_and_wait() {
    std::unique_lock lock(m_);
    if (error_) std::rethrow_exception(error_);
    const std::uint64_t generation = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      try {
        if (last_) last_();
      } catch (...) {
        error_ = std::current_exception();
      }
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation || error_; });
    }
    if (error_) std::rethrow_exception(error_);
  }
  void fail(std::exception_ptr e) {
    std::lock_guard lock(m_);
    if (!error_) error_ = e;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  const unsigned n_;
  unsigned arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::function<void()> last_;
  std::exception_ptr error_;
};

// The queue post i of a bandwidth test goes to, and the number of `count` posts queue `q`
// gets: batches of `batch` posts rotate over `queues` queues.
inline std::size_t queue_of(std::uint64_t i, std::uint64_t batch, std::uint64_t queues) {
  return static_cast<std::size_t>((i / batch) % queues);
}
inline std::uint64_t queue_share(std::uint64_t count, std::uint64_t batch, std::uint64_t queues,
                                 std::uint64_t q) {
  const std::uint64_t cycle = batch * queues;
  const std::uint64_t rest = count % cycle;
  const std::uint64_t before = q * batch;
  return count / cycle * batch + (rest > before ? std::min(rest - before, batch) : 0);
}
// The index of the next post after post i that goes to the same queue.
inline std::uint64_t next_on_queue(std::uint64_t i, std::uint64_t batch, std::uint64_t queues) {
  return (i + 1) % batch != 0 ? i + 1 : i + 1 + (queues - 1) * batch;
}

// One rank's state for one run. T is the concrete transport type.
template <class T>
class RawRunner {
 public:
  RawRunner(std::span<T* const> queues, Bootstrap& boot, const RawParams& p, const Clock& clock,
            bool progress_thread);

  // Runs warm-up and measurement for one size and test; rank 0 returns the row.
  std::optional<RawRow> run(RawTest test, std::size_t size);

  // A multi-threaded bandwidth test (run_raw's team): this runner is one thread's. Its phase
  // barriers meet the team's (the team's last arrival meets the peer), and it asks the
  // bootstrap about the peer only as the team's first runner (`liveness`, else nullptr).
  void join_team(TeamBarrier* team, Bootstrap* liveness) {
    team_ = team;
    liveness_ = liveness;
  }
  // One thread's bandwidth phase of `count` operations (stream or sink; nothing on a passive
  // target); returns its seconds.
  double bandwidth_phase(std::size_t size, std::uint64_t count) {
    return phase(RawTest::bandwidth, size, count, nullptr);
  }
  bool injects(std::size_t size) const noexcept { return injecting(size); }
  // Drives every endpoint of this runner once (the team's barriers).
  void drive() { progress_all(); }

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
  bool unreliable() const noexcept { return !t_.caps().reliable; }
  void* desc(std::size_t q = 0) const noexcept { return queues_[q].mr->desc(); }
  const RemoteMemory& remote() const noexcept { return queues_.front().remote; }
  void progress_all() {
    for (auto& q : queues_) q.t->progress();
  }
  bool injecting(std::size_t size) const noexcept {
    return p_.inject && !is_atomic(p_.op) && p_.op != Op::read && size <= t_.caps().inject_size;
  }

  // Defined in raw.cc: the setup, calibration and phases.
  void wait_all();
  std::uint64_t calibrate(RawTest test, std::size_t size);
  double phase(RawTest test, std::size_t size, std::uint64_t count, std::vector<double>* samples);

  void check(Status s, const char* what) {
    if (s == Status::failed)
      throw Error(std::string("raw bench: ") + what + ": " + t_.last_error());
  }
  static std::string report_number(double v) {
    char text[64];
    std::snprintf(text, sizeof text, "%.0f", v);
    return text;
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
  RecvPool recv_pool(std::uint64_t messages) const {
    const bool needs_recv =
        p_.op == Op::send || (p_.op == Op::writedata && t_.caps().rx_cq_data_consumes_recv);
    return RecvPool{needs_recv ? messages : 0, 0, 0};
  }

  // Defined in raw_pingpong.cc: the ping-pong latency loops.
  std::uint64_t in_flight_cap() const noexcept;
  void post_ping(std::size_t size, std::uint64_t seq, std::uint64_t i);
  void post_ping_from(const std::byte* from, std::size_t size, std::uint64_t seq, std::uint64_t i);
  void pingpong(std::size_t size, std::uint64_t count, std::vector<double>* samples);
  void wait_reply(std::size_t size, std::uint64_t seq, RecvPool& pool);
  bool consume_multi(const Completion& c, std::size_t size, RecvPool& pool);
  void settle_multi(RecvPool& pool);
  void open_loop(std::size_t size, std::uint64_t count, std::vector<double>* samples);
  std::string report_unsustainable(std::uint64_t sent, std::uint64_t now,
                                   const OpenLoopSchedule& s) const;
  void pingpong_write_like(std::size_t size, std::uint64_t count, std::vector<double>* samples);
  // Unreliable endpoints (caps().reliable false, dgram): a ping whose answer has not come
  // within loss_timeout_ms() is counted lost (lost_), never waited for; the target answers
  // every ping it gets until the initiator is done (it cannot know how many arrive).
  void pingpong_unreliable(std::size_t size, std::uint64_t count, std::vector<double>* samples);
  void post_dgram_receives();
  template <class OnMessage>
  void take_dgram(OnMessage&& on_message);
  std::uint64_t loss_timeout_ms() const noexcept {
    return std::min<std::uint64_t>(200, p_.target.timeout_ms);
  }

  // A barrier used inside a phase: both sides progress while waiting (in a team, the team's
  // barrier, whose last arrival meets the peer).
  void wait_all_light() {
    if (team_)
      team_->arrive_and_wait();
    else
      boot_.barrier([this] { progress_all(); });
  }

  void drain_tx() {
    // Signalled sends still in flight complete once the peer has answered; collect them so
    // the completion queue starts empty for the next phase.
    for (int i = 0; i < 64; ++i) reap_tx();
  }

  // Defined in raw_stream.cc: one-sided latency and streaming bandwidth.
  void one_sided_latency(std::size_t size, std::uint64_t count, std::vector<double>* samples);
  Status post_one_sided(std::size_t qi, std::size_t size, std::uint64_t* result, std::uint64_t ctx);
  void stream(std::size_t size, std::uint64_t count);
  void sink(std::uint64_t count);

  T& t_;
  Bootstrap& boot_;
  Bootstrap* liveness_ = &boot_;  // what the watchdogs ask about the peer (join_team)
  TeamBarrier* team_ = nullptr;
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
  std::uint64_t lost_ = 0;     // unreliable: pings of the current phase counted lost
  bool dgram_posted_ = false;  // unreliable: every receive slot has its receive posted
  double last_phase_seconds_ = 0;
  std::string overloaded_;  // rank 0: why the open loop could not keep its rate
};

}  // namespace fabflow::raw_detail
