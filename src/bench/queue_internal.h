// What the queue bench's files share: its bounded wait, the items' access and checks (put and
// get, inline: the measured loops call them per item), the queues' setup and the summary of one
// end. Internal to src/bench: queue.cc runs the bench, queue_pingpong.cc its ping-pong mode.
#pragma once

#include <fabflow/bench/queue.h>
#include <fabflow/bootstrap.h>
#include <fabflow/flow.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bench/item_payload.h"
#include "common/bounded_wait.h"

namespace fabflow::queue_detail {

using flow::Consumer;
using flow::Producer;
using flow::QueueOptions;

// The queue bench's bounded wait. `drive` is another transport this rank must keep
// progressing while it waits here: in the ping-pong each rank waits on one queue while its
// peer may need the other one progressed (reads of counters or slots, end-of-stream head
// updates), as any thread serving two queues must; `drive_notify` is that queue's notify
// transport (separate_notify_endpoint).
class Stall {
 public:
  Stall(Bootstrap& boot, std::uint64_t timeout_ms, Transport* drive = nullptr,
        Transport* drive_notify = nullptr)
      : wait_(std::chrono::milliseconds(timeout_ms), &boot, {drive, drive_notify}) {}
  void reset() noexcept { wait_.reset(); }
  void idle(const char* what) { wait_.idle("queue bench", what); }

 private:
  BoundedWait wait_;
};

inline std::string queue_error(const char* end, const std::string& why, Status s) {
  return std::string("queue bench: ") + end + " failed (" + std::string(to_string(s)) + ")" +
         (why.empty() ? "" : ": " + why);
}

struct EndSummary {
  double seconds = 0;
  std::uint64_t items = 0, data = 0, transfer = 0, space = 0, full = 0, empty = 0;
  // Consumer: first to last item, and the items within (after the first call's); producer:
  // the first call's commit to the last commit, and the items after the first call's.
  std::uint64_t timed = 0;
};

inline EndSummary summary_of(const flow::QueueStats& s) {
  return {0, s.items, s.data_ops, s.transfer_ops, s.space_ops, s.full, s.empty};
}

// How the bench's ends touch each item (QueueParams::api): every byte of it, written by the
// producer and read by the consumer, except with seq_only.
struct ItemAccess {
  QueueApi api;
  bench::ItemPayload payload;
  bool in_place() const noexcept { return api != QueueApi::copy; }
  bool whole() const noexcept { return api != QueueApi::seq_only; }
};

// The error for an item that arrived with the wrong length, sequence number or bytes (`len`
// bytes, `got` its sequence number), or "" when it is item `seq` whole.
inline std::string item_fault(const ItemAccess& a, std::span<const std::byte> item,
                              std::uint64_t seq) {
  const std::string which = "queue bench: item " + std::to_string(seq);
  if (item.size() != a.payload.size())
    return which + " has " + std::to_string(item.size()) + " bytes, expected " +
           std::to_string(a.payload.size());
  const std::uint64_t got = bench::ItemPayload::seq_of(item, seq);
  if (got != seq) return which + " arrived as " + std::to_string(got);
  if (a.whole() && !a.payload.intact(item, seq)) return which + "'s payload is corrupt (checksum)";
  return {};
}

// Spins until the producer takes item `seq`, which carries its sequence number in its first 8
// bytes when there is room. Copy API: try_enqueue of `buf`, item `seq` written into it; zero-copy:
// reserve / commit, the payload written into the slot; seq_only: only the number written.
inline void put(Producer& p, std::vector<std::byte>& buf, std::uint64_t seq, const ItemAccess& a,
                Stall& stall, const Clock& clock, std::vector<double>* samples) {
  if (!a.in_place()) a.payload.fill(buf, seq);  // the item the copy API enqueues
  stall.reset();
  for (;;) {
    std::uint64_t t0 = samples ? clock.now() : 0;
    Status s;
    if (a.in_place()) {
      std::span<std::byte> slot;
      s = p.reserve(buf.size(), &slot);
      if (s == Status::ok) {
        if (a.whole())
          a.payload.fill(slot, seq);
        else
          a.payload.stamp(slot, seq);
        s = p.commit();
      }
    } else {
      s = p.try_enqueue(buf);
    }
    if (s == Status::ok) {
      if (samples) samples->push_back(clock.to_ns(clock.now() - t0));
      return;
    }
    if (s != Status::full) throw Error(queue_error("enqueue", p.error(), s));
    stall.idle("enqueuing");
  }
}

// Spins until item `seq` arrives; false at end of stream. Checks its length, its order and
// (but with seq_only) every byte. Copy API: try_dequeue into `buf`; zero-copy APIs: peek /
// release, reading the item in place.
inline bool get(Consumer& c, std::vector<std::byte>& buf, std::uint64_t seq, const ItemAccess& a,
                Stall& stall, const Clock& clock, std::vector<double>* samples) {
  stall.reset();
  for (;;) {
    std::uint64_t t0 = samples ? clock.now() : 0;
    std::string fault;
    Status s;
    if (a.in_place()) {
      std::span<const std::byte> item;
      s = c.peek(&item);
      if (s == Status::ok) {
        fault = item_fault(a, item, seq);
        s = c.release();
      }
    } else {
      std::size_t len = 0;
      s = c.try_dequeue(buf, &len);
      if (s == Status::ok)
        fault = item_fault(a, std::span(buf).first(std::min(len, buf.size())), seq);
    }
    if (s == Status::ok) {
      if (samples) samples->push_back(clock.to_ns(clock.now() - t0));
      if (!fault.empty()) throw Error(fault);
      return true;
    }
    if (s == Status::closed) return false;
    if (s != Status::empty) throw Error(queue_error("dequeue", c.error(), s));
    stall.idle("dequeuing");
  }
}

// --burst: takes up to slots.size() items at once (reserve_many / commit_many), items seq on,
// Barrier that keeps a fabric transport (and the queue's notify transport, if any) progressing
// (a passive peer may depend on it).
inline void settle(Bootstrap& boot, Transport& t, const QueueOptions& o,
                   Transport* notify = nullptr) {
  if (o.socket) {
    boot.barrier();
  } else {
    boot.barrier([&] {
      t.progress();
      if (notify) notify->progress();
    });
  }
}

// One queue's transports: data, and notify when the notifications have their own.
struct QueueTransports {
  Transport& data;
  Transport* notify = nullptr;
};

inline std::unique_ptr<Producer> producer_on(QueueTransports q, Bootstrap& boot, int peer,
                                             const QueueOptions& o) {
  return q.notify ? flow::make_producer(q.data, *q.notify, boot, peer, o)
                  : flow::make_producer(q.data, boot, peer, o);
}
inline std::unique_ptr<Consumer> consumer_on(QueueTransports q, Bootstrap& boot, int peer,
                                             const QueueOptions& o) {
  return q.notify ? flow::make_consumer(q.data, *q.notify, boot, peer, o)
                  : flow::make_consumer(q.data, boot, peer, o);
}

// Makes the item just enqueued visible to the consumer: with manual-progress providers (tcp)
// nothing leaves the producer until it drives its transport.
inline void flush_queue(Producer& p, std::uint64_t timeout_ms) {
  Status s = p.flush(std::chrono::milliseconds(timeout_ms));
  if (s != Status::ok) throw Error(queue_error("flush", p.error(), s));
}

// The cache-line ping-pong run between blocks of the queue's ping-pong (--reference): every
// `trips` measured round trips both ranks stop, rank 0 bounces a line between the two CPUs for
// as many round trips while rank 1 sleeps, and the block's transfer p50 is set against it.
// This VM's cross-core latency changes several-fold between states that last from a tenth of a
// second to seconds; a block pair spans a few milliseconds. Filled on rank 0.
struct LineBlocks {
  std::uint64_t trips = 2048;
  int cpu0 = -1, cpu1 = -1;
  std::vector<double> samples;       // the sampled cache-line runs, pooled
  std::vector<double> vs, vs_whole;  // per block: transfer p50 / line p50, / line whole run
  double whole_ns = 0;               // sum over blocks of whole-run one-way ns x trips
  std::uint64_t whole_trips = 0;
};

// One ping-pong measurement of a design; queue_pingpong.cc describes it.
void pingpong(const QueueParams& params, const QueueOptions& o, QueueTransports t,
              QueueTransports back, Bootstrap& boot, const Clock& clock, QueueRow& row,
              std::vector<double>* keep, LineBlocks* lines = nullptr);

}  // namespace fabflow::queue_detail
