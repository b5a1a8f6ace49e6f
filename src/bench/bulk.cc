// The bulk-transfer benchmark (seed 004, Fig. 5 and 6): for each size and protocol, rank 0
// ping-pongs messages with rank 1, then streams windows of them to it, replacing buffers with
// freshly mapped ones every `reuse` messages outside the timed parts. Rank 0 combines both
// ranks' channel counters and CPU times into the row. docs/bulk.md, docs/bench-output.md.
#include <fabflow/bench/bulk.h>
#include <fabflow/bootstrap.h>
#include <fabflow/bulk/transfer.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "bench/engine.h"
#include "bench/mapped_buffer.h"
#include "bench/message_pattern.h"
#include "common/affinity.h"
#include "common/bounded_wait.h"

namespace fabflow {
namespace {

using bulk::Protocol;

constexpr std::uint32_t kTag = 1;
constexpr std::size_t kBulkPage = 4096;

using Mapped = bench::MappedBuffer;

// One message buffer of a point: freshly mapped user memory, or memory of the channel
// (--memory fabflow); every byte `fill`.
class Buffer {
 public:
  Buffer(bulk::Channel& ch, BufferMemory kind, std::size_t size, int fill) {
    if (kind == BufferMemory::user) {
      mapped_ = Mapped(size, fill);
      bytes_ = mapped_.span();
      return;
    }
    memory_ = ch.allocate(std::max<std::size_t>(size, 1));
    std::memset(memory_->data(), fill, memory_->size());
    bytes_ = {memory_->data(), size};
  }
  std::span<std::byte> span() const { return bytes_; }

 private:
  Mapped mapped_;
  std::shared_ptr<bulk::Memory> memory_;
  std::span<std::byte> bytes_;
};

// What one rank tells rank 0 about one point (plain bytes through the bootstrap): its channel's
// counters over the ping-pong and over the stream, and its CPU time streaming.
struct Summary {
  bulk::Counters pingpong, stream;
  double stream_cpu_s = 0;
};

struct Point {
  bulk::Channel& ch;
  Bootstrap& boot;
  const BulkParams& p;
  const Clock& clock;
  Protocol protocol;
  std::size_t size;
  std::uint64_t messages;
  std::uint64_t* seq;  // the run's next message number, the same on both ranks
};

using bench::MessagePattern;

// Outside the timed sections: the sender writes message `seq`'s pattern into its buffer...
void stamp(const Point& pt, std::span<std::byte> out, std::uint64_t seq) {
  if (pt.p.verify) MessagePattern::stamp(out, seq);
}

// ... and the receiver checks it where it landed; a mismatch is an error naming the message.
void check(const Point& pt, std::span<const std::byte> in, std::uint64_t seq, const char* phase,
           std::uint64_t index) {
  if (!pt.p.verify) return;
  if (const auto bad = MessagePattern::check(in, seq)) {
    char bytes[48];
    std::snprintf(bytes, sizeof bytes, "0x%02x where 0x%02x was sent", bad->got, bad->want);
    throw Error("bench bulk: " + std::string(bulk::to_string(pt.protocol)) + ", " +
                std::to_string(pt.size) + " bytes: " + phase + " message " + std::to_string(index) +
                " from rank " + std::to_string(1 - pt.boot.rank()) + " arrived wrong at offset " +
                std::to_string(bad->offset) + " (" + bytes + ")");
  }
}

// Replaces the buffers whose turn it is (message `i`): both ranks follow the same schedule.
bool due(const BulkParams& p, std::uint64_t i) { return p.reuse > 0 && i > 0 && i % p.reuse == 0; }

// A zero-byte exchange: both ranks are past their untimed work.
void sync(bulk::Channel& ch, int rank) {
  std::byte none{};
  if (rank == 0) {
    ch.send(1, kTag, {&none, 0}, Protocol::eager);
    ch.recv(1, kTag, {&none, 0});
  } else {
    ch.recv(0, kTag, {&none, 0});
    ch.send(0, kTag, {&none, 0}, Protocol::eager);
  }
}

// Mean half round trip in ns (rank 0; 0 elsewhere). Each rank sends from one buffer and
// receives into another (the same buffer for both would serve two messages per round trip),
// both replaced every `reuse` round trips.
double pingpong(const Point& pt) {
  const int rank = pt.boot.rank();
  Buffer out(pt.ch, pt.p.memory, pt.size, rank + 1), in(pt.ch, pt.p.memory, pt.size, rank + 1);
  // Round trip i (0: the untimed one) carries messages base + 2i (rank 0's) and base + 2i + 1.
  const std::uint64_t base = *pt.seq;
  *pt.seq += 2 * (pt.messages + 1);
  auto mine = [&](std::uint64_t i) { return base + 2 * i + static_cast<std::uint64_t>(rank); };
  auto theirs = [&](std::uint64_t i) {
    return base + 2 * i + static_cast<std::uint64_t>(1 - rank);
  };
  auto once = [&] {
    if (rank == 0) {
      pt.ch.send(1, kTag, out.span(), pt.protocol);
      pt.ch.recv(1, kTag, in.span());
    } else {
      pt.ch.recv(0, kTag, in.span());
      pt.ch.send(0, kTag, out.span(), pt.protocol);
    }
  };
  stamp(pt, out.span(), mine(0));
  once();  // untimed: connections, first registrations
  check(pt, in.span(), theirs(0), "ping-pong", 0);
  sync(pt.ch, rank);
  pt.ch.reset_stats();
  double ns = 0;
  for (std::uint64_t i = 0; i < pt.messages; ++i) {
    if (due(pt.p, i)) {
      out = Buffer(pt.ch, pt.p.memory, pt.size, rank + 1);
      in = Buffer(pt.ch, pt.p.memory, pt.size, rank + 1);
      sync(pt.ch, rank);
    }
    stamp(pt, out.span(), mine(i + 1));
    const std::uint64_t t0 = pt.clock.now();
    once();
    ns += pt.clock.to_ns(pt.clock.now() - t0);
    check(pt, in.span(), theirs(i + 1), "ping-pong", i + 1);
  }
  return ns / static_cast<double>(pt.messages) / 2;
}

// One-way streaming: `window` messages kept in flight (each completed one is posted again at
// once), then one zero-byte acknowledgement. A buffer whose turn it is to be replaced is
// replaced before it is posted again; that time is taken out of this rank's timing. Returns
// the seconds (rank 0) and adds this rank's CPU seconds to *cpu.
double stream(const Point& pt, std::uint64_t* sent, double* cpu) {
  const int rank = pt.boot.rank();
  const unsigned w = pt.p.window;
  std::vector<Buffer> bufs;
  for (unsigned k = 0; k < w; ++k) bufs.emplace_back(pt.ch, pt.p.memory, pt.size, rank + 1);
  const std::uint64_t total = std::max<std::uint64_t>(pt.messages, w);
  const std::uint64_t base = *pt.seq;  // message i of the stream is base + i
  *pt.seq += total;
  std::vector<std::uint64_t> uses(w, 0);
  std::vector<bulk::RequestPtr> reqs(w);
  std::byte none{};
  if (pt.p.memory == BufferMemory::fabflow) {
    // Untimed: each memory's first message hands its key (on local, its segment) to the peer.
    for (unsigned k = 0; k < w; ++k)
      reqs[k] = rank == 0 ? pt.ch.isend(1, kTag, bufs[k].span(), pt.protocol)
                          : pt.ch.irecv(0, kTag, bufs[k].span());
    for (unsigned k = 0; k < w; ++k) pt.ch.wait(reqs[k]);
  }
  sync(pt.ch, rank);
  pt.ch.reset_stats();
  double untimed = 0, untimed_cpu = 0;
  // Runs `f` outside this rank's timing (its time and CPU time taken out).
  auto outside = [&](auto&& f) {
    const double c0 = thread_cpu_seconds();
    const std::uint64_t t0 = pt.clock.now();
    f();
    untimed += pt.clock.to_ns(pt.clock.now() - t0) / 1e9;
    untimed_cpu += thread_cpu_seconds() - c0;
  };
  auto post = [&](unsigned k, std::uint64_t i) {
    if (uses[k] > 0 && pt.p.reuse > 0 && uses[k] % pt.p.reuse == 0)
      outside([&] { bufs[k] = Buffer(pt.ch, pt.p.memory, pt.size, rank + 1); });
    if (rank == 0 && pt.p.verify) outside([&] { stamp(pt, bufs[k].span(), base + i); });
    ++uses[k];
    reqs[k] = rank == 0 ? pt.ch.isend(1, kTag, bufs[k].span(), pt.protocol)
                        : pt.ch.irecv(0, kTag, bufs[k].span());
  };
  const double c0 = thread_cpu_seconds();
  const std::uint64_t t0 = pt.clock.now();
  std::uint64_t posted = 0;
  for (unsigned k = 0; k < w && posted < total; ++k, ++posted) post(k, posted);
  // Messages complete in order per tag: wait for the oldest, reuse its slot.
  for (std::uint64_t done = 0; done < total; ++done) {
    const unsigned k = static_cast<unsigned>(done % w);
    pt.ch.wait(reqs[k]);
    if (rank == 1 && pt.p.verify)
      outside([&] { check(pt, bufs[k].span(), base + done, "streamed", done); });
    if (posted < total) {
      post(k, posted);
      ++posted;
    }
  }
  if (rank == 0)
    pt.ch.recv(1, kTag, {&none, 0});
  else
    pt.ch.send(0, kTag, {&none, 0}, Protocol::eager);
  const double s = pt.clock.to_ns(pt.clock.now() - t0) / 1e9 - untimed;
  *cpu += thread_cpu_seconds() - c0 - untimed_cpu;
  *sent = total;
  return s;
}

// The raw streaming RMA write of `size` bytes from rank 0 into rank 1's registered region,
// `window` in flight; MB/s on rank 0. Both regions come from Transport::allocate (so local
// takes part too).
double raw_write_rate(Transport& t, bulk::Channel& ch, Bootstrap& boot, std::size_t size,
                      unsigned window, std::uint64_t messages, std::chrono::milliseconds timeout) {
  auto mr = t.allocate(std::max<std::size_t>(size, 1), kAllAccess);
  std::memset(mr->data(), boot.rank() + 1, mr->size());
  auto keys = boot.allgather(t.export_key(*mr));
  double mb_s = 0;
  if (boot.rank() == 0) {
    RemoteMemory dst = t.import_key(1, keys[1]);
    BoundedWait watch(timeout, &boot, {&t}, 256);
    const std::uint64_t total = std::max<std::uint64_t>(messages, window);
    std::uint64_t posted = 0, done = 0;
    Completion c[16];
    const auto t0 = std::chrono::steady_clock::now();
    while (done < total) {
      while (posted < total && posted - done < window) {
        Status s = t.post_write(1, mr->data(), size, mr->desc(), dst, 0, posted, kSignal);
        if (s == Status::again) break;
        if (s != Status::ok) throw Error("bench bulk: raw write: " + t.last_error());
        ++posted;
      }
      int n = t.poll_tx(c);
      if (n < 0) throw Error("bench bulk: raw write: " + t.last_error());
      if (n == 0)
        watch.idle("bench bulk", "waiting for raw writes");
      else
        watch.reset();
      done += static_cast<std::uint64_t>(n);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    mb_s = static_cast<double>(size) * static_cast<double>(total) / s / 1e6;
  }
  // A write's completion at its initiator does not say the data was placed (the software
  // providers place it when the target drives progress): a message behind the writes on the
  // same connection does, before rank 1 gives its region back.
  std::byte none{};
  if (boot.rank() == 0)
    ch.send(1, kTag, {&none, 0}, Protocol::eager);
  else
    ch.recv(0, kTag, {&none, 0});
  return mb_s;
}

}  // namespace

BulkResult run_bulk(const BulkParams& given, Bootstrap& boot,
                    const std::function<void(const BulkResult&, const BulkRow&)>& on_row) {
  if (boot.size() != 2) throw UsageError("bench bulk: runs on two ranks");
  BulkParams params = given;
  if (params.sizes.empty())
    for (std::size_t s = std::size_t{64} << 10; s <= (std::size_t{64} << 20); s *= 2)
      params.sizes.push_back(s);
  if (params.protocols.empty()) throw UsageError("bench bulk: no protocol given");
  if (params.window < 1 || params.window > 64)
    throw UsageError("bench bulk: the window must be 1-64 messages");
  for (std::size_t s : params.sizes)
    if (s > (std::size_t{1} << 30))
      throw UsageError("bench bulk: size " + std::to_string(s) + " is above 1 GiB");
  if (params.memory == BufferMemory::fabflow && params.reuse > 0)
    throw UsageError(
        "bench bulk: --reuse replaces user buffers; --memory fabflow keeps the channel's memory");
  Clock clock;
  BulkResult result = bench::start_result<BulkResult>(params, boot, clock);
  bulk::ChannelOptions co;
  co.eager_limit = params.eager_limit;
  co.frag_size = params.frag_size;
  co.depth = params.depth;
  co.frag_growth = params.frag_growth;
  if (params.split_copy_min) co.split_copy_min = *params.split_copy_min;
  co.pin = params.pin;
  const bench::BulkEnds ends = bench::open_bulk(params.target, boot, co, result);
  Transport* t = ends.transport.get();
  bulk::Channel* ch = ends.channel.get();
  result.costs = ch->costs();
  const int rank = boot.rank();
  std::uint64_t seq = 0;  // the next message's number (MessagePattern), on both ranks
  for (std::size_t size : params.sizes) {
    BulkRow refs;  // what every protocol's row of this size shares: the references
    refs.size = size;
    const std::uint64_t messages =
        std::clamp<std::uint64_t>(params.bytes_per_point / std::max<std::size_t>(size, 1),
                                  params.min_messages, params.max_messages);
    if (params.reference) {
      // Rank 0 runs both references' threads (the ping-pong's on the two ranks' CPUs) while
      // rank 1 sleeps in a barrier.
      if (rank == 0) {
        refs.memcpy_mb_s = bench::memcpy_mb_s(size, params.bytes_per_point);
        refs.copy_pingpong_mb_s =
            copy_pingpong_mb_s(size, messages, result.env.cpu_initiator, result.env.cpu_target);
        boot.barrier();
      } else {
        boot.barrier([] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
      }
      if (t->caps().supports(Op::write))
        refs.raw_write_mb_s = raw_write_rate(*t, *ch, boot, size, params.window, messages,
                                             std::chrono::milliseconds(params.target.timeout_ms));
      else
        refs.raw_write_unsupported = t->caps().why_not(Op::write);
    }
    for (Protocol proto : params.protocols) {
      BulkRow row = refs;
      row.protocol = proto;
      if (proto == Protocol::eager && size > result.options.eager_limit)
        row.unsupported = "eager carries at most the eager limit (" +
                          std::to_string(result.options.eager_limit) + " bytes)";
      if (row.unsupported.empty()) {
        Point pt{*ch, boot, params, clock, proto, size, messages, &seq};
        const double half_ns = pingpong(pt);
        const bulk::Counters pp = ch->stats();
        double cpu = 0;
        std::uint64_t sent = 0;
        const double secs = stream(pt, &sent, &cpu);
        const bulk::Counters st = ch->stats();
        const Summary mine{pp, st, cpu};
        const auto s = allgather_value(boot, mine, "bench bulk: summary");
        if (rank == 0) {
          row.messages = messages;
          row.half_rtt_us = half_ns / 1e3;
          row.pingpong_mb_s = half_ns > 0 ? static_cast<double>(size) / half_ns * 1e3 : 0;
          row.stream_mb_s = secs > 0 ? static_cast<double>(size) * sent / secs / 1e6 : 0;
          const double msgs = 2.0 * static_cast<double>(messages);
          row.registrations_per_message =
              static_cast<double>(s[0].pingpong.registrations + s[1].pingpong.registrations) / msgs;
          row.registration_us_per_message =
              static_cast<double>(s[0].pingpong.registration_ns + s[0].pingpong.deregistration_ns +
                                  s[1].pingpong.registration_ns + s[1].pingpong.deregistration_ns) /
              msgs / 1e3;
          row.cache_hits = s[0].pingpong.cache_hits + s[1].pingpong.cache_hits;
          row.cache_misses = s[0].pingpong.cache_misses + s[1].pingpong.cache_misses;
          row.cache_evictions = s[0].pingpong.cache_evictions + s[1].pingpong.cache_evictions;
          row.cache_invalidations =
              s[0].pingpong.cache_invalidations + s[1].pingpong.cache_invalidations;
          static_cast<bulk::Counters&>(row.sender) = s[0].stream;
          static_cast<bulk::Counters&>(row.receiver) = s[1].stream;
          const double bytes = static_cast<double>(size) * static_cast<double>(sent);
          if (bytes > 0) {
            row.cpu_ns_per_byte_sender = s[0].stream_cpu_s * 1e9 / bytes;
            row.cpu_ns_per_byte_receiver = s[1].stream_cpu_s * 1e9 / bytes;
          }
        }
      }
      bench::publish_row(boot, result, std::move(row), on_row);
    }
  }
  boot.barrier([&] { t->progress(); });
  return result;
}

BulkResult plan_bulk(const bench::Target& target, Bootstrap& boot,
                     const bulk::ChannelOptions& options) {
  BulkResult plan;
  const bench::BulkEnds ends = bench::open_bulk(target, boot, options, plan);
  plan.costs = ends.channel->costs();
  boot.barrier([&] { ends.transport->progress(); });
  return plan;
}

}  // namespace fabflow
