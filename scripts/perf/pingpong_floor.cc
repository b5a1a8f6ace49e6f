// How close can a 64-byte item's one-way transfer between two pinned cores come to the bare
// cache-line ping-pong (`bench queue --reference`'s line reference), with no queue software
// at all? Not part of the library; a measurement aid for docs/measurements/flow-queues.md (issue
// 17's "at most 1.6x the cache-line ping-pong"), built by CMake as perf_pingpong_floor.
//
//   ninja -C build perf_pingpong_floor
//   build/perf_pingpong_floor [cpu_a] [cpu_b] [rounds]
//
// Two threads, pinned, bounce an item back and forth. Each round runs every layout once, for
// a block of 2048 round trips each, timed as a whole (no clock read inside a block), in
// turn; a layout's figure in a round is its one-way time over the line reference's in the same
// round (this VM changes speed several-fold between states lasting from a tenth of a second to
// seconds; a round lasts a few milliseconds). Printed: per layout, the median and quartiles of
// those ratios over the rounds, and the median one-way time.
//   line        the reference: one 8-byte word per direction on a line of its own, a fixed
//               place (as bench queue's cache-line ping-pong)
//   line+56     a fixed line per direction carrying 56 payload bytes and the word (written
//               last, release); the reader copies the payload out
//   lines+64    the same with 64 payload bytes: two fixed lines per direction
//   ring 56     a 256-slot ring per direction, 64-byte slots: 56 payload bytes and the word,
//               each item in the next slot (a compact flow slot of 56 bytes)
//   ring 64     the same with 128-byte slots: 64 payload bytes before the word (a compact
//               flow slot of 64 bytes: two lines)
//   ring 64+h   ring 64, and the reader also publishes its head on a line of its own after
//               each item, which the writer loads once per 128 items (the queue's lazy rule)
//   ring 64+h/16  the same with the head stored after every 16th item only
//   ring 64 dem ring 64 with the writer demoting the item's two lines after the word (CLDEMOTE,
//               as fabflow's local transport does where the CPU has it: docs/local-transport.md);
//               "n/a" on a CPU without the instruction
//   ring 64 dem wf  ring 64 dem with the word first: [word][payload], the payload's first 56
//               bytes in the word's line (fabflow's word-first compact slots, for direct
//               stores); the writer stores the payload's last 8 bytes, then its first 56, then
//               the word
//   8/64 dem    ring 64 dem, but the writer stores only the payload's first 8 bytes and the
//               reader reads only those (what bench queue's seq-only API does with a 64-byte
//               item: its sequence number); word last, so those 8 bytes are in the other line
//   8/64 dem wf the same with the word first: the 8 bytes share the word's line
#include <cpuid.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace {

constexpr std::uint64_t kTrips = 2048;
constexpr std::uint64_t kSlots = 256;
// A reader that publishes its head every 16th item lags it by up to 15: a ring of 16 slots or
// fewer would leave the writer waiting for a head the reader publishes only after the next item.
static_assert(kSlots > 16 && (kSlots & (kSlots - 1)) == 0);

struct alignas(64) Line {
  std::atomic<std::uint64_t> v{0};
};

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

void relax() { __builtin_ia32_pause(); }

enum class Layout {
  line,
  line56,
  line64,
  ring56,
  ring64,
  ring64h,
  ring64h16,
  ring64d,
  ring64dwf,
  head8d,
  head8dwf
};
constexpr Layout kLayouts[] = {Layout::line,      Layout::line56,  Layout::line64,
                               Layout::ring56,    Layout::ring64,  Layout::ring64h,
                               Layout::ring64h16, Layout::ring64d, Layout::ring64dwf,
                               Layout::head8d,    Layout::head8dwf};
constexpr const char* kNames[] = {"line",           "line+56",   "lines+64",     "ring 56",
                                  "ring 64",        "ring 64+h", "ring 64+h/16", "ring 64 dem",
                                  "ring 64 dem wf", "8/64 dem",  "8/64 dem wf"};

bool has_cldemote() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (c & (1u << 25)) != 0;
}
void demote(const void* line) {
  asm volatile("cldemote %0" : : "m"(*static_cast<const char*>(line)));
}

// One direction's memory: a ring of kSlots slots (stride bytes each), and the reader's head.
struct Direction {
  std::vector<std::byte> storage;
  std::byte* ring = nullptr;
  Line head;
  explicit Direction(std::size_t stride) : storage(kSlots * stride + 64) {
    ring = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(storage.data()) + 63) &
                                        ~std::uintptr_t{63});
  }
};

struct Shape {
  std::size_t stride, payload;
  bool rotate;
  unsigned head;  // publish the head every `head` items (0: never)
  bool demote = false;
  bool word_first = false;  // [word][payload] instead of [payload][word]
  bool head8 = false;       // only the payload's first 8 bytes are written and read
};
Shape shape_of(Layout l) {
  switch (l) {
    case Layout::line: return {64, 0, false, 0};
    case Layout::line56: return {64, 56, false, 0};
    case Layout::line64: return {128, 64, false, 0};
    case Layout::ring56: return {64, 56, true, 0};
    case Layout::ring64: return {128, 64, true, 0};
    case Layout::ring64h: return {128, 64, true, 1};
    case Layout::ring64h16: return {128, 64, true, 16};
    case Layout::ring64d: return {128, 64, true, 0, true};
    case Layout::ring64dwf: return {128, 64, true, 0, true, true};
    case Layout::head8d: return {128, 64, true, 0, true, false, true};
    case Layout::head8dwf: return {128, 64, true, 0, true, true, true};
  }
  return {};
}

std::uint64_t* word(std::byte* slot, const Shape& s) {
  return reinterpret_cast<std::uint64_t*>(s.word_first ? slot : slot + s.stride - 8);
}
std::byte* payload_of(std::byte* slot, const Shape& s) {
  return s.word_first ? slot + 8 : slot + s.stride - 8 - s.payload;
}

// Sends item `seq` on `d`: payload, then the word (release).
void send(Direction& d, const Shape& s, std::uint64_t seq, std::uint64_t& head_seen,
          const std::byte* payload) {
  if (s.head && seq - head_seen >= kSlots / 2) {
    while (seq - (head_seen = d.head.v.load(std::memory_order_acquire)) >= kSlots) relax();
  }
  std::byte* slot = d.ring + (s.rotate ? (seq & (kSlots - 1)) * s.stride : 0);
  std::byte* p = payload_of(slot, s);
  if (s.head8) {
    std::memcpy(p, payload, 8);
  } else if (s.word_first && s.payload > 56) {  // the word's line last, in one go
    std::memcpy(p + 56, payload + 56, s.payload - 56);
    std::memcpy(p, payload, 56);
  } else if (s.payload) {
    std::memcpy(p, payload, s.payload);
  }
  std::atomic_ref<std::uint64_t>(*word(slot, s)).store(seq, std::memory_order_release);
  if (s.demote) {
    demote(slot);
    demote(slot + 64);
  }
}

// Waits for item `seq` on `d` and copies its payload out.
std::uint64_t receive(Direction& d, const Shape& s, std::uint64_t seq, std::byte* out) {
  std::byte* slot = d.ring + (s.rotate ? (seq & (kSlots - 1)) * s.stride : 0);
  while (std::atomic_ref<std::uint64_t>(*word(slot, s)).load(std::memory_order_acquire) != seq)
    relax();
  std::uint64_t first = 0;
  if (s.head8) {
    std::memcpy(&first, payload_of(slot, s), 8);
  } else if (s.payload) {
    std::memcpy(out, payload_of(slot, s), s.payload);
    std::memcpy(&first, out, 8);
  }
  if (s.head && seq % s.head == 0) d.head.v.store(seq, std::memory_order_release);
  return first;
}

struct Sync {
  Line go, done;
};

}  // namespace

int main(int argc, char** argv) {
  const int cpu_a = argc > 1 ? std::atoi(argv[1]) : 0;
  const int cpu_b = argc > 2 ? std::atoi(argv[2]) : 1;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 100;
  constexpr int kN = sizeof kLayouts / sizeof kLayouts[0];
  // As fabflow's pinned ranks do (common/idle_poll.h): a PM QoS request of 0 us while running,
  // so that an idle vCPU polls instead of halting and the run stays in one state longer.
  const int qos = ::open("/dev/cpu_dma_latency", O_WRONLY);
  const std::int32_t zero = 0;
  if (qos < 0 || ::write(qos, &zero, sizeof zero) != sizeof zero)
    std::printf("note: no PM QoS request (/dev/cpu_dma_latency not writable)\n");
  std::vector<double> ratio[kN], ns[kN];
  std::uint64_t sink = 0;
  // The TSC's rate: measured once against steady_clock.
  const auto c0 = std::chrono::steady_clock::now();
  const std::uint64_t t0 = __rdtsc();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double tsc_per_ns =
      static_cast<double>(__rdtsc() - t0) /
      static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now() - c0)
                              .count());
  std::uint64_t seq = 0;  // free-running over all blocks, so slots are never stale
  std::vector<std::unique_ptr<Direction>> ab, ba;
  for (Layout l : kLayouts) {
    ab.push_back(std::make_unique<Direction>(shape_of(l).stride));
    ba.push_back(std::make_unique<Direction>(shape_of(l).stride));
  }
  // Thread b echoes whatever block thread a runs: a announces (layout, first seq) in `go`.
  Sync sync;
  std::atomic<int> which{-1};
  std::thread b([&] {
    pin(cpu_b);
    std::byte buf[64] = {};
    std::uint64_t acc = 0, head_seen = 0;
    for (;;) {
      std::uint64_t g;
      while ((g = sync.go.v.load(std::memory_order_acquire)) == 0) relax();
      if (g == UINT64_MAX) break;
      const int k = which.load(std::memory_order_relaxed);
      const Shape s = shape_of(kLayouts[k]);
      head_seen = g - 1;
      for (std::uint64_t i = g; i < g + kTrips; ++i) {
        acc += receive(*ab[static_cast<std::size_t>(k)], s, i, buf);
        send(*ba[static_cast<std::size_t>(k)], s, i, head_seen, buf);
      }
      sync.go.v.store(0, std::memory_order_relaxed);
      sync.done.v.store(g, std::memory_order_release);
    }
    sink += acc;
  });
  pin(cpu_a);
  std::byte item[64], buf[64] = {};
  std::memset(item, 0x5a, sizeof item);
  std::uint64_t acc = 0;
  const bool cldemote = has_cldemote();
  for (int r = 0; r < rounds; ++r) {
    double line_ns = 0;
    for (int k = 0; k < kN; ++k) {
      const Shape s = shape_of(kLayouts[k]);
      if (s.demote && !cldemote) continue;
      const std::uint64_t g = seq + 1;
      std::uint64_t head_seen = g - 1;
      which.store(k, std::memory_order_relaxed);
      // Every item of the layout's earlier blocks was taken: both heads start at g - 1 (a head
      // published every 16th item would otherwise lag a block behind, and a small ring stall).
      ab[static_cast<std::size_t>(k)]->head.v.store(g - 1, std::memory_order_relaxed);
      ba[static_cast<std::size_t>(k)]->head.v.store(g - 1, std::memory_order_relaxed);
      sync.done.v.store(0, std::memory_order_relaxed);
      sync.go.v.store(g, std::memory_order_release);
      // Warm-up: the first 64 round trips are not timed.
      std::uint64_t start = 0;
      for (std::uint64_t i = g; i < g + kTrips; ++i) {
        if (i == g + 64) start = __rdtsc();
        std::memcpy(item, &i, 8);
        send(*ab[static_cast<std::size_t>(k)], s, i, head_seen, item);
        acc += receive(*ba[static_cast<std::size_t>(k)], s, i, buf);
      }
      const double one_way =
          static_cast<double>(__rdtsc() - start) / tsc_per_ns / 2.0 / (kTrips - 64);
      while (sync.done.v.load(std::memory_order_acquire) != g) relax();
      seq = g + kTrips;
      if (k == 0) line_ns = one_way;
      ns[k].push_back(one_way);
      ratio[k].push_back(one_way / line_ns);
    }
  }
  which.store(0);
  sync.go.v.store(UINT64_MAX, std::memory_order_release);
  b.join();
  if (qos >= 0) ::close(qos);
  auto q = [](std::vector<double> v, double f) {
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(f * static_cast<double>(v.size() - 1))];
  };
  std::printf("%d rounds of %llu round trips per layout, cpus %d/%d (sink %llu)\n", rounds,
              static_cast<unsigned long long>(kTrips), cpu_a, cpu_b,
              static_cast<unsigned long long>(sink + acc) % 10);
  std::printf("%-15s %10s %22s\n", "layout", "one-way ns", "/ line: p25 p50 p75");
  for (int k = 0; k < kN; ++k) {
    if (ns[k].empty()) {
      std::printf("%-15s %10s %12s\n", kNames[k], "n/a", "(no CLDEMOTE)");
      continue;
    }
    std::printf("%-15s %10.1f %12.2f %4.2f %4.2f\n", kNames[k], q(ns[k], 0.5), q(ratio[k], 0.25),
                q(ratio[k], 0.5), q(ratio[k], 0.75));
  }
  return 0;
}
