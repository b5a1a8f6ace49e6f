// bench queue: the flow queues of seed 003 (chapter 6): throughput, operations per item,
// enqueue / dequeue latency and transfer time of each design point and the socket baseline.
#pragma once

#include <fabflow/bench/common.h>
#include <fabflow/flow.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace fabflow {

class Bootstrap;

// The queue's enumerated choices, named for flags and output.
enum class QueuePreset : std::uint8_t { basic, batching, datamover };
// copy: try_enqueue / try_dequeue copy every item in and out; zero_copy: reserve / commit and
// peek / release, the producer writing the whole item into its slot and the consumer reading
// all of it in place; seq_only: the same calls, but only the 8-byte sequence number is written
// and read (the queue's per-item cost alone: no MB/s is reported, since no payload moves).
enum class QueueApi : std::uint8_t { copy, zero_copy, seq_only };
enum class NotifyEndpoint : std::uint8_t { shared, separate };
inline constexpr NameTable<QueuePreset, 3> kQueuePresetNames{
    {{{"basic", QueuePreset::basic},
      {"batching", QueuePreset::batching},
      {"datamover", QueuePreset::datamover}}}};
inline constexpr NameTable<QueueApi, 3> kQueueApiNames{{{{"copy", QueueApi::copy},
                                                         {"zero-copy", QueueApi::zero_copy},
                                                         {"seq-only", QueueApi::seq_only}}}};
inline constexpr NameTable<NotifyEndpoint, 2> kNotifyEndpointNames{
    {{{"shared", NotifyEndpoint::shared}, {"separate", NotifyEndpoint::separate}}}};
constexpr const auto& name_table(QueuePreset) noexcept { return kQueuePresetNames; }
namespace flow {  // found by argument-dependent lookup, beside the enum
inline constexpr NameTable<SlotFormat, 3> kSlotFormatNames{{{{"auto", SlotFormat::automatic},
                                                             {"framed", SlotFormat::framed},
                                                             {"compact", SlotFormat::compact}}}};
constexpr const auto& name_table(SlotFormat) noexcept { return kSlotFormatNames; }
}  // namespace flow
constexpr const auto& name_table(QueueApi) noexcept { return kQueueApiNames; }
constexpr const auto& name_table(NotifyEndpoint) noexcept { return kNotifyEndpointNames; }

// One queue under test: a design point with a preset, or the socket baseline.
struct QueueDesign {
  std::string design;  // "push1-watermark-pull", ... or "socket"
  std::string preset;  // "basic", "batching", "datamover"; empty for socket
};

struct QueueParams {
  bench::Target target;  // provider, endpoint, CPUs, timeout
  std::vector<QueueDesign> designs;
  std::vector<std::size_t> sizes{64};  // item_bytes; every item is this long
  std::uint64_t items = 1u << 20;      // throughput mode: items per (design, size)
  // S; 0: automatic (queue_capacity): 1024 items, but a ring of at most 4 MiB for large items.
  std::size_t capacity = 0;
  bool pingpong = false;                 // transfer time instead of throughput
  std::uint64_t round_trips = 1u << 17;  // ping-pong mode, after warm-up
  std::uint64_t warmup = 1000;           // ping-pong round trips not measured
  bool latency = false;                  // throughput mode: also time every enqueue / dequeue
  // Every item is written whole and read whole (a checksum checks it) except with seq_only.
  QueueApi api = QueueApi::zero_copy;
  // Throughput, zero-copy APIs: items per call (1: reserve / commit, peek / release; more:
  // reserve_many / commit_many and peek_many / release_many of up to this many).
  std::size_t burst = 1;
  bool active_consumer = false;  // QueueOptions::active_consumer on every design point
  // References measured in the same run, once per item size, on the same two CPUs:
  // throughput mode: the provider's raw streaming write bandwidth (run_raw) and a minimal SPSC
  // shared-memory ring; ping-pong mode: a bare cache-line ping-pong (the raw write ping-pong
  // is always measured there).
  bool reference = false;
  // Ping-pong with --reference: each row and its two references (raw write, cache line) run
  // in this many interleaved rounds, the round trips shared out among them; the ratios are the
  // median of the rounds' ratios, so that a machine whose speed changes within seconds sets a
  // row only against references measured beside it.
  unsigned reference_rounds = 5;
  ProgressMode progress = ProgressMode::automatic;  // ping-pong progress threads, raw reference
  // Design points: notifications on a second transport per queue (separate_notify_endpoint)
  // instead of the data transport. The socket baseline has none and ignores it.
  bool separate_notify = false;
  flow::SlotFormat slot_format = flow::SlotFormat::automatic;  // QueueOptions::slot_format
  // Design points: the notification cadence (QueueOptions' fields of these names, defaults
  // theirs). lazy_refresh 0 with one_notification_in_flight is the thesis' space cadence.
  double lazy_refresh = flow::QueueOptions{}.lazy_refresh;
  std::size_t recv_pool = 0;  // push2: receives kept posted (0: capacity)
  bool one_notification_in_flight = false;
};

struct QueueRow {
  QueueDesign design;
  std::string provider;
  std::size_t item_bytes = 0;
  std::size_t capacity = 0;  // S used for this row
  std::string unsupported;   // non-empty: refused, nothing measured
  std::string slot_format;   // the slots the queue used: "framed", "compact" (socket: empty)
  std::uint64_t items = 0;   // items (throughput) or round trips (ping-pong)
  double seconds = 0;        // consumer: first to last item
  double items_per_s = 0;
  // Throughput timed at the producer, first call's commit to last commit (seed 003's method, L599):
  // above items_per_s by at most the items the ring holds when the producer finishes.
  double producer_items_per_s = 0;
  double mbps = 0;  // 10^6 item bytes per second; 0 with QueueApi::seq_only (none moved)
  // Per item, both ends summed: fabric operations (socket: syscalls) by purpose.
  double data_per_item = 0, transfer_per_item = 0, space_per_item = 0;
  std::uint64_t full = 0;   // producer(s): try_enqueue returned full
  std::uint64_t empty = 0;  // consumer(s): try_dequeue returned empty
  LatencyStats transfer;    // ping-pong: half the round trip
  LatencyStats raw_write;   // ping-pong: raw write ping-pong, one-way
  bool raw_write_measured = false;
  // --reference (0 / false: not measured).
  double raw_stream_mbps = 0;  // throughput: raw streaming write, same provider and size
  double raw_stream_msgs_per_s = 0;
  double spsc_items_per_s = 0;        // throughput: minimal SPSC ring, same item size and S
  double memcpy_mbps = 0;             // throughput: memcpy of one item, producer's CPU
  LatencyStats cacheline;             // ping-pong: bare cache-line ping-pong, one-way
  double cacheline_whole_run_ns = 0;  // ... its mean over a run with no clock read per trip
  bool cacheline_measured = false;
  // Ping-pong with --reference: the interleaved rounds; transfer p50 over the cache-line p50
  // and whole run, the medians over the cache-line blocks, each block's own; transfer p50 over
  // the raw write p50, the median over the rounds, each round's own.
  unsigned rounds = 0;
  double vs_cacheline = 0, vs_cacheline_whole_run = 0, vs_raw_write = 0;
  std::vector<double> block_vs_cacheline, round_vs_raw_write;
  LatencyStats enqueue, dequeue;  // --latency: successful calls
};

struct QueueResult {
  RunEnvironment env;
  QueueParams params;
  std::vector<QueueRow> rows;  // filled on rank 0 only
};

// Collective over exactly two ranks: rank 0 produces (and measures ping-pong), rank 1
// consumes. Every (design, size) gets a fresh transport opened for the operations it needs;
// a design the provider cannot run yields a row with `unsupported` set. Rank 0 hands every
// row to `on_row` as soon as it is measured (with the result so far). Throws Error /
// PeerError on failure.
QueueResult run_queue(const QueueParams& params, Bootstrap& boot,
                      const std::function<void(const QueueResult&, const QueueRow&)>& on_row = {});

// The capacity S a queue of `item_bytes` items gets: params.capacity when set, else 1024
// items capped at a 4 MiB ring (at least 16 items). Where the provider's "fabric" is a CPU
// copy (shm, tcp and local here), a ring that stays in the cache is what keeps large items
// fast: 1024 x 64 KB = 64 MiB per side does not.
std::size_t queue_capacity(const QueueParams& params, std::size_t item_bytes) noexcept;

// Hardware references between two pinned cores (two threads of this process; cpu < 0:
// unpinned), src/bench/local_reference.cc. Half the round trip of a cache line bounced between
// the cores, sampled with one clock read per round trip (as the queue's ping-pong is) and
// again timed as a whole with none (the floor); items/s of Lamport's SPSC ring with cached indices,
// timed on the consumer from first to last item; each item written and read as bench queue's
// `api` does (copy: copied in and out, checked; zero_copy: written and checked in place;
// seq_only: only the 8-byte sequence number written and read in place).
struct CachelineReference {
  LatencyStats sampled;     // one-way, per round trip
  double whole_run_ns = 0;  // one-way mean, the clock read before and after the run only
};
// `keep`: the sampled run's samples are appended there too.
CachelineReference cacheline_pingpong(std::uint64_t round_trips, std::uint64_t warmup, int cpu_a,
                                      int cpu_b, const Clock& clock,
                                      std::vector<double>* keep = nullptr);
double spsc_ring_items_per_s(std::uint64_t items, std::size_t item_bytes, std::size_t capacity,
                             QueueApi api, int cpu_producer, int cpu_consumer, const Clock& clock);

void print_queue_header(std::ostream& out, const QueueResult& result);
void print_queue_row(std::ostream& out, const QueueResult& result, const QueueRow& row);
void print_queue_json(std::ostream& out, const QueueResult& result, const QueueRow& row);

}  // namespace fabflow
