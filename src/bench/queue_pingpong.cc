// The queue bench's ping-pong mode: the transfer time of an item, half of a round trip through
// two queues, with the cache-line ping-pong in blocks between its round trips (--reference).
#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "bench/queue_internal.h"

namespace fabflow::queue_detail {
namespace {

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
}  // namespace

// Two queues, 0->1 on `t` and 1->0 on `back`: each queue owns its transport's completion
// queues. `keep` (rank 0): the samples are appended there too; `lines`: cache-line blocks
// in between (LineBlocks). No progress threads: each rank
// drives the transport it is not waiting on from its idle loop (Stall), so the transfer time
// contains no thread hand-off or time-slicing.
void pingpong(const QueueParams& params, const QueueOptions& o, QueueTransports t,
              QueueTransports back, Bootstrap& boot, const Clock& clock, QueueRow& row,
              std::vector<double>* keep, LineBlocks* lines) {
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

}  // namespace fabflow::queue_detail
