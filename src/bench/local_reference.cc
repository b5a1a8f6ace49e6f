// Hardware references for intra-host queues (issue 4): what two pinned cores can do with no
// library in between. Both run as two threads of this process pinned to the two CPUs the
// bench ranks use; cache coherence does not care whether the threads share an address space,
// so this is the same cost two processes mapping one segment would pay.
//   - cache-line ping-pong: each side stores a sequence number into its own cache line and
//     spins on the other's; one-way time is half the round trip. Run twice: sampled (one clock
//     read per round trip, as the queue's ping-pong) and whole-run (no clock read in between);
//   - minimal SPSC ring: Lamport's single-producer single-consumer ring with cached indices
//     (the textbook shared-memory queue), slots of item_bytes copied in and out, capacity slots;
//     timed on the consumer from the first item to the last, with no clock read in between.
#include <fabflow/bench/bulk.h>
#include <fabflow/bench/queue.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "bench/item_payload.h"
#include "bench/mapped_buffer.h"
#include "common/affinity.h"

namespace fabflow {
namespace {

constexpr std::size_t kLine = 64;

struct alignas(kLine) Line {
  std::atomic<std::uint64_t> v{0};
};

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Runs `a` on this thread pinned to cpu_a and `b` on a new thread pinned to cpu_b, then
// restores this thread's pinning (cpu_a is the caller's own CPU in the bench).
template <class A, class B>
void on_two_cores(int cpu_a, int cpu_b, A&& a, B&& b) {
  std::thread other([&] {
    if (cpu_b >= 0) pin_current_thread(cpu_b);
    b();
  });
  if (cpu_a >= 0) pin_current_thread(cpu_a);
  a();
  other.join();
}

}  // namespace

namespace {

// Bounces a cache line `warmup + round_trips` times. With `samples`, one clock read per round
// trip (the interval between consecutive reads is one round trip, its read included); without,
// the clock is read only before the first and after the last measured round trip. Returns the
// measured round trips' total ticks.
std::uint64_t bounce(std::uint64_t round_trips, std::uint64_t warmup, int cpu_a, int cpu_b,
                     const Clock& clock, std::vector<double>* samples) {
  auto lines = std::make_unique<Line[]>(2);  // [0] ping, written by a; [1] pong, written by b
  Line& ping = lines[0];
  Line& pong = lines[1];
  const std::uint64_t total = warmup + round_trips;
  std::uint64_t start = 0, end = 0;
  on_two_cores(
      cpu_a, cpu_b,
      [&] {
        std::uint64_t prev = 0;
        for (std::uint64_t i = 1; i <= total; ++i) {
          if (i == warmup + 1) prev = start = clock.now();
          ping.v.store(i, std::memory_order_release);
          while (pong.v.load(std::memory_order_acquire) != i) cpu_relax();
          if (samples && i > warmup) {
            const std::uint64_t t = clock.now();
            samples->push_back(clock.to_ns(t - prev) / 2);
            prev = t;
          }
        }
        end = samples ? prev : clock.now();
      },
      [&] {
        for (std::uint64_t i = 1; i <= total; ++i) {
          while (ping.v.load(std::memory_order_acquire) != i) cpu_relax();
          pong.v.store(i, std::memory_order_release);
        }
      });
  return end - start;
}

}  // namespace

CachelineReference cacheline_pingpong(std::uint64_t round_trips, std::uint64_t warmup, int cpu_a,
                                      int cpu_b, const Clock& clock, std::vector<double>* keep) {
  CachelineReference r;
  std::vector<double> samples;
  samples.reserve(round_trips);
  bounce(round_trips, warmup, cpu_a, cpu_b, clock, &samples);
  if (keep) keep->insert(keep->end(), samples.begin(), samples.end());
  r.sampled = summarize(samples);
  const std::uint64_t ticks = bounce(round_trips, warmup, cpu_a, cpu_b, clock, nullptr);
  r.whole_run_ns = round_trips ? clock.to_ns(ticks) / 2 / static_cast<double>(round_trips) : 0;
  return r;
}

double spsc_ring_items_per_s(std::uint64_t items, std::size_t item_bytes, std::size_t capacity,
                             QueueApi api, int cpu_producer, int cpu_consumer, const Clock& clock) {
  // Indices on their own lines; each side caches the other's index and re-reads it only when
  // the cached value says full (producer) or empty (consumer).
  struct alignas(kLine) Indices {
    Line head;  // written by the consumer
    Line tail;  // written by the producer
  };
  auto idx = std::make_unique<Indices>();
  const std::size_t stride = (item_bytes + kLine - 1) / kLine * kLine;
  // Cache-line aligned: allocated and freed with the aligned operator new[] / delete[].
  struct AlignedDelete {
    void operator()(std::byte* p) const noexcept {
      ::operator delete[](p, std::align_val_t{kLine});
    }
  };
  std::unique_ptr<std::byte[], AlignedDelete> ring(new (std::align_val_t{kLine})
                                                       std::byte[capacity * stride]);
  std::memset(ring.get(), 0, capacity * stride);
  std::uint64_t first = 0, last = 0, bad = 0;
  const bench::ItemPayload payload(item_bytes);
  on_two_cores(
      cpu_producer, cpu_consumer,
      [&] {
        std::vector<std::byte> item(item_bytes);  // copy API: the item copied in
        std::uint64_t head_seen = 0;
        for (std::uint64_t i = 0; i < items; ++i) {
          while (i - head_seen >= capacity) {
            head_seen = idx->head.v.load(std::memory_order_acquire);
            if (i - head_seen >= capacity) cpu_relax();
          }
          std::byte* slot = &ring[(i % capacity) * stride];
          if (api == QueueApi::zero_copy) {
            payload.fill({slot, item_bytes}, i);
          } else if (api == QueueApi::seq_only) {
            payload.stamp({slot, item_bytes}, i);
          } else {
            payload.fill(item, i);
            std::memcpy(slot, item.data(), item_bytes);
          }
          idx->tail.v.store(i + 1, std::memory_order_release);
        }
      },
      [&] {
        std::vector<std::byte> out(item_bytes);
        std::uint64_t tail_seen = 0;
        for (std::uint64_t i = 0; i < items; ++i) {
          while (i >= tail_seen) {
            tail_seen = idx->tail.v.load(std::memory_order_acquire);
            if (i >= tail_seen) cpu_relax();
          }
          const std::byte* slot = &ring[(i % capacity) * stride];
          std::span<const std::byte> got{slot, item_bytes};
          if (api == QueueApi::copy) {
            std::memcpy(out.data(), slot, item_bytes);
            got = out;
          }
          bad += api == QueueApi::seq_only ? bench::ItemPayload::seq_of(got, i) != i
                                           : !payload.intact(got, i);
          idx->head.v.store(i + 1, std::memory_order_release);
          if (i == 0) first = clock.now();  // the clock is read twice, not once per item
        }
        last = clock.now();
      });
  if (bad)
    throw Error("SPSC ring reference: " + std::to_string(bad) + " items out of order or corrupt");
  const double seconds = clock.to_ns(last - first) / 1e9;
  // Timed like the queue: on the consumer, first to last item (items - 1 intervals).
  return seconds > 0 ? static_cast<double>(items - 1) / seconds : 0;
}

double copy_pingpong_mb_s(std::size_t size, std::uint64_t round_trips, int cpu_a, int cpu_b) {
  // Each side's send buffer and receive buffer, as bench bulk's ping-pong has them.
  const bench::MappedBuffer out_a(size, 1), in_a(size, 1), out_b(size, 2), in_b(size, 2);
  Line turn;  // message k may start once turn == k; a message is one copy by its receiver
  const std::uint64_t total = 2 * (round_trips + 1);  // the first round trip untimed
  std::chrono::steady_clock::time_point start, end;
  auto side = [&](std::uint64_t first, const bench::MappedBuffer& from,
                  const bench::MappedBuffer& into) {
    for (std::uint64_t k = first; k < total; k += 2) {
      while (turn.v.load(std::memory_order_acquire) != k) cpu_relax();
      if (k == 2 && first == 0) start = std::chrono::steady_clock::now();
      std::memcpy(into.span().data(), from.span().data(), size);
      turn.v.store(k + 1, std::memory_order_release);
    }
  };
  on_two_cores(
      cpu_a, cpu_b,
      [&] {
        side(1, out_b, in_a);  // a receives b's odd messages
        while (turn.v.load(std::memory_order_acquire) != total) cpu_relax();
        end = std::chrono::steady_clock::now();
      },
      [&] { side(0, out_a, in_b); });  // b receives a's even messages
  const double s = std::chrono::duration<double>(end - start).count();
  return s > 0 ? static_cast<double>(size) * 2.0 * static_cast<double>(round_trips) / s / 1e6 : 0;
}

}  // namespace fabflow
