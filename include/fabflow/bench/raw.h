// bench raw: ping-pong latency and streaming bandwidth of one fabric operation, perftest
// style (run_raw), and its reporters.
#pragma once

#include <fabflow/bench/common.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

namespace fabflow {

class Bootstrap;

enum class RawTest : std::uint8_t { latency, bandwidth, both };
inline constexpr NameTable<RawTest, 5> kRawTestNames{{{{"lat", RawTest::latency},
                                                       {"bw", RawTest::bandwidth},
                                                       {"both", RawTest::both},
                                                       {"latency", RawTest::latency},
                                                       {"bandwidth", RawTest::bandwidth}}}};
constexpr const auto& name_table(RawTest) noexcept { return kRawTestNames; }

// How a ping-pong's receiver re-posts its receives (seed 002, Fig. 19/20): one call per
// receive, a list of receives in one batch (FI_MORE on all but the last), or multi-receive
// buffers (FI_MULTI_RECV) that each take a batch of messages.
enum class RecvPost : std::uint8_t { one, list, multi };
inline constexpr NameTable<RecvPost, 3> kRecvPostNames{
    {{{"one", RecvPost::one}, {"list", RecvPost::list}, {"multi", RecvPost::multi}}}};
constexpr const auto& name_table(RecvPost) noexcept { return kRecvPostNames; }

// The open-loop schedule: message i is due at start + i * period (ticks), whatever happened to
// the messages before it, so a stall delays the samples of every message due during it (no
// coordinated omission).
struct OpenLoopSchedule {
  std::uint64_t start = 0;
  double period = 0;  // ticks between messages
  std::uint64_t due(std::uint64_t i) const noexcept {
    return start + static_cast<std::uint64_t>(static_cast<double>(i) * period);
  }
  // Whether sending message `sent` at `now` still keeps to the rate: it may lag behind its due
  // time by `min_slack` ticks (a pause of the machine, which the samples then show) or a tenth
  // of the time since the start, whichever is more; a rate the run cannot hold makes the lag
  // grow with the time and fails this.
  bool on_time(std::uint64_t sent, std::uint64_t now, double min_slack) const noexcept {
    const double lag = static_cast<double>(now) - static_cast<double>(due(sent));
    const double elapsed = static_cast<double>(now) - static_cast<double>(start);
    return lag <= std::max(min_slack, elapsed / 10);
  }
};

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
  // Bandwidth tests: endpoints (each its own connected transport) the batches rotate over:
  // post i goes to queue (i / batch) % queues. Latency tests use the first one only.
  unsigned queues = 1;
  // Bandwidth tests only, > 1: initiator threads (seed 001 drives all cores, L264), each with
  // its own `queues` endpoints, streaming `iterations` operations each at the same time; an
  // active target (send, writedata) sinks each thread's endpoints in a thread of its own. Each
  // thread is pinned to a core of its own where the host has one for every busy thread of both
  // ranks, else none is pinned. 1..64.
  unsigned threads = 1;
  RawTest test = RawTest::both;
  ProgressMode progress = ProgressMode::automatic;
  // Where it runs: provider, endpoint, this rank's CPU (-1: unpinned), the timeout (no
  // progress for this long: fail). The CLI's rank runner fills it.
  bench::Target target;
  bool keep_samples = false;  // latency rows keep every sample (RawRow::samples)
  // Send ping-pong only, > 0: "WRITE-like send/recv" (seed 002, Fig. 26): reap_every receives
  // are posted at once, each into its own buffer; a rank learns of a message by polling the
  // next buffer's memory (driving progress) and reaps the receive completions only every
  // reap_every messages, then posts that many again. Not for the local transport, which
  // places a message in its receive buffer only when the receiver polls its completions.
  unsigned reap_every = 0;
  // Send ping-pong only: how receives are re-posted, and how many at once (list: receives per
  // batch; multi: messages per multi-receive buffer, two buffers posted). 1..64.
  RecvPost recv_post = RecvPost::one;
  unsigned recv_batch = 16;
  // Send ping-pong only, > 0: open loop at this many pings per second. Rank 0 sends ping i at
  // its scheduled time whether or not earlier replies have come back; a sample is the time
  // from the ping's scheduled send to its reply, halved. A rate the run cannot hold (the
  // replies fall a receive window behind, or the pings themselves fall behind the schedule)
  // is an error, never a silent closed loop.
  double rate = 0;
};

struct CpuUse {
  double initiator_ns_per_msg = 0;
  double target_ns_per_msg = 0;
  double progress_thread_s = 0;  // CPU seconds of progress threads (both ranks)
};

// One initiator thread's share of a bandwidth row (RawParams::threads).
struct RawThreadShare {
  int cpu = -1;  // the CPU it was pinned to (-1: not pinned)
  std::uint64_t iterations = 0;
  double seconds = 0;  // its own time, from the common start to its last completion
  double mbps = 0;
  double msgs_per_s = 0;
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
  RecvPost recv_post = RecvPost::one;
  double rate = 0;              // open loop: pings per second asked for (0: closed loop)
  LatencyStats latency;         // of the answered pings
  std::vector<double> samples;  // with RawParams::keep_samples: every sample, ns, in order
  // Latency rows: whether the endpoint is reliable, and (unreliable, dgram) how many of the
  // `iterations` pings got no answer within the loss timeout (200 ms, or --timeout if less).
  bool reliable = true;
  std::uint64_t lost = 0;
  // Bandwidth rows.
  double seconds = 0;
  double mbps = 0;  // 10^6 bytes per second
  double msgs_per_s = 0;
  // Bandwidth rows: initiator threads (iterations, seconds, mbps and msgs_per_s are then the
  // aggregate: every thread's operations over the time from the common start to the last
  // thread's end), whether each had a core of its own, and each thread's share.
  unsigned threads = 1;
  bool threads_pinned = false;
  std::vector<RawThreadShare> per_thread;
  CpuUse cpu;
};

struct RawResult {
  RunEnvironment env;
  RawParams params;
  std::string more_hint;     // what the provider does with FI_MORE (more_hint())
  std::vector<RawRow> rows;  // filled on rank 0 only
};

// Collective over exactly two ranks of `boot`: rank 0 initiates and measures, rank 1 is the
// target. Opens params.queues transports of params.target for params.op (thread-safe where a
// passive target needs a progress thread, with multi-receive buffers for RecvPost::multi) and
// connects them. Throws UsageError for what the provider cannot do, Error / PeerError on
// failure.
RawResult run_raw(const RawParams& params, Bootstrap& boot);
// The same over a transport the caller opened and connected.
RawResult run_raw(const RawParams& params, Transport& transport, Bootstrap& boot);
// The same over params.queues connected transports of one provider (the first one also
// carries the latency tests); both ranks pass them in the same order.
RawResult run_raw(const RawParams& params, std::span<Transport* const> queues, Bootstrap& boot);

// What `caps`' provider does with the FI_MORE batching hint on transmit, read from the
// libfabric 1.17 sources (prov/*/src): "used" (efa, usnic, gni queue the post and ring the
// doorbell on the last one), "ignored by provider" (every other provider of 1.17: tcp, shm,
// ofi_rxm, verbs, udp, ...), "ignored by transport (no doorbell)" for the local transport, or
// "unknown" for another libfabric version.
std::string more_hint(const Capabilities& caps, const std::string& libfabric_version);

// Whether `rank` runs a progress thread in run_raw (the transport must then be thread-safe).
bool raw_progress_thread(const RawParams& params, const Capabilities& caps, int rank);

// Reporters.
void print_raw_header(std::ostream& out, const RawResult& result);
void print_raw_table(std::ostream& out, const RawResult& result);
void print_raw_json(std::ostream& out, const RawResult& result);  // one object per line

}  // namespace fabflow
