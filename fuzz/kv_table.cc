// Fuzz target: what a key-value client takes from a server: the table layout of its hello
// (Layout::check, which must leave nothing outside the region) and item copies read remotely
// (inspect, which must call a torn or foreign copy torn or locked, never crash).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kv/internal.h"

namespace kd = fabflow::kv::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t kHead = 2 + 8 + sizeof(kd::Layout);
  if (size < kHead) return 0;
  const std::size_t value_bytes = 1 + (std::size_t{data[0]} | std::size_t{data[1]} << 8) % 4096;
  std::uint64_t region;
  std::memcpy(&region, data + 2, 8);
  kd::Layout l;
  std::memcpy(&l, data + 10, sizeof l);
  if (l.check(value_bytes, region).empty()) {
    // What the check promises, verified in 128 bits: every bucket and item inside the region.
    using u128 = unsigned __int128;
    if (u128{l.index_offset} + u128{l.buckets} * kd::kBucketBytes > region) __builtin_trap();
    if (u128{l.items_offset} + u128{l.items} * l.item_bytes > region) __builtin_trap();
    if (l.bucket_offset(l.home(~std::uint64_t{0})) + kd::kBucketBytes > region) __builtin_trap();
  } else {
    l = kd::Layout::for_capacity(16, value_bytes);
  }
  // The rest of the input is an item copy as a READ brought it.
  std::vector<std::byte> item(l.item_bytes);
  std::memcpy(item.data(), data + kHead, std::min(size - kHead, item.size()));
  std::uint64_t word = 0;
  (void)kd::inspect(item.data(), l, &word);
  return 0;
}
