// What bounds a shared-memory ring whose consumer runs right behind its producer: the memory
// layout or the instructions per item? Not part of the library; a measurement aid for
// docs/measurements/flow-queues.md ("Intra-host figures", 2026-11-25, second session), built by
// CMake as perf_ring_work.
//
//   ninja -C build perf_ring_work
//   build/perf_ring_work [cpu_producer] [cpu_consumer]
//
// Two threads, pinned, 4*10^6 items through a 1024-slot ring, zero-copy (each side touches
// only the item's first 8 bytes, as `bench queue --api seq-only` does). Three layouts:
//   index        64-byte slots, head and tail counters on their own lines (the SPSC-ring
//                reference of `bench queue --reference`);
//   word, 1 line 56-byte items, the sequence word in the slot's last 8 bytes, one line a slot
//                (a compact flow slot of 56 bytes; the consumer polls the word);
//   word, 2 lines 64-byte items with their word: 128-byte slots (a compact 64-byte slot).
// "work N": the 64-byte layout again with N dependent multiply-adds per item on each side
// (about 4 cycles each), standing in for a queue's own instructions per item. Prints Mitem/s,
// timed on the consumer from the first item to the last.
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

struct alignas(64) Line {
  std::atomic<std::uint64_t> v{0};
};

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

std::uint64_t busy(std::uint64_t x, int work) {
  for (int k = 0; k < work; ++k) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    asm volatile("" : "+r"(x));  // keep each step
  }
  return x;
}

std::uint64_t* word_at(std::byte* p) { return reinterpret_cast<std::uint64_t*>(p); }

enum class Layout { index, word };

double run(Layout layout, std::size_t stride, std::size_t item, int work, int cpu_p, int cpu_c) {
  constexpr std::uint64_t kItems = 4'000'000, kCap = 1024;
  std::vector<std::byte> storage(kCap * stride + 64);
  auto* ring = reinterpret_cast<std::byte*>(
      (reinterpret_cast<std::uintptr_t>(storage.data()) + 63) & ~std::uintptr_t{63});
  Line head, tail;
  std::chrono::steady_clock::time_point first, last;
  std::uint64_t bad = 0, sink = 0;
  std::thread producer([&] {
    pin(cpu_p);
    std::uint64_t head_seen = 0, acc = 0;
    for (std::uint64_t i = 0; i < kItems; ++i) {
      while (i - head_seen >= kCap) {
        head_seen = head.v.load(std::memory_order_acquire);
        if (i - head_seen >= kCap) relax();
      }
      std::byte* slot = ring + (i & (kCap - 1)) * stride;
      acc += busy(i, work);
      if (layout == Layout::index) {
        std::memcpy(slot, &i, 8);
        tail.v.store(i + 1, std::memory_order_release);
      } else {
        std::memcpy(slot + stride - 8 - item, &i, 8);
        std::atomic_ref<std::uint64_t>(*word_at(slot + stride - 8))
            .store(i + 1, std::memory_order_release);
      }
    }
    sink += acc;
  });
  std::thread consumer([&] {
    pin(cpu_c);
    std::uint64_t tail_seen = 0, acc = 0;
    for (std::uint64_t i = 0; i < kItems; ++i) {
      std::byte* slot = ring + (i & (kCap - 1)) * stride;
      std::uint64_t got;
      if (layout == Layout::index) {
        while (i >= tail_seen) {
          tail_seen = tail.v.load(std::memory_order_acquire);
          if (i >= tail_seen) relax();
        }
        std::memcpy(&got, slot, 8);
      } else {
        while (std::atomic_ref<std::uint64_t>(*word_at(slot + stride - 8))
                   .load(std::memory_order_acquire) != i + 1)
          relax();
        std::memcpy(&got, slot + stride - 8 - item, 8);
      }
      bad += got != i;
      acc += busy(got, work);
      head.v.store(i + 1, std::memory_order_release);
      if (i == 0) first = std::chrono::steady_clock::now();
    }
    last = std::chrono::steady_clock::now();
    sink += acc;
  });
  producer.join();
  consumer.join();
  if (bad) std::printf("%llu items out of order\n", static_cast<unsigned long long>(bad));
  if (sink == 42) std::printf(" ");
  return static_cast<double>(kItems - 1) / std::chrono::duration<double>(last - first).count() /
         1e6;
}

}  // namespace

int main(int argc, char** argv) {
  const int cpu_p = argc > 1 ? std::atoi(argv[1]) : 0;
  const int cpu_c = argc > 2 ? std::atoi(argv[2]) : 1;
  // Work levels interleaved within each round: a shared VM changes speed between runs, so
  // compare the figures of one line.
  for (int r = 0; r < 3; ++r) {
    std::printf("index %.1f | word, 1 line %.1f | word, 2 lines %.1f",
                run(Layout::index, 64, 64, 0, cpu_p, cpu_c),
                run(Layout::word, 64, 56, 0, cpu_p, cpu_c),
                run(Layout::word, 128, 64, 0, cpu_p, cpu_c));
    for (int work : {15, 30, 60})
      std::printf(" | work %d: %.1f", work, run(Layout::word, 128, 64, work, cpu_p, cpu_c));
    std::printf(" Mitem/s\n");
  }
}
