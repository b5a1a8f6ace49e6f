// The flow-queue benchmark (seed 003, chapter 6): throughput of one producer thread and one
// consumer thread through a queue, operation counts per item, and transfer time (half of a
// two-queue ping-pong, queue_pingpong.cc) next to the raw write ping-pong of the same provider.
#include <fabflow/bench/queue.h>
#include <fabflow/bench/raw.h>
#include <fabflow/bootstrap.h>
#include <fabflow/flow.h>
#include <fabflow/profile.h>
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

#include "bench/engine.h"
#include "bench/item_payload.h"
#include "bench/mapped_buffer.h"
#include "bench/queue_internal.h"
#include "common/bounded_wait.h"
#include "flow/end_base.h"
#include "flow/socket/socket_queue.h"

namespace fabflow {
namespace queue_detail {
namespace {

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
    // The producer's own time, as the thesis times its queues (seed 003 L599): from its first
    // call's commit to the last commit (the close after it not counted), two clock reads. The
    // items of the first call (one, or a burst) are not timed: that call also pays for the
    // first touch of the ring and the connection's first operation, which the consumer's
    // figure leaves out the same way.
    std::uint64_t first = 0, before_first = 0;
    if (params.burst > 1) {
      std::vector<std::span<std::byte>> slots(params.burst);
      for (std::uint64_t i = 0; i < params.items;) {
        const auto want =
            static_cast<std::size_t>(std::min<std::uint64_t>(params.burst, params.items - i));
        i += put_many(*p, access, i, std::span(slots).first(want), stall);
        if (before_first == 0) {
          first = clock.now();
          before_first = i;
        }
      }
    } else {
      for (std::uint64_t i = 0; i < params.items; ++i) {
        put(*p, buf, i, access, stall, clock, params.latency ? &samples : nullptr);
        if (i == 0) {
          first = clock.now();
          before_first = 1;
        }
      }
    }
    const std::uint64_t last = clock.now();
    close_queue(*p, params.target.timeout_ms);
    mine = summary_of(p->stats());
    mine.seconds = clock.to_ns(last - first) / 1e9;
    mine.timed = params.items - before_first;
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
  if (p.seconds > 0) row.producer_items_per_s = static_cast<double>(p.timed) / p.seconds;
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

// The receives of the CQ-data pool a design keeps posted beside a push2 ring's.
std::size_t cq_data_pool(const flow::QueueOptions& o) {
  return o.design.transfer == flow::TransferNotify::imm ? flow::detail::kCounterPool : 0;
}

// Under a profile, a push2 ring of the automatic size (no --capacity) is sized down to what the
// profile's receive queue holds beside the design's other receives: the bench sizes what it
// chose itself, and refuses (receive_queue_refusal) only what the user asked for.
void fit_profile(const QueueParams& params, const ProviderProfile* prof, flow::QueueOptions& o) {
  if (!prof || params.capacity != 0 || o.socket || o.design.data != flow::DataFlow::push2) return;
  const std::size_t pool = cq_data_pool(o);
  if (prof->rx_depth > pool) o.capacity = std::min(o.capacity, prof->rx_depth - pool);
}

// Why a profile's receive queue cannot hold the receives design point `o` keeps posted, in the
// bench's words (the flags that lower them), or "" (no profile, or they fit). The bench sizes
// the transport's queue itself (rx_depth); a profile's is the hardware provider's, fixed.
std::string receive_queue_refusal(const ProviderProfile* prof, const flow::QueueOptions& o) {
  if (!prof) return "";
  const std::size_t need = flow::required_rx_depth(o);
  if (need <= prof->rx_depth) return "";
  std::string what = prof->name + " profile: receive queue of " + std::to_string(prof->rx_depth) +
                     ", " + o.design.name() + " needs " + std::to_string(need) + " receives posted";
  if (o.design.data != flow::DataFlow::push2) return what;  // fixed pools: nothing to lower
  const std::size_t pool = cq_data_pool(o);
  const std::string beside = pool ? ", beside " + std::to_string(pool) + " for CQ data" : "";
  if (prof->rx_depth <= pool) return what + " (one per ring slot" + beside + ")";
  return what + " (one per ring slot" + beside + "): lower --capacity or --recv-pool to " +
         std::to_string(prof->rx_depth - pool);
}

}  // namespace queue_detail

std::size_t queue_capacity(const QueueParams& params, std::size_t item_bytes) noexcept {
  if (params.capacity != 0) return params.capacity;
  constexpr std::size_t kRingBytes = std::size_t{4} << 20;
  return std::clamp<std::size_t>(kRingBytes / std::max<std::size_t>(item_bytes, 1), 16, 1024);
}

QueueResult run_queue(const QueueParams& params, Bootstrap& boot,
                      const std::function<void(const QueueResult&, const QueueRow&)>& on_row) {
  if (boot.size() != 2)
    throw UsageError("queue bench needs exactly 2 processes, got " + std::to_string(boot.size()));
  if (params.designs.empty() || params.sizes.empty()) throw UsageError("no design or size given");
  if (params.items < 2 || params.round_trips == 0)
    throw UsageError("queue bench: --items must be at least 2 and round trips at least 1");
  Clock clock;
  QueueResult result = bench::start_result<QueueResult>(params, boot, clock);
  auto add = [&](const QueueRow& row) { bench::publish_row(boot, result, row, on_row); };

  // Ping-pong with --reference: the references run beside each row, in rounds (below);
  // otherwise once per size, before the rows.
  const bool interleaved = params.pingpong && params.reference;
  std::map<std::size_t, queue_detail::References> refs;
  if (!interleaved)
    for (std::size_t size : params.sizes) {
      queue_detail::References& ref = refs[size];
      if (params.pingpong) queue_detail::raw_reference(params, size, boot, ref);
      if (params.reference) {
        if (!params.pingpong) queue_detail::raw_reference(params, size, boot, ref);
        queue_detail::core_references(params, size, boot, clock, result.env.cpu_initiator,
                                      result.env.cpu_target, ref);
      }
    }
  std::optional<ProviderProfile> profile;
  if (!params.target.profile.empty()) profile = load_profile(params.target.profile);
  for (const QueueDesign& d : params.designs)
    for (std::size_t size : params.sizes) {
      flow::QueueOptions o = queue_detail::queue_options(params, d, size);
      queue_detail::fit_profile(params, profile ? &*profile : nullptr, o);
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
      const bench::ProbedPoint probed =
          bench::probe_row(result.env, to, [&](const Capabilities& c) {
            std::string why = separate ? flow::why_unsupported(c, probe_transport(nto), o)
                                       : flow::why_unsupported(c, o);
            if (why.empty() && !o.socket)
              why = queue_detail::receive_queue_refusal(profile ? &*profile : nullptr, o);
            if (why.empty() && size > c.max_msg_size && !o.socket)
              why = "item size " + std::to_string(size) + " is above " + c.provider +
                    "'s max_msg_size " + std::to_string(c.max_msg_size);
            return why;
          });
      const Capabilities& caps = probed.caps;
      const std::string& why = probed.unsupported;
      if (why.empty() && !o.socket) row.slot_format = flow::to_string(flow::slot_format(caps, o));
      row.provider = caps.provider.empty() ? params.target.provider : caps.provider;
      if (!why.empty()) {
        row.unsupported = why;
        add(row);
        continue;
      }
      // One measurement of the design: fresh transports, opened (and connected, collectively)
      // on both ranks in the same order.
      auto measure = [&](const QueueParams& run, std::vector<double>* keep,
                         queue_detail::LineBlocks* lines = nullptr) {
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
            queue_detail::pingpong(run, o, {*t, tn.get()}, {*back, backn.get()}, boot, clock, row,
                                   keep, lines);
            queue_detail::settle(boot, *back, o, backn.get());
          } else {
            queue_detail::throughput(run, o, {*t, tn.get()}, boot, clock, row);
          }
        } catch (const UsageError& e) {
          row.unsupported = e.what();
        }
        queue_detail::settle(boot, *t, o, tn.get());
      };
      if (interleaved) {
        queue_detail::interleave(params, o, size, boot, clock, result.env, measure, row);
      } else {
        measure(params, nullptr);
        refs[size].apply(row);
      }
      add(row);
    }
  return result;
}

}  // namespace fabflow