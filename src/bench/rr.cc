// The request-response benchmark (seed 000): requester processes (each with T threads) and
// responder processes exchange requests and responses over a channel per (pattern, model,
// response size). Requester threads measure every round trip; both sides report CPU per
// message. Ranks [0, requesters) request, the rest respond.
#include <fabflow/bench/raw.h>
#include <fabflow/bench/rr.h>
#include <fabflow/bootstrap.h>
#include <fabflow/progress.h>

#include <nlohmann/json.hpp>
#include <valgrind/callgrind.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <type_traits>
#include <unistd.h>

#include "common/affinity.h"
#include "common/perf.h"
#include "common/bounded_wait.h"

namespace fabflow {
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

// What one thread measured.
struct ThreadLoad {
  double cpu_s = 0;
  std::uint64_t messages = 0;
  std::optional<CounterValues> counters;
};

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

struct WorkerResult {
  std::vector<double> samples;  // round trips, ns
  double seconds = 0;           // measured phase
  ThreadLoad load;
};

struct WorkerSetup {
  const RrParams& p;
  const rr::ChannelOptions& o;
  const Clock& clock;
  Bootstrap* boot;                // liveness checks; one thread per process at a time may use it
  const std::atomic<bool>* stop;  // another thread of this rank failed
  bool yield;
  std::uint64_t tag_base;  // rank and thread, for --verify tags
  std::uint64_t seed;
};

template <class Port>
WorkerResult drive(Port& port, const WorkerSetup& s) {
  port.prepare();
  WorkerResult res;
  const std::uint64_t total = s.p.warmup + s.p.requests;
  res.samples.reserve(std::min<std::uint64_t>(s.p.requests, 1u << 20));
  std::mt19937_64 rng(s.seed);
  std::uniform_int_distribution<int> pick(0, s.p.responders - 1);
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

// ---- one configuration ----

struct Lane {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<rr::Requester> requester;
  std::unique_ptr<rr::Responder> responder;
};

// What each rank sends rank 0 after a configuration (fixed-size part).
struct RankSummary {
  std::uint32_t role = 0;  // 0 requester, 1 responder
  std::uint32_t counters_ok = 1;
  double cpu_s = 0;
  std::uint64_t messages = 0;
  std::uint64_t instructions = 0, cycles = 0;
  double rate = 0;     // requester: sum of its threads' rates
  double seconds = 0;  // requester: longest thread's measured time
  std::uint64_t measured = 0;
  std::uint64_t served = 0;  // responder: requests answered
  double callgrind_ir = -1;  // whole process during the run; < 0: not measured
};

int cpu_of_thread(const RrParams& p, unsigned i) {
  if (!p.target.pin || p.target.cpu < 0) return -1;
  const std::vector<int>& cpus = p.target.cpus;
  if (cpus.empty()) return -1;
  auto it = std::find(cpus.begin(), cpus.end(), p.target.cpu);
  std::size_t base = it == cpus.end() ? 0 : static_cast<std::size_t>(it - cpus.begin());
  return cpus[(base + i) % cpus.size()];
}

// Total Ir in this process' latest callgrind dump (after CALLGRIND_DUMP_STATS).
double callgrind_ir(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string prefix = "cg." + std::to_string(::getpid());
  fs::path newest;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0 &&
        (newest.empty() || e.path().filename().string() > newest.filename().string()))
      newest = e.path();
  if (newest.empty())
    throw Error("rr bench: no callgrind dump in " + dir + " (not run under callgrind?)");
  std::ifstream in(newest);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("summary:", 0) == 0 || line.rfind("totals:", 0) == 0)
      return std::stod(line.substr(line.find(':') + 1));
  throw Error("rr bench: no totals in " + newest.string());
}

class Config {
 public:
  Config(const RrParams& p, Bootstrap& boot, const Clock& clock, const rr::ChannelOptions& o,
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

  RankSummary run(const TransportOptions& to) {
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
      s.callgrind_ir = callgrind_ir(p_.callgrind_dir);
    }
    // Requesters closed their channels; everyone keeps progressing until all are done.
    boot_.barrier([&] {
      for (auto& l : lane) l.transport->progress();
    });
    return s;
  }

  std::vector<double> samples;  // requester ranks: every measured round trip

 private:
  WorkerSetup setup(unsigned thread, Bootstrap* boot) {
    std::uint64_t tag = (static_cast<std::uint64_t>(boot_.rank()) << 48) |
                        (static_cast<std::uint64_t>(thread) << 32);
    return {p_, o_, clock_, boot, &stop_, yield_, tag, p_.seed * 7919 + tag};
  }

  void add(RankSummary& s, const WorkerResult& w) {
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
    samples.insert(samples.end(), w.samples.begin(), w.samples.end());
  }

  // Runs `n` threads of `body(i)`, pinned next to this rank's CPU. The first failure is
  // rethrown after all joined; it sets stop_ so that the other threads give up at once.
  template <class Body>
  void run_threads(unsigned n, unsigned first_cpu, Body&& body) {
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

  RankSummary request(std::vector<Lane>& lane) {
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

  // The dispatcher thread: drives the channel until every worker is done.
  void dispatch(rr::DispatcherRequester& d, std::atomic<unsigned>& running, std::uint64_t& moved) {
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

  void close(rr::Requester& r) {
    if (r.close() != Status::ok) throw Error(r.error());
  }

  RankSummary serve(std::vector<Lane>& lane) {
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
    for (auto& l : lane) served += l.responder->stats().requests;
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

  const RrParams& p_;
  Bootstrap& boot_;
  const Clock& clock_;
  const rr::ChannelOptions& o_;
  rr::Model model_;
  bool requester_;
  bool yield_ = false;
  std::atomic<bool> stop_{false};
};

RrCpu side_cpu(const std::vector<RankSummary>& all, std::uint32_t role, const RrParams& p) {
  double cpu = 0, instr = 0, cycles = 0, ir = 0;
  std::uint64_t msgs = 0;
  bool counters = true, callgrind = p.callgrind;
  for (const auto& s : all) {
    if (s.role != role) continue;
    cpu += s.cpu_s;
    msgs += s.messages;
    instr += static_cast<double>(s.instructions);
    cycles += static_cast<double>(s.cycles);
    counters = counters && s.counters_ok;
    if (s.callgrind_ir < 0) callgrind = false;
    ir += s.callgrind_ir;
  }
  RrCpu c;
  double n = static_cast<double>(std::max<std::uint64_t>(msgs, 1));
  c.ns_per_msg = cpu * 1e9 / n;
  if (counters) {
    c.instructions_per_msg = instr / n;
    c.cycles_per_msg = cycles / n;
  }
  if (callgrind) c.callgrind_ir_per_msg = ir / n;
  return c;
}

// Rank 0 combines every rank's summary and samples into the row.
void collect(const RrParams& p, Bootstrap& boot, const RankSummary& mine,
             std::vector<double>& samples, RrRow& row) {
  const auto all = allgather_value(boot, mine, "rr bench: summary");
  const auto rank_samples =
      allgather_values(boot, std::span<const double>(samples), "rr bench: samples");
  if (boot.rank() != 0) return;
  std::vector<double> every;
  std::uint64_t served = 0, sent = 0;
  for (std::size_t r = 0; r < all.size(); ++r) {
    every.insert(every.end(), rank_samples[r].begin(), rank_samples[r].end());
    if (all[r].role == 0) {
      row.requests += all[r].measured;
      row.requests_per_s += all[r].rate;
      row.seconds = std::max(row.seconds, all[r].seconds);
      sent += all[r].messages;
    } else {
      served += all[r].served;
    }
  }
  // Every request answered exactly once: the responders served what the requesters got.
  if (served != sent)
    throw Error("rr bench: responders served " + std::to_string(served) +
                " requests, requesters got " + std::to_string(sent) + " responses");
  row.latency = summarize(every);
  row.mbps = row.requests_per_s * static_cast<double>(row.response_bytes) / 1e6;
  row.requester = side_cpu(all, 0, p);
  row.responder = side_cpu(all, 1, p);
}

// The raw 64 B write ping-pong of the same provider, on its own transport (1:1 only), into
// `row` on rank 0; `keep`: its round trips are appended there too.
void raw_reference(const RrParams& p, Bootstrap& boot, RrRow& row,
                   std::vector<double>* keep = nullptr) {
  RawParams rp;
  rp.keep_samples = keep != nullptr;
  rp.op = Op::write;
  rp.sizes = {64};
  rp.iterations = p.requests;
  rp.warmup = p.warmup;
  rp.test = RawTest::latency;
  rp.target = p.target;
  rp.target.timeout_ms = std::max<std::uint64_t>(p.target.timeout_ms, 2000);
  rp.progress = p.progress;
  if (!probe_transport(p.target.transport({Op::write}, boot.local_address())).supports(Op::write))
    return;
  RawResult r = run_raw(rp, boot);
  if (boot.rank() == 0 && !r.rows.empty()) {
    // run_raw reports half the round trip for ping-pong operations.
    row.raw_write_rtt = r.rows.front().latency.scaled(2);
    row.raw_measured = true;
    if (keep)
      for (double half : r.rows.front().samples) keep->push_back(2 * half);
  }
}

// Adds a round's summary to the sum of the rounds before it (the first round's, at least).
void merge(RankSummary& sum, const RankSummary& s) {
  // Rates add as requests over time: weigh each round's rate by its time.
  const double seconds = sum.seconds + s.seconds;
  sum.rate = seconds > 0 ? (sum.rate * sum.seconds + s.rate * s.seconds) / seconds : 0;
  sum.seconds = seconds;
  sum.role = s.role;
  sum.counters_ok = sum.counters_ok && s.counters_ok;
  sum.cpu_s += s.cpu_s;
  sum.messages += s.messages;
  sum.instructions += s.instructions;
  sum.cycles += s.cycles;
  sum.measured += s.measured;
  sum.served += s.served;
  sum.callgrind_ir =
      sum.callgrind_ir < 0 || s.callgrind_ir < 0 ? -1 : sum.callgrind_ir + s.callgrind_ir;
}

void validate(const RrParams& p, const Bootstrap& boot) {
  using rr::Topology;
  if (p.requesters < 1 || p.responders < 1)
    throw UsageError("rr: at least one requester and one responder");
  if (boot.size() != p.requesters + p.responders)
    throw UsageError("rr: " + std::to_string(p.requesters) + " requesters + " +
                     std::to_string(p.responders) + " responders need that many processes, got " +
                     std::to_string(boot.size()));
  if (p.topology == Topology::one_to_one && (p.requesters != 1 || p.responders != 1))
    throw UsageError("rr: topology 1:1 needs exactly 1 requester and 1 responder");
  if (p.topology == Topology::n_to_one && p.responders != 1)
    throw UsageError("rr: topology N:1 needs exactly 1 responder");
  if (p.topology == Topology::n_to_m && p.responders < 2)
    throw UsageError("rr: topology N:M needs at least 2 responders (1 is N:1)");
  if (p.threads < 1 || p.depth < 1 || p.requests < 1)
    throw UsageError("rr: threads, depth and requests must be at least 1");
  if (p.empty_mailboxes_pct > 99) throw UsageError("rr: --empty-mailboxes must be in 0..99");
  if (p.reference && p.topology != Topology::one_to_one)
    throw UsageError("rr: --reference needs topology 1:1");
  if (p.verify &&
      (p.request_bytes < 8 || std::any_of(p.response_sizes.begin(), p.response_sizes.end(),
                                          [](std::size_t s) { return s < 8; })))
    throw UsageError("rr: verifying needs requests and responses of at least 8 bytes");
}

// --reference (1:1): params.reference_rounds rounds of [the row's configuration, the raw
// write ping-pong], the requests shared out among them. The row pools every round (figures,
// CPU, rates); its ratio is the median of the rounds' own p50 ratios. A row the provider cannot
// run still gets its reference.
void interleave(const RrParams& params, Bootstrap& boot, const Clock& clock,
                const rr::ChannelOptions& o, rr::Model model, const TransportOptions& to,
                RrRow& row) {
  const bool supported = row.unsupported.empty();
  const unsigned rounds =
      static_cast<unsigned>(std::min<std::uint64_t>(params.reference_rounds, params.requests));
  RankSummary sum;
  std::vector<double> samples, raw, ratios;
  RrParams run = params;
  for (unsigned k = 0; k < rounds; ++k) {
    // The first params.requests % rounds rounds take one request more.
    run.requests = params.requests / rounds + (k < params.requests % rounds ? 1 : 0);
    double p50 = 0;
    if (supported) {
      Config config(run, boot, clock, o, model);
      const RankSummary s = config.run(to);
      if (k == 0)
        sum = s;
      else
        merge(sum, s);
      samples.insert(samples.end(), config.samples.begin(), config.samples.end());
      // Rank 0, the requester of 1:1: this round's p50, ranked as the row's is.
      p50 = summarize(config.samples).p50;
    }
    RrRow round;
    raw_reference(run, boot, round, &raw);
    if (boot.rank() == 0 && round.raw_measured && round.raw_write_rtt.p50 > 0 && p50 > 0)
      ratios.push_back(p50 / round.raw_write_rtt.p50);
    row.rounds = k + 1;
  }
  if (supported) collect(params, boot, sum, samples, row);
  if (boot.rank() != 0 || raw.empty()) return;
  row.raw_measured = true;
  row.raw_write_rtt = summarize(raw);
  row.vs_raw_write = median(ratios);
  row.round_ratios = std::move(ratios);
}

}  // namespace

RrResult run_rr(const RrParams& given, Bootstrap& boot,
                const std::function<void(const RrResult&, const RrRow&)>& on_row) {
  validate(given, boot);
  RrParams params = given;
  // A thread's own affinity, once pinned, is one CPU: the host's set must come from before.
  if (params.target.cpus.empty()) params.target.cpus = allowed_cpus();
  Clock clock;
  RrResult result;
  result.env = machine_environment();
  result.params = params;
  result.env.clock = clock.name();
  gather_pinning(result.env, boot, params.target.cpu);
  const unsigned slots_per_requester =
      params.depth * params.threads;  // both models: the same outstanding requests per process
  for (rr::Pattern pattern : params.patterns)
    for (rr::Model model : params.models)
      for (std::size_t size : params.response_sizes) {
        rr::ChannelOptions o;
        o.pattern = pattern;
        o.mailbox = params.mailbox;
        o.request_bytes = params.request_bytes;
        o.response_bytes = size;
        o.inject = params.inject;
        o.signal_every = params.signal_every;
        o.peer_timeout = std::chrono::milliseconds(params.target.timeout_ms);
        const std::size_t active =
            static_cast<std::size_t>(params.requesters) * slots_per_requester;
        const unsigned pct = params.empty_mailboxes_pct;
        o.empty_mailboxes = pct ? (active * pct + (100 - pct) - 1) / (100 - pct) : 0;
        RrRow row;
        row.pattern = pattern;
        row.model = model;
        row.response_bytes = size;
        row.empty_mailboxes = rr::request_by_write(pattern) ? o.empty_mailboxes : 0;
        TransportOptions to = params.target.transport(rr::required_ops(o), boot.local_address());
        to.rx_depth = std::max<std::size_t>(256, 2 * active);
        to.tx_depth = std::max<std::size_t>(256, 2 * active);
        const bench::ProbedPoint probed = bench::probe_point(
            to, [&](const Capabilities& c) { return rr::why_unsupported(c, o); });
        const Capabilities& caps = probed.caps;
        row.unsupported = probed.unsupported;
        bench::note_caps(result.env, caps);
        row.receive_queue = std::string(rr::receive_queue_kind(caps));
        if (row.unsupported.empty() && !params.reference) {
          Config config(params, boot, clock, o, model);
          RankSummary mine = config.run(to);
          collect(params, boot, mine, config.samples, row);
        } else if (params.reference) {
          // The reference runs beside the row, in interleaved rounds: a VM's speed changes
          // within seconds, and a ratio is only fair against what ran in the same state.
          // Collective: every rank takes part in every round.
          interleave(params, boot, clock, o, model, to, row);
        }
        if (boot.rank() != 0) continue;
        result.rows.push_back(row);
        if (on_row) on_row(result, row);
      }
  return result;
}

}  // namespace fabflow
