// One configuration of the request-response benchmark (rr_config.h): payloads for --verify,
// the requester threads' loop over a private channel or a dispatcher's mailboxes, the
// dispatcher and responder loops, and the callgrind profile.
#include "bench/rr_config.h"

#include <valgrind/callgrind.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>
#include <unistd.h>

#include "common/affinity.h"
#include "common/bounded_wait.h"

namespace fabflow::bench_rr {
namespace {

// ---- payloads for --verify: every byte follows from a 64-bit tag naming the request ----

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  return x ^ (x >> 33);
}
void fill(std::span<std::byte> p, std::uint64_t tag) {
  std::uint64_t x = tag;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (i % 8 == 0) x = mix(x + i);
    p[i] = static_cast<std::byte>(x >> (8 * (i % 8)));
  }
}
std::uint64_t checksum(std::span<const std::byte> p) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (std::byte b : p) h = (h ^ static_cast<std::uint8_t>(b)) * 0x100000001b3ull;
  return h;
}
// The request's tag in its first 8 bytes, the rest derived from it.
void make_request(std::span<std::byte> p, std::uint64_t tag) {
  fill(p, tag);
  std::memcpy(p.data(), &tag, 8);
}
// The verifying responder: the response starts with the request's checksum, then bytes
// derived from the request's tag, so a response can only pass for its own request.
std::size_t verify_handler(int, std::span<const std::byte> req, std::span<std::byte> resp) {
  if (req.size() < 8 || resp.size() < 8)
    throw Error("verify needs requests and responses of 8+ bytes");
  std::uint64_t tag, sum = checksum(req);
  std::memcpy(&tag, req.data(), 8);
  fill(resp, ~tag);
  std::memcpy(resp.data(), &sum, 8);
  return resp.size();
}
void check_response(std::span<const std::byte> req, std::span<const std::byte> resp,
                    std::size_t expected_len, std::uint64_t tag) {
  std::vector<std::byte> want(expected_len);
  fill(want, ~tag);
  std::uint64_t sum = checksum(req);
  std::memcpy(want.data(), &sum, 8);
  if (resp.size() != expected_len || std::memcmp(resp.data(), want.data(), expected_len) != 0)
    throw Error("rr bench: response to request " + std::to_string(tag & 0xffffffffu) +
                " does not match its request (cross-talk or corruption)");
}

// Runs `body` with the thread's CPU time and hardware counters recorded around it.
template <class F>
ThreadLoad measured(std::uint64_t* messages, F&& body) {
  ThreadCounters counters;
  auto before = counters.read();
  double c0 = thread_cpu_seconds();
  body();
  ThreadLoad l;
  l.cpu_s = thread_cpu_seconds() - c0;
  l.messages = *messages;
  auto after = counters.read();
  if (before && after)
    l.counters =
        CounterValues{after->instructions - before->instructions, after->cycles - before->cycles};
  return l;
}

// ---- requester threads: the same loop over a private channel or a dispatcher's mailboxes ----

class PrivatePort {
 public:
  explicit PrivatePort(rr::Requester& r) : r_(r) {}
  unsigned depth() const { return r_.slots(); }
  std::span<std::byte> buffer(unsigned k) { return r_.request_buffer(k); }
  Status submit(unsigned k, int responder, std::size_t len) {
    Status s = r_.submit(k, responder, len);
    if (s == Status::failed) throw Error(r_.error());
    return s;
  }
  bool poll(unsigned* k, std::span<const std::byte>* data) {
    Status s = r_.poll(&current_);
    if (s == Status::failed) throw Error(r_.error());
    if (s != Status::ok) return false;
    *k = current_.slot;
    *data = current_.data;
    held_[current_.slot] = current_;
    return true;
  }
  void release(unsigned k) { r_.release(held_[k]); }
  void prepare() { held_.resize(r_.slots()); }

 private:
  rr::Requester& r_;
  rr::Response current_;
  std::vector<rr::Response> held_;
};

class DispatchPort {
 public:
  // sleep: wait on the doorbell instead of spinning (more threads than CPUs).
  DispatchPort(rr::DispatcherRequester& d, unsigned worker, bool sleep)
      : d_(d), w_(worker), sleep_(sleep) {}
  unsigned depth() const { return d_.slots_per_worker(); }
  std::span<std::byte> buffer(unsigned k) { return d_.request_buffer(w_, k); }
  Status submit(unsigned k, int responder, std::size_t len) {
    Status s = d_.hand_over(w_, k, responder, len);
    if (s == Status::ok) pending_.push_back(k);
    return s;
  }
  bool poll(unsigned* k, std::span<const std::byte>* data) {
    for (;;) {
      std::uint32_t bell = d_.doorbell(w_);
      if (d_.failed()) throw Error("rr bench: the dispatcher failed: " + d_.error());
      for (std::size_t i = 0; i < pending_.size(); ++i)
        if (auto r = d_.response(w_, pending_[i])) {
          *k = pending_[i];
          *data = *r;
          pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
          return true;
        }
      if (!sleep_ || pending_.empty()) return false;
      d_.wait_doorbell(w_, bell);  // the dispatcher rings after delivering, and on failure
    }
  }
  void release(unsigned k) { d_.release(w_, k); }
  void prepare() {}

 private:
  rr::DispatcherRequester& d_;
  unsigned w_;
  bool sleep_;
  std::vector<unsigned> pending_;
};

template <class Port>
WorkerResult drive(Port& port, const WorkerSetup& s) {
  port.prepare();
  WorkerResult res;
  const std::uint64_t total = s.p.warmup + s.p.requests;
  res.samples.reserve(std::min<std::uint64_t>(s.p.requests, 1u << 20));
  std::mt19937_64 rng(s.seed);
  std::uniform_int_distribution<int> pick(0, s.p.responders - 1);
  std::uniform_int_distribution<unsigned> percent(0, 99);
  const auto idle_wait = std::chrono::nanoseconds(s.p.idle_wait_ns);
  const unsigned depth = port.depth();
  std::vector<std::uint64_t> started(depth), number(depth);
  std::vector<unsigned> idle;
  for (unsigned k = depth; k-- > 0;) idle.push_back(k);
  std::uint64_t submitted = 0, done = 0, cpu_msgs = 0, start = s.clock.now();
  BoundedWait watch(std::chrono::milliseconds(s.p.target.timeout_ms), s.boot, {}, 256);
  watch.yield_when_idle(s.yield);
  res.load = measured(&cpu_msgs, [&] {
    while (done < total) {
      while (!idle.empty() && submitted < total) {
        // Idle turns: this thread "contacts another responder" instead (a wait, no request).
        while (s.p.idle_requesters_pct && percent(rng) < s.p.idle_requesters_pct) {
          const auto until = std::chrono::steady_clock::now() + idle_wait;
          while (std::chrono::steady_clock::now() < until) {
          }
          if (submitted >= s.p.warmup) ++res.idle_turns;
        }
        unsigned k = idle.back();
        auto buf = port.buffer(k).first(s.o.request_bytes);
        std::uint64_t tag = s.tag_base | submitted;
        if (s.p.verify) make_request(buf, tag);
        int responder = s.p.topology == rr::Topology::n_to_m ? pick(rng) : 0;
        started[k] = s.clock.now();
        if (port.submit(k, responder, s.o.request_bytes) != Status::ok) break;
        number[k] = submitted++;
        idle.pop_back();
      }
      unsigned k;
      std::span<const std::byte> data;
      if (!port.poll(&k, &data)) {
        if (s.stop->load(std::memory_order_relaxed))
          throw Error("rr bench: stopped after another thread failed");
        watch.idle("rr", "waiting for a response");
        continue;
      }
      watch.reset();
      std::uint64_t now = s.clock.now();
      if (s.p.verify)
        check_response(port.buffer(k).first(s.o.request_bytes), data, s.o.response_bytes,
                       s.tag_base | number[k]);
      else if (data.size() != s.o.response_bytes)
        throw Error("rr bench: a response of " + std::to_string(data.size()) + " bytes, expected " +
                    std::to_string(s.o.response_bytes));
      port.release(k);
      idle.push_back(k);
      if (number[k] >= s.p.warmup) res.samples.push_back(s.clock.to_ns(now - started[k]));
      ++cpu_msgs;
      if (++done == s.p.warmup) start = now;
    }
    res.seconds = s.clock.to_ns(s.clock.now() - start) / 1e9;
  });
  return res;
}

int cpu_of_thread(const RrParams& p, unsigned i) {
  if (!p.target.pin || p.target.cpu < 0) return -1;
  const std::vector<int>& cpus = p.target.cpus;
  if (cpus.empty()) return -1;
  auto it = std::find(cpus.begin(), cpus.end(), p.target.cpu);
  std::size_t base = it == cpus.end() ? 0 : static_cast<std::size_t>(it - cpus.begin());
  return cpus[(base + i) % cpus.size()];
}

}  // namespace

Config::Config(const RrParams& p, Bootstrap& boot, const Clock& clock, const rr::ChannelOptions& o,
               rr::Model model)
    : p_(p),
      boot_(boot),
      clock_(clock),
      o_(o),
      model_(model),
      requester_(boot.rank() < p.requesters) {
  // More spinning threads on this host than CPUs: waits yield so the peer can run.
  const unsigned spinning =
      static_cast<unsigned>(p.requesters) * (p.threads + (model == rr::Model::dispatcher)) +
      static_cast<unsigned>(p.responders);
  yield_ = p.always_yield || spinning > std::max<std::size_t>(p.target.cpus.size(), 1);
}

RankSummary Config::run(const TransportOptions& to) {
  const unsigned lanes = model_ == rr::Model::private_connections ? p_.threads : 1;
  const unsigned slots =
      model_ == rr::Model::private_connections ? p_.depth : p_.depth * p_.threads;
  std::vector<Lane> lane(lanes);
  for (auto& l : lane) {  // collective, one lane at a time
    l.transport = open_transport(to);
    l.transport->connect(boot_);
    if (requester_)
      l.requester = rr::make_requester(*l.transport, boot_, o_, p_.requesters, slots);
    else
      l.responder = rr::make_responder(*l.transport, boot_, o_, p_.requesters);
  }
  boot_.barrier([&] {
    for (auto& l : lane) l.transport->progress();
  });
  if (p_.callgrind) CALLGRIND_ZERO_STATS;
  RankSummary s = requester_ ? request(lane) : serve(lane);
  if (p_.callgrind) {
    CALLGRIND_DUMP_STATS;
    profile = callgrind::read_newest(p_.callgrind_dir, ::getpid());
    s.callgrind_ir = profile.total;
  }
  // Requesters closed their channels; everyone keeps progressing until all are done.
  boot_.barrier([&] {
    for (auto& l : lane) l.transport->progress();
  });
  return s;
}

WorkerSetup Config::setup(unsigned thread, Bootstrap* boot) {
  std::uint64_t tag =
      (static_cast<std::uint64_t>(boot_.rank()) << 48) | (static_cast<std::uint64_t>(thread) << 32);
  return {p_, o_, clock_, boot, &stop_, yield_, tag, p_.seed * 7919 + tag};
}

void Config::add(RankSummary& s, const WorkerResult& w) {
  s.cpu_s += w.load.cpu_s;
  s.messages += w.load.messages;
  if (w.load.counters) {
    s.instructions += w.load.counters->instructions;
    s.cycles += w.load.counters->cycles;
  } else {
    s.counters_ok = 0;
  }
  double secs = w.seconds > 0 ? w.seconds : 0;
  if (secs > 0) s.rate += static_cast<double>(w.samples.size()) / secs;
  s.seconds = std::max(s.seconds, secs);
  s.measured += w.samples.size();
  s.idle_turns += w.idle_turns;
  samples.insert(samples.end(), w.samples.begin(), w.samples.end());
}

template <class Body>
void Config::run_threads(unsigned n, unsigned first_cpu, Body&& body) {
  std::vector<std::thread> threads;
  std::mutex m;
  std::exception_ptr first;
  for (unsigned i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      if (int cpu = cpu_of_thread(p_, first_cpu + i); cpu >= 0) pin_current_thread(cpu);
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!first) first = std::current_exception();
        stop_ = true;
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

RankSummary Config::request(std::vector<Lane>& lane) {
  RankSummary s;
  std::vector<WorkerResult> results(p_.threads);
  if (model_ == rr::Model::private_connections) {
    // Thread i owns lane i; thread 0 also watches the bootstrap. This thread only joins, so
    // thread 0 takes its CPU.
    run_threads(p_.threads, 0, [&](unsigned i) {
      PrivatePort port(*lane[i].requester);
      results[i] = drive(port, setup(i, i == 0 ? &boot_ : nullptr));
      close(*lane[i].requester);
    });
  } else {
    rr::DispatcherRequester d(*lane[0].requester, p_.threads);
    std::atomic<unsigned> running{p_.threads};
    std::exception_ptr dispatcher_error;
    std::uint64_t dispatched = 0;
    ThreadLoad dl;
    std::thread dispatcher([&] {
      if (int cpu = cpu_of_thread(p_, 0); cpu >= 0) pin_current_thread(cpu);
      try {
        dl = measured(&dispatched, [&] { dispatch(d, running, dispatched); });
      } catch (...) {
        dispatcher_error = std::current_exception();
        d.abort();
      }
    });
    try {
      run_threads(p_.threads, 1, [&](unsigned i) {
        struct Done {  // the dispatcher runs until every worker left, however it left
          std::atomic<unsigned>& n;
          ~Done() { --n; }
        } done{running};
        DispatchPort port(d, i, yield_);
        try {
          results[i] = drive(port, setup(i, nullptr));
        } catch (...) {
          d.abort();
          throw;
        }
      });
    } catch (...) {
      dispatcher.join();
      if (dispatcher_error) std::rethrow_exception(dispatcher_error);
      throw;
    }
    dispatcher.join();
    if (dispatcher_error) std::rethrow_exception(dispatcher_error);
    close(*lane[0].requester);
    // The dispatcher's CPU is requester-side work; its messages are the workers'.
    s.cpu_s += dl.cpu_s;
    if (dl.counters) {
      s.instructions += dl.counters->instructions;
      s.cycles += dl.counters->cycles;
    } else {
      s.counters_ok = 0;
    }
  }
  for (const auto& w : results) add(s, w);
  return s;
}

void Config::dispatch(rr::DispatcherRequester& d, std::atomic<unsigned>& running,
                      std::uint64_t& moved) {
  BoundedWait watch(std::chrono::milliseconds(p_.target.timeout_ms), &boot_, {}, 256);
  watch.yield_when_idle(yield_);
  while (running.load(std::memory_order_acquire) > 0) {
    Status s = d.run_once();
    if (s == Status::failed) throw Error(d.error());
    if (s == Status::ok) {
      ++moved;
      watch.reset();
    } else {
      watch.idle("rr", "dispatching");
    }
  }
}

void Config::close(rr::Requester& r) {
  if (r.close() != Status::ok) throw Error(r.error());
}

RankSummary Config::serve(std::vector<Lane>& lane) {
  RankSummary s;
  s.role = 1;
  const rr::Handler handler = verify_handler;
  const rr::Handler* h = p_.verify ? &handler : nullptr;
  std::uint64_t served = 0;
  ThreadLoad load = measured(&served, [&] {
    BoundedWait watch(std::chrono::milliseconds(p_.target.timeout_ms), &boot_, {}, 256);
    watch.yield_when_idle(yield_);
    auto all_done = [&] {
      return std::all_of(lane.begin(), lane.end(),
                         [](const Lane& l) { return l.responder->done(); });
    };
    while (!all_done()) {
      unsigned got = 0;
      for (auto& l : lane) {
        unsigned n = 0;
        if (l.responder->serve(h, &n) == Status::failed) throw Error(l.responder->error());
        got += n;
      }
      if (got) {
        served += got;
        watch.reset();
      } else {
        watch.idle("rr", "waiting for requests");
      }
    }
  });
  served = 0;
  for (auto& l : lane) {
    const rr::ChannelStats& st = l.responder->stats();
    served += st.requests;
    s.scans += st.scans;
    s.empty_scans += st.empty_polls;
    s.mailboxes_read += st.mailboxes_read;
    s.mailboxes_with_request += st.mailboxes_with_request;
  }
  s.cpu_s = load.cpu_s;
  s.messages = served;
  s.served = served;
  if (load.counters) {
    s.instructions = load.counters->instructions;
    s.cycles = load.counters->cycles;
  } else {
    s.counters_ok = 0;
  }
  return s;
}

}  // namespace fabflow::bench_rr
