// bench bulk: the large-message channel's protocols (seed 004, Fig. 5 and 6) between ranks 0
// and 1: ping-pong bandwidth (size over half the round trip) and streaming bandwidth (a window
// of messages in flight), with buffers replaced by freshly mapped ones every `reuse` messages;
// registrations per message and their time, the registration cache's counters, and CPU time
// per byte on both sides. --reference adds, in the same run, a memcpy of the same size and the
// raw streaming RMA write of the same size on the same provider. --memory fabflow takes both
// ranks' buffers from the channel's own memory (Channel::allocate) instead of the user's.
#pragma once

#include <fabflow/bench/common.h>
#include <fabflow/bulk.h>
#include <fabflow/names.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace fabflow {

class Bootstrap;

// Where bench bulk's buffers live: freshly mapped user memory, or memory the channel allocated
// and registered once (on local a segment the peer maps: one copy in user space per message).
enum class BufferMemory : std::uint8_t { user, fabflow };
inline constexpr NameTable<BufferMemory, 2> kBufferMemoryNames{
    {{{"user", BufferMemory::user}, {"fabflow", BufferMemory::fabflow}}}};
constexpr const auto& name_table(BufferMemory) noexcept { return kBufferMemoryNames; }

struct BulkParams {
  bench::Target target;  // provider, endpoint, CPUs, timeout
  std::vector<bulk::Protocol> protocols{std::begin(bulk::kAllProtocols),
                                        std::end(bulk::kAllProtocols)};
  std::vector<std::size_t> sizes;  // empty: 64K:64M
  // A buffer serves this many messages before a freshly mapped one replaces it (the old one is
  // unmapped: what the registration cache must notice). 0: never replaced.
  std::uint64_t reuse = 0;
  std::uint64_t bytes_per_point = std::uint64_t{256} << 20;  // sets the message count per size
  std::uint64_t min_messages = 4, max_messages = 1000;
  unsigned window = 8;  // streaming: messages in flight
  bool pin = false;     // --mr-pin
  std::string memlock;  // what became of RLIMIT_MEMLOCK for --mr-pin (the header says it)
  std::size_t eager_limit = 0, frag_size = 0;
  unsigned depth = 0;
  double frag_growth = 1.0;
  // On local, rendezvous between Memories of at least this many bytes are split copies
  // (ChannelOptions::split_copy_min; 0: never; unset: the channel's default).
  std::optional<std::size_t> split_copy_min;
  bool reference = false;
  BufferMemory memory = BufferMemory::user;  // fabflow: never replaced (reuse must be 0)
  // The sender writes a pattern that changes per message and the receiver checks it, both
  // outside the timed sections: every byte of a message of up to a page, a rotating sample of
  // a larger one (one page in 16, at most 16, and the last page; src/bench/message_pattern.h).
  // false: no check (what it costs, docs/bench-output.md).
  bool verify = true;
};

struct BulkRow {
  bulk::Protocol protocol = bulk::Protocol::copy;
  std::size_t size = 0;
  std::string unsupported;                 // non-empty: not run, with the reason
  std::uint64_t messages = 0;              // per phase
  double pingpong_mb_s = 0;                // size / half round trip, MB = 10^6 bytes
  double half_rtt_us = 0;                  // mean
  double stream_mb_s = 0;                  // a window of messages in flight, one way
  double registrations_per_message = 0;    // both ranks, ping-pong phase
  double registration_us_per_message = 0;  // registering + deregistering, both ranks
  bulk::Stats sender, receiver;            // the streaming phase's channel counters
  std::uint64_t cache_hits = 0, cache_misses = 0, cache_evictions = 0, cache_invalidations = 0;
  double cpu_ns_per_byte_sender = 0, cpu_ns_per_byte_receiver = 0;  // streaming phase
  // --reference, on rank 0's CPU: memcpy of the size between two buffers (cache-hot where
  // twice the size fits the cache). And copy_pingpong_mb_s below: the ping-pong of one memcpy
  // per message through the four buffers this ping-pong walks, with no library in between.
  std::optional<double> memcpy_mb_s, copy_pingpong_mb_s;
  std::optional<double> raw_write_mb_s;  // --reference: streaming RMA write, same window
  std::string raw_write_unsupported;
};

struct BulkResult {
  RunEnvironment env;
  BulkParams params;
  bulk::ChannelOptions options;  // resolved
  bulk::Costs costs;             // what auto chose from
  std::string rendezvous_path, cache_state;
  std::vector<BulkRow> rows;  // rank 0
};

// A one-copy ping-pong's ceiling, the hardware reference of --reference: two threads pinned to
// `cpu_a` and `cpu_b` (-1: unpinned) pass messages of `size` bytes back and forth, each message
// one memcpy by its receiver from the sender's send buffer into its own receive buffer (four
// buffers, as bench bulk's ping-pong), handed over by one cache line. MB/s of size over half
// the mean round trip, over `round_trips` round trips after one untimed.
double copy_pingpong_mb_s(std::size_t size, std::uint64_t round_trips, int cpu_a, int cpu_b);

// Collective over two ranks. Throws UsageError / Error / PeerError. `on_row` sees each row on
// rank 0.
BulkResult run_bulk(const BulkParams& params, Bootstrap& boot,
                    const std::function<void(const BulkResult&, const BulkRow&)>& on_row = {});

// What the channel's auto chooses from on `target` (`fabflow bulk plan`): a channel opened with
// `options` between the two ranks of `boot`, which measures the costs. The result holds the
// capabilities (env.caps), the resolved options, the costs, the rendezvous path and the cache
// state, and no rows. Collective. Throws UsageError / Error / PeerError.
BulkResult plan_bulk(const bench::Target& target, Bootstrap& boot,
                     const bulk::ChannelOptions& options);

// auto's plan: the costs it was measured from, then size -> the cheapest protocol with every
// candidate's estimate (powers of 4 from 1 B to 1 GiB). Each line starts with "# " when
// `comment`.
void print_bulk_plan(std::ostream& out, const bulk::Costs& costs,
                     const bulk::ChannelOptions& options, bool comment);
void print_bulk_header(std::ostream& out, const BulkResult& result);
void print_bulk_row(std::ostream& out, const BulkResult& result, const BulkRow& row);
void print_bulk_json(std::ostream& out, const BulkResult& result, const BulkRow& row);

}  // namespace fabflow
