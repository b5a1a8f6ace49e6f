// The benchmark engine as a library: run(params) -> result, plus reporters (human table and
// JSON lines). The CLI is a thin shell over it. Field meanings: docs/bench-output.md.
#pragma once

#include <fabflow/rr.h>
#include <fabflow/transport.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace fabflow {

class Bootstrap;

// Percentiles of a set of samples, in nanoseconds.
struct LatencyStats {
  double mean = 0, min = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0;
  std::uint64_t samples = 0;
};

// Sorts `samples` in place and summarises them (nearest-rank percentiles).
LatencyStats summarize(std::vector<double>& samples);

// Parses "64", "4K", "1M", lists "64,4096" and power-of-two sweeps "4:64K" into sizes.
// Throws UsageError on malformed input.
std::vector<std::size_t> parse_sizes(const std::string& text);

// Time source for samples: the invariant TSC when the CPU has one (calibrated against
// CLOCK_MONOTONIC), else CLOCK_MONOTONIC. Thread-safe after construction.
class Clock {
 public:
  Clock();
  std::uint64_t now() const noexcept;  // ticks
  double to_ns(std::uint64_t ticks) const noexcept { return static_cast<double>(ticks) * ns_per_tick_; }
  const std::string& name() const noexcept { return name_; }

 private:
  bool tsc_ = false;
  double ns_per_tick_ = 1.0;
  std::string name_;
};

enum class RawTest : std::uint8_t { latency, bandwidth, both };

struct RawParams {
  Op op = Op::send;
  std::vector<std::size_t> sizes{64};
  std::uint64_t iterations = 10000;  // measured iterations per size
  double duration_s = 0;             // > 0: pick iterations to fill this time per size
  std::uint64_t warmup = 1000;       // iterations discarded before measuring
  unsigned window = 64;              // outstanding operations in bandwidth tests
  bool inject = true;                // inject sizes up to the provider's inject size
  unsigned signal_every = 1;         // request a completion every n-th operation
  unsigned batch = 1;                // post n operations back to back, FI_MORE on all but last
  RawTest test = RawTest::both;
  ProgressMode progress = ProgressMode::automatic;
  int cpu = -1;                      // the CPU this rank is pinned to (-1: unpinned)
  std::uint64_t timeout_ms = 10000;  // no progress for this long: fail
};

struct CpuUse {
  double initiator_ns_per_msg = 0;
  double target_ns_per_msg = 0;
  double progress_thread_s = 0;  // CPU seconds of progress threads (both ranks)
};

struct RawRow {
  RawTest test = RawTest::latency;
  Op op = Op::send;
  std::size_t size = 0;
  std::uint64_t iterations = 0;
  bool injected = false;
  // Latency rows: one-way for ping-pong ops (send, write, writedata: half the round trip),
  // completion time for read and atomics.
  bool one_way = true;
  LatencyStats latency;
  // Bandwidth rows.
  double seconds = 0;
  double mbps = 0;  // 10^6 bytes per second
  double msgs_per_s = 0;
  CpuUse cpu;
};

// The configuration and environment echoed in every report.
struct RawEnvironment {
  Capabilities caps;
  std::string fabflow_version;
  std::string libfabric_version;
  std::string build_type;
  std::string sanitizer;
  std::string clock;
  std::string launcher;
  bool pinned = false;
  int cpu_initiator = -1;
  int cpu_target = -1;
  bool progress_thread_initiator = false;
  bool progress_thread_target = false;
};

struct RawResult {
  RawEnvironment env;
  RawParams params;
  std::vector<RawRow> rows;  // filled on rank 0 only
};

// Collective over exactly two ranks of `boot`: rank 0 initiates and measures, rank 1 is the
// target. `transport` must be connected. Throws Error / PeerError on failure.
RawResult run_raw(const RawParams& params, Transport& transport, Bootstrap& boot);

// Whether `rank` runs a progress thread in run_raw (the transport must then be thread-safe).
bool raw_progress_thread(const RawParams& params, const Capabilities& caps, int rank);

// Reporters.
void print_raw_header(std::ostream& out, const RawResult& result);
void print_raw_table(std::ostream& out, const RawResult& result);
void print_raw_json(std::ostream& out, const RawResult& result);  // one object per line

// ---- bench queue: the flow queues (seed 003, chapter 6) ----

// One queue under test: a design point with a preset, or the socket baseline.
struct QueueDesign {
  std::string design;          // "push1-watermark-pull", ... or "socket"
  std::string preset;          // "basic", "batching", "datamover"; empty for socket
};

struct QueueParams {
  std::string provider = "auto";
  EndpointType endpoint = EndpointType::automatic;
  std::vector<QueueDesign> designs;
  std::vector<std::size_t> sizes{64};   // item_bytes; every item is this long
  std::uint64_t items = 1u << 20;       // throughput mode: items per (design, size)
  // S; 0: automatic (queue_capacity): 1024 items, but a ring of at most 4 MiB for large items.
  std::size_t capacity = 0;
  bool pingpong = false;                // transfer time instead of throughput
  std::uint64_t round_trips = 1u << 17; // ping-pong mode, after warm-up
  std::uint64_t warmup = 1000;          // ping-pong round trips not measured
  bool latency = false;                 // throughput mode: also time every enqueue / dequeue
  // Zero-copy API (reserve / commit, peek / release; only the 8-byte sequence number is
  // written and read) instead of try_enqueue / try_dequeue copying whole items.
  bool zero_copy = true;
  bool active_consumer = false;         // QueueOptions::active_consumer on every design point
  // References measured in the same run, once per item size, on the same two CPUs:
  // throughput mode: the provider's raw streaming write bandwidth (run_raw) and a minimal SPSC
  // shared-memory ring; ping-pong mode: a bare cache-line ping-pong (the raw write ping-pong
  // is always measured there).
  bool reference = false;
  ProgressMode progress = ProgressMode::automatic;  // ping-pong progress threads, raw reference
  // Design points: notifications on a second transport per queue (separate_notify_endpoint)
  // instead of the data transport. The socket baseline has none and ignores it.
  bool separate_notify = false;
  int cpu = -1;                         // the CPU this rank is pinned to (-1: unpinned)
  std::uint64_t timeout_ms = 10000;     // no progress for this long: fail
};

struct QueueRow {
  QueueDesign design;
  std::string provider;
  std::size_t item_bytes = 0;
  std::size_t capacity = 0;             // S used for this row
  std::string unsupported;              // non-empty: refused, nothing measured
  std::uint64_t items = 0;              // items (throughput) or round trips (ping-pong)
  double seconds = 0;                   // consumer: first to last item
  double items_per_s = 0;
  double mbps = 0;                      // 10^6 item bytes per second
  // Per item, both ends summed: fabric operations (socket: syscalls) by purpose.
  double data_per_item = 0, transfer_per_item = 0, space_per_item = 0;
  std::uint64_t full = 0;               // producer(s): try_enqueue returned full
  std::uint64_t empty = 0;              // consumer(s): try_dequeue returned empty
  LatencyStats transfer;                // ping-pong: half the round trip
  LatencyStats raw_write;               // ping-pong: raw write ping-pong, one-way
  bool raw_write_measured = false;
  bool progress_threads = false;        // a progress thread drove a transport (never, today)
  // --reference (0 / false: not measured).
  double raw_stream_mbps = 0;           // throughput: raw streaming write, same provider and size
  double raw_stream_msgs_per_s = 0;
  double spsc_items_per_s = 0;          // throughput: minimal SPSC ring, same item size and S
  LatencyStats cacheline;               // ping-pong: bare cache-line ping-pong, one-way
  bool cacheline_measured = false;
  LatencyStats enqueue, dequeue;        // --latency: successful calls
};

struct QueueResult {
  RawEnvironment env;
  QueueParams params;
  std::vector<QueueRow> rows;           // filled on rank 0 only
};

// Collective over exactly two ranks: rank 0 produces (and measures ping-pong), rank 1
// consumes. Every (design, size) gets a fresh transport opened for the operations it needs;
// a design the provider cannot run yields a row with `unsupported` set. Throws Error /
// PeerError on failure.
QueueResult run_queue(const QueueParams& params, Bootstrap& boot);

// The capacity S a queue of `item_bytes` items gets: params.capacity when set, else 1024
// items capped at a 4 MiB ring (at least 16 items). Where the provider's "fabric" is a CPU
// copy (shm, tcp and local here), a ring that stays in the cache is what keeps large items
// fast: 1024 x 64 KB = 64 MiB per side does not.
std::size_t queue_capacity(const QueueParams& params, std::size_t item_bytes) noexcept;

// Hardware references between two pinned cores (two threads of this process; cpu < 0:
// unpinned), src/bench/local_reference.cc. Half the round trip of a cache line bounced between
// the cores; items/s of Lamport's SPSC ring with cached indices, timed on the consumer from
// first to last item; zero_copy: only the 8-byte sequence number is written and read in place
// (as bench queue's zero-copy API), else every item is copied in and out.
LatencyStats cacheline_pingpong(std::uint64_t round_trips, std::uint64_t warmup, int cpu_a,
                                int cpu_b, const Clock& clock);
double spsc_ring_items_per_s(std::uint64_t items, std::size_t item_bytes, std::size_t capacity,
                             bool zero_copy, int cpu_producer, int cpu_consumer,
                             const Clock& clock);

void print_queue_header(std::ostream& out, const QueueResult& result);
void print_queue_row(std::ostream& out, const QueueResult& result, const QueueRow& row);
void print_queue_json(std::ostream& out, const QueueResult& result, const QueueRow& row);

// ---- bench rr: request-response patterns (seed 000) ----

struct RrParams {
  std::string provider = "auto";
  EndpointType endpoint = EndpointType::automatic;
  std::vector<rr::Pattern> patterns{rr::Pattern::write_write};
  std::vector<rr::Model> models{rr::Model::private_connections};
  rr::Topology topology = rr::Topology::one_to_one;
  int requesters = 1;                   // requester processes (ranks [0, requesters))
  int responders = 1;                   // responder processes (the ranks after them)
  unsigned threads = 1;                 // requester threads per requester process
  std::vector<std::size_t> response_sizes{64};
  std::size_t request_bytes = 64;
  std::uint64_t requests = 10000;       // measured requests per requester thread
  std::uint64_t warmup = 1000;          // requests per requester thread not measured
  unsigned depth = 1;                   // outstanding requests per requester thread
  rr::Mailbox mailbox = rr::Mailbox::sparse;
  unsigned empty_mailboxes_pct = 0;     // share of the responders' mailboxes left empty
  bool inject = true;
  unsigned signal_every = 16;
  bool reference = false;               // 1:1 only: raw write ping-pong of the same provider
  bool verify = false;                  // checksum every response against its request
  bool callgrind = false;               // ranks run under callgrind (deterministic Ir)
  std::string callgrind_dir;            // where the ranks' callgrind dumps go
  std::uint64_t seed = 1;               // responder choice in N:M
  ProgressMode progress = ProgressMode::automatic;  // raw reference only
  int cpu = -1;                         // the CPU this rank's main thread is pinned to
  bool pin = true;                      // pin extra threads next to it
  std::vector<int> cpus;                // CPUs of the host this rank may use (empty: ask the OS
                                        // now; pass it in when the caller already pinned itself)
  bool always_yield = false;            // idle waits yield the CPU (ranks sharing CPUs, tests)
  std::uint64_t timeout_ms = 2000;      // no progress for this long: fail
};

// CPU per message on one side (requesters or responders, all their threads summed).
struct RrCpu {
  double ns_per_msg = 0;                       // thread CPU time (always measured)
  std::optional<double> instructions_per_msg;  // perf_event_open; nullopt where unavailable
  std::optional<double> cycles_per_msg;
  std::optional<double> callgrind_ir_per_msg;  // --callgrind only
};

struct RrRow {
  rr::Pattern pattern = rr::Pattern::write_write;
  rr::Model model = rr::Model::private_connections;
  std::size_t response_bytes = 0;
  std::string unsupported;              // non-empty: refused, nothing measured
  std::string receive_queue;            // "shared" / "per-endpoint" where SENDs are received
  std::size_t empty_mailboxes = 0;      // per responder
  std::uint64_t requests = 0;           // measured requests, all requester threads
  double seconds = 0;                   // longest requester thread's measured time
  double requests_per_s = 0;            // sum of every requester thread's rate
  double mbps = 0;                      // requests_per_s x response bytes / 10^6
  LatencyStats latency;                 // full round trip, every measured request
  RrCpu requester, responder;
  bool raw_measured = false;
  LatencyStats raw_write_rtt;           // --reference: raw 64 B write ping-pong, full round trip
};

struct RrResult {
  RawEnvironment env;
  RrParams params;
  std::vector<RrRow> rows;              // filled on rank 0 only
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
