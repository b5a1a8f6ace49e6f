// `fabflow bench kv`: checks designs, counts and the workload in the launching process (one
// clear line per mistake); with --reference memcached measures memcached on loopback under the
// same workload there first; then starts --clients client ranks and --servers server ranks per
// provider; rank 0 (a client) reports, the memcached figures beside its rows.
#include <fabflow/bench/kv.h>
#include <fabflow/launcher.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "bench/report.h"
#include "cli/bench_shell.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "tools/subprocess.h"
#include "references/memcached.h"
#include "common/affinity.h"

namespace fabflow::cli {
namespace {

enum class KvReference : std::uint8_t { none, memcached };
inline constexpr NameTable<KvReference, 2> kKvReferenceNames{
    {{{"none", KvReference::none}, {"memcached", KvReference::memcached}}}};
constexpr const auto& name_table(KvReference) noexcept { return kKvReferenceNames; }

struct KvFlags : CommonFlags {
  std::string designs = "all";
  int servers = 1;
  unsigned workers = 1;
  int clients = 1;
  std::uint64_t keys = 8 << 20;
  std::uint64_t value_size = 32;
  double put_fraction = 0.05;
  double zipf = 0;
  unsigned batch = 16;
  unsigned outstanding = 1;
  double rate = 0;
  MeasuredCounts requests;  // -I and -w
  std::uint64_t seed = 1;
  std::string reference = "none";
  std::string put_emulation = "lock-write-unlock";
  std::uint64_t lock_lease_ms = 250;
  std::string check = "linearizable";
  std::string reference_result;  // internal: the launcher's memcached figures, as JSON
};

struct KvValidated : Checked<KvParams> {
  int clients = 1;
};

KvValidated validate(const KvFlags& f) {
  KvValidated v;
  KvParams& p = v.params;
  if (!f.sizes.empty())
    throw UsageError("bench kv sizes its values with --value-size: -S does not apply");
  // --design auto: the kv advise profile's best design for this provider (or herd), named in
  // place of "auto" (replace_auto).
  p.designs = parse_choice_list<kv::Design>(replace_auto(
      f, {"--design", "value", "kv", f.designs, "", "throughput,p50,p99", "herd",
          "herd, as seed 001 finds RPCs over RDMA the best design for a networked store "
          "(docs/advise.md)"}));
  p.servers = f.servers;
  p.workers = f.workers;
  p.keys = f.keys;
  p.value_bytes = f.value_size;
  p.put_fraction = f.put_fraction;
  p.zipf = f.zipf;
  p.batch = f.batch;
  p.outstanding = f.outstanding;
  p.rate = f.rate;
  p.requests = f.requests.measured;
  p.warmup = f.requests.warmup;
  p.seed = f.seed;
  p.put_emulation = *parse_name<kv::PutEmulation>(f.put_emulation);
  p.check = *parse_name<KvCheck>(f.check);
  p.lock_lease = std::chrono::milliseconds(f.lock_lease_ms);
  if (p.put_emulation == kv::PutEmulation::two_atomics)
    for (kv::Design d : p.designs)
      if (d != kv::Design::atomic)
        throw UsageError(
            "--put-emulation two-atomics is the atomic design's PUT (the seed's DrTM-KV "
            "emulation): run it with --design atomic, not " +
            std::string(kv::to_string(d)));
  p.target = flags_target(f);
  v.clients = f.clients;
  kv::Options o;
  o.workers = p.workers;
  o.value_bytes = p.value_bytes;
  o.capacity = p.keys + p.keys / 8 + 64;
  o.outstanding = p.outstanding;
  o.batch = p.batch;
  kv::validate(o, v.clients, p.servers);
  kv::validate(kv::WorkloadOptions{p.keys * static_cast<std::uint64_t>(p.servers), p.put_fraction,
                                   p.zipf, p.seed});
  v.providers = providers_to_run(f);
  return v;
}

// The memcached line under the rows (text) or its own JSON line.
void print_reference(const KvFlags& f, const KvResult& r) {
  if (f.reference_result.empty()) return;
  const auto m = nlohmann::json::parse(f.reference_result).get<references::MemcachedResult>();
  if (f.json) {
    nlohmann::json j = report::base_row(r.env, "kv");
    j["type"] = "kv_reference";
    j["reference"] = "memcached";
    j["value_size"] = r.params.value_bytes;
    j["put_fraction"] = r.params.put_fraction;
    j["zipf"] = r.params.zipf;
    j["keys"] = r.params.keys * static_cast<std::uint64_t>(r.params.servers);
    j.update(nlohmann::json(m));
    std::cout << j.dump() << "\n" << std::flush;
    return;
  }
  if (!m.skipped.empty()) {
    std::cout << "  reference: memcached not measured: " << m.skipped << "\n" << std::flush;
    return;
  }
  double best = 0;
  for (const KvRow& row : r.rows)
    if (row.unsupported.empty()) best = std::max(best, row.requests_per_s);
  const double ref = m.requests_per_s;
  char line[400];
  std::snprintf(line, sizeof line,
                "  reference: %s on loopback, %u client threads (1 operation in flight each), "
                "%u server threads: %.0f ops/s, get p50 %.2f us, CPU ns/op client %.0f server "
                "%.0f; best design / memcached %.1fx; %s\n",
                m.version.c_str(), m.clients, m.server_threads, ref, m.get_latency_ns.p50 / 1e3,
                m.cpu_ns_per_op.client, m.cpu_ns_per_op.server, ref > 0 ? best / ref : 0.0,
                m.misses + m.bad_values == 0
                    ? "check passed"
                    : ("FAILED: " + std::to_string(m.misses) + " misses, " +
                       std::to_string(m.bad_values) + " bad values")
                          .c_str());
  std::cout << line << std::flush;
}

int run_kv_rank(const KvFlags& flags, const KvValidated& v) {
  return run_family_rank(
      flags, v.params,
      [&](Rank& rank, const KvParams& params) {
        KvResult last = run_kv(
            params, rank.boot,
            RowPrinter<KvResult, KvRow>(flags.json, print_kv_header, print_kv_json, print_kv_row));
        if (rank.boot.rank() != 0) return;
        finish_environment(last.env);
        print_reference(flags, last);
        if (flags.json) report::warn_stderr(last.env);
      },
      // Servers load their keys before the first barrier: 8 M keys take seconds.
      std::chrono::milliseconds(120000));
}

}  // namespace

Runner add_bench_kv(CLI::App* app, const Invocation& self) {
  auto f = add_bench_flags<KvFlags>(*app, "not used: values are sized with --value-size",
                                    "not used: the store's ends drive their own progress");
  add_choice<kv::Design>(*app, "--design", f->designs,
                         "design(s), comma-separated, all, or auto (the advise profile's)",
                         /*list=*/true, {"all", "auto"});
  add_number<int>(*app, "--servers", f->servers, 1, static_cast<int>(kv::kMaxServers),
                  "server processes, each holding a partition");
  add_number<unsigned>(*app, "--workers", f->workers, 1, kv::kMaxWorkers,
                       "worker threads per server");
  add_number<int>(*app, "--clients", f->clients, 1, 63, "client processes");
  add_number<std::uint64_t>(*app, "--keys", f->keys, 1, kv::kMaxCapacity / 2,
                            "keys loaded per server before measuring");
  add_number<std::uint64_t>(*app, "--value-size", f->value_size, 1, kv::kMaxValueBytes,
                            "bytes per value");
  add_real(*app, "--put-fraction", f->put_fraction, 0, 1, "fraction of operations that are PUTs");
  add_real(*app, "--zipf", f->zipf, 0, 0.99, "Zipf skew of the key choice (0: uniform)");
  add_number<unsigned>(*app, "--batch", f->batch, 1, kv::kMaxBatch,
                       "herd: most requests a worker round takes (1: answer one by one)");
  add_number<unsigned>(*app, "--outstanding", f->outstanding, 1, kv::kMaxOutstanding,
                       "operations each client keeps in flight (closed loop)");
  add_real(*app, "--rate", f->rate, 0, 1e9,
           "open loop: operations per second per client (0: closed loop)");
  add_measured_counts(*app, "-I,--requests", f->requests, "operations per client");
  add_seed(*app, f->seed, "workload seed");
  add_choice<kv::PutEmulation>(
      *app, "--put-emulation", f->put_emulation,
      "atomic design's PUT: lock-write-unlock (default: CAS lock, WRITE the item, CAS unlock) or "
      "two-atomics (the seed's emulation: CAS lock, CAS unlock, no WRITE; stores no value, so "
      "the history check is not run)");
  add_number<std::uint64_t>(*app, "--lock-lease", f->lock_lease_ms, 1, 3600000,
                            "atomic: ms a lock word may stay unchanged before it is taken as a "
                            "dead client's and recovered (default 250)");
  add_choice<KvCheck>(*app, "--check", f->check,
                      "history check: linearizable (the whole concurrent history against one "
                      "order, the default) or per-get (each GET alone, weaker)");
  add_choice<KvReference>(*app, "--reference", f->reference,
                          "also measure memcached on loopback under the same workload");
  app->add_option("--reference-result", f->reference_result)->group("");  // internal

  return [f, self]() -> int {
    KvValidated v = validate(*f);
    if (started_by_launcher()) return run_kv_rank(*f, v);
    std::string reference;
    if (parse_name<KvReference>(f->reference) == KvReference::memcached) {
      const KvParams& p = v.params;
      references::MemcachedParams m;
      m.binary = tools::find_binary("memcached");
      m.keys = p.keys * static_cast<std::uint64_t>(p.servers);
      m.value_size = p.value_bytes;
      m.put_fraction = p.put_fraction;
      m.zipf = p.zipf;
      m.clients = static_cast<unsigned>(v.clients);
      m.requests = p.requests;
      m.warmup = p.warmup;
      m.seed = p.seed;
      m.server_threads = static_cast<unsigned>(p.servers) * p.workers;
      m.cpus = allowed_cpus();
      reference = nlohmann::json(references::run_memcached_reference(m)).dump();
    }
    return launch_each_provider(self, *f, v.providers, v.params.target.endpoint,
                                [&](LaunchConfig& lc) {
                                  lc.nprocs = v.clients + v.params.servers;
                                  if (!reference.empty()) {
                                    lc.argv.push_back("--reference-result");
                                    lc.argv.push_back(reference);
                                  }
                                });
  };
}

}  // namespace fabflow::cli
