// The flow-queue benchmark (seed 003, chapter 6): throughput of one producer thread and one
// consumer thread through a queue, operation counts per item, and transfer time (half of a
// two-queue ping-pong) next to the raw write ping-pong of the same provider.
#include <fabflow/bench/queue.h>
#include <fabflow/bench/raw.h>
#include <fabflow/bootstrap.h>
#include <fabflow/flow.h>
#include <fabflow/progress.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <optional>
#include <ostream>
#include <type_traits>

#include "bench/item_payload.h"
#include "bench/mapped_buffer.h"
#include "common/bounded_wait.h"
#include "flow/socket/socket_queue.h"

namespace fabflow {
namespace {

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

std::string queue_error(const char* end, const std::string& why, Status s) {
  return std::string("queue bench: ") + end + " failed (" + std::string(to_string(s)) + ")" +
         (why.empty() ? "" : ": " + why);
}

QueueOptions queue_options(const QueueParams& params, const QueueDesign& d,
                           std::size_t item_bytes) {
  QueueOptions o;
  if (d.design == "socket") {
    o.socket = true;
  } else {
    auto design = flow::Design::parse(d.design);
    if (!design) throw UsageError("unknown design '" + d.design + "'");
    o = QueueOptions::preset(d.preset, *design);
    o.active_consumer = params.active_consumer;
    o.separate_notify_endpoint = params.separate_notify;
    o.slot_format = params.slot_format;
    o.lazy_refresh = params.lazy_refresh;
    o.recv_pool = params.recv_pool;
    o.one_notification_in_flight = params.one_notification_in_flight;
  }
  o.capacity = queue_capacity(params, item_bytes);
  o.item_bytes = item_bytes;
  return o;
}

struct EndSummary {
  double seconds = 0;
  std::uint64_t items = 0, data = 0, transfer = 0, space = 0, full = 0, empty = 0;
  std::uint64_t timed = 0;  // consumer: items within `seconds` (after the first call's)
};

EndSummary summary_of(const flow::QueueStats& s) {
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
std::string item_fault(const ItemAccess& a, std::span<const std::byte> item, std::uint64_t seq) {
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
void put(Producer& p, std::vector<std::byte>& buf, std::uint64_t seq, const ItemAccess& a,
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
bool get(Consumer& c, std::vector<std::byte>& buf, std::uint64_t seq, const ItemAccess& a,
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
// writing each one into its slot (seq_only: its sequence number); returns how many. Spins
// while full.
std::size_t put_many(Producer& p, const ItemAccess& a, std::uint64_t seq,
                     std::span<std::span<std::byte>> slots, Stall& stall) {
  stall.reset();
  for (;;) {
    std::size_t granted = 0;
    Status s = p.reserve_many(a.payload.size(), slots, &granted);
    if (s == Status::ok) {
      for (std::size_t i = 0; i < granted; ++i) {
        if (a.whole())
          a.payload.fill(slots[i], seq + i);
        else
          a.payload.stamp(slots[i], seq + i);
      }
      s = p.commit_many(granted);
      if (s == Status::ok) return granted;
    }
    if (s != Status::full) throw Error(queue_error("enqueue", p.error(), s));
    stall.idle("enqueuing");
  }
}

// --burst: gives the items that are there, up to items.size() (peek_many / release_many),
// checking each one from seq on as get() does; 0 at end of stream.
std::size_t get_many(Consumer& c, const ItemAccess& a, std::uint64_t seq,
                     std::span<std::span<const std::byte>> items, Stall& stall) {
  stall.reset();
  for (;;) {
    std::size_t n = 0;
    Status s = c.peek_many(items, &n);
    if (s == Status::ok) {
      for (std::size_t i = 0; i < n; ++i)
        if (std::string fault = item_fault(a, items[i], seq + i); !fault.empty())
          throw Error(fault);
      s = c.release_many(n);
      if (s != Status::ok) throw Error(queue_error("dequeue", c.error(), s));
      return n;
    }
    if (s == Status::closed) return 0;
    if (s != Status::empty) throw Error(queue_error("dequeue", c.error(), s));
    stall.idle("dequeuing");
  }
}

// Barrier that keeps a fabric transport (and the queue's notify transport, if any) progressing
// (a passive peer may depend on it).
void settle(Bootstrap& boot, Transport& t, const QueueOptions& o, Transport* notify = nullptr) {
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

std::unique_ptr<Producer> producer_on(QueueTransports q, Bootstrap& boot, int peer,
                                      const QueueOptions& o) {
  return q.notify ? flow::make_producer(q.data, *q.notify, boot, peer, o)
                  : flow::make_producer(q.data, boot, peer, o);
}
std::unique_ptr<Consumer> consumer_on(QueueTransports q, Bootstrap& boot, int peer,
                                      const QueueOptions& o) {
  return q.notify ? flow::make_consumer(q.data, *q.notify, boot, peer, o)
                  : flow::make_consumer(q.data, boot, peer, o);
}

// Makes the item just enqueued visible to the consumer: with manual-progress providers (tcp)
// nothing leaves the producer until it drives its transport.
void flush_queue(Producer& p, std::uint64_t timeout_ms) {
  Status s = p.flush(std::chrono::milliseconds(timeout_ms));
  if (s != Status::ok) throw Error(queue_error("flush", p.error(), s));
}

void close_queue(Producer& p, std::uint64_t timeout_ms) {
  Status s = p.close(std::chrono::milliseconds(timeout_ms));
  if (s != Status::ok) throw Error(queue_error("close", p.error(), s));
}

void throughput(const QueueParams& params, const QueueOptions& o, QueueTransports q,
                Bootstrap& boot, const Clock& clock, QueueRow& row) {
  const ItemAccess access{params.api, bench::ItemPayload(o.item_bytes)};
  std::vector<std::byte> buf(o.item_bytes);  // the copy API's item
  access.payload.fill(buf, 0);
  Stall stall(boot, params.target.timeout_ms);
  std::vector<double> samples;
  if (params.latency) samples.reserve(params.items);
  EndSummary mine;
  if (boot.rank() == 0) {
    auto p = producer_on(q, boot, 1, o);
    boot.barrier();
    if (params.burst > 1) {
      std::vector<std::span<std::byte>> slots(params.burst);
      for (std::uint64_t i = 0; i < params.items;) {
        const auto want =
            static_cast<std::size_t>(std::min<std::uint64_t>(params.burst, params.items - i));
        i += put_many(*p, access, i, std::span(slots).first(want), stall);
      }
    } else {
      for (std::uint64_t i = 0; i < params.items; ++i)
        put(*p, buf, i, access, stall, clock, params.latency ? &samples : nullptr);
    }
    close_queue(*p, params.target.timeout_ms);
    mine = summary_of(p->stats());
    settle(boot, q.data, o, q.notify);
  } else {
    auto c = consumer_on(q, boot, 0, o);
    boot.barrier();
    // Timed from the first item to the last with two clock reads (none per item in between),
    // as the SPSC-ring reference is. The items of the first call (one, or a burst) arrived
    // before the first read: the rate counts those after it.
    std::uint64_t first = 0, last = 0, n = 0, before_first = 0;
    if (params.burst > 1) {
      std::vector<std::span<const std::byte>> items(params.burst);
      while (std::size_t got = get_many(*c, access, n, items, stall)) {
        if (n == 0) {
          first = clock.now();
          before_first = got;
        }
        n += got;
        if (n >= params.items) last = clock.now();
        if (n > params.items) break;  // reported below
      }
    } else {
      while (get(*c, buf, n, access, stall, clock, params.latency ? &samples : nullptr)) {
        if (n == 0) {
          first = clock.now();
          before_first = 1;
        }
        if (++n == params.items) last = clock.now();
      }
    }
    if (n != params.items)
      throw Error("queue bench: consumer got " + std::to_string(n) + " items, expected " +
                  std::to_string(params.items));
    mine = summary_of(c->stats());
    mine.seconds = clock.to_ns(last - first) / 1e9;
    mine.timed = params.items - before_first;
    settle(boot, q.data, o, q.notify);
  }
  LatencyStats lat = params.latency ? summarize(samples) : LatencyStats{};
  auto all = allgather_value(boot, mine, "queue bench: summary");
  auto lats =
      allgather_value(boot, static_cast<const LatencyFigures&>(lat), "queue bench: latency");
  const EndSummary& p = all[0];
  const EndSummary& c = all[1];
  row.items = params.items;
  row.seconds = c.seconds;
  // The consumer times first to last item: the items after the first call's.
  if (c.seconds > 0) row.items_per_s = static_cast<double>(c.timed) / c.seconds;
  // Bytes per second only where every byte of every item was written and read.
  if (params.api != QueueApi::seq_only)
    row.mbps = row.items_per_s * static_cast<double>(o.item_bytes) / 1e6;
  double n = static_cast<double>(std::max<std::uint64_t>(params.items, 1));
  row.data_per_item = static_cast<double>(p.data + c.data) / n;
  row.transfer_per_item = static_cast<double>(p.transfer + c.transfer) / n;
  row.space_per_item = static_cast<double>(p.space + c.space) / n;
  row.full = p.full;
  row.empty = c.empty;
  // This rank's own figures keep their histogram; the peer's come as figures only.
  row.enqueue = boot.rank() == 0 ? lat : LatencyStats{lats[0]};
  row.dequeue = boot.rank() == 1 ? lat : LatencyStats{lats[1]};
}

// Closes `p` while draining `c` to its end of stream (rank 0's echo queue) or, once `c` is
// closed, still calling it so that it keeps driving its transport and re-sends its final head.
// Neither end blocks on one queue while the peer waits on the other.
void close_both(Producer& p, Consumer& c, std::vector<std::byte>& buf, Stall& stall) {
  bool closed = false, drained = false;
  stall.reset();
  while (!closed || !drained) {
    if (!closed) {
      Status s = p.close(std::chrono::milliseconds(0));
      if (s == Status::ok)
        closed = true;
      else if (s != Status::timeout)
        throw Error(queue_error("close", p.error(), s));
    }
    std::size_t len = 0;
    Status s = c.try_dequeue(buf, &len);
    if (s == Status::closed)
      drained = true;
    else if (s != Status::empty)
      throw Error(queue_error("dequeue at the end", c.error(), s));
    stall.idle("closing");
  }
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

// Rank 0, at the end of a block (the last `b.trips` of `samples`): the cache-line run, between
// two barriers that rank 1 meets in its loop.
void line_block(LineBlocks& b, const std::vector<double>& samples, Bootstrap& boot,
                const Clock& clock) {
  std::vector<double> block(samples.end() - static_cast<std::ptrdiff_t>(b.trips), samples.end());
  const double p50 = summarize(block).p50;
  boot.barrier();
  const CachelineReference c = cacheline_pingpong(b.trips, std::min<std::uint64_t>(b.trips, 256),
                                                  b.cpu0, b.cpu1, clock, &b.samples);
  boot.barrier();
  if (c.sampled.p50 > 0) b.vs.push_back(p50 / c.sampled.p50);
  if (c.whole_run_ns > 0) b.vs_whole.push_back(p50 / c.whole_run_ns);
  b.whole_ns += c.whole_run_ns * static_cast<double>(b.trips);
  b.whole_trips += b.trips;
}

// Two queues, 0->1 on `t` and 1->0 on `back`: each queue owns its transport's completion
// queues. `keep` (rank 0): the samples are appended there too; `lines`: cache-line blocks
// in between (LineBlocks). No progress threads: each rank
// drives the transport it is not waiting on from its idle loop (Stall), so the transfer time
// contains no thread hand-off or time-slicing.
void pingpong(const QueueParams& params, const QueueOptions& o, QueueTransports t,
              QueueTransports back, Bootstrap& boot, const Clock& clock, QueueRow& row,
              std::vector<double>* keep, LineBlocks* lines = nullptr) {
  const ItemAccess access{params.api, bench::ItemPayload(o.item_bytes)};
  std::vector<std::byte> buf(o.item_bytes);  // the copy API's item
  access.payload.fill(buf, 0);
  const std::uint64_t total = params.warmup + params.round_trips;
  std::vector<double> samples;
  EndSummary mine;
  // Queue 0->1 first, then 1->0: both setups are collective.
  std::unique_ptr<Producer> p;
  std::unique_ptr<Consumer> c;
  const bool rank0 = boot.rank() == 0;
  QueueTransports mine_out = rank0 ? t : back;  // the transports of this rank's producer
  QueueTransports mine_in = rank0 ? back : t;   // ... and of its consumer
  Stall put_stall(boot, params.target.timeout_ms, o.socket ? nullptr : &mine_in.data,
                  mine_in.notify);
  Stall get_stall(boot, params.target.timeout_ms, o.socket ? nullptr : &mine_out.data,
                  mine_out.notify);
  if (rank0) {
    p = producer_on(t, boot, 1, o);
    c = consumer_on(back, boot, 1, o);
    samples.reserve(params.round_trips);
    boot.barrier();
    // One clock read per round trip: a sample is the interval between consecutive reads (a
    // round trip with one read in it), as the cache-line reference's sampled run.
    std::uint64_t prev = 0;
    for (std::uint64_t i = 0; i < total; ++i) {
      if (i == params.warmup) prev = clock.now();
      put(*p, buf, i, access, put_stall, clock, nullptr);
      flush_queue(*p, params.target.timeout_ms);
      if (!get(*c, buf, i, access, get_stall, clock, nullptr))
        throw Error("queue bench: echo queue closed early");
      if (i >= params.warmup) {
        const std::uint64_t t = clock.now();
        samples.push_back(clock.to_ns(t - prev) / 2);
        prev = t;
        if (lines && (i + 1 - params.warmup) % lines->trips == 0) {
          line_block(*lines, samples, boot, clock);
          prev = clock.now();
        }
      }
    }
  } else {
    c = consumer_on(t, boot, 0, o);
    p = producer_on(back, boot, 0, o);
    boot.barrier();
    for (std::uint64_t i = 0; get(*c, buf, i, access, get_stall, clock, nullptr); ++i) {
      put(*p, buf, i, access, put_stall, clock, nullptr);
      flush_queue(*p, params.target.timeout_ms);
      if (lines && i >= params.warmup && (i + 1 - params.warmup) % lines->trips == 0) {
        boot.barrier();  // rank 0 has the item back; it bounces the line while we sleep
        boot.barrier([] { std::this_thread::sleep_for(std::chrono::microseconds(200)); });
      }
    }
  }
  close_both(*p, *c, buf, get_stall);
  EndSummary a = summary_of(p->stats()), b = summary_of(c->stats());
  mine = {0,       a.items, a.data + b.data, a.transfer + b.transfer, a.space + b.space, a.full,
          b.empty, 0};
  if (o.socket) {
    boot.barrier();
  } else {
    boot.barrier([&] {
      for (QueueTransports x : {t, back}) {
        x.data.progress();
        if (x.notify) x.notify->progress();
      }
    });
  }
  auto all = allgather_value(boot, mine, "queue bench: summary");
  const EndSummary& e0 = all[0];
  const EndSummary& e1 = all[1];
  row.items = params.round_trips;
  // Each of the 2 x total items, both queues' ends summed.
  double n = 2.0 * static_cast<double>(total);
  row.data_per_item = static_cast<double>(e0.data + e1.data) / n;
  row.transfer_per_item = static_cast<double>(e0.transfer + e1.transfer) / n;
  row.space_per_item = static_cast<double>(e0.space + e1.space) / n;
  row.full = e0.full + e1.full;
  row.empty = e0.empty + e1.empty;
  if (boot.rank() != 0) return;
  if (keep) keep->insert(keep->end(), samples.begin(), samples.end());
  row.transfer = summarize(samples);
}

// The references of one item size, measured once and attached to every row of that size.
struct References {
  LatencyStats raw_pingpong;
  bool raw_pingpong_measured = false;
  double raw_stream_mbps = 0, raw_stream_msgs_per_s = 0;
  double spsc_items_per_s = 0;
  double memcpy_mbps = 0;
  LatencyStats cacheline;
  double cacheline_whole_run_ns = 0;
  bool cacheline_measured = false;

  void apply(QueueRow& row) const {
    row.raw_write = raw_pingpong;
    row.raw_write_measured = raw_pingpong_measured;
    row.raw_stream_mbps = raw_stream_mbps;
    row.raw_stream_msgs_per_s = raw_stream_msgs_per_s;
    row.spsc_items_per_s = spsc_items_per_s;
    row.memcpy_mbps = memcpy_mbps;
    row.cacheline = cacheline;
    row.cacheline_whole_run_ns = cacheline_whole_run_ns;
    row.cacheline_measured = cacheline_measured;
  }
};

// The raw bench (run_raw) on its own transport, same provider and size: the write ping-pong
// (one-way) in ping-pong mode, the streaming write bandwidth (as many writes as the queue
// moves items, the raw bench's default window) in throughput mode. Collective.
void raw_reference(const QueueParams& params, std::size_t size, Bootstrap& boot, References& ref,
                   std::vector<double>* keep = nullptr) {
  RawParams rp;
  rp.keep_samples = keep != nullptr;
  rp.op = Op::write;
  rp.sizes = {size};
  rp.iterations = params.pingpong ? params.round_trips : params.items;
  rp.warmup = params.pingpong ? params.warmup : std::min<std::uint64_t>(params.items / 10, 1000);
  rp.test = params.pingpong ? RawTest::latency : RawTest::bandwidth;
  rp.target = params.target;
  rp.progress = params.progress;
  const Capabilities caps =
      probe_transport(params.target.transport({Op::write}, boot.local_address()));
  if (!caps.supports(Op::write) || size > caps.max_msg_size) return;
  RawResult r = run_raw(rp, boot);
  if (boot.rank() != 0 || r.rows.empty()) return;
  if (params.pingpong) {
    ref.raw_pingpong = r.rows.front().latency;
    ref.raw_pingpong_measured = true;
    if (keep)
      keep->insert(keep->end(), r.rows.front().samples.begin(), r.rows.front().samples.end());
  } else {
    ref.raw_stream_mbps = r.rows.front().mbps;
    ref.raw_stream_msgs_per_s = r.rows.front().msgs_per_s;
  }
}

// The hardware references: rank 0 runs both threads on the two ranks' CPUs (and, throughput
// mode, the memcpy on its own) while rank 1 sleeps in a barrier. Collective.
void core_references(const QueueParams& params, std::size_t size, Bootstrap& boot,
                     const Clock& clock, int cpu0, int cpu1, References& ref,
                     std::vector<double>* keep = nullptr) {
  if (boot.rank() == 0) {
    if (params.pingpong) {
      const CachelineReference c =
          cacheline_pingpong(params.round_trips, params.warmup, cpu0, cpu1, clock, keep);
      ref.cacheline = c.sampled;
      ref.cacheline_whole_run_ns = c.whole_run_ns;
      ref.cacheline_measured = true;
    } else {
      ref.spsc_items_per_s = spsc_ring_items_per_s(params.items, size, queue_capacity(params, size),
                                                   params.api, cpu0, cpu1, clock);
      // The copy the producer's thread makes of each item, alone, on its CPU.
      if (params.api != QueueApi::seq_only)
        ref.memcpy_mbps = bench::memcpy_mb_s(size, params.items * size);
    }
    boot.barrier();
  } else {
    boot.barrier([] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
  }
}

// Ping-pong with --reference: params.reference_rounds rounds of [the design (`measure`), the
// raw write ping-pong], the round trips shared out among the rounds, with the cache-line
// ping-pong in blocks inside the design's run (LineBlocks; after it, once per round, where a
// helper thread would spin through the blocks: an active consumer or producer). The row's figures
// pool every round's samples; its ratios are the medians of the rounds' own ratios (raw write) and
// of the blocks' (cache line). Collective.
template <class Measure>
void interleave(const QueueParams& params, const QueueOptions& o, std::size_t size, Bootstrap& boot,
                const Clock& clock, const RunEnvironment& env, Measure& measure, QueueRow& row) {
  const unsigned rounds =
      static_cast<unsigned>(std::min<std::uint64_t>(params.reference_rounds, params.round_trips));
  const bool blocks = !o.active_consumer && !o.active_producer;  // no helper thread to spin
  std::vector<double> transfer, raw, vs_raw;
  LineBlocks lines;
  lines.cpu0 = env.cpu_initiator;
  lines.cpu1 = env.cpu_target;
  QueueParams run = params;
  for (unsigned k = 0; k < rounds && row.unsupported.empty(); ++k) {
    // The first params.round_trips % rounds rounds take one trip more.
    run.round_trips = params.round_trips / rounds + (k < params.round_trips % rounds ? 1 : 0);
    // At least one block per round; the trips after the last whole block have none.
    lines.trips = std::min<std::uint64_t>(2048, run.round_trips);
    measure(run, &transfer, blocks ? &lines : nullptr);
    if (!row.unsupported.empty()) break;
    const double p50 = row.transfer.p50;  // this round's, from pingpong() on rank 0
    References ref;
    raw_reference(run, size, boot, ref, &raw);
    if (!blocks) {
      core_references(run, size, boot, clock, env.cpu_initiator, env.cpu_target, ref,
                      &lines.samples);
      if (boot.rank() == 0 && ref.cacheline_measured) {
        if (ref.cacheline.p50 > 0) lines.vs.push_back(p50 / ref.cacheline.p50);
        if (ref.cacheline_whole_run_ns > 0)
          lines.vs_whole.push_back(p50 / ref.cacheline_whole_run_ns);
        lines.whole_ns += ref.cacheline_whole_run_ns * static_cast<double>(run.round_trips);
        lines.whole_trips += run.round_trips;
      }
    }
    if (boot.rank() != 0) continue;
    if (ref.raw_pingpong_measured && ref.raw_pingpong.p50 > 0)
      vs_raw.push_back(p50 / ref.raw_pingpong.p50);
    row.rounds = k + 1;
  }
  if (boot.rank() != 0 || !row.unsupported.empty()) return;
  row.items = params.round_trips;
  row.transfer = summarize(transfer);
  row.raw_write_measured = !raw.empty();
  if (row.raw_write_measured) row.raw_write = summarize(raw);
  row.cacheline_measured = !lines.samples.empty();
  if (row.cacheline_measured) {
    row.cacheline = summarize(lines.samples);
    row.cacheline_whole_run_ns = lines.whole_ns / static_cast<double>(lines.whole_trips);
  }
  row.vs_cacheline = median(lines.vs);
  row.vs_cacheline_whole_run = median(lines.vs_whole);
  row.vs_raw_write = median(vs_raw);
  row.block_vs_cacheline = std::move(lines.vs);
  row.round_vs_raw_write = std::move(vs_raw);
}

}  // namespace

std::size_t queue_capacity(const QueueParams& params, std::size_t item_bytes) noexcept {
  if (params.capacity != 0) return params.capacity;
  constexpr std::size_t kRingBytes = std::size_t{4} << 20;
  return std::clamp<std::size_t>(kRingBytes / std::max<std::size_t>(item_bytes, 1), 16, 1024);
}

QueueResult run_queue(const QueueParams& params, Bootstrap& boot,
                      const std::function<void(const QueueResult&, const QueueRow&)>& on_row) {
  QueueResult result;
  auto add = [&](const QueueRow& row) {
    if (boot.rank() != 0) return;
    result.rows.push_back(row);
    if (on_row) on_row(result, result.rows.back());
  };
  if (boot.size() != 2)
    throw UsageError("queue bench needs exactly 2 processes, got " + std::to_string(boot.size()));
  if (params.designs.empty() || params.sizes.empty()) throw UsageError("no design or size given");
  if (params.items < 2 || params.round_trips == 0)
    throw UsageError("queue bench: --items must be at least 2 and round trips at least 1");
  Clock clock;
  result.env = machine_environment();
  result.params = params;
  result.env.clock = clock.name();
  gather_pinning(result.env, boot, params.target.cpu);

  // Ping-pong with --reference: the references run beside each row, in rounds (below);
  // otherwise once per size, before the rows.
  const bool interleaved = params.pingpong && params.reference;
  std::map<std::size_t, References> refs;
  if (!interleaved)
    for (std::size_t size : params.sizes) {
      References& ref = refs[size];
      if (params.pingpong) raw_reference(params, size, boot, ref);
      if (params.reference) {
        if (!params.pingpong) raw_reference(params, size, boot, ref);
        core_references(params, size, boot, clock, result.env.cpu_initiator, result.env.cpu_target,
                        ref);
      }
    }
  for (const QueueDesign& d : params.designs)
    for (std::size_t size : params.sizes) {
      QueueOptions o = queue_options(params, d, size);
      TransportOptions to = params.target.transport(
          o.socket ? std::vector<Op>{Op::send} : flow::required_ops(o), boot.local_address());
      to.thread_safe = o.active_producer || o.active_consumer;
      // Receives kept posted (push2: one per ring slot): size the receive queue for them
      // rather than refusing the point.
      if (!o.socket) to.rx_depth = std::max(to.rx_depth, flow::required_rx_depth(o));
      // Separate notifications: a second transport per queue, opened for their operations.
      const bool separate = o.separate_notify_endpoint;
      TransportOptions nto = to;
      if (separate) nto.ops = flow::required_notify_ops(o);
      QueueRow row;
      row.design = d;
      row.item_bytes = size;
      row.capacity = o.capacity;
      const bench::ProbedPoint probed = bench::probe_point(to, [&](const Capabilities& c) {
        std::string why = separate ? flow::why_unsupported(c, probe_transport(nto), o)
                                   : flow::why_unsupported(c, o);
        if (why.empty() && size > c.max_msg_size && !o.socket)
          why = "item size " + std::to_string(size) + " is above " + c.provider +
                "'s max_msg_size " + std::to_string(c.max_msg_size);
        return why;
      });
      const Capabilities& caps = probed.caps;
      const std::string& why = probed.unsupported;
      if (why.empty() && !o.socket) row.slot_format = flow::to_string(flow::slot_format(caps, o));
      bench::note_caps(result.env, caps);
      row.provider = caps.provider.empty() ? params.target.provider : caps.provider;
      if (!why.empty()) {
        row.unsupported = why;
        add(row);
        continue;
      }
      // One measurement of the design: fresh transports, opened (and connected, collectively)
      // on both ranks in the same order.
      auto measure = [&](const QueueParams& run, std::vector<double>* keep,
                         LineBlocks* lines = nullptr) {
        auto open = [&](const TransportOptions& opts) {
          auto x = open_transport(opts);
          if (!o.socket) x->connect(boot);
          return x;
        };
        auto t = open(to);
        std::unique_ptr<Transport> tn = separate ? open(nto) : nullptr;
        // make_producer / make_consumer refuse on both ranks at the same collective step
        // (a refusal found during setup travels in the hello), so both land here together.
        try {
          if (run.pingpong) {
            auto back = open(to);
            std::unique_ptr<Transport> backn = separate ? open(nto) : nullptr;
            pingpong(run, o, {*t, tn.get()}, {*back, backn.get()}, boot, clock, row, keep, lines);
            settle(boot, *back, o, backn.get());
          } else {
            throughput(run, o, {*t, tn.get()}, boot, clock, row);
          }
        } catch (const UsageError& e) {
          row.unsupported = e.what();
        }
        settle(boot, *t, o, tn.get());
      };
      if (interleaved) {
        interleave(params, o, size, boot, clock, result.env, measure, row);
      } else {
        measure(params, nullptr);
        refs[size].apply(row);
      }
      add(row);
    }
  return result;
}

}  // namespace fabflow
