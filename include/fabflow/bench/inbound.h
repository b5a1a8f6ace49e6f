// bench inbound: C client ranks issue one-sided operations to one server rank that only drives
// progress (seed 001, Fig. 12: inbound READ / WRITE rate by payload size and number of
// clients; Fig. 14: atomics on K counters chosen at random, and the same-12-low-bits probe),
// or SENDs to a server that receives them into posted buffers (Table 5's RECV half: header-only
// against payload-carrying messages).
// run_inbound(params, transport, bootstrap) -> result, and its reporters.
#pragma once

#include <fabflow/bench/common.h>

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace fabflow {

class Bootstrap;

// The largest region the server registers for the counters (K * stride bytes).
inline constexpr std::uint64_t kInboundMaxCounterRegion = std::uint64_t{256} << 20;
// The largest payload of inbound reads and writes.
inline constexpr std::size_t kInboundMaxSize = std::size_t{4} << 20;
// The largest payload of inbound sends, and the most bytes of receives the server posts
// (clients x window x the largest send, each rounded up to 64).
inline constexpr std::size_t kInboundMaxSendSize = std::size_t{64} << 10;
inline constexpr std::size_t kInboundMaxReceivePool = std::size_t{64} << 20;

// Counter placement of one atomics row: K counters `stride` bytes apart, or one of the two
// address pairs of the aliasing probe (two counters whose offsets share their 12 low bits,
// or do not; both pairs span two pages and two cache lines).
enum class Aliasing : std::uint8_t { none, same_low12, different_low12 };
inline constexpr NameTable<Aliasing, 3> kAliasingNames{
    {{{"none", Aliasing::none},
      {"same_low12", Aliasing::same_low12},
      {"different_low12", Aliasing::different_low12}}}};
constexpr const auto& name_table(Aliasing) noexcept { return kAliasingNames; }

struct InboundParams {
  std::vector<Op> ops{Op::read, Op::write};  // each supported by the transport
  std::vector<std::size_t> sizes{64};        // read / write / send payloads (send: 0 too)
  std::vector<std::uint64_t> counters{1};    // atomics: K values
  std::uint64_t stride = 8;                  // bytes between counters (multiple of 8)
  bool probe_aliasing = false;               // atomics: also the two address-pair rows
  std::uint64_t iterations = 10000;          // measured operations per client and row
  std::uint64_t warmup = 1000;               // operations per client before measuring
  unsigned window = 16;                      // outstanding operations per client
  std::uint64_t seed = 1;                    // counter choice: client c uses seed + c
  ProgressMode progress = ProgressMode::automatic;
  // Where it runs: provider, endpoint, this rank's CPU (-1: unpinned), the host's CPUs, the
  // timeout. The CLI's rank runner fills it.
  bench::Target target;
  bool yield = false;  // clients yield the CPU when a poll finds nothing (oversubscribed)
};

// The offsets of the counters one row uses in the server's counter region.
std::vector<std::uint64_t> counter_offsets(std::uint64_t counters, std::uint64_t stride,
                                           Aliasing aliasing);
// Bytes of the counter region the server registers for `params` (the largest row).
std::uint64_t counter_region_bytes(const InboundParams& params);

struct InboundClient {
  std::uint64_t ops = 0;  // measured operations completed
  double seconds = 0;     // this client's measured phase
  LatencyStats latency;   // post to completion, ns
};

struct InboundRow {
  Op op = Op::read;
  std::size_t size = 0;        // payload bytes (8 for atomics)
  std::uint64_t counters = 0;  // atomics: K (2 for the aliasing probe)
  Aliasing aliasing = Aliasing::none;
  std::uint64_t ops = 0;  // measured operations, all clients
  double seconds = 0;     // the slowest client's measured phase
  double ops_per_s = 0;   // ops / seconds
  double mbps = 0;        // 10^6 payload bytes per second
  LatencyStats latency;   // over all clients' samples (each at most kInboundMaxSamples)
  std::vector<InboundClient> clients;
  // Atomics: the counters' final sum read back by the server against what the clients say
  // they added (fadd: every operation adds 1; cswap: every successful swap adds 1).
  bool checked = false;
  bool check_passed = false;
  std::uint64_t counter_sum = 0;
  std::uint64_t expected_sum = 0;
  double server_cpu_s = 0;  // CPU seconds of the server process over the measured phase
  // Sends: the rate is the server's (ops received in the measured phase / the time from its
  // start to the last one), and the check is the server's count of every client's messages,
  // and for payloads of 16 bytes or more the sum of their sequence numbers, against what the
  // clients sent (`received` and `expected` messages, all phases).
  bool server_rate = false;
  std::uint64_t received = 0;
  std::uint64_t expected = 0;
};

// The samples each client contributes to a row's merged percentiles (evenly spaced).
inline constexpr std::size_t kInboundMaxSamples = 1u << 16;

struct InboundResult {
  RunEnvironment env;
  InboundParams params;
  int clients = 0;
  bool oversubscribed = false;   // more ranks than CPUs
  std::vector<InboundRow> rows;  // filled on the server rank only
};

// Collective over the ranks of `boot`: ranks 0..size-2 are clients, the last rank the server.
// `transport` must be connected. Throws UsageError for an unsupported op or a bad parameter,
// Error / PeerError on failure; a failed exactly-once check is reported in its row.
InboundResult run_inbound(const InboundParams& params, Transport& transport, Bootstrap& boot);
// The same on a transport of params.target for params.ops that it opens (thread-safe where the
// server needs a progress thread) and connects.
InboundResult run_inbound(const InboundParams& params, Bootstrap& boot);

// Whether `rank` runs a progress thread: only the server may, as a passive target
// (needs_progress_thread: auto gives one on providers with manual data progress; off makes the
// server's own thread drive progress inline between its barriers). The transport must then be
// thread-safe.
bool inbound_progress_thread(const InboundParams& params, const Capabilities& caps, int rank,
                             int size);

// Reporters.
void print_inbound_header(std::ostream& out, const InboundResult& result);
void print_inbound_table(std::ostream& out, const InboundResult& result);
void print_inbound_json(std::ostream& out, const InboundResult& result);  // one object per line
// The line for an operation the provider lacks: JSON (a row with "unsupported") or text.
void print_inbound_unsupported(std::ostream& out, const RunEnvironment& env, Op op,
                               const std::string& why, bool json);

}  // namespace fabflow
