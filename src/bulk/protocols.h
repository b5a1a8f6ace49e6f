// What each bulk protocol is, as the channel's code asks it: every "which protocols do X" in
// the channel is a lookup in this table, not a list of protocol names (docs/bulk.md,
// "Protocols"). The per-protocol cost formulas are in plan.cc.
#pragma once

#include <fabflow/bulk.h>

#include <algorithm>
#include <cstdint>

namespace fabflow::bulk::detail {

// What a match header carries of the payload.
enum class Head : std::uint8_t {
  none,        // nothing (rendezvous over the whole buffer)
  whole,       // the whole message (eager)
  bounce,      // the first bounce-size piece (copy; the rest follows in data messages)
  eager_part,  // the first eager-limit bytes (pipelines; none by cross-memory attach)
};

// Who moves what the header did not carry.
enum class Mover : std::uint8_t {
  messages,        // the sender, in data messages through bounce buffers
  sender_writes,   // the sender, by RMA write into the receiver's advertised buffer
  receiver_reads,  // the receiver, by RMA read from the sender's advertised buffer
};

struct ProtocolTraits {
  Head head;
  Mover mover;
  bool pipelined;  // the RMA part in fragments, each advertised by a READY and ended by a FIN
  bool cached;     // registrations from the registration cache
};

inline constexpr ProtocolTraits kProtocolTraits[] = {
    // automatic: resolved before anything is sent; never on the wire
    {Head::none, Mover::messages, false, false},
    {Head::bounce, Mover::messages, false, false},           // copy
    {Head::whole, Mover::messages, false, false},            // eager
    {Head::none, Mover::sender_writes, false, false},        // rndv_write
    {Head::none, Mover::receiver_reads, false, false},       // rndv_read
    {Head::none, Mover::sender_writes, false, true},         // leave_pinned
    {Head::eager_part, Mover::sender_writes, true, false},   // pipeline
    {Head::eager_part, Mover::receiver_reads, true, false},  // pipeline_read
    {Head::eager_part, Mover::sender_writes, true, true},    // caching_pipeline
};
static_assert(std::size(kProtocolTraits) == std::size(kProtocolNames.entries),
              "one row of traits per protocol");

constexpr const ProtocolTraits& traits(Protocol p) noexcept {
  return kProtocolTraits[static_cast<std::uint8_t>(p)];
}
// The payload moves outside the messages, by RMA (or cross-memory attach).
constexpr bool rendezvous(Protocol p) noexcept { return traits(p).mover != Mover::messages; }
// The receiver pulls it; READY goes to the receiver and FIN to the sender.
constexpr bool read_based(Protocol p) noexcept { return traits(p).mover == Mover::receiver_reads; }
constexpr bool pipelined(Protocol p) noexcept { return traits(p).pipelined; }

constexpr bool cached_column_is_uses_cache() noexcept {
  for (const auto& e : kProtocolNames.entries)
    if (traits(e.value).cached != uses_cache(e.value)) return false;
  return true;
}
static_assert(cached_column_is_uses_cache(), "the cached column says what uses_cache() says");

// The payload bytes a match header of protocol `p` carries for a message of `size` bytes,
// sent other than by cross-memory attach (which carries none).
constexpr std::uint64_t head_bytes(Protocol p, std::uint64_t size,
                                   const ChannelOptions& o) noexcept {
  switch (traits(p).head) {
    case Head::whole: return size;
    case Head::bounce: return std::min<std::uint64_t>(size, o.bounce_size);
    case Head::eager_part: return std::min<std::uint64_t>(size, o.eager_limit);
    case Head::none: break;
  }
  return 0;
}

}  // namespace fabflow::bulk::detail
