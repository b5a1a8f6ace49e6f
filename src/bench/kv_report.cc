// Reporters of bench kv: the header, one fixed-column line per design and JSON lines (fields:
// docs/bench-output.md).
#include <fabflow/bench/kv.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <ostream>
#include <string>

#include "bench/report.h"

namespace fabflow {
namespace {

// Fig. 9's series names: HERD with and without batching, the READ-based store (its GETs never
// touch the server's CPU; "unbatched" when its PUT RPCs are answered one by one), the atomic one.
std::string variant_of(const KvRow& row) {
  switch (row.design) {
    case kv::Design::herd: return row.batch > 1 ? "herd-batched" : "herd-unbatched";
    case kv::Design::read: return row.batch > 1 ? "read-based" : "read-based-unbatched";
    case kv::Design::atomic: return "atomic";
  }
  return "?";
}

std::string us(const KvOpStats& s, double LatencyStats::*field) {
  return s.count ? report::fmt("%.2f", s.latency.*field / 1e3) : "n/a";
}

}  // namespace

void print_kv_header(std::ostream& out, const KvResult& r) {
  const auto& p = r.params;
  char mix[160];
  std::snprintf(mix, sizeof mix, "%.0f%% GET / %.0f%% PUT, keys %s, %zu-byte values",
                100 * (1 - p.put_fraction), 100 * p.put_fraction,
                p.zipf > 0 ? report::fmt("Zipf(%.2f)", p.zipf).c_str() : "uniform", p.value_bytes);
  report::print_table_header(
      out, r.env, "kv",
      {"servers " + std::to_string(p.servers) + " x " + std::to_string(p.workers) + " workers, " +
           std::to_string(p.keys) + " keys each; clients " + std::to_string(r.clients) + " x " +
           std::to_string(p.outstanding) + " in flight" +
           (p.rate > 0 ? report::fmt(", open loop at %.0f ops/s each", p.rate) : "") +
           "; herd batch " + std::to_string(p.batch) + "; atomic PUTs " +
           (p.put_emulation == kv::PutEmulation::two_atomics
                ? "two-atomics (CAS lock, CAS unlock, no WRITE: no value stored)"
                : "lock-write-unlock (CAS, WRITE, CAS)"),
       std::string(mix),
       "operations " + std::to_string(p.requests) + " per client, warm-up " +
           std::to_string(p.warmup),
       "ops/s: sum of the clients' rates; CPU per op: clients over the measured operations, "
       "servers over all they ran (busy polling included); check: every GET's value whole and "
       "of its key, and the history of every operation " +
           (p.check == KvCheck::linearizable
                ? std::string("linearizable (one order of all operations, real time kept)")
                : std::string("per GET (each GET against the PUTs to its key)"))},
      "  design              ops/s  get p50  get p99  put p50  put p99 (us)  client ns/op  "
      "server ns/op  reads/get  retries  batch  check");
}

void print_kv_row(std::ostream& out, const KvResult&, const KvRow& row) {
  if (report::print_if_unsupported_design(out, variant_of(row), row.unsupported)) return;
  char line[512];
  std::snprintf(line, sizeof line,
                "  %-14s %10.0f %8s %8s %8s %8s      %12.0f  %12.0f  %9s  %7llu  %5s  %s\n",
                variant_of(row).c_str(), row.requests_per_s,
                us(row.get, &LatencyStats::p50).c_str(), us(row.get, &LatencyStats::p99).c_str(),
                us(row.put, &LatencyStats::p50).c_str(), us(row.put, &LatencyStats::p99).c_str(),
                row.client_cpu_ns_per_op, row.server_cpu_ns_per_op,
                report::fmt_or_na(row.reads_per_get, "%.2f").c_str(),
                static_cast<unsigned long long>(row.retries),
                report::fmt_or_na(row.mean_batch, "%.1f").c_str(), row.check.c_str());
  out << line << std::flush;
}

void print_kv_json(std::ostream& out, const KvResult& r, const KvRow& row) {
  const auto& p = r.params;
  nlohmann::json j = report::design_row(r.env, "kv", "kv", row, variant_of(row));
  j["servers"] = row.servers;
  j["keys"] = row.keys;
  j["value_size"] = p.value_bytes;
  j["put_fraction"] = p.put_fraction;
  j["zipf"] = p.zipf;
  j["rate"] = p.rate;
  j["put_emulation"] = row.design == kv::Design::atomic
                           ? nlohmann::json(std::string(kv::to_string(p.put_emulation)))
                           : nlohmann::json(nullptr);
  j["lock_lease_ms"] = row.design == kv::Design::atomic ? nlohmann::json(p.lock_lease.count())
                                                        : nlohmann::json(nullptr);
  if (report::print_if_unsupported(out, j, row.unsupported)) return;
  j["requests"] = row.requests;
  j["warmup"] = p.warmup;
  j["requests_per_s"] = row.requests_per_s;
  j["get"] = {{"count", row.get.count}, {"latency_ns", report::latency_json(row.get.latency)}};
  j["put"] = {{"count", row.put.count}, {"latency_ns", report::latency_json(row.put.latency)}};
  j["cpu_ns_per_op"] = {{"client", row.client_cpu_ns_per_op}, {"server", row.server_cpu_ns_per_op}};
  j["reads_per_get"] = report::optional_json(row.reads_per_get);
  j["atomics_per_put"] = report::optional_json(row.atomics_per_put);
  j["writes_per_put"] = report::optional_json(row.writes_per_put);
  j["retries"] = row.retries;
  j["lock_waits"] = row.lock_waits;
  j["recovered"] = row.recovered;
  j["cache_misses"] = row.cache_misses;
  j["mean_batch"] = report::optional_json(row.mean_batch);
  j["history_checked"] = row.history;
  j["history_check"] = std::string(to_string(p.check));
  j["verified"] = row.verified;
  j["check"] = row.check;
  report::print_json_line(out, j);
}

}  // namespace fabflow
