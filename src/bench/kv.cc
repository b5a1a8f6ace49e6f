// The key-value benchmark (seed 001, Fig. 9 and 10): for each design the servers load their
// keys, the clients run the workload (closed loop with `outstanding` in flight, or open loop at
// `rate`) for warm-up then measured operations, timing each; every PUT writes a value that
// names its key, writer and version, every GET's value is checked whole, and rank 0 checks the
// history of all operations (kv::check_history).
#include <fabflow/bench/kv.h>
#include <fabflow/bootstrap.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "bench/engine.h"
#include "common/affinity.h"
#include "common/bounded_wait.h"

namespace fabflow {
namespace {

constexpr std::uint32_t kLoader = 0xfffffff0u;   // the writer of the loaded values
constexpr std::uint64_t kMaxHistory = 4u << 20;  // operations whose history rank 0 checks

struct Summary {
  std::uint32_t role = 0;  // 0 client, 1 server
  std::uint32_t history_kept = 0;
  // Clients.
  std::uint64_t measured = 0;
  double seconds = 0, cpu_s = 0;
  std::uint64_t gets = 0, puts = 0, reads = 0, retries = 0, lock_waits = 0, recovered = 0;
  std::uint64_t cache_misses = 0, not_found = 0, full = 0, corrupt = 0, all_ops = 0;
  std::uint64_t atomics = 0, writes = 0;
  std::uint64_t not_loaded = 0;  // two-atomics: GETs whose value was not the loaded one
  // Servers: what the server's run() returned.
  kv::ServerStats server;
};

struct ClientRun {
  Summary summary;
  std::vector<double> get_ns, put_ns;
  std::vector<kv::HistoryEntry> history;
  std::string first_corrupt;
};

std::uint64_t steady_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// Runs `n` operations of the workload; samples when `measure`.
class Driver {
 public:
  Driver(kv::Client& c, const KvParams& p, int rank, const Clock& clock, BoundedWait& watch,
         ClientRun& run, bool keep_history)
      : c_(c),
        p_(p),
        rank_(rank),
        clock_(clock),
        watch_(watch),
        run_(run),
        keep_(keep_history),
        verify_(p.value_bytes >= kv::kMinValueBytes),
        stores_nothing_(p.put_emulation == kv::PutEmulation::two_atomics),
        load_({p.keys * static_cast<std::uint64_t>(p.servers), p.put_fraction, p.zipf, p.seed},
              static_cast<std::uint64_t>(rank)),
        flying_(p.outstanding),
        value_(p.value_bytes) {
    for (unsigned k = p.outstanding; k-- > 0;) free_.push_back(k);
  }

  void run(std::uint64_t n, bool measure) {
    std::uint64_t sent = 0, got = 0;
    const std::uint64_t t0 = clock_.now();
    const double ticks_per_op = p_.rate > 0 ? 1e9 / p_.rate / clock_.to_ns(1) : 0;
    while (got < n) {
      while (sent < n && !free_.empty()) {
        std::uint64_t due = 0;
        if (ticks_per_op > 0) {
          due = t0 + static_cast<std::uint64_t>(static_cast<double>(sent) * ticks_per_op);
          if (clock_.now() < due) break;
        }
        if (!issue(due)) break;
        ++sent;
      }
      kv::Result r;
      Status s = c_.poll(&r);
      if (s == Status::failed) throw Error(c_.error());
      if (s == Status::empty) {
        watch_.idle("kv bench", "waiting for answers");
        continue;
      }
      watch_.reset();
      finished(r, measure);
      ++got;
    }
  }

 private:
  struct InFlight {
    kv::HistoryEntry e;
    std::uint64_t t = 0;  // issue (closed loop) or due time (open loop), clock ticks
  };

  bool issue(std::uint64_t due) {
    const unsigned k = free_.back();
    InFlight& f = flying_[k];
    const kv::Workload::Op op = load_.next();
    f.e = {};
    f.e.kind = op.kind;
    f.e.key = op.key;
    if (op.kind == kv::OpKind::put) {
      f.e.writer = static_cast<std::uint32_t>(rank_);
      f.e.version = ++version_;
      kv::fill_value(value_, op.key, f.e.writer, f.e.version);
    }
    f.e.start_ns = keep_ ? steady_ns() : 0;
    f.t = due ? due : clock_.now();
    Status s = c_.submit(op.kind, kv::key_of(op.key),
                         op.kind == kv::OpKind::put ? std::span<const std::byte>(value_)
                                                    : std::span<const std::byte>{},
                         k);
    if (s == Status::failed) throw Error(c_.error());
    // The driver's free slots mirror the client's: it cannot be busy here.
    if (s != Status::ok) throw Error("kv bench: the client refused an operation with a slot free");
    free_.pop_back();
    return true;
  }

  void finished(const kv::Result& r, bool measure) {
    InFlight& f = flying_[r.tag];
    const std::uint64_t now = clock_.now();
    Summary& s = run_.summary;
    ++s.all_ops;
    if (measure) {
      const double ns = clock_.to_ns(now - f.t);
      (f.e.kind == kv::OpKind::get ? run_.get_ns : run_.put_ns).push_back(ns);
    }
    f.e.code = r.code;
    if (r.code == kv::Code::not_found) ++s.not_found;
    if (r.code == kv::Code::full) ++s.full;
    if (f.e.kind == kv::OpKind::get && r.code == kv::Code::ok && verify_) {
      auto tag = kv::check_value(r.value);
      if (!tag || tag->key != f.e.key) {
        if (s.corrupt++ == 0)
          run_.first_corrupt = "a GET of key " + std::to_string(f.e.key) +
                               (tag ? " returned the value of key " + std::to_string(tag->key)
                                    : " returned a torn value");
      } else {
        f.e.writer = tag->writer;
        f.e.version = tag->version;
        // PUTs that store nothing leave every key its loaded value.
        if (stores_nothing_ && (tag->writer != kLoader || tag->version != 0)) ++s.not_loaded;
      }
    }
    if (keep_) {
      f.e.end_ns = steady_ns();
      run_.history.push_back(f.e);
    }
    free_.push_back(static_cast<unsigned>(r.tag));
  }

  kv::Client& c_;
  const KvParams& p_;
  int rank_;
  const Clock& clock_;
  BoundedWait& watch_;
  ClientRun& run_;
  bool keep_;
  bool verify_;          // values long enough to carry their tag
  bool stores_nothing_;  // two-atomics PUTs
  kv::Workload load_;
  std::vector<InFlight> flying_;
  std::vector<unsigned> free_;
  std::vector<std::byte> value_;
  std::uint64_t version_ = 0;
};

// Waits for the servers (loading can take seconds) without the bootstrap's barrier timeout.
void long_barrier(Bootstrap& boot) {
  boot.barrier([] { std::this_thread::sleep_for(std::chrono::microseconds(200)); });
}

ClientRun run_client(const KvParams& p, const kv::Options& o, const TransportOptions& to,
                     Bootstrap& boot, const Clock& clock, bool keep_history) {
  auto client = kv::make_client(to, boot, p.servers, o);
  long_barrier(boot);
  client->cache_index(boot);
  ClientRun r;
  BoundedWait watch(std::chrono::milliseconds(p.target.timeout_ms), &boot, {}, 256);
  watch.yield_when_idle(o.yield_when_idle);
  Driver d(*client, p, boot.rank(), clock, watch, r, keep_history);
  d.run(p.warmup, false);
  r.get_ns.reserve(std::min<std::uint64_t>(p.requests, 1u << 20));
  const kv::ClientStats before = client->stats();
  const double c0 = thread_cpu_seconds();
  const std::uint64_t t0 = clock.now();
  d.run(p.requests, true);
  const std::uint64_t t1 = clock.now();
  r.summary.cpu_s = thread_cpu_seconds() - c0;
  client->close(boot);
  boot.barrier();
  Summary& s = r.summary;
  s.measured = p.requests;
  s.seconds = clock.to_ns(t1 - t0) / 1e9;
  const kv::ClientStats& cs = client->stats();
  s.gets = cs.gets - before.gets;
  s.puts = cs.puts - before.puts;
  s.reads = cs.reads - before.reads;
  s.atomics = cs.atomics - before.atomics;
  s.writes = cs.writes - before.writes;
  s.retries = cs.retries;
  s.lock_waits = cs.lock_waits;
  s.recovered = cs.recovered;
  s.cache_misses = cs.cache_misses;
  s.history_kept = keep_history;
  return r;
}

Summary run_server(const KvParams& p, const kv::Options& o, const TransportOptions& to,
                   Bootstrap& boot) {
  auto server = kv::make_server(to, boot, p.servers, o);
  const int me = boot.rank() - (boot.size() - p.servers);
  std::vector<std::byte> v(p.value_bytes);
  const std::uint64_t total = p.keys * static_cast<std::uint64_t>(p.servers);
  for (std::uint64_t id = 0; id < total; ++id) {
    // Loading takes seconds at the default key count: a peer that died or stopped meanwhile
    // ends it (within a few ms), not the barrier after it.
    if ((id & 0x3fff) == 0 && boot.peer_failed()) {
      throw peer_failure_error(&boot, "kv bench", "loading keys");
    }
    const kv::Key k = kv::key_of(id);
    if (server->server_of(k) != me) continue;
    kv::fill_value(v, id, kLoader, 0);
    if (server->load(k, v) != kv::Code::ok)
      throw Error("kv bench: loading key " + std::to_string(id) + " found the table full");
  }
  long_barrier(boot);
  Summary s;
  s.role = 1;
  s.server = server->run();
  boot.barrier();
  return s;
}

template <class T>
void append(std::vector<T>& to, const std::vector<T>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

void collect(Bootstrap& boot, const ClientRun& mine, const KvParams& p, KvRow& row) {
  const auto sums = allgather_value(boot, mine.summary, "kv bench: summary");
  const auto gets = allgather_values(boot, std::span(mine.get_ns), "kv bench: GET latencies");
  const auto puts = allgather_values(boot, std::span(mine.put_ns), "kv bench: PUT latencies");
  const auto hist = allgather_values(boot, std::span(mine.history), "kv bench: history");
  const auto corrupt =
      allgather_values(boot, std::span(mine.first_corrupt), "kv bench: first corrupt value");
  if (boot.rank() != 0) return;
  std::vector<double> get_ns, put_ns;
  std::vector<kv::HistoryEntry> history;
  double client_cpu = 0, server_cpu = 0;
  std::uint64_t reads = 0, get_count = 0, served = 0, rounds = 0, corrupted = 0, all_ops = 0;
  std::uint64_t atomics = 0, writes = 0, put_count = 0, not_loaded = 0;
  bool kept = true;
  std::string first_corrupt;
  for (std::size_t r = 0; r < sums.size(); ++r) {
    const Summary& s = sums[r];
    if (s.role == 1) {
      served += s.server.served;
      rounds += s.server.rounds;
      server_cpu += s.server.cpu_s;
      continue;
    }
    append(get_ns, gets[r]);
    append(put_ns, puts[r]);
    append(history, hist[r]);
    row.requests += s.measured;
    if (s.seconds > 0) row.requests_per_s += static_cast<double>(s.measured) / s.seconds;
    client_cpu += s.cpu_s;
    reads += s.reads;
    get_count += s.gets;
    put_count += s.puts;
    atomics += s.atomics;
    writes += s.writes;
    not_loaded += s.not_loaded;
    row.retries += s.retries;
    row.lock_waits += s.lock_waits;
    row.recovered += s.recovered;
    row.cache_misses += s.cache_misses;
    row.not_found += s.not_found;
    row.full += s.full;
    corrupted += s.corrupt;
    all_ops += s.all_ops;
    kept = kept && s.history_kept;
    if (first_corrupt.empty() && !corrupt[r].empty())
      first_corrupt.assign(corrupt[r].begin(), corrupt[r].end());
  }
  row.get.count = get_ns.size();
  row.get.latency = summarize(get_ns);
  row.put.count = put_ns.size();
  row.put.latency = summarize(put_ns);
  if (row.requests) row.client_cpu_ns_per_op = client_cpu * 1e9 / row.requests;
  if (all_ops) row.server_cpu_ns_per_op = server_cpu * 1e9 / all_ops;
  if (row.design != kv::Design::herd && get_count)
    row.reads_per_get = static_cast<double>(reads) / get_count;
  if (row.design == kv::Design::atomic && put_count) {
    row.atomics_per_put = static_cast<double>(atomics) / put_count;
    row.writes_per_put = static_cast<double>(writes) / put_count;
  }
  if (rounds) row.mean_batch = static_cast<double>(served) / rounds;
  // The checks: no GET accepted a torn or foreign value; none found a loaded key missing or
  // the table full (this workload deletes nothing and inserts nothing); the history holds.
  std::string check;
  if (corrupted) check += std::to_string(corrupted) + " corrupt values (" + first_corrupt + "); ";
  if (row.not_found) check += std::to_string(row.not_found) + " loaded keys not found; ";
  if (row.full) check += std::to_string(row.full) + " PUTs found the table full; ";
  // Two-atomics PUTs store nothing: the history check, which reads what PUTs wrote back
  // through GETs, cannot apply and is refused; every GET must see the loaded value instead.
  const bool emulated = p.put_emulation == kv::PutEmulation::two_atomics;
  if (emulated && not_loaded)
    check += std::to_string(not_loaded) + " GETs returned a value no loader wrote; ";
  if (kept && !emulated) {
    row.history = history.size();
    const std::string h = p.check == KvCheck::linearizable
                              ? kv::check_linearizable(history, kLoader)
                              : kv::check_history(history, kLoader);
    if (!h.empty())
      check += (p.check == KvCheck::linearizable ? "not linearizable: " : "") + h + "; ";
  }
  row.verified = check.empty() && !emulated;
  row.check = check.empty() ? (kept ? "passed" : "passed (values only: history over 4M ops)")
                            : "FAILED: " + check.substr(0, check.size() - 2);
  if (emulated && check.empty())
    row.check =
        "not verified: two-atomics PUTs store no value (a cost emulation), no history to "
        "check; every GET returned its key's loaded value whole";
  if (p.value_bytes < kv::kMinValueBytes) {
    row.verified = false;
    row.check = "not verified: values under " + std::to_string(kv::kMinValueBytes) +
                " bytes cannot carry their tag";
  }
}

}  // namespace

KvResult run_kv(const KvParams& given, Bootstrap& boot,
                const std::function<void(const KvResult&, const KvRow&)>& on_row) {
  KvParams params = given;
  if (params.servers < 1 || params.servers >= boot.size())
    throw UsageError("kv: needs at least one client and one server");
  if (params.target.cpus.empty()) params.target.cpus = allowed_cpus();
  if (params.requests < 1) throw UsageError("kv: requests must be at least 1");
  if (params.designs.empty()) throw UsageError("kv: no design given");
  kv::validate(kv::WorkloadOptions{params.keys * static_cast<std::uint64_t>(params.servers),
                                   params.put_fraction, params.zipf, params.seed});
  const int clients = boot.size() - params.servers;
  const bool server = boot.rank() >= clients;
  const bool keep_history =
      params.value_bytes >= kv::kMinValueBytes &&
      (params.requests + params.warmup) * static_cast<std::uint64_t>(clients) <= kMaxHistory;
  Clock clock;
  KvResult result = bench::start_result<KvResult>(params, boot, clock);
  result.clients = static_cast<unsigned>(clients);
  for (kv::Design design : params.designs) {
    kv::Options o;
    o.design = design;
    o.workers = params.workers;
    o.value_bytes = params.value_bytes;
    o.capacity = params.keys + params.keys / 8 + 64;
    o.outstanding = params.outstanding;
    o.batch = params.batch;
    o.put_emulation = params.put_emulation;
    o.lock_lease = params.lock_lease;
    o.peer_timeout = std::chrono::milliseconds(params.target.timeout_ms);
    kv::validate(o, clients, params.servers);
    o.yield_when_idle = static_cast<std::size_t>(clients) +
                            static_cast<std::size_t>(params.servers) * params.workers >
                        std::max<std::size_t>(params.target.cpus.size(), 1);
    if (server) o.worker_init = params.target.worker_pinning();
    KvRow row;
    row.design = design;
    row.servers = static_cast<unsigned>(params.servers);
    row.workers = params.workers;
    row.clients = static_cast<unsigned>(clients);
    row.outstanding = params.outstanding;
    row.batch = params.batch;
    row.keys = params.keys;
    TransportOptions to = params.target.transport(kv::required_ops(design), boot.local_address());
    bench::size_queues(to, static_cast<std::size_t>(clients) * params.outstanding);
    const bench::ProbedPoint probed = bench::probe_row(
        result.env, to, [&](const Capabilities& c) { return kv::why_unsupported(c, o); });
    row.unsupported = probed.unsupported;
    if (row.unsupported.empty()) {
      ClientRun mine;
      if (server)
        mine.summary = run_server(params, o, to, boot);
      else
        mine = run_client(params, o, to, boot, clock, keep_history);
      collect(boot, mine, params, row);
    }
    bench::publish_row(boot, result, std::move(row), on_row);
  }
  return result;
}

}  // namespace fabflow
