// Fuzz target: what a flow-queue consumer reads from a peer. Mode 0: the queue hello a peer
// contributes to the setup all-gather (decode_hello). Mode 1: a slot's header, payload and
// trailer as the consumer checks them (check_slot), with and without the payload sum, and the
// same bytes as a compact slot, word last or word first (check_compact).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <fabflow/status.h>

#include "flow/layout.h"

namespace d = fabflow::flow::detail;

namespace {

void hello(std::span<const std::byte> blob, bool separate) {
  d::Hello expect;  // a consumer of push1-watermark-pull, 64 x 64 B
  expect.role = 1;
  expect.rank = 0;  // this end; the peer is rank 3
  expect.peer = 3;
  expect.data = 0;
  expect.capacity = 64;
  expect.item_bytes = 64;
  expect.separate = separate;
  std::span<const std::byte> notify;
  try {
    d::Hello peer;
    auto key = d::decode_hello(blob, 3, expect, &notify, &peer);
    // The slot format it accepts from the producer is one this end can read.
    if (peer.word_first > 1 ||
        (peer.word_first &&
         peer.format != static_cast<std::uint8_t>(fabflow::flow::SlotFormat::compact)))
      __builtin_trap();
    // The keys it hands out lie inside the blob.
    auto inside = [&](std::span<const std::byte> s) {
      return s.empty() ||
             (s.data() >= blob.data() && s.data() + s.size() <= blob.data() + blob.size());
    };
    if (!inside(key) || !inside(notify)) __builtin_trap();
  } catch (const fabflow::Error&) {
    // PeerError for a malformed hello, UsageError for a refusal with its reason
  }
}

void slot(const std::uint8_t* data, std::size_t size) {
  if (size < 11) return;
  const std::size_t item_bytes = (std::size_t{data[0]} | std::size_t{data[1]} << 8) % 4097;
  const bool sum = data[2] & 1;
  std::uint64_t index;
  std::memcpy(&index, data + 3, 8);
  // The slot as the ring holds it: exactly slot_used(item_bytes) bytes, 8-byte aligned (the
  // rest of the input fills it, zeros beyond).
  std::vector<std::uint64_t> ring(d::slot_used(item_bytes) / 8);
  std::memcpy(ring.data(), data + 11, std::min(size - 11, ring.size() * 8));
  std::uint32_t len = 0, flags = 0;
  const auto st = d::check_slot(reinterpret_cast<const std::byte*>(ring.data()), index, item_bytes,
                                &len, &flags, sum);
  // A valid slot's length fits the item and its flags are known.
  if (st == d::SlotState::valid && (len > item_bytes || (flags & ~d::kFlagClose))) __builtin_trap();
  // The same bytes as a compact slot (the word at its end, or word first): the same promises,
  // and the payload the consumer would hand out lies inside the slot, clear of the word.
  auto l = d::Layout::make(1, item_bytes, 0, false, false, fabflow::flow::SlotFormat::compact);
  l.word_first = data[2] & 2;
  std::vector<std::uint64_t> compact(l.stride / 8);
  std::memcpy(compact.data(), data + 11, std::min(size - 11, compact.size() * 8));
  const auto cs = d::check_compact(reinterpret_cast<const std::byte*>(compact.data()), l.word_at(),
                                   index, item_bytes, &len, &flags);
  if (cs == d::SlotState::valid) {
    const std::size_t at = l.payload_at(len), word = l.word_at();
    if (len > item_bytes || (flags & ~d::kFlagClose) || at + len > l.stride ||
        (at < word + d::kCompactWord && word < at + len))
      __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  if (data[0] < 128)
    hello({reinterpret_cast<const std::byte*>(data + 1), size - 1}, data[0] & 1);
  else
    slot(data + 1, size - 1);
  return 0;
}
