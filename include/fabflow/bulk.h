// Large-message transfer (seed 004): a channel between every pair of ranks that sends and
// receives user buffers of any size (the user registers nothing), with the protocol that fits
// the size: copy through bounce buffers, eager, rendezvous by write or read, rendezvous with
// cached registrations (leave-pinned), and the registration-overlapping pipeline with or
// without cached fragments. Design and wire format: docs/bulk.md.
//
// Matching: a receive names its peer and tag; messages from one peer with one tag match the
// receives for that peer and tag in the order both were posted. Every message carries a
// per-pair sequence number, so the transport may deliver control messages in any order.
//
// Nothing a peer sends is trusted: sequence numbers, request ids, offsets, lengths and keys
// are range-checked against what this rank advertised, and a bad message fails the channel
// with an error naming the peer. A failed channel stays failed.
//
// Setup is collective over one Bootstrap, each rank with one connected Transport. Not
// thread-safe: one thread uses a channel.
#pragma once

#include <fabflow/names.h>
#include <fabflow/node.h>
#include <fabflow/transport.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace fabflow {
class Bootstrap;
}

namespace fabflow::bulk {

class Memory;  // fabflow/bulk/transfer.h

enum class Protocol : std::uint8_t {
  automatic,         // by size, from the plan (plan.h's thresholds)
  copy,              // bounce buffers over send/recv, fragmented
  eager,             // the whole message with its match header (up to the eager limit)
  rndv_write,        // register both buffers, the sender writes, FIN
  rndv_read,         // register both buffers, the receiver reads, FIN
  leave_pinned,      // rndv_write with both registrations from the registration cache
  pipeline,          // seed 004 section 4: eager part, send/recv part, fragments by write
  pipeline_read,     // the same with fragments pulled by read
  caching_pipeline,  // the pipeline with cached, fragment-aligned registrations (section 5.2)
};

inline constexpr NameTable<Protocol, 9> kProtocolNames{
    {{{"auto", Protocol::automatic},
      {"copy", Protocol::copy},
      {"eager", Protocol::eager},
      {"rndv-write", Protocol::rndv_write},
      {"rndv-read", Protocol::rndv_read},
      {"leave-pinned", Protocol::leave_pinned},
      {"pipeline", Protocol::pipeline},
      {"pipeline-read", Protocol::pipeline_read},
      {"caching-pipeline", Protocol::caching_pipeline}}}};
constexpr const auto& name_table(Protocol) noexcept { return kProtocolNames; }
constexpr std::string_view to_string(Protocol p) noexcept { return kProtocolNames.name(p); }
constexpr std::optional<Protocol> parse_protocol(std::string_view s) noexcept {
  return kProtocolNames.parse(s);
}
// Every protocol but auto, in the order reports list them.
inline constexpr Protocol kAllProtocols[] = {Protocol::copy,          Protocol::eager,
                                             Protocol::rndv_write,    Protocol::rndv_read,
                                             Protocol::leave_pinned,  Protocol::pipeline,
                                             Protocol::pipeline_read, Protocol::caching_pipeline};

constexpr bool uses_cache(Protocol p) noexcept {
  return p == Protocol::leave_pinned || p == Protocol::caching_pipeline;
}

// The largest message a channel takes (the size field is checked against it on receipt too).
inline constexpr std::uint64_t kMaxMessage = std::uint64_t{1} << 40;  // 1 TiB

struct ChannelOptions {
  Protocol protocol = Protocol::automatic;  // default for send(); each send may override
  // Thresholds and shapes; 0 = this channel's default (docs/bulk.md). Every rank must agree on
  // them (checked at open).
  std::size_t eager_limit = 0;  // largest eager message (default 16 KiB)
  std::size_t bounce_size = 0;  // payload of one receive buffer / copy fragment (default 64 KiB)
  std::size_t frag_size = 0;    // first pipeline fragment (default 1 MiB)
  double frag_growth = 1.0;     // each pipeline fragment this many times the previous one
  std::size_t max_frag = 0;     // cap of grown fragments (default 16 MiB)
  unsigned depth = 0;           // pipeline fragments in flight per message (default 4)
  // Bytes after the eager part that go by send/recv while the first fragments register
  // (seed 004's first RDMA offset); 0 = one bounce buffer.
  std::size_t copy_ahead = 0;
  // auto: messages above this use the pipeline, from eager_limit up to it copy (0 = 256 KiB).
  std::size_t copy_limit = 0;
  unsigned rx_buffers = 0;  // receive buffers kept posted (default 32)
  // Pin the pages of every registration (mlock) as verbs registration does, unpinning at
  // deregistration: registration then costs what it costs on hardware.
  bool pin = false;
  // The registration cache of leave-pinned and caching-pipeline (bounds; 0 = defaults).
  std::size_t cache_entries = 0;  // default 1024
  std::size_t cache_bytes = 0;    // default 1 GiB, and never above RLIMIT_MEMLOCK when pinning
  bool cache_verify = false;      // check every hit against /proc/self/pagemap (debug)
  // On the local transport, rendezvous by cross-memory attach (process_vm_readv/writev):
  // one copy. Where the kernel refuses it, rendezvous falls back to copy (reason in stats).
  bool cross_memory_attach = true;
  // On the local transport, a read rendezvous (rndv-read, pipeline-read) of at least this many
  // bytes whose send and receive buffers are both Memories of allocate() is copied by both
  // ranks at once, half each, through their mappings of each other's Memory (0: never). The
  // receiver decides; the sender follows the ACK that asks it to.
  std::size_t split_copy_min = std::size_t{1} << 20;
  // auto: measure the costs at open (collective, tens of milliseconds) and pick each message's
  // protocol by the cheapest estimate; off: fixed thresholds (eager limit, copy limit).
  bool measure_costs = true;
  // wait() yields the CPU when a poll found nothing (more ranks than cores on the host).
  bool yield_when_idle = false;
  std::chrono::milliseconds peer_timeout{10000};
};

// What `auto` decides from, measured on this machine by open_channel (docs/bulk.md, "auto").
struct Costs {
  bool measured = false;
  double reg_call_ns = 0;          // registering and deregistering a buffer: per call ...
  double reg_byte_ns = 0;          // ... and per byte (pinning included when pinning)
  double memcpy_byte_ns = 0;       // copying a byte (4 MiB memcpy)
  double round_trip_ns = 0;        // a zero-byte message there and back (ranks 0 and 1)
  double wire_byte_ns = 0;         // moving a byte by rendezvous, registration taken out
  bool registration_free = false;  // local: rendezvous by cross-memory attach, nothing registered
};

// The estimated time of one message of `bytes` by `p` (eager, copy, rndv-write or pipeline;
// others are not estimated and give infinity) under `c` and the shapes of `o`.
double estimate_ns(const Costs& c, const ChannelOptions& o, Protocol p, std::size_t bytes);
// The protocols auto chooses among, in order of preference on a tie.
inline constexpr Protocol kAutoCandidates[] = {Protocol::eager, Protocol::copy,
                                               Protocol::rndv_write, Protocol::pipeline};
// The cheapest candidate for `bytes` (eager only up to the eager limit).
Protocol cheapest(const Costs& c, const ChannelOptions& o, std::size_t bytes);

// Applies the defaults above; throws UsageError naming the option for a bad combination
// (eager limit above the bounce size, a fragment below a page, growth below 1, ...).
ChannelOptions resolve(const ChannelOptions& o, const Capabilities& caps);

// What a channel did, for reports: its counts, trivially copyable (what ranks exchange), and
// its states. Registration times include pinning.
struct Counters {
  std::uint64_t messages_sent = 0, messages_received = 0;
  std::uint64_t bytes_sent = 0, bytes_received = 0;
  std::uint64_t registrations = 0, deregistrations = 0;
  std::uint64_t registration_ns = 0, deregistration_ns = 0;
  std::uint64_t cache_hits = 0, cache_misses = 0, cache_evictions = 0, cache_invalidations = 0,
                cache_uncached = 0;
  std::uint64_t control_messages = 0;  // headers, ACK, READY, FIN sent
  std::uint64_t cma_bytes = 0;         // moved by cross-memory attach (local)
  std::uint64_t mapped_bytes = 0;      // copied through the peer's mapping (local, Memory)
  std::uint64_t unexpected = 0;        // messages that arrived before their receive
  // RMA writes and reads this rank posted (rendezvous and pipeline fragments, in operations of
  // at most the transport's preferred size: rma_operation_size in fabflow/transport.h).
  std::uint64_t rma_operations = 0;
};
static_assert(std::is_trivially_copyable_v<Counters>);

struct Stats : Counters {
  std::string cache_state;      // "on (userfaultfd)", or why it is off
  std::string rendezvous_path;  // "fabric RMA", "cross-memory attach", or the fallback
};

// One non-blocking send or receive. Obtained from isend/irecv; complete once test() says so.
class Request;
using RequestPtr = std::shared_ptr<Request>;

class Channel {
 public:
  virtual ~Channel() = default;

  // Non-blocking. The buffer must stay valid and unchanged (send) / untouched (receive) until
  // the request completes. `protocol` overrides the channel's default for this message; both
  // ranks need not agree on it (the header says which protocol carries the message).
  virtual RequestPtr isend(int peer, std::uint32_t tag, std::span<const std::byte> buf,
                           std::optional<Protocol> protocol = std::nullopt) = 0;
  virtual RequestPtr irecv(int peer, std::uint32_t tag, std::span<std::byte> buf) = 0;

  // Drives the channel; true once `r` completed. Throws Error / PeerError when the channel
  // failed (a peer's malformed message, a receive buffer shorter than its message, a peer
  // that vanished or went silent for peer_timeout while `r` waited).
  virtual bool test(const RequestPtr& r) = 0;
  // Blocks until `r` completes; returns the bytes it moved. Throws like test().
  virtual std::size_t wait(const RequestPtr& r) = 0;
  // Drives the channel once (progress for requests nobody tests).
  virtual void progress() = 0;

  // `len` bytes of memory registered with the channel's transport once (Transport::allocate:
  // on local a segment the peer maps). A message sent from or received into it needs no
  // registration, and on local a rendezvous whose advertised buffer lies in it moves by one
  // copy into (or out of) the peer's mapping instead of cross-memory attach. The channel
  // keeps a memory alive while a message uses it.
  virtual std::shared_ptr<Memory> allocate(std::size_t len) = 0;

  std::size_t send(int peer, std::uint32_t tag, std::span<const std::byte> buf,
                   std::optional<Protocol> protocol = std::nullopt) {
    return wait(isend(peer, tag, buf, protocol));
  }
  std::size_t recv(int peer, std::uint32_t tag, std::span<std::byte> buf) {
    return wait(irecv(peer, tag, buf));
  }

  // The protocol `auto` picks for a message of `bytes`.
  virtual Protocol choose(std::size_t bytes) const noexcept = 0;
  // What it picks from (measured is false with measure_costs off: fixed thresholds).
  virtual const Costs& costs() const noexcept = 0;
  virtual const ChannelOptions& options() const noexcept = 0;
  virtual const Stats& stats() noexcept = 0;  // refreshes the cache counters
  virtual void reset_stats() noexcept = 0;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  virtual Transport& transport() noexcept = 0;
};

// Collective over every rank of `boot`; `t` connected over the same ranks. Throws UsageError
// for bad options and PeerError when the ranks disagree on them.
std::unique_ptr<Channel> open_channel(Transport& t, Bootstrap& boot, const ChannelOptions& o);

// Over a connected Peer (fabflow/node.h): both sides call it with the same options and name each
// other as `Opened::peer` in isend / irecv. The transport is opened with `transport` ("auto" by
// default) plus send, write and read.
Opened<Channel> open_channel(Peer& peer, const ChannelOptions& o,
                             const TransportOptions& transport = {});

// The bytes a completed request moved (the message size for a receive).
std::size_t request_bytes(const RequestPtr& r) noexcept;

}  // namespace fabflow::bulk
