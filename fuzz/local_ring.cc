// Fuzz target: what the local transport reads from a peer's side of a shared ring
// (src/transport/local/local_transport.h): a notice ring's tail and a ring's head, checked
// against our own indices (tail_valid, head_valid), and the message slot headers (sequence
// number, length, chunk count: message_chunks). The consumer's delivery loop is replayed over
// one real message ring: a header it accepts must never send a copy outside the ring or the
// posted receive.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "transport/local/local_transport.h"

namespace fl = fabflow::local;

namespace {

std::uint64_t take_u64(const std::uint8_t*& p, std::size_t& left) {
  std::uint64_t v = 0;
  const std::size_t n = left < 8 ? left : 8;
  std::memcpy(&v, p, n);
  p += n;
  left -= n;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto ring_memory = std::make_unique<std::byte[]>(fl::kMsgRingBytes);
  const fl::Ring ring{ring_memory.get(), fl::kMsgSlots, fl::kSlotStride};
  const std::uint8_t* p = data;
  std::size_t left = size;
  // Our consumer index, where a previous call left it, and the tail the peer published.
  std::uint64_t head = take_u64(p, left);
  const std::uint64_t tail = take_u64(p, left);
  // The producer side, with the same two words: `tail` as the head a consumer published,
  // `head` as our own tail, and what we saw last. Accepted, it leaves the free space (our tail
  // minus its head) within the ring and never moves backwards.
  const std::uint64_t seen = take_u64(p, left);
  if (fl::head_valid(tail, head, seen, fl::kMsgSlots) &&
      (tail > head || head - tail > fl::kMsgSlots || tail < seen))
    __builtin_trap();
  if (fl::tail_valid(tail, head, fl::kNoteSlots) && (tail < head || tail - head > fl::kNoteSlots))
    __builtin_trap();
  // The rest: slot headers (u32 total, u32 chunks, u64 sequence) written into the slots from
  // our head on, as a peer may have left them.
  for (std::uint64_t i = head; left >= sizeof(fl::SlotHeader) && i < head + fl::kMsgSlots; ++i) {
    std::memcpy(ring.slot(i), p, sizeof(fl::SlotHeader));
    p += sizeof(fl::SlotHeader);
    left -= sizeof(fl::SlotHeader);
  }
  std::vector<std::byte> posted;
  for (unsigned taken = 0; taken < fl::kMsgSlots; ++taken) {
    const std::byte* first = ring.slot(head);
    if (fl::load_slot_seq(first) != head + 1) break;  // nothing (more) published
    fl::SlotHeader h;
    std::memcpy(&h, first, sizeof h);
    const std::uint64_t chunks = fl::message_chunks(h);
    if (chunks == 0) break;  // the ring is broken: the transport reports the peer
    if (chunks > fl::kMsgSlots / 2 || h.total > fl::kMaxMsg) __builtin_trap();
    posted.assign(h.total, std::byte{0});  // a receive of exactly the message's length
    std::size_t todo = h.total;
    std::byte* dst = posted.data();
    for (std::uint64_t i = 0; i < chunks && todo > 0; ++i) {
      const std::size_t n = todo < fl::kChunk ? todo : fl::kChunk;
      std::memcpy(dst, ring.slot(head + i) + fl::kSlotHeader, n);
      dst += n;
      todo -= n;
    }
    if (todo != 0) __builtin_trap();
    head += chunks;
  }
  return 0;
}
