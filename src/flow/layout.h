// Memory layout shared by both ends of a flow queue: slots, counter cells and the hello blob
// exchanged through the bootstrap. See docs/flow-queues.md for the picture.
#pragma once

#include <fabflow/flow.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace fabflow::flow::detail {

inline constexpr std::size_t kSlotHeader = 16;   // u64 seq, u32 len, u32 flags
inline constexpr std::size_t kSlotTrailer = 16;  // the same 16 bytes again after the payload
inline constexpr std::uint32_t kFlagClose = 1;   // end-of-stream marker (len 0)
inline constexpr std::size_t kCellBytes = 64;    // one counter per cache line
inline constexpr std::size_t kCells = 4;
// Cells, after the ring. Producer region: 0 head (consumer writes), 1 own tail (consumer
// reads), 2 landing of head reads. Consumer region: 0 tail (producer writes), 1 own head
// (producer reads), 2 landing of tail reads. Cell 3 is spare.
inline constexpr int kPeerCell = 0;
inline constexpr int kOwnCell = 1;
inline constexpr int kLandingCell = 2;

constexpr std::size_t round8(std::size_t n) noexcept { return (n + 7) & ~std::size_t{7}; }
// Bytes a slot carrying `len` payload bytes occupies on the wire.
constexpr std::size_t slot_used(std::size_t len) noexcept {
  return kSlotHeader + round8(len) + kSlotTrailer;
}

// Compact slots (SlotFormat::compact): [padding][payload, padded to 8][word], the word the last 8
// bytes of the slot, the payload right before it. The word packs the low 32 bits of the
// sequence number (index + 1: a stale slot of an earlier lap differs, as capacity < 2^32), the
// length (31 bits: item_bytes <= 1 GiB) and the close flag (bit 63). Each slot starts on its own
// cache line.
// Word first (Layout::word_first): [word][payload][padding], for slots the producer stores
// itself into the consumer's memory (local's direct stores), where the order of the stores, not
// the place of the word in a write, publishes the item. The payload's first 56 bytes then share
// the word's cache line: a consumer that reads an item's head waits for one line, not two
// (docs/flow-queues.md, "Word-first compact slots").
inline constexpr std::size_t kCompactWord = 8;
inline constexpr std::size_t kCompactHead = kCellBytes - kCompactWord;  // word first: in its line
inline constexpr std::uint64_t kCompactClose = std::uint64_t{1} << 63;
constexpr std::size_t compact_stride(std::size_t item_bytes) noexcept {
  return (round8(item_bytes) + kCompactWord + kCellBytes - 1) / kCellBytes * kCellBytes;
}
// Where a compact slot's payload of `len` bytes starts: after the word, or right before it.
constexpr std::size_t compact_payload_at(bool word_first, std::size_t stride,
                                         std::size_t len) noexcept {
  return word_first ? kCompactWord : stride - kCompactWord - round8(len);
}
constexpr std::uint64_t compact_word(std::uint64_t index, std::uint32_t len,
                                     std::uint32_t flags) noexcept {
  return ((index + 1) & 0xffff'ffffu) | (std::uint64_t{len & 0x7fff'ffffu} << 32) |
         ((flags & kFlagClose) ? kCompactClose : 0);
}

inline std::uint64_t load_acquire(const std::byte* p) noexcept {
  return std::atomic_ref<std::uint64_t>(
             *reinterpret_cast<std::uint64_t*>(const_cast<std::byte*>(p)))
      .load(std::memory_order_acquire);
}
inline void store_release(std::byte* p, std::uint64_t v) noexcept {
  std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(p))
      .store(v, std::memory_order_release);
}
inline std::uint64_t meta(std::uint32_t len, std::uint32_t flags) noexcept {
  return std::uint64_t{len} | (std::uint64_t{flags} << 32);
}

// Geometry of one side's registered memory: ring of `capacity` slots, counter cells, then
// `pool` 8-byte cells for posted receives of counters. With one endpoint everything is one
// region: [ring][cells][pool]. With separate_notify_endpoint the cells live in a second, small
// region registered on the notify transport: data region [ring] (+ [pool] when the pool holds
// data-path receives: imm on the consumer), notify region [cells] (+ [pool] when it holds
// pushed head counters: push2 space on the producer).
struct Layout {
  bool compact = false;  // SlotFormat::compact (else framed)
  // Compact slots with the word first: the producer stores slots directly (stores_directly);
  // the consumer takes it from the producer's hello. Never carried by a transport write.
  bool word_first = false;
  bool sum = false;  // framed slots carry the payload sum (needs_sum)
  std::size_t capacity = 0;
  std::size_t mask = 0;  // capacity - 1 when capacity is a power of two, else 0 (slot divides)
  std::size_t item_bytes = 0;
  std::size_t stride = 0;
  std::size_t ring_bytes = 0;
  std::size_t pool = 0;
  std::size_t region_bytes = 0;  // the data region
  std::size_t notify_bytes = 0;  // the notify region (0: none, the cells follow the ring)
  std::size_t cells_base = 0;    // offset of cell 0 in the region that holds the cells
  std::size_t pool_base = 0;     // offset of pool cell 0 in the region that holds the pool

  static Layout make(std::size_t capacity, std::size_t item_bytes, std::size_t pool,
                     bool separate = false, bool pool_notify = false,
                     SlotFormat format = SlotFormat::framed) noexcept {
    Layout l;
    l.capacity = capacity;
    l.mask = capacity && (capacity & (capacity - 1)) == 0 ? capacity - 1 : 0;
    l.item_bytes = item_bytes;
    l.compact = format == SlotFormat::compact;
    l.stride = l.compact ? compact_stride(item_bytes) : slot_used(item_bytes);
    l.ring_bytes = (capacity * l.stride + kCellBytes - 1) / kCellBytes * kCellBytes;
    l.pool = pool;
    constexpr std::size_t cells = kCells * kCellBytes;
    if (!separate) {
      l.cells_base = l.ring_bytes;
      l.pool_base = l.ring_bytes + cells;
      l.region_bytes = l.pool_base + pool * 8;
    } else if (pool_notify) {
      l.region_bytes = l.ring_bytes;
      l.pool_base = cells;
      l.notify_bytes = cells + pool * 8;
    } else {
      l.pool_base = l.ring_bytes;
      l.region_bytes = l.ring_bytes + pool * 8;
      l.notify_bytes = cells;
    }
    return l;
  }
  bool separate() const noexcept { return notify_bytes != 0; }
  // Offset of slot `index`: a mask where capacity is a power of two (the default, 1024), so
  // the data path pays no 64-bit division per item.
  [[gnu::always_inline]] std::size_t ring_pos(std::uint64_t index) const noexcept {
    return mask ? index & mask : index % capacity;
  }
  [[gnu::always_inline]] std::size_t slot(std::uint64_t index) const noexcept {
    return ring_pos(index) * stride;
  }
  // Where the payload of a `len`-byte item starts within its slot.
  [[gnu::always_inline]] std::size_t payload_at(std::size_t len) const noexcept {
    return compact ? compact_payload_at(word_first, stride, len) : kSlotHeader;
  }
  // Where a compact slot's word is within the slot.
  [[gnu::always_inline]] std::size_t word_at() const noexcept {
    return word_first ? 0 : stride - kCompactWord;
  }
  // The bytes of a slot that carry a `len`-byte item: [wire_begin, wire_end) within the slot.
  // A write of them ends with the word that publishes the item (compact, word last) or the
  // trailer. (Word-first slots are stored, never written.)
  [[gnu::always_inline]] std::size_t wire_begin(std::size_t len) const noexcept {
    return compact ? payload_at(len) : 0;
  }
  [[gnu::always_inline]] std::size_t wire_end(std::size_t len) const noexcept {
    return compact ? stride : slot_used(len);
  }
  [[gnu::always_inline]] std::size_t cell(int i) const noexcept {
    return cells_base + static_cast<std::size_t>(i) * kCellBytes;
  }
  std::size_t pool_cell(std::size_t i) const noexcept { return pool_base + i * 8; }
  // Bytes the peer's regions must at least hold for this end to reach: its ring and cells
  // (the pool is never reached remotely).
  std::size_t peer_data_bytes() const noexcept { return separate() ? ring_bytes : cell(kCells); }
  std::size_t peer_notify_bytes() const noexcept { return separate() ? cell(kCells) : 0; }
};

// Whether the producer coalesces several slots into one write that the consumer polls
// (batching or a data mover, with the watermark transfer).
constexpr bool coalesces_writes(TransferNotify t, bool batching, bool active_producer) noexcept {
  return t == TransferNotify::watermark && (batching || active_producer);
}

// Whether framed slots carry the payload sum: where the consumer polls slots (watermark
// transfer) that a copy may still be placing. Pull data: the consumer reads speculatively.
// Push1 data on a transport that does not place writes in order: the provider's copy may run
// in the producer's process while the consumer polls (shm's cross-memory attach), and a copy's
// cache lines land in no set order. Push1 data in coalesced writes (`coalesced`) even where
// writes are placed in order: that order covers only a write's last word (local), and the
// slots before it are copied by one string copy (rep movsb) whose cache lines another core
// may see in any order, so a slot's header and trailer can be seen before its payload. The sum
// guards against the torn reads (below).
constexpr bool needs_sum(DataFlow d, TransferNotify t, bool in_order_data,
                         bool coalesced) noexcept {
#ifdef FABFLOW_UNSAFE_NO_PAYLOAD_SUM
  (void)d, (void)t, (void)in_order_data, (void)coalesced;
  return false;  // measurement-only build (CMakeLists.txt): torn reads go undetected
#else
  return t == TransferNotify::watermark &&
         (d == DataFlow::pull || (d == DataFlow::push1 && (!in_order_data || coalesced)));
#endif
}

// Integrity sum of a slot's payload (with its sequence number and length), for the designs
// whose consumer reads slots the producer may be writing at that moment (pull data with
// watermark transfer: speculative reads). A provider's copy need not run front to back: string
// copies (rep movsb, CMA in the kernel) may fetch cache lines in any order, so a read can see
// the new header and trailer around a stale 64-byte line of the previous lap; the sum catches
// that. XXH3 from xxHash folded to 32 bits (checksum.cc); not cryptographic.
std::uint32_t payload_sum(std::uint64_t seq, std::uint32_t len, const std::byte* p) noexcept;

// The trailer's last word without a sum: the length/flags word mixed with the sequence number.
// A read may get the new sequence numbers with the previous lap's length and last word (a
// write's stores land in no set order, and a store across two cache lines lands in two parts);
// where both items' trailers fall at the same place those two stale words would agree with each
// other, and mixed they cannot agree with a fresh sequence number.
constexpr std::uint64_t trailer_meta(std::uint64_t m, std::uint64_t seq) noexcept {
  return m ^ (seq * 0x9e3779b97f4a7c15ull);
}

// Writes item `index` (sequence index + 1) into `slot`: payload and trailer first, the header
// sequence last, so a reader that sees the header sees everything before it was written (when
// it reads front to back). The trailer repeats the sequence number and the length/flags word
// (trailer_meta); with `sum` its second word is instead the length and payload_sum (the flags
// stay in the header).
inline void write_slot(std::byte* slot, std::uint64_t index, const void* data, std::uint32_t len,
                       std::uint32_t flags, bool sum = false) noexcept {
  const std::uint64_t seq = index + 1;
  if (len && data != slot + kSlotHeader) std::memcpy(slot + kSlotHeader, data, len);
  std::byte* trailer = slot + kSlotHeader + round8(len);
  std::memcpy(trailer, &seq, 8);
  const std::uint64_t m = meta(len, flags);
  const std::uint64_t t =
      sum ? std::uint64_t{len} | (std::uint64_t{payload_sum(seq, len, slot + kSlotHeader)} << 32)
          : trailer_meta(m, seq);
  std::memcpy(trailer + 8, &t, 8);
  std::memcpy(slot + 8, &m, 8);
  store_release(slot, seq);
}

// torn: header and trailer carry the slot's sequence number but the payload does not match
// its sum (only with `sum`): a read caught the producer writing; read it again.
enum class SlotState : std::uint8_t { absent, valid, bad, torn };

// Checks slot `index`: valid when header and trailer both carry its sequence number and the
// same length/flags (trailer_meta; with `sum`: the same length, and the payload its sum). `bad`
// when a complete-looking header names an impossible length or flag.
// `verify` false: a slot with the sum whose read cannot have overlapped the producer's writes
// (the consumer knew it published before the read was posted); the sum is not recomputed.
inline SlotState check_slot(const std::byte* slot, std::uint64_t index, std::size_t item_bytes,
                            std::uint32_t* len, std::uint32_t* flags, bool sum = false,
                            bool verify = true) noexcept {
  const std::uint64_t seq = index + 1;
  if (load_acquire(slot) != seq) return SlotState::absent;
  std::uint64_t m;
  std::memcpy(&m, slot + 8, 8);
  const auto l = static_cast<std::uint32_t>(m);
  const auto f = static_cast<std::uint32_t>(m >> 32);
  if (l > item_bytes || (f & ~kFlagClose) || ((f & kFlagClose) && l != 0)) {
    *len = l;
    *flags = f;
    return SlotState::bad;
  }
  const std::byte* trailer = slot + kSlotHeader + round8(l);
  std::uint64_t tseq, tm;
  std::memcpy(&tseq, trailer, 8);
  std::memcpy(&tm, trailer + 8, 8);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (tseq != seq) return SlotState::absent;
  if (!sum && tm != trailer_meta(m, seq)) return SlotState::absent;
  if (sum) {
    if (static_cast<std::uint32_t>(tm) != l) return SlotState::absent;
    if (verify && static_cast<std::uint32_t>(tm >> 32) != payload_sum(seq, l, slot + kSlotHeader))
      return SlotState::torn;
  }
  *len = l;
  *flags = f;
  return SlotState::valid;
}

// Writes item `index` into the compact slot at `slot`, its word at `word_at` and its payload at
// `payload_at` (Layout::word_at, Layout::payload_at): the payload (unless it is already in
// place), then the word with a release store. A reader that sees the word sees the payload, in
// this memory (the stores' order: either place of the word) and at a peer whose transport
// places writes in order (word last: the last 8 bytes of the write that carries the slot).
[[gnu::always_inline]] inline void write_compact(std::byte* slot, std::size_t word_at,
                                                 std::size_t payload_at, std::uint64_t index,
                                                 const void* data, std::uint32_t len,
                                                 std::uint32_t flags) noexcept {
  std::byte* payload = slot + payload_at;
  if (len && data != payload) std::memcpy(payload, data, len);
  store_release(slot + word_at, compact_word(index, len, flags));
}

// Checks compact slot `index`, its word at `word_at`: valid when the word carries the sequence
// number (low 32 bits) and a possible length and flag; `bad` when the sequence matches but the
// length or flag is impossible. There is no torn state: the format relies on the order of the
// stores or of the transport's placement (the payload is complete once the word is visible),
// which is why only in-order transports use it.
[[gnu::always_inline]] inline SlotState check_compact(const std::byte* slot, std::size_t word_at,
                                                      std::uint64_t index, std::size_t item_bytes,
                                                      std::uint32_t* len,
                                                      std::uint32_t* flags) noexcept {
  const std::uint64_t w = load_acquire(slot + word_at);
  if (static_cast<std::uint32_t>(w) != static_cast<std::uint32_t>(index + 1))
    return SlotState::absent;
  const auto l = static_cast<std::uint32_t>((w >> 32) & 0x7fff'ffffu);
  const std::uint32_t f = (w & kCompactClose) ? kFlagClose : 0;
  *len = l;
  *flags = f;
  if (l > item_bytes || (f && l != 0)) return SlotState::bad;
  return SlotState::valid;
}

// The blob each queue end contributes to the bootstrap all-gather: the header, the data
// region's key, then (separate_notify_endpoint) the notify region's key.
struct Hello {
  static constexpr std::uint32_t kMagic = 0x48514646;  // 'FFQH'
  std::uint32_t magic = kMagic;
  std::uint16_t version = 6;  // 6: the ends' ranks (rank, peer)
  std::uint8_t role = 0;      // 0 producer, 1 consumer
  std::uint8_t data = 0, transfer = 0, space = 0;
  std::uint8_t refused = 0;     // 1: this end cannot run the queue; the key bytes are the reason
  std::uint8_t separate = 0;    // 1: notifications on a second endpoint (a second key follows)
  std::uint8_t format = 0;      // SlotFormat the end resolved (framed or compact)
  std::uint8_t sum = 0;         // 1: framed slots carry the payload sum (Layout::sum)
  std::uint8_t word_first = 0;  // producer: 1 when it stores compact slots word first
  std::uint64_t capacity = 0, item_bytes = 0, region_bytes = 0;
  std::uint32_t key_len = 0;
  std::uint32_t notify_key_len = 0;
  // This end's rank and the rank it pairs with: a third rank opening the queue with one of
  // the two as its peer finds that peer paired with someone else.
  std::int32_t rank = -1;
  std::int32_t peer = -1;
};

inline std::vector<std::byte> encode_hello(Hello h, std::span<const std::byte> key,
                                           std::span<const std::byte> notify_key = {}) {
  h.key_len = static_cast<std::uint32_t>(key.size());
  h.notify_key_len = static_cast<std::uint32_t>(notify_key.size());
  std::vector<std::byte> out(sizeof(Hello) + key.size() + notify_key.size());
  std::memcpy(out.data(), &h, sizeof h);
  if (!key.empty()) std::memcpy(out.data() + sizeof h, key.data(), key.size());
  if (!notify_key.empty())
    std::memcpy(out.data() + sizeof h + key.size(), notify_key.data(), notify_key.size());
  return out;
}

// Validates the peer's blob against what this end expects; throws PeerError on mismatch and
// returns the data key blob (and the notify key blob in *notify_key: empty without
// separate_notify_endpoint; the peer's checked hello in *peer_hello).
std::span<const std::byte> decode_hello(std::span<const std::byte> blob, int peer,
                                        const Hello& expect,
                                        std::span<const std::byte>* notify_key = nullptr,
                                        Hello* peer_hello = nullptr);

}  // namespace fabflow::flow::detail
