// The sequencer benchmark (seed 001, Fig. 7, 8 and Table 3): for each design, the clients
// keep `outstanding` requests in flight for warm-up then measured requests and time every one;
// the server runs its workers until all clients closed. Rank 0 combines the clients' rates,
// samples and CPU time with the server's counts, and checks that every value was handed out
// exactly once (docs/sequencer.md).
#include <fabflow/bench/raw.h>
#include <fabflow/bench/seq.h>
#include <fabflow/bootstrap.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <thread>

#include "bench/engine.h"
#include "common/affinity.h"
#include "common/bounded_wait.h"

namespace fabflow {
namespace {

// What one rank tells rank 0 about one design (plain bytes through the bootstrap).
struct Summary {
  std::uint32_t role = 0;  // 0 client, 1 server
  std::uint32_t pad = 0;
  // Clients.
  std::uint64_t measured = 0;
  double seconds = 0, cpu_s = 0;
  std::uint64_t received = 0, full = 0, order_violations = 0, fp[2] = {0, 0};
  // The server.
  std::uint64_t served = 0, rounds = 0, server_full = 0, rejected = 0, counter = 0;
  double server_cpu_s = 0;
};

struct ClientRun {
  Summary summary;
  std::vector<double> samples;
};

// Keeps `outstanding` requests in flight until `n` values came back; times each from its
// issue to the answer taken in issue order.
void drive(seq::Client& c, std::uint64_t n, const Clock& clock, BoundedWait& watch,
           std::vector<double>* samples) {
  std::deque<std::uint64_t> issued_at;
  std::uint64_t sent = 0, got = 0;
  while (got < n) {
    while (sent < n) {
      Status s = c.issue();
      if (s == Status::failed) throw Error(c.error());
      if (s != Status::ok) break;
      issued_at.push_back(clock.now());
      ++sent;
    }
    std::uint64_t v;
    Status s = c.poll(&v);
    if (s == Status::failed) throw Error(c.error());
    if (s != Status::ok) {
      watch.idle("seq bench", "waiting for values");
      continue;
    }
    const std::uint64_t now = clock.now();
    if (samples) samples->push_back(clock.to_ns(now - issued_at.front()));
    issued_at.pop_front();
    ++got;
    watch.reset();
  }
}

ClientRun run_client(const SeqParams& p, const seq::Options& o, const TransportOptions& to,
                     Bootstrap& boot, const Clock& clock) {
  auto client = seq::make_client(to, boot, o);
  boot.barrier();
  ClientRun r;
  BoundedWait watch(std::chrono::milliseconds(p.target.timeout_ms), &boot, {}, 256);
  watch.yield_when_idle(o.yield_when_idle);
  drive(*client, p.warmup, clock, watch, nullptr);
  r.samples.reserve(p.requests);
  const double c0 = thread_cpu_seconds();
  const std::uint64_t t0 = clock.now();
  drive(*client, p.requests, clock, watch, &r.samples);
  const std::uint64_t t1 = clock.now();
  r.summary.cpu_s = thread_cpu_seconds() - c0;
  client->close(boot);
  boot.barrier();  // every transport stays until all ranks are done
  Summary& s = r.summary;
  s.measured = p.requests;
  s.seconds = clock.to_ns(t1 - t0) / 1e9;
  const seq::ClientStats& cs = client->stats();
  s.received = cs.received;
  s.full = cs.full_responses;
  s.order_violations = cs.order_violations;
  s.fp[0] = cs.fingerprint[0];
  s.fp[1] = cs.fingerprint[1];
  return r;
}

Summary run_server(const seq::Options& o, const TransportOptions& to, Bootstrap& boot) {
  auto server = seq::make_server(to, boot, o);
  boot.barrier();
  seq::ServerStats st = server->run();
  boot.barrier();
  Summary s;
  s.role = 1;
  s.served = st.served;
  s.rounds = st.rounds;
  s.server_full = st.full_responses;
  s.rejected = st.rejected;
  s.counter = st.counter;
  s.server_cpu_s = st.cpu_s;
  return s;
}

// Rank 0 turns every rank's summary and samples into the row and its exactly-once check.
void collect(Bootstrap& boot, const ClientRun& mine, const seq::Options& o, SeqRow& row) {
  const auto all = allgather_value(boot, mine.summary, "seq bench: summary");
  const auto rank_samples = allgather_values(boot, std::span(mine.samples), "seq bench: samples");
  if (boot.rank() != 0) return;
  std::vector<double> every;
  Summary server;
  std::uint64_t received = 0, full = 0, fp[2] = {0, 0};
  double client_cpu = 0;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const Summary& s = all[r];
    if (s.role == 1) {
      server = s;
      continue;
    }
    every.insert(every.end(), rank_samples[r].begin(), rank_samples[r].end());
    row.requests += s.measured;
    if (s.seconds > 0) row.requests_per_s += static_cast<double>(s.measured) / s.seconds;
    client_cpu += s.cpu_s;
    received += s.received;
    full += s.full;
    row.order_violations += s.order_violations;
    fp[0] += s.fp[0];
    fp[1] += s.fp[1];
  }
  row.latency = summarize(every);
  row.served = server.served;
  row.counter_first = o.first_value;
  row.counter_final = server.counter;
  if (row.requests) row.client_cpu_ns_per_request = client_cpu * 1e9 / row.requests;
  if (server.served) row.server_cpu_ns_per_request = server.server_cpu_s * 1e9 / server.served;
  if (o.design != seq::Design::atomic && server.rounds)
    row.responses_per_batch = static_cast<double>(server.served) / server.rounds;
  if (o.design == seq::Design::spec && server.served)
    row.spec_miss_fraction = static_cast<double>(server.server_full) / server.served;
  // Exactly once: the clients received as many values as the server handed out, the counter
  // moved by that much, the values form exactly the range [first, final) (fingerprint), and
  // each client's values respect real-time order.
  std::uint64_t want[2];
  seq::fingerprint_range(o.first_value, server.counter, want);
  std::string check;
  if (server.rejected) check = std::to_string(server.rejected) + " requests rejected; ";
  if (received != server.served)
    check += "clients received " + std::to_string(received) + " values, the server served " +
             std::to_string(server.served) + "; ";
  if (server.counter - o.first_value != server.served)
    check += "the counter moved by " + std::to_string(server.counter - o.first_value) + " for " +
             std::to_string(server.served) + " served; ";
  if (fp[0] != want[0] || fp[1] != want[1])
    check += "the values received are not exactly the counter's range; ";
  if (row.order_violations)
    check += std::to_string(row.order_violations) + " values out of real-time order; ";
  if (o.design == seq::Design::spec && full != server.server_full)
    check += "clients saw " + std::to_string(full) + " full answers, the server sent " +
             std::to_string(server.server_full) + "; ";
  row.exactly_once = check.empty();
  row.check = check.empty() ? "passed" : "FAILED: " + check.substr(0, check.size() - 2);
}

}  // namespace

SeqReference fetch_add_reference(unsigned threads, const std::vector<int>& cpus, double seconds) {
  struct alignas(64) Shared {
    std::atomic<std::uint64_t> counter{0};
  } shared;
  alignas(64) std::atomic<bool> stop{false};
  std::atomic<unsigned> ready{0};
  std::vector<std::uint64_t> done(threads, 0);
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      if (!cpus.empty()) pin_current_thread(cpus[i % cpus.size()]);
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      std::uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 64; ++k) shared.counter.fetch_add(1, std::memory_order_relaxed);
        n += 64;
      }
      done[i] = n;
    });
  while (ready.load() < threads) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  for (auto& t : pool) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  SeqReference r;
  r.threads = threads;
  r.ops_per_s = static_cast<double>(shared.counter.load()) / s;
  return r;
}

SeqResult run_seq(const SeqParams& given, Bootstrap& boot,
                  const std::function<void(const SeqResult&, const SeqRow&)>& on_row) {
  if (boot.size() < 2) throw UsageError("seq: needs at least one client and the server");
  SeqParams params = given;
  if (params.target.cpus.empty()) params.target.cpus = allowed_cpus();
  if (params.requests < 1) throw UsageError("seq: requests must be at least 1");
  if (params.designs.empty()) throw UsageError("seq: no design given");
  const int clients = boot.size() - 1;
  const bool server = boot.rank() == clients;
  Clock clock;
  SeqResult result = bench::start_result<SeqResult>(params, boot, clock);
  result.clients = static_cast<unsigned>(clients);
  // First, so that every row can carry it: rank 0 alone measures while the others wait.
  if (params.reference) {
    if (boot.rank() == 0)
      result.reference =
          fetch_add_reference(static_cast<unsigned>(clients), params.target.cpus, 0.3);
    boot.barrier();
  }
  for (seq::Design design : params.designs) {
    seq::Options o;
    o.design = design;
    o.workers = params.workers;
    o.queues = params.queues;
    o.outstanding = params.outstanding;
    o.batch = params.batch;
    o.batch_responses = params.batch_responses;
    o.peer_timeout = std::chrono::milliseconds(params.target.timeout_ms);
    seq::validate(o, clients);
    // More spinning threads than CPUs: idle waits yield so that the others can run.
    o.yield_when_idle = static_cast<std::size_t>(clients) + params.workers >
                        std::max<std::size_t>(params.target.cpus.size(), 1);
    if (server) o.worker_init = params.target.worker_pinning();
    SeqRow row;
    row.design = design;
    row.workers = params.workers;
    row.queues = design == seq::Design::atomic ? 1 : params.queues;
    row.clients = static_cast<unsigned>(clients);
    row.outstanding = params.outstanding;
    row.batch = params.batch;
    row.batching =
        design == seq::Design::rpc_batch || (design == seq::Design::spec && params.batch_responses);
    TransportOptions to = params.target.transport(seq::required_ops(design), boot.local_address());
    bench::size_queues(to, static_cast<std::size_t>(clients) * params.outstanding);
    const bench::ProbedPoint probed = bench::probe_row(
        result.env, to, [&](const Capabilities& c) { return seq::why_unsupported(c, o); });
    const Capabilities& caps = probed.caps;
    row.unsupported = probed.unsupported;
    if (!caps.provider.empty()) row.more_hint = more_hint(caps, result.env.libfabric_version);
    if (row.unsupported.empty()) {
      ClientRun mine;
      if (server)
        mine.summary = run_server(o, to, boot);
      else
        mine = run_client(params, o, to, boot, clock);
      collect(boot, mine, o, row);
    }
    bench::publish_row(boot, result, std::move(row), on_row);
  }
  return result;
}

}  // namespace fabflow
