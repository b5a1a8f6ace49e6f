// payload_sum: the slot checksum of the speculative-read designs, XXH3 (64-bit) from xxHash.
#include "flow/layout.h"

// Short inputs: xxHash inlined here, no call through the library (XXH_INLINE_ALL renames its
// symbols, so they do not clash with the shared library's). Long inputs: the library's x86
// dispatcher, which picks SSE2, AVX2 or AVX-512 at run time. Both compute the same XXH3 value.
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace fabflow::flow::detail {

std::uint32_t payload_sum(std::uint64_t seq, std::uint32_t len, const std::byte* p) noexcept {
  // Sequence number and length in the seed: a stale slot of an earlier lap, or one cut short,
  // sums differently even where the bytes happen to agree.
  const XXH64_hash_t seed = seq ^ (std::uint64_t{len} << 40);
  const XXH64_hash_t h = len <= XXH3_MIDSIZE_MAX ? XXH3_64bits_withSeed(p, len, seed)
                                                 : XXH3_64bits_withSeed_dispatch(p, len, seed);
  return static_cast<std::uint32_t>(h ^ (h >> 32));
}

}  // namespace fabflow::flow::detail
