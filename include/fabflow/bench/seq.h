// bench seq: the networked sequencer of seed 001 in its four designs (rpc, rpc-batch, spec,
// atomic): throughput, latency, responses per batch, CPU per request on each side, Spec-S0's
// miss fraction and the exactly-once check; --reference adds the bare shared-memory fetch-add
// rate of as many threads as there are clients (the cache-coherence ceiling of a counter).
#pragma once

#include <fabflow/bench/common.h>
#include <fabflow/seq.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace fabflow {

class Bootstrap;

struct SeqParams {
  bench::Target target;  // provider, endpoint, CPUs, timeout
  std::vector<seq::Design> designs{std::begin(seq::kAllDesigns), std::end(seq::kAllDesigns)};
  unsigned workers = 1;
  unsigned queues = 1;
  unsigned outstanding = 1;  // per client
  unsigned batch = 16;
  bool batch_responses = true;     // spec: FI_MORE batches (false: one by one)
  std::uint64_t requests = 10000;  // measured requests per client
  std::uint64_t warmup = 1000;     // requests per client not measured
  bool reference = false;
};

struct SeqRow {
  seq::Design design = seq::Design::rpc;
  std::string unsupported;  // non-empty: refused, nothing measured
  unsigned workers = 0, queues = 0, clients = 0, outstanding = 0, batch = 0;
  bool batching = false;       // responses posted as FI_MORE batches
  std::string more_hint;       // what the provider does with FI_MORE (more_hint() of bench/raw.h)
  std::uint64_t requests = 0;  // measured, all clients
  double requests_per_s = 0;   // sum of the clients' rates
  LatencyStats latency;        // issue to answer (FIFO pairing, see docs/bench-output.md)
  std::optional<double> responses_per_batch;  // server rounds (not for atomic)
  double client_cpu_ns_per_request = 0;
  std::optional<double> server_cpu_ns_per_request;  // not for atomic on local: no server work
  std::optional<double> spec_miss_fraction;         // spec: full answers / answers
  std::uint64_t served = 0;                         // server's count, warm-up included
  std::uint64_t counter_first = 0, counter_final = 0;
  std::uint64_t order_violations = 0;
  bool exactly_once = false;  // the check below passed
  std::string check;          // "passed" or what failed
};

struct SeqReference {
  unsigned threads = 0;
  double ops_per_s = 0;  // fetch-adds per second, all threads
};

struct SeqResult {
  RunEnvironment env;
  SeqParams params;
  unsigned clients = 0;
  std::vector<SeqRow> rows;               // rank 0 only
  std::optional<SeqReference> reference;  // rank 0 only, with --reference
};

// Collective over every rank of `boot`: ranks [0, size-1) are clients, the last the server.
// A design the provider cannot run yields a row with `unsupported`. `on_row` sees each row on
// rank 0 when complete. Throws UsageError / Error / PeerError.
SeqResult run_seq(const SeqParams& params, Bootstrap& boot,
                  const std::function<void(const SeqResult&, const SeqRow&)>& on_row = {});

// The bare fetch-add loop: `threads` threads pinned over `cpus`, each adding to one shared
// counter for `seconds`.
SeqReference fetch_add_reference(unsigned threads, const std::vector<int>& cpus, double seconds);

void print_seq_header(std::ostream& out, const SeqResult& result);
void print_seq_row(std::ostream& out, const SeqResult& result, const SeqRow& row);
void print_seq_reference(std::ostream& out, const SeqResult& result);
void print_seq_json(std::ostream& out, const SeqResult& result, const SeqRow& row);
void print_seq_reference_json(std::ostream& out, const SeqResult& result);

}  // namespace fabflow
