// The benchmark item (src/bench/item_payload.h): a filled item is intact, and every fault a
// queue could make is caught by reading it once: any one byte changed, a slot left as an
// earlier item wrote it, a slot of which only the sequence number was written, a shifted item.
#include "bench/item_payload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fabflow::bench {
namespace {

TEST(ItemPayload, FilledItemsAreIntactAndCarryTheirNumber) {
  for (std::size_t bytes : {1, 4, 7, 8, 9, 63, 64, 65, 200, 4096, 65536}) {
    ItemPayload p(bytes);
    std::vector<std::byte> slot(bytes);
    for (std::uint64_t seq : {0ull, 1ull, 12345ull, ~0ull}) {
      p.fill(slot, seq);
      EXPECT_TRUE(p.intact(slot, seq)) << bytes << " bytes, item " << seq;
      if (bytes >= 8) {
        EXPECT_EQ(ItemPayload::seq_of(slot, seq + 1), seq);
        // Another item's number is another item.
        EXPECT_FALSE(p.intact(slot, seq + 1)) << bytes;
      }
    }
  }
}

TEST(ItemPayload, EveryChangedByteIsCaught) {
  for (std::size_t bytes : {5, 8, 13, 64, 100, 1024}) {
    ItemPayload p(bytes);
    std::vector<std::byte> slot(bytes);
    for (std::size_t i = 0; i < bytes; ++i) {
      p.fill(slot, 77);
      slot[i] ^= std::byte{0x10};
      EXPECT_FALSE(p.intact(slot, 77)) << bytes << " bytes, byte " << i;
    }
  }
}

// What `bench queue`'s zero-copy API did before: the sequence number written and nothing else.
// Neither a fresh slot nor one holding an earlier item passes for item `seq`.
TEST(ItemPayload, OnlyTheNumberWrittenIsNotAnItem) {
  for (std::size_t bytes : {16, 64, 65536}) {
    ItemPayload p(bytes);
    std::vector<std::byte> fresh(bytes);
    p.stamp(fresh, 5);
    EXPECT_EQ(ItemPayload::seq_of(fresh, 0), 5u);
    EXPECT_FALSE(p.intact(fresh, 5)) << bytes;

    std::vector<std::byte> reused(bytes);
    p.fill(reused, 3);   // an earlier lap of the ring
    p.stamp(reused, 5);  // only the word rewritten
    EXPECT_FALSE(p.intact(reused, 5)) << bytes;
  }
}

TEST(ItemPayload, WrongLengthOrShiftedItemIsCaught) {
  ItemPayload p(64);
  std::vector<std::byte> slot(72);
  p.fill(std::span(slot).first(64), 9);
  EXPECT_FALSE(p.intact(std::span(slot).first(63), 9));
  EXPECT_FALSE(p.intact(slot, 9));
  std::vector<std::byte> shifted(64);
  std::copy(slot.begin(), slot.begin() + 60, shifted.begin() + 4);
  EXPECT_FALSE(p.intact(shifted, 9));
}

}  // namespace
}  // namespace fabflow::bench
