// bench rr: the request-response patterns of seed 000 over One-to-One, N-to-One and N-to-M,
// with private connections or a dispatcher.
#pragma once

#include <fabflow/bench/common.h>
#include <fabflow/rr.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <iosfwd>
#include <string>
#include <vector>

namespace fabflow {

class Bootstrap;

struct RrParams {
  bench::Target target{.timeout_ms = 2000};  // provider, CPUs, timeout
  std::vector<rr::Pattern> patterns{rr::Pattern::write_write};
  std::vector<rr::Model> models{rr::Model::private_connections};
  rr::Topology topology = rr::Topology::one_to_one;
  int requesters = 1;    // requester processes (ranks [0, requesters))
  int responders = 1;    // responder processes (the ranks after them)
  unsigned threads = 1;  // requester threads per requester process
  std::vector<std::size_t> response_sizes{64};
  std::size_t request_bytes = 64;
  std::uint64_t requests = 10000;  // measured requests per requester thread
  std::uint64_t warmup = 1000;     // requests per requester thread not measured
  unsigned depth = 1;              // outstanding requests per requester thread
  rr::Mailbox mailbox = rr::Mailbox::sparse;
  unsigned empty_mailboxes_pct = 0;  // share of the responders' mailboxes left empty
  // Idle requesters (seed 000, Fig. 9b): before each request a requester thread waits
  // idle_wait_ns instead, as long as a draw below idle_requesters_pct % says so, as the paper's
  // requesters that contact another responder (8 us, L243) instead of this one.
  unsigned idle_requesters_pct = 0;
  std::uint64_t idle_wait_ns = 8000;
  bool inject = true;
  unsigned signal_every = 16;
  bool reference = false;  // 1:1 only: raw write ping-pong of the same provider
  // --reference: each row and its reference run in this many interleaved rounds that share
  // the requests (and the warm-up of each); the ratio is the median of the rounds' ratios.
  unsigned reference_rounds = 5;
  bool verify = false;                              // checksum every response against its request
  bool callgrind = false;                           // ranks run under callgrind (deterministic Ir)
  std::string callgrind_dir;                        // where the ranks' callgrind dumps go
  std::uint64_t seed = 1;                           // responder choice in N:M
  ProgressMode progress = ProgressMode::automatic;  // raw reference only
  bool always_yield = false;  // idle waits yield the CPU (ranks sharing CPUs, tests)
};

// CPU per message on one side (requesters or responders, all their threads summed).
struct RrCpu {
  double ns_per_msg = 0;                       // thread CPU time (always measured)
  std::optional<double> instructions_per_msg;  // perf_event_open; nullopt where unavailable
  std::optional<double> cycles_per_msg;
  std::optional<double> callgrind_ir_per_msg;  // --callgrind only
};

// --callgrind: where the responders' instructions went while the row ran (callgrind's self
// cost per function, every responder process together).
struct RrProfile {
  double total_ir = 0;
  // Shares of total_ir by where the code lives: the transport (libfabric and its provider, or
  // fabflow's own local transport), the C library and loader (locks, copies), the rest of
  // fabflow (the channel, the benchmark), anything else (the C++ runtime, valgrind).
  double transport = 0, libc = 0, fabflow = 0, other = 0;
  struct Function {
    std::string name, object;
    double share = 0;
  };
  std::vector<Function> top;  // the functions with the most, at most 10
};

struct RrRow {
  rr::Pattern pattern = rr::Pattern::write_write;
  rr::Model model = rr::Model::private_connections;
  std::size_t response_bytes = 0;
  std::string unsupported;          // non-empty: refused, nothing measured
  std::string receive_queue;        // "shared" / "per-endpoint" where SENDs are received
  std::size_t empty_mailboxes = 0;  // per responder
  std::uint64_t idle_turns = 0;     // waits before measured requests, all requester threads
  // Every responder's rounds of looking for requests over the whole loop (warm-up included),
  // those that found none, and for WRITE requests the mailboxes read and those holding a new
  // request: how often a responder polls without work (the paper's Table 2).
  std::uint64_t responder_scans = 0, empty_scans = 0;
  std::uint64_t mailboxes_read = 0, mailboxes_with_request = 0;
  std::uint64_t requests = 0;  // measured requests, all requester threads
  double seconds = 0;          // longest requester thread's measured time
  double requests_per_s = 0;   // sum of every requester thread's rate
  double mbps = 0;             // requests_per_s x response bytes / 10^6
  LatencyStats latency;        // full round trip, every measured request
  RrCpu requester, responder;
  std::optional<RrProfile> responder_profile;  // --callgrind only
  bool raw_measured = false;
  LatencyStats raw_write_rtt;        // --reference: raw 64 B write ping-pong, full round trip
  unsigned rounds = 0;               // --reference: the interleaved rounds measured
  std::vector<double> round_ratios;  // ... each round's p50 round trip / raw write p50
  double vs_raw_write = 0;           // ... their median
};

struct RrResult {
  RunEnvironment env;
  RrParams params;
  std::vector<RrRow> rows;  // filled on rank 0 only
};

// Collective over requesters + responders ranks of `boot`. Every (pattern, model, size) gets
// fresh transports; a combination the provider cannot run yields a row with `unsupported`.
// Throws UsageError for inconsistent parameters, Error / PeerError on failure. `on_row`, when
// given, sees each row on rank 0 as soon as it is complete (long runs report as they go).
RrResult run_rr(const RrParams& params, Bootstrap& boot,
                const std::function<void(const RrResult&, const RrRow&)>& on_row = {});

void print_rr_header(std::ostream& out, const RrResult& result);
void print_rr_row(std::ostream& out, const RrResult& result, const RrRow& row);
void print_rr_json(std::ostream& out, const RrResult& result, const RrRow& row);

}  // namespace fabflow
