// The bulk channel's control messages: one fixed header, then inline bytes (eager data, a copy
// fragment) or a memory key. Layout and rules: docs/bulk.md ("Wire format"). Everything here is
// read from a peer and checked before use.
#pragma once

#include <fabflow/bulk.h>
#include <fabflow/status.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace fabflow::bulk::wire {

inline constexpr std::uint32_t kMagic = 0x4b4c5542;  // "BULK"

enum class Type : std::uint8_t {
  rts = 1,  // sender -> receiver: match header (tag, sequence, size, protocol), inline bytes
  ack,      // receiver -> sender: matched; rndv-write's target region, the pipeline's offset
  data,     // sender -> receiver: a copy fragment
  ready,  // pipeline: a fragment's region is registered (the writer's target, the reader's source)
  fin,    // a write or read finished: fragment index, or the whole message
  nack,   // receiver -> sender: the receive buffer is too short (size in `length`)
};
inline constexpr std::uint8_t kLastType = static_cast<std::uint8_t>(Type::nack);

// 80 bytes, host byte order (every rank of a job runs the same build on one architecture).
struct Header {
  std::uint32_t magic = kMagic;
  Type type = Type::rts;
  Protocol protocol = Protocol::eager;
  std::uint16_t key_len = 0;  // bytes of memory key after the inline bytes
  std::uint32_t src = 0;      // sending rank
  std::uint32_t tag = 0;
  std::uint64_t seq = 0;     // rts: per-pair message number; ready/fin: fragment index
  std::uint64_t size = 0;    // rts: message bytes
  std::uint64_t sreq = 0;    // the sender's request id
  std::uint64_t rreq = 0;    // the receiver's request id
  std::uint64_t offset = 0;  // data: message offset; ack: first RDMA offset (pipelines)
  std::uint64_t length = 0;  // rts / data: inline bytes; nack: the receive buffer's size
  std::uint64_t base = 0;    // offset of the advertised bytes in the key's region, or an address
  std::uint64_t flags = 0;   // a split copy's FIN: kFinFromSender or kFinFromReceiver; else 0
};
static_assert(sizeof(Header) == 80);

inline constexpr std::size_t kHeader = sizeof(Header);
// The FINs of a split copy say who sends them: each side's share is done (every other FIN
// goes one way, fixed by its protocol).
inline constexpr std::uint64_t kFinFromSender = 1;
inline constexpr std::uint64_t kFinFromReceiver = 2;
inline constexpr std::size_t kMaxKey = 1024;

// A received message, checked for shape: magic, type, the sender's rank, and that the inline
// bytes and key fit in what arrived. Throws PeerError otherwise.
struct Message {
  Header h;
  std::span<const std::byte> inline_bytes;
  std::span<const std::byte> key;
};

inline Message parse(std::span<const std::byte> in, int ranks, int self) {
  Message m;
  if (in.size() < kHeader)
    throw PeerError(-1, "bulk: a " + std::to_string(in.size()) + "-byte control message");
  std::memcpy(&m.h, in.data(), kHeader);
  const auto type = static_cast<std::uint8_t>(m.h.type);
  const int src = static_cast<int>(m.h.src);
  if (m.h.magic != kMagic || type == 0 || type > kLastType || m.h.src >= std::uint32_t(ranks) ||
      src == self || (m.h.flags != 0 && (m.h.type != Type::fin || m.h.flags > kFinFromReceiver)))
    throw PeerError(-1, "bulk: a malformed control message (magic, type, sender rank or flags)");
  const std::size_t carried = in.size() - kHeader;
  // A NACK's length is the receive buffer's size, not bytes it carries.
  const std::uint64_t inline_len = m.h.type == Type::nack ? 0 : m.h.length;
  if (m.h.key_len > kMaxKey || inline_len > carried || m.h.key_len > carried - inline_len ||
      (m.h.type != Type::rts && m.h.type != Type::data && m.h.type != Type::nack &&
       m.h.length != 0) ||
      inline_len + m.h.key_len != carried)
    throw PeerError(src, "bulk: rank " + std::to_string(src) +
                             " sent a control message whose lengths do not add up");
  m.inline_bytes = in.subspan(kHeader, inline_len);
  m.key = in.subspan(kHeader + inline_len, m.h.key_len);
  return m;
}

}  // namespace fabflow::bulk::wire
