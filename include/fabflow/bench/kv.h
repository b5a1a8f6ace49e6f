// bench kv: the key-value store of seed 001 in its three designs (herd, read, atomic) under a
// generated workload: throughput, latency per operation type, CPU per operation on each side,
// READs per GET, retries and batch sizes, and the verifying mode's verdict on every GET.
// `fabflow bench kv --reference memcached` adds memcached on loopback under the same workload.
#pragma once

#include <fabflow/bench/common.h>
#include <fabflow/kv.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace fabflow {

class Bootstrap;

// The history check of each row: every operation of every client against one order that keeps
// their real-time order (kv::check_linearizable), or each GET on its own against the PUTs to its
// key (kv::check_history: weaker, it accepts two readers that see a new value and then the old).
enum class KvCheck : std::uint8_t { linearizable, per_get };
inline constexpr NameTable<KvCheck, 2> kKvCheckNames{
    {{{"linearizable", KvCheck::linearizable}, {"per-get", KvCheck::per_get}}}};
constexpr const auto& name_table(KvCheck) noexcept { return kKvCheckNames; }
constexpr std::string_view to_string(KvCheck c) noexcept { return kKvCheckNames.name(c); }

struct KvParams {
  bench::Target target;  // provider, endpoint, CPUs, timeout
  std::vector<kv::Design> designs{std::begin(kv::kAllDesigns), std::end(kv::kAllDesigns)};
  int servers = 1;
  unsigned workers = 1;          // per server
  std::uint64_t keys = 8 << 20;  // loaded per server
  std::size_t value_bytes = 32;
  double put_fraction = 0.05;
  double zipf = 0;                 // 0: uniform
  unsigned batch = 16;             // herd: most requests a worker round takes (1: unbatched)
  unsigned outstanding = 1;        // per client (closed loop)
  double rate = 0;                 // > 0: open loop, operations per second per client
  std::uint64_t requests = 10000;  // measured operations per client
  std::uint64_t warmup = 1000;
  std::uint64_t seed = 1;
  // atomic: a PUT as a working store does it, or the seed's two-atomics emulation, which stores
  // no value: then no GET can read a PUT's value back, and the history check is not run (the
  // row says so); GETs must return the loaded values. Other designs refuse two_atomics.
  kv::PutEmulation put_emulation = kv::PutEmulation::lock_write_unlock;
  // atomic: a lock word unchanged this long is taken as a dead client's (kv::Options).
  std::chrono::milliseconds lock_lease{250};
  KvCheck check = KvCheck::linearizable;
};

// Operations of one type, all clients.
struct KvOpStats {
  std::uint64_t count = 0;
  LatencyStats latency;
};

struct KvRow {
  kv::Design design = kv::Design::herd;
  std::string unsupported;
  unsigned servers = 0, workers = 0, clients = 0, outstanding = 0, batch = 0;
  std::uint64_t keys = 0;  // per server
  std::uint64_t requests = 0;
  double requests_per_s = 0;  // sum of the clients' rates
  KvOpStats get, put;
  double client_cpu_ns_per_op = 0;
  double server_cpu_ns_per_op = 0;  // server CPU over every measured and warm-up operation
  std::optional<double> reads_per_get;
  // atomic: compare-and-swaps and WRITEs posted in the measured phase per PUT (lock-write-unlock
  // 2 and 1 without contention, two-atomics 2 and 0); null elsewhere or without PUTs.
  std::optional<double> atomics_per_put, writes_per_put;
  std::uint64_t retries = 0, lock_waits = 0, recovered = 0, cache_misses = 0;
  std::optional<double> mean_batch;  // RPCs per worker round
  std::uint64_t not_found = 0, full = 0;
  std::uint64_t history = 0;  // operations whose history was checked
  bool verified = false;
  std::string check;  // "passed" or what failed
};

struct KvResult {
  RunEnvironment env;
  KvParams params;
  unsigned clients = 0;
  std::vector<KvRow> rows;  // rank 0 only
};

// Collective: ranks [0, size - servers) are clients, the rest servers. Each design loads the
// keys, runs warm-up and measured operations, and checks every GET's value (whole, of its
// key) and the history of every operation (params.check) up to 4 M operations.
KvResult run_kv(const KvParams& params, Bootstrap& boot,
                const std::function<void(const KvResult&, const KvRow&)>& on_row = {});

void print_kv_header(std::ostream& out, const KvResult& result);
void print_kv_row(std::ostream& out, const KvResult& result, const KvRow& row);
void print_kv_json(std::ostream& out, const KvResult& result, const KvRow& row);

}  // namespace fabflow
