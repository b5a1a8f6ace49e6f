// A timed reference, built apart from the library and linked by the CLI only (CMakeLists.txt,
// fabflow_references). `fabflow bench kv --reference memcached`: memcached, started by fabflow on
// loopback and driven with libmemcached under the same workload as the store (same key ids, values,
// mix, seeds and client count), so the store's rate can be read against it in the same run. What is
// measured and how: docs/kv-workload.md.
#pragma once

#include <fabflow/bench/common.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "bench/report.h"

namespace fabflow::references {

struct MemcachedParams {
  std::uint64_t keys = 1000;  // key ids [0, keys), all loaded before measuring
  std::size_t value_size = 32;
  double put_fraction = 0.05;
  double zipf = 0;
  unsigned clients = 1;  // client threads, one connection and one operation in flight each
  std::uint64_t requests = 10000;  // measured operations per client
  std::uint64_t warmup = 1000;
  std::uint64_t seed = 1;
  unsigned server_threads = 1;  // memcached -t
  std::vector<int> cpus;        // client c is pinned to cpus[c % size] (empty: not pinned)
  std::string binary;  // the memcached executable's path (empty: not found; the run says so)
};

// CPU time per measured operation, in ns.
struct CpuPerOp {
  double client = 0;  // the client threads'
  double server = 0;  // memcached's, over the measured phase
};

struct MemcachedResult {
  std::string skipped;  // empty, or why memcached was not measured
  std::string version;
  unsigned clients = 0, server_threads = 0;
  std::uint64_t requests = 0;  // measured operations of all clients
  double requests_per_s = 0;   // sum over clients of measured operations / their time
  LatencyStats get_latency_ns, put_latency_ns;
  std::uint64_t gets = 0, puts = 0;
  std::uint64_t misses = 0;      // GETs of loaded keys that memcached did not find
  std::uint64_t bad_values = 0;  // GETs whose value was not one fabflow wrote for that key
  double load_seconds = 0;
  CpuPerOp cpu_ns_per_op;
  std::string command;  // memcached's command line
};

// The result as the fields of the kv_reference JSON line (docs/bench-output.md), and back: the
// launching process measures, a rank prints.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(CpuPerOp, client, server)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(MemcachedResult, skipped, version, clients, server_threads,
                                   requests, requests_per_s, get_latency_ns, put_latency_ns, gets,
                                   puts, misses, bad_values, load_seconds, cpu_ns_per_op, command)

// Starts memcached, loads the keys, measures, stops it. Never throws for a memcached that is
// missing or fails to start: `skipped` says why.
MemcachedResult run_memcached_reference(const MemcachedParams& params);

}  // namespace fabflow::references
