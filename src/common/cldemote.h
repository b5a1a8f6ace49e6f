// Cache-line demotion: CLDEMOTE tells the CPU that a line this core wrote will be read next by
// another core, and moves it from the core's private caches to the shared last-level cache.
// The reader's miss is then served there instead of by a snoop into the writer's core. A hint:
// it never changes what any load returns, and its cost is one instruction per line.
//
// Measured on an Intel Xeon (family 6, model 207) VM with scripts/perf/pingpong_floor.cc: a
// 64-byte item with its 8-byte word spans two lines, and the reader, having seen the word,
// misses on the other line after it; demoting the item's lines takes that one-way transfer from
// 1.42x to 1.22x the bare line ping-pong, while a one-line transfer gains nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace fabflow {

// Whether this CPU has CLDEMOTE (CPUID leaf 7, ECX bit 25). Where it does not, the instruction
// would run as a no-op hint, but fabflow issues it only where it is there.
inline bool cpu_has_cldemote() noexcept {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (c & (1u << 25)) != 0;
#else
  return false;
#endif
}

// Stores into a peer's memory (local's writes, flow items and rr frames stored directly) of up
// to this many bytes have their lines demoted after the stores (Capabilities::stores_demoted),
// as have local's messages of one slot: a reader that polls one line misses on the others after
// it. Measured (docs/local-transport.md): writes of 128-256 B 15-35% faster, 512 B-1 KB
// unchanged, 4 KB and more slower, since a writer that rewrites the same place then fetches its
// lines back; messages of 128 B-4 KB 8-16% faster (the ring moves on, and the receiver reads
// every line).
inline constexpr std::size_t kDemoteMax = 256;

// Demotes every cache line that [from, from + len) touches.
[[gnu::always_inline]] inline void demote_lines(const void* from, std::size_t len) noexcept {
#if defined(__x86_64__)
  auto at = reinterpret_cast<std::uintptr_t>(from) & ~std::uintptr_t{63};
  const auto end = reinterpret_cast<std::uintptr_t>(from) + len;
  for (; at < end; at += 64)
    asm volatile("cldemote %0" : : "m"(*reinterpret_cast<const char*>(at)));
#else
  (void)from;
  (void)len;
#endif
}

}  // namespace fabflow
