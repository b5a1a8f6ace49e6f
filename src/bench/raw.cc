// The raw microbenchmarks: ping-pong latency and streaming bandwidth of one fabric operation
// between two ranks, in perftest / fabtests terms. The loops are templates over the concrete
// transport so the data path is bound statically (bench/raw_runner.h); this file holds the
// entry points, the checks of the parameters, and the runner's setup, calibration and phases.
#include <fabflow/bench/raw.h>
#include <fabflow/bootstrap.h>
#include <fabflow/progress.h>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bench/raw_runner.h"
#include "common/affinity.h"
#include "transport/dispatch.h"

namespace fabflow {
namespace raw_detail {

template <class T>
RawRunner<T>::RawRunner(std::span<T* const> queues, Bootstrap& boot, const RawParams& p,
                        const Clock& clock, bool progress_thread)
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
  if (unreliable()) rx_slots = kRxDepth;  // a receive per slot: a late answer cannot overwrite
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

template <class T>
std::optional<RawRow> RawRunner<T>::run(RawTest test, std::size_t size) {
  const bool passive_me = !initiator_ && target_passive(p_.op, test);
  wait_all();
  phase(test, size, p_.warmup, nullptr);
  wait_all();

  std::uint64_t iters = p_.duration_s > 0 ? calibrate(test, size) : p_.iterations;

  std::vector<double> samples;
  if (initiator_ && test == RawTest::latency) samples.reserve(iters);
  lost_ = 0;
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
    row.lost = lost_;
    row.reliable = t_.caps().reliable;
    if (samples.empty())
      throw Error("raw bench: every one of " + std::to_string(iters) +
                  " pings was lost on the unreliable endpoint: no latency to report");
    row.latency = summarize(samples);
    row.seconds = seconds;
  } else {
    row.seconds = seconds;
    row.mbps = static_cast<double>(size) * static_cast<double>(iters) / seconds / 1e6;
    row.msgs_per_s = static_cast<double>(iters) / seconds;
    row.threads = 1;
    row.threads_pinned = p_.target.cpu >= 0;
    row.per_thread = {{p_.target.cpu, iters, seconds, row.mbps, row.msgs_per_s}};
  }
  return row;
}

// A barrier during which this rank keeps the provider progressing (its peer may still need
// it to complete operations aimed at this rank).
template <class T>
void RawRunner<T>::wait_all() {
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
template <class T>
std::uint64_t RawRunner<T>::calibrate(RawTest test, std::size_t size) {
  constexpr std::uint64_t kFinal = 1ull << 63;
  constexpr std::uint64_t kMaxIters = 1ull << 34;
  std::uint64_t n = std::max<std::uint64_t>(p_.warmup, 1);
  double seconds = last_phase_seconds_;
  for (;;) {
    std::uint64_t decision = 0;
    if (initiator_) {
      double per_op = seconds / static_cast<double>(n);
      if (seconds >= p_.duration_s / 10 || n >= kMaxIters / 4 || per_op <= 0)
        decision = kFinal | std::clamp<std::uint64_t>(
                                per_op > 0 ? static_cast<std::uint64_t>(p_.duration_s / per_op) : n,
                                100, kMaxIters);
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
template <class T>
double RawRunner<T>::phase(RawTest test, std::size_t size, std::uint64_t count,
                           std::vector<double>* samples) {
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

// ---- multi-threaded bandwidth tests (RawParams::threads) ----

// The CPUs of a rank's team threads: thread 0 on the rank's own CPU, the others on CPUs no
// other busy thread of the run holds (on one host, rank 0's extra threads take the first free
// CPUs and rank 1's the next ones). Where the host has too few, no thread is pinned.
struct TeamPlan {
  std::vector<int> cpus;  // per thread; -1: not pinned
  bool pinned = false;
};

TeamPlan plan_team(const RawParams& p, Bootstrap& boot, bool active_target) {
  const unsigned n = p.threads;
  const int rank = boot.rank();
  const auto mains = allgather_value(boot, p.target.cpu, "raw bench: team CPUs");  // collective
  TeamPlan plan;
  plan.cpus.assign(n, -1);
  if (!p.target.pin || mains[0] < 0 || mains[1] < 0) return plan;
  const bool shared = p.target.same_host;
  if (shared && mains[0] == mains[1]) return plan;
  const std::vector<int> host = p.target.cpus.empty() ? allowed_cpus() : p.target.cpus;
  const int own = mains[static_cast<std::size_t>(rank)];
  const int other = mains[static_cast<std::size_t>(1 - rank)];
  std::vector<int> free;
  for (int c : host)
    if (c != own && (!shared || c != other)) free.push_back(c);
  const std::size_t extra0 = n - 1;
  const std::size_t extra1 = active_target ? n - 1 : 0;
  const std::size_t mine = rank == 0 ? extra0 : extra1;
  const std::size_t offset = shared && rank == 1 ? extra0 : 0;
  const std::size_t needed = shared ? extra0 + extra1 : mine;
  if (free.size() < needed) return plan;
  plan.pinned = true;
  plan.cpus[0] = own;
  for (std::size_t k = 1; k <= mine; ++k) plan.cpus[k] = free[offset + k - 1];
  return plan;
}

// Places the calling team thread: on its CPU, or (unpinned) anywhere on the host's CPUs, not
// the CPU its spawning thread was pinned to.
void place_team_thread(const TeamPlan& plan, std::size_t k, const std::vector<int>& host) {
  if (plan.pinned && plan.cpus[k] >= 0) {
    pin_current_thread(plan.cpus[k]);
    return;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : host) CPU_SET(c, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

template <class T>
void run_team(std::span<T* const> typed, Bootstrap& boot, const RawParams& params,
              const Clock& clock, bool progress_thread, RawResult& result) {
  using Runner = RawRunner<T>;
  const unsigned n = params.threads;
  const bool initiator = boot.rank() == 0;
  const bool active_target = !target_passive(params.op, RawTest::bandwidth);
  const bool passive_me = !initiator && !active_target;
  const TeamPlan plan = plan_team(params, boot, active_target);
  const std::vector<int> host = params.target.cpus.empty() ? allowed_cpus() : params.target.cpus;

  std::vector<std::unique_ptr<Runner>> runners;  // collective, one thread's endpoints at a time
  for (unsigned k = 0; k < n; ++k)
    runners.push_back(
        std::make_unique<Runner>(typed.subspan(std::size_t{k} * params.queues, params.queues), boot,
                                 params, clock, progress_thread));
  auto drive_all = [&] {
    for (auto& r : runners) r->drive();
  };
  TeamBarrier team(n, [&] { boot.barrier(drive_all); });
  for (unsigned k = 0; k < n; ++k) runners[k]->join_team(&team, k == 0 ? &boot : nullptr);
  auto wait_all = [&] {
    if (!progress_thread)
      boot.barrier([&] {
        for (int i = 0; i < 256; ++i) drive_all();
      });
    else
      boot.barrier([] { std::this_thread::sleep_for(std::chrono::microseconds(50)); });
  };

  // Runs one phase in n threads; each thread's start (after a common gate) and end.
  using TimePoint = std::chrono::steady_clock::time_point;
  std::vector<TimePoint> start(n), end(n);
  auto run_threads = [&](std::size_t size, std::uint64_t count) {
    TeamBarrier gate(n, {});
    std::mutex m;
    std::exception_ptr error;
    std::vector<std::thread> threads;
    for (unsigned k = 0; k < n; ++k)
      threads.emplace_back([&, k] {
        try {
          place_team_thread(plan, k, host);
          gate.arrive_and_wait();
          start[k] = std::chrono::steady_clock::now();
          runners[k]->bandwidth_phase(size, count);
          end[k] = std::chrono::steady_clock::now();
        } catch (...) {
          std::lock_guard lock(m);
          if (!error) error = std::current_exception();
          team.fail(std::current_exception());
          gate.fail(std::current_exception());
        }
      });
    for (auto& t : threads) t.join();
    if (error) std::rethrow_exception(error);
  };

  for (std::size_t size : params.sizes) {
    wait_all();
    if (!passive_me) run_threads(size, params.warmup);
    wait_all();
    const std::uint64_t iters = params.iterations;
    const double cpu0 = process_cpu_seconds();
    if (!passive_me) run_threads(size, iters);
    wait_all();
    const double cpu = process_cpu_seconds() - cpu0;
    const auto reports = allgather_value(boot, cpu, "raw bench: phase report");
    const double cpu_target = reports[1];
    if (!(cpu_target >= 0 && cpu_target < 1e6))
      throw PeerError(1, "raw bench: rank 1 reported an impossible CPU time");
    if (!initiator) continue;

    RawRow row;
    row.test = RawTest::bandwidth;
    row.op = params.op;
    row.size = size;
    row.injected = runners.front()->injects(size);
    row.one_way = is_pingpong(params.op);
    row.threads = n;
    row.threads_pinned = plan.pinned;
    const TimePoint first = *std::min_element(start.begin(), start.end());
    const TimePoint last = *std::max_element(end.begin(), end.end());
    for (unsigned k = 0; k < n; ++k) {
      RawThreadShare share;
      share.cpu = plan.cpus[k];
      share.iterations = iters;
      share.seconds = std::chrono::duration<double>(end[k] - first).count();
      share.msgs_per_s = static_cast<double>(iters) / share.seconds;
      share.mbps = static_cast<double>(size) * share.msgs_per_s / 1e6;
      row.per_thread.push_back(share);
    }
    row.iterations = iters * n;
    row.seconds = std::chrono::duration<double>(last - first).count();
    row.msgs_per_s = static_cast<double>(row.iterations) / row.seconds;
    row.mbps = static_cast<double>(size) * row.msgs_per_s / 1e6;
    row.cpu.initiator_ns_per_msg = cpu * 1e9 / static_cast<double>(row.iterations);
    row.cpu.target_ns_per_msg = cpu_target * 1e9 / static_cast<double>(row.iterations);
    result.rows.push_back(row);
  }
}

}  // namespace raw_detail

bool raw_progress_thread(const RawParams& params, const Capabilities& caps, int rank) {
  // A rank is passive if it is a passive target in every test it takes part in.
  const bool lat = params.test != RawTest::bandwidth;
  const bool bw = params.test != RawTest::latency;
  bool passive = rank != 0 && (!lat || raw_detail::target_passive(params.op, RawTest::latency)) &&
                 (!bw || raw_detail::target_passive(params.op, RawTest::bandwidth));
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
  for (unsigned q = 0; q < params.queues * std::max(params.threads, 1u); ++q) {
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
  p.threads = 1;
  return run_raw(p, one, boot);
}

RawResult run_raw(const RawParams& params, std::span<Transport* const> queues, Bootstrap& boot) {
  if (params.threads == 0 || params.threads > 64)
    throw UsageError("raw bench: initiator threads: 1..64, got " + std::to_string(params.threads));
  const std::size_t endpoints = std::size_t{params.queues} * params.threads;
  if (queues.empty() || queues.size() != endpoints)
    throw UsageError("raw bench: " + std::to_string(params.queues) + " queues x " +
                     std::to_string(params.threads) + " threads asked for, " +
                     std::to_string(queues.size()) + " transports given");
  if (params.threads > 1) {
    if (params.test != RawTest::bandwidth)
      throw UsageError("initiator threads (--threads " + std::to_string(params.threads) +
                       ") are for the bandwidth test only: add -t bw");
    if (params.duration_s > 0)
      throw UsageError("initiator threads (--threads) stream -I iterations each: drop --duration");
  }
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
  if (!caps.reliable) {
    // A lost message would leave a streaming sink, a write-like poller or an open loop waiting
    // for what never comes; the closed send ping-pong counts it lost instead.
    if (params.op != Op::send || params.test != RawTest::latency || params.reap_every > 0 ||
        params.recv_post != RecvPost::one || params.rate > 0)
      throw UsageError(caps.provider +
                       "'s dgram endpoint is unreliable: it runs only the closed send ping-pong "
                       "(-o send -t lat, receives posted one by one), which counts lost pings");
    for (std::size_t s : params.sizes)
      if (s == 0)
        throw UsageError(
            "size 0 on an unreliable endpoint: a ping of no bytes carries no sequence number, "
            "so a late answer could not be told from the awaited one");
  }
  if (params.signal_every == 0 || params.window == 0 || params.batch == 0)
    throw UsageError("window, signal interval and batch must be at least 1");
  if (params.reap_every > 0) {
    if (params.op != Op::send)
      throw UsageError("WRITE-like receives (reap every n) are for -o send only");
    if (params.reap_every > raw_detail::kMaxReapEvery)
      throw UsageError("WRITE-like receives: at most " + std::to_string(raw_detail::kMaxReapEvery) +
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
  if (params.recv_batch == 0 || params.recv_batch > raw_detail::kMaxRecvBatch)
    throw UsageError("receives per batch: 1.." + std::to_string(raw_detail::kMaxRecvBatch) +
                     ", got " + std::to_string(params.recv_batch));
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
    if (params.threads > 1) {
      raw_detail::run_team<T>(typed, boot, params, clock, thread, result);
      return;
    }
    raw_detail::RawRunner<T> runner(typed, boot, params, clock, thread);
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