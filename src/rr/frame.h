// The request-response wire format and region layouts (docs/request-response.md).
//
// Every request and response travels as one frame:
//   [stamp u64][source u32][slot u32][payload, padded to 8][stamp u64]     (Framing::trailer)
//   [stamp u64][source u32][slot u32][payload]                              (Framing::ordered)
// stamp = seq << 25 | bye << 24 | payload length. In a mailbox the frame starts at the
// (64-byte aligned) slot start, so the leading stamp is one aligned word: read once, it gives
// a consistent sequence and length. With the trailer framing the trailer behind the payload
// must repeat it: a frame is accepted only when both stamps carry a sequence the reader has not
// seen, which is how a poller avoids torn messages on providers that do not promise in-order
// placement. The ordered framing is for transports that do (Capabilities::in_order_data and
// write_after_write: `local`): a WRITE frame goes as two writes, the rest of the frame and then
// the stamp word, so a reader that sees a new stamp (acquire) sees the whole frame and reads
// one cache line, not two, to accept it; a SEND frame needs no trailer since its completion
// says it is all there.
#pragma once

#include <fabflow/rr.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace fabflow::rr::detail {

inline constexpr std::uint64_t kLenMask = (std::uint64_t{1} << 24) - 1;
inline constexpr std::uint64_t kByeBit = std::uint64_t{1} << 24;
inline constexpr unsigned kSeqShift = 25;
inline constexpr std::uint64_t kMaxSeq = (std::uint64_t{1} << (64 - kSeqShift)) - 1;
inline constexpr std::size_t kHeader = 16;
inline constexpr std::size_t kAlign = 64;  // mailboxes on their own cache lines
static_assert(kMaxPayload <= kLenMask, "payload length must fit the stamp");
static_assert(kFrameOverhead == kHeader + 8);

// How frames are delimited on a channel; every rank of a channel uses one transport kind, so
// all agree (see the comment at the top).
enum class Framing : std::uint8_t { trailer, ordered };

struct Stamp {
  std::uint64_t seq = 0;
  std::size_t len = 0;
  bool bye = false;
};

constexpr std::uint64_t pack(const Stamp& s) noexcept {
  return (s.seq << kSeqShift) | (s.bye ? kByeBit : 0) | (s.len & kLenMask);
}
constexpr Stamp unpack(std::uint64_t w) noexcept {
  return {w >> kSeqShift, static_cast<std::size_t>(w & kLenMask), (w & kByeBit) != 0};
}

constexpr std::size_t round_up(std::size_t v, std::size_t a) noexcept {
  return (v + a - 1) / a * a;
}
// Bytes a frame with `len` payload bytes occupies on the wire.
constexpr std::size_t frame_bytes(std::size_t len, Framing f = Framing::trailer) noexcept {
  return f == Framing::ordered ? kHeader + len : kFrameOverhead + round_up(len, 8);
}
// Bytes of one mailbox, send buffer or receive buffer for payloads up to `max` (either framing).
constexpr std::size_t slot_bytes(std::size_t max) noexcept {
  return round_up(frame_bytes(max), kAlign);
}

// Writes the header (and with Framing::trailer the trailer) around a payload already in
// place at frame + kHeader.
inline void seal(std::byte* frame, const Stamp& s, std::uint32_t source, std::uint32_t slot,
                 Framing f = Framing::trailer) {
  std::uint64_t w = pack(s);
  std::memcpy(frame, &w, 8);
  std::memcpy(frame + 8, &source, 4);
  std::memcpy(frame + 12, &slot, 4);
  if (f == Framing::trailer) std::memcpy(frame + kHeader + round_up(s.len, 8), &w, 8);
}

// The leading stamp word of a mailbox (written by a peer at any time): one aligned load.
inline std::uint64_t load_stamp(const std::byte* frame) noexcept {
  return __atomic_load_n(reinterpret_cast<const std::uint64_t*>(frame), __ATOMIC_ACQUIRE);
}
inline std::uint64_t trailer_of(const std::byte* frame, std::size_t len) noexcept {
  std::uint64_t w;
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  std::memcpy(&w, frame + kHeader + round_up(len, 8), 8);
  return w;
}
inline std::uint32_t source_of(const std::byte* frame) noexcept {
  std::uint32_t v;
  std::memcpy(&v, frame + 8, 4);
  return v;
}
inline std::uint32_t slot_of(const std::byte* frame) noexcept {
  std::uint32_t v;
  std::memcpy(&v, frame + 12, 4);
  return v;
}

// What a reader makes of a mailbox a peer writes into at any time (any bytes; the mailbox is
// slot_bytes(max_len) long): nothing new yet (an older frame, or a new one still arriving), a
// complete frame (*out: its stamp; the caller still checks its ids), or an oversized one.
// `fresh(seq)` says whether a stamp's sequence number is one the reader waits for. With
// Framing::ordered the stamp is written after the rest of the frame, so its acquire load is
// all it takes (the length is still range-checked: the peer is not trusted).
enum class MailboxState : std::uint8_t { nothing, complete, oversized };
template <class Fresh>
inline MailboxState read_mailbox(const std::byte* frame, std::size_t max_len, Fresh&& fresh,
                                 Stamp* out, Framing f = Framing::trailer) noexcept {
  const std::uint64_t word = load_stamp(frame);
  *out = unpack(word);
  if (!fresh(out->seq)) return MailboxState::nothing;
  if (out->len > max_len) return MailboxState::oversized;  // before the trailer is located
  if (f == Framing::trailer && trailer_of(frame, out->len) != word) return MailboxState::nothing;
  return MailboxState::complete;
}

// A frame that arrived by SEND: `length` bytes in a receive buffer of slot_bytes(max_len).
// True (*out: its stamp) when the length, the stamp and (Framing::trailer) the trailer agree.
inline bool read_received(const std::byte* frame, std::size_t length, std::size_t max_len,
                          Stamp* out, Framing f = Framing::trailer) noexcept {
  if (length < frame_bytes(0, f)) return false;
  const std::uint64_t word = load_stamp(frame);
  *out = unpack(word);
  return out->len <= max_len && length == frame_bytes(out->len, f) &&
         (f == Framing::ordered || trailer_of(frame, out->len) == word);
}

// Region layouts; every rank computes every peer's from the options and the slot counts.
// Requester: [request frames: slots][dense flag sources: slots][response mailboxes or receive
// buffers]. Responder: [dense flags: rx][request mailboxes or receive buffers: rx][response
// frames: one per requester slot].
// The frame slots of the channel's requests and responses, which both layouts are made of.
struct SlotSizes {
  std::size_t req_slot, resp_slot;
  explicit SlotSizes(const ChannelOptions& o)
      : req_slot(slot_bytes(o.request_bytes)), resp_slot(slot_bytes(o.response_bytes)) {}
};

struct RequesterLayout : SlotSizes {
  std::size_t tx_off, flag_off, rx_off, bytes;
  RequesterLayout(const ChannelOptions& o, std::size_t slots, std::size_t rx_buffers)
      : SlotSizes(o) {
    tx_off = 0;
    flag_off = tx_off + slots * req_slot;
    rx_off = flag_off + round_up(std::max<std::size_t>(slots, 1), kAlign);
    bytes = rx_off + rx_buffers * resp_slot;
  }
};

struct ResponderLayout : SlotSizes {
  std::size_t flag_off, mailbox_off, tx_off, bytes;
  ResponderLayout(const ChannelOptions& o, std::size_t rx_buffers, std::size_t tx_buffers)
      : SlotSizes(o) {
    flag_off = 0;
    mailbox_off = round_up(std::max<std::size_t>(rx_buffers, 1), kAlign);
    tx_off = mailbox_off + rx_buffers * req_slot;
    bytes = tx_off + tx_buffers * resp_slot;
  }
};

// What each rank publishes at setup; all ranks must agree on the channel options.
struct Hello {
  std::uint32_t magic = 0x72721001;
  std::uint8_t role = 0;  // 0 requester, 1 responder
  std::uint8_t pattern = 0;
  std::uint8_t mailbox = 0;
  std::uint8_t pad = 0;
  std::uint32_t slots = 0;  // requesters: outstanding requests it may have
  std::uint32_t key_len = 0;
  std::uint64_t request_bytes = 0;
  std::uint64_t response_bytes = 0;
  std::uint64_t empty_mailboxes = 0;
  std::uint64_t region_bytes = 0;
};

inline constexpr std::uint32_t kMaxSlots = 1u << 16;

}  // namespace fabflow::rr::detail
