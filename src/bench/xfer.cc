// bench xfer: the transfer engine's batches between ranks 0 and 1 (fabflow/bench/xfer.h).
#include <fabflow/bench/bulk.h>
#include <fabflow/bench/xfer.h>
#include <fabflow/bootstrap.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "bench/engine.h"
#include "bench/mapped_buffer.h"
#include "bench/message_pattern.h"
#include "common/affinity.h"

namespace fabflow {
namespace {

// The most memory one transfer size's batches walk through: above the last-level cache of most
// machines, below what a 2-rank run on a small machine can spare.
constexpr std::size_t kFootprint = std::size_t{64} << 20;
// The smallest operation size a point may ask for: an 8 MB transfer in 2048 operations.
constexpr std::size_t kMinOperation = 4096;

using bulk::Direction;

// What each rank tells rank 0 after a point.
struct Tally {
  double cpu_s = 0;
  std::uint64_t notifications = 0;
};

using bench::MessagePattern;

// What a point checks (MessagePattern), outside the timed sections. Transfer t of window w is
// bytes [(w * batch + t) * size, + size) of both ranks' memory. A WRITE batch numbered g (the
// run's count, `first_batch` the point's first) carries messages g * batch + t: rank 0 writes
// them into its memory before submitting, rank 1 checks them when the batch's notification
// arrives, accepting where rank 0 has already overwritten them a later batch of the same window
// (nothing holds rank 0 back). A READ reads rank 1's memory, written once before the point with
// messages (first_batch + w) * batch + t: rank 0 spoils its checked bytes before submitting and
// checks them after the batch completed.
struct Verify {
  bool on = false;
  Direction dir = Direction::write;
  std::span<std::byte> memory;  // this rank's
  std::size_t size = 0, batch = 0, windows = 1;
  std::size_t stride = 0;  // from one transfer's start to the next (size, or more: scattered)
  std::uint64_t first_batch = 0;
  std::string what;  // the point, for errors: "write of 8 x 65536 bytes"
};

std::span<std::byte> transfer_bytes(const Verify& v, std::size_t w, std::size_t t) {
  return v.memory.subspan((w * v.batch + t) * v.stride, v.size);
}

void check_transfer(const Verify& v, std::span<const std::byte> got, std::uint64_t seq,
                    std::uint64_t batch_no, std::size_t t, std::uint64_t last_seq) {
  const std::uint64_t lap = static_cast<std::uint64_t>(v.windows) * v.batch;
  std::function<bool(std::uint64_t)> later;
  if (v.dir == Direction::write)
    later = [&](std::uint64_t s) { return s > seq && s <= last_seq && (s - seq) % lap == 0; };
  const auto bad = MessagePattern::check(got, seq, later);
  if (!bad) return;
  char bytes[48];
  std::snprintf(bytes, sizeof bytes, "0x%02x where 0x%02x was sent", bad->got, bad->want);
  throw Error("bench xfer: " + v.what + ": batch " + std::to_string(batch_no) + ", transfer " +
              std::to_string(t) + " arrived wrong at offset " + std::to_string(bad->offset) + " (" +
              bytes + ")");
}

// The batches of one point: rank 0 submits `n` batches (plus `warm` untimed ones first), batch i
// the transfers of windows[i % windows.size()], and waits for each; rank 1 takes one
// notification per batch. Rank 0's batch times go to *batch_ns and the measured seconds are
// returned (0 on rank 1); the checks' time is taken out of both (and out of the CPU times).
double run_point(bulk::Engine& e, Bootstrap& boot,
                 const std::vector<std::vector<bulk::TransferRequest>>& windows, std::uint64_t warm,
                 std::uint64_t n, const Verify& v, std::vector<double>* batch_ns, Tally* mine) {
  const bool initiator = boot.rank() == 0;
  if (v.on && v.dir == Direction::read) {
    if (!initiator)
      for (std::size_t w = 0; w < v.windows; ++w)
        for (std::size_t t = 0; t < v.batch; ++t)
          MessagePattern::stamp(transfer_bytes(v, w, t), (v.first_batch + w) * v.batch + t);
    boot.barrier([&] { e.progress(); });
  }
  double seconds = 0;
  for (int phase = 0; phase < 2; ++phase) {
    const std::uint64_t count = phase == 0 ? warm : n;
    const std::uint64_t g0 = v.first_batch + (phase == 0 ? 0 : warm);  // batch 0's number
    const std::uint64_t last_seq = (g0 + count) * v.batch - 1;
    double untimed_s = 0, untimed_cpu = 0;
    auto outside = [&](auto&& f) {
      const double c = thread_cpu_seconds();
      const auto s = std::chrono::steady_clock::now();
      f();
      untimed_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
      untimed_cpu += thread_cpu_seconds() - c;
    };
    const double cpu0 = thread_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::size_t w = static_cast<std::size_t>(i % windows.size());
      if (!initiator) {
        const bulk::Notification note = e.wait_notification();
        if (note.peer != 0 || note.tag != i)
          throw PeerError(0, "bench xfer: notification " + std::to_string(note.tag) +
                                 " from rank " + std::to_string(note.peer) + ", expected " +
                                 std::to_string(i) + " from rank 0");
        ++mine->notifications;
        if (v.on && v.dir == Direction::write)
          outside([&] {
            for (std::size_t t = 0; t < v.batch; ++t)
              check_transfer(v, transfer_bytes(v, w, t), (g0 + i) * v.batch + t, g0 + i, t,
                             last_seq);
          });
        continue;
      }
      if (v.on)
        outside([&] {
          for (std::size_t t = 0; t < v.batch; ++t) {
            if (v.dir == Direction::write)
              MessagePattern::stamp(transfer_bytes(v, w, t), (g0 + i) * v.batch + t);
            else
              MessagePattern::spoil(transfer_bytes(v, w, t), (v.first_batch + w) * v.batch + t);
          }
        });
      const auto s0 = std::chrono::steady_clock::now();
      const bulk::Handle h = e.submit(windows[w], i);
      if (e.wait(h) != Status::ok) throw Error("bench xfer: " + e.error(h));
      e.release(h);
      if (phase == 1)
        batch_ns->push_back(
            std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - s0)
                .count());
      if (v.on && v.dir == Direction::read)
        outside([&] {
          for (std::size_t t = 0; t < v.batch; ++t)
            check_transfer(v, transfer_bytes(v, w, t), (v.first_batch + w) * v.batch + t, g0 + i, t,
                           0);
        });
    }
    if (phase == 1) {
      seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - untimed_s;
      mine->cpu_s = thread_cpu_seconds() - cpu0 - untimed_cpu;
    }
    // Both ranks end the phase together: rank 1 has taken every notification, so no batch of
    // this phase is in flight when the next begins.
    boot.barrier([&] { e.progress(); });
  }
  return initiator ? seconds : 0;
}

// The two-sided best at `size`: bench bulk's protocols that carry it (all but eager), each
// ping-ponged and streamed over a transport and channel of their own; the fastest figure on
// rank 0, and bench bulk's raw RMA write of the size over that transport. Collective.
struct TwoSided {
  double mb_s = 0;
  std::string protocol, phase;
  std::optional<double> raw_write_mb_s;  // bench bulk's raw write of the size, same transport
};
TwoSided two_sided_best(const XferParams& p, Bootstrap& boot, std::size_t size) {
  BulkParams bp;
  bp.target = p.target;
  bp.sizes = {size};
  bp.protocols.clear();
  for (bulk::Protocol proto : bulk::kAllProtocols)
    if (proto != bulk::Protocol::eager) bp.protocols.push_back(proto);
  bp.bytes_per_point = p.bytes_per_point;
  bp.reference = true;  // the raw write (and a memcpy, not used here)
  TwoSided best;
  for (const BulkRow& row : run_bulk(bp, boot).rows) {
    if (row.raw_write_mb_s) best.raw_write_mb_s = row.raw_write_mb_s;
    if (!row.unsupported.empty()) continue;
    for (auto [mb_s, phase] :
         {std::pair{row.pingpong_mb_s, "pingpong"}, std::pair{row.stream_mb_s, "stream"}})
      if (mb_s > best.mb_s) {
        best.mb_s = mb_s;
        best.protocol = bulk::to_string(row.protocol);
        best.phase = phase;
      }
  }
  return best;
}

}  // namespace

XferResult run_xfer(const XferParams& params, Bootstrap& boot,
                    const std::function<void(const XferResult&, const XferRow&)>& on_row) {
  if (boot.size() != 2) throw UsageError("bench xfer runs on 2 ranks");
  if (params.sizes.empty() || params.batches.empty() || params.directions.empty() ||
      params.layouts.empty())
    throw UsageError("bench xfer: no size, batch, direction or layout given");
  for (std::size_t s : params.sizes)
    for (std::size_t b : params.batches)
      if (s == 0 || b == 0 || b > 65536 || s > (std::size_t{1} << 30) / b)
        throw UsageError("bench xfer: a batch of " + std::to_string(b) + " x " + std::to_string(s) +
                         " bytes is outside 1 B .. 1 GiB (and 1-65536)");
  Clock clock;
  XferResult result = bench::start_result<XferResult>(params, boot, clock);
  if (params.endpoints < 1 || params.endpoints > 16)
    throw UsageError("bench xfer: 1-16 endpoints, not " + std::to_string(params.endpoints));
  if (params.operation_sizes.empty())
    throw UsageError("bench xfer: no operation size given (0: the engine's default)");
  for (std::size_t op : params.operation_sizes)
    if (op != 0 && (op < kMinOperation || op > (std::size_t{1} << 30)))
      throw UsageError("bench xfer: an operation size of " + std::to_string(op) +
                       " bytes is outside 4 KiB .. 1 GiB (or 0, the engine's default)");
  TransportOptions to = params.target.transport(bulk::Engine::required_ops(), boot.local_address());
  bench::size_queues(to, params.max_outstanding + 64 * 2);
  bench::probe_row(result.env, to, [](const Capabilities&) { return std::string(); });
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<Transport*> endpoints;
  for (std::size_t e = 0; e < params.endpoints; ++e) {
    transports.push_back(open_transport(to));
    if (params.target.wrap) transports.back() = params.target.wrap(std::move(transports.back()));
    transports.back()->connect(boot);
    endpoints.push_back(transports.back().get());
  }
  result.env.caps = endpoints[0]->caps();
  bulk::EngineOptions eo;
  eo.peer_timeout = std::chrono::milliseconds(params.target.timeout_ms);
  eo.max_outstanding = params.max_outstanding;
  bulk::Engine engine(endpoints, boot, eo);
  const int peer = 1 - boot.rank();
  const std::size_t largest_batch = *std::max_element(params.batches.begin(), params.batches.end());
  std::uint64_t next_batch = 0;  // the run's batch count (Verify), the same on both ranks
  for (std::size_t size : params.sizes) {
    // Every batch size of this transfer size walks through the same memory, the largest
    // batch's (at most kFootprint): a small batch is not favoured by a cache-hot region.
    const std::size_t footprint = std::min(size * largest_batch, std::max(size, kFootprint));
    const TwoSided two_sided = params.reference ? two_sided_best(params, boot, size) : TwoSided{};
    for (std::size_t batch : params.batches) {
      // The memory batches walk through, on both ranks, described to the other: `windows`
      // windows of one batch each, `size x batch` bytes wide contiguous and twice that
      // scattered (a gap of one transfer after each). Both layouts take as many windows, so
      // they touch the same bytes (a scattered point does not rewrite a cache-hot half).
      const bool scattered = std::find(params.layouts.begin(), params.layouts.end(),
                                       XferLayout::scattered) != params.layouts.end();
      const std::size_t windows = std::max<std::size_t>(1, footprint / (size * batch));
      const std::size_t span = size * batch * windows * (scattered ? 2 : 1);
      auto mine = engine.allocate(span);
      auto all = boot.allgather(engine.describe(*mine, peer));
      const bulk::RemoteRegion theirs = engine.import(peer, all[static_cast<std::size_t>(peer)]);
      std::optional<double> memcpy_mb_s;
      if (params.reference && boot.rank() == 0)
        memcpy_mb_s = bench::memcpy_mb_s(size * batch, params.bytes_per_point);
      const std::uint64_t n = std::clamp<std::uint64_t>(params.bytes_per_point / (size * batch),
                                                        params.min_batches, params.max_batches);
      for (std::size_t op_size : params.operation_sizes)
        for (Direction dir : params.directions)
          for (XferLayout layout : params.layouts) {
            engine.set_max_operation(op_size);
            const std::size_t stride = layout == XferLayout::scattered ? 2 * size : size;
            std::vector<std::vector<bulk::TransferRequest>> requests(windows);
            for (std::size_t w = 0; w < windows; ++w)
              for (std::size_t i = 0; i < batch; ++i) {
                const std::size_t at = (w * batch + i) * stride;
                requests[w].push_back({mine, at, &theirs, at, size, dir});
              }
            std::vector<double> batch_ns;
            Tally tally;
            const std::uint64_t warm = std::max<std::uint64_t>(1, n / 10);
            Verify v;
            v.on = params.verify;
            v.dir = dir;
            v.memory = {mine->data(), stride * batch * windows};
            v.size = size;
            v.stride = stride;
            v.batch = batch;
            v.windows = windows;
            v.first_batch = next_batch;
            v.what = std::string(bulk::kDirectionNames.name(dir)) + " of " + std::to_string(batch) +
                     " x " + std::to_string(size) + " bytes (" +
                     std::string(kXferLayoutNames.name(layout)) + ")";
            next_batch += warm + n + windows;
            const std::vector<std::uint64_t> bytes_before = engine.endpoint_bytes();
            const std::vector<std::uint64_t> ops_before = engine.endpoint_operations();
            const double seconds = run_point(engine, boot, requests, warm, n, v, &batch_ns, &tally);
            const auto tallies = allgather_value(boot, tally, "bench xfer: tally");
            if (tallies[1].notifications != n + std::max<std::uint64_t>(1, n / 10))
              throw PeerError(1, "bench xfer: rank 1 took " +
                                     std::to_string(tallies[1].notifications) + " notifications");
            XferRow row;
            row.size = size;
            row.batch = batch;
            row.direction = dir;
            row.layout = layout;
            row.operation_size = op_size;
            row.max_operation = engine.max_operation();
            row.batches = n;
            row.footprint_bytes = stride * batch * windows;
            row.seconds = seconds;
            row.memcpy_mb_s = memcpy_mb_s;
            if (params.reference && boot.rank() == 0) {
              row.two_sided_mb_s = two_sided.mb_s;
              row.two_sided_protocol = two_sided.protocol;
              row.two_sided_phase = two_sided.phase;
              row.raw_write_mb_s = two_sided.raw_write_mb_s;
            }
            if (boot.rank() == 0) {
              const double bytes =
                  static_cast<double>(size) * static_cast<double>(batch) * static_cast<double>(n);
              row.mb_s = seconds > 0 ? bytes / seconds / 1e6 : 0;
              row.transfers_per_s =
                  seconds > 0 ? static_cast<double>(batch) * static_cast<double>(n) / seconds : 0;
              row.batch_ns = summarize(batch_ns);
              row.cpu_ns_per_byte_initiator = tallies[0].cpu_s * 1e9 / bytes;
              row.cpu_ns_per_byte_target = tallies[1].cpu_s * 1e9 / bytes;
              for (std::size_t e = 0; e < engine.endpoints(); ++e) {
                row.endpoint_bytes.push_back(engine.endpoint_bytes()[e] - bytes_before[e]);
                row.endpoint_operations.push_back(engine.endpoint_operations()[e] - ops_before[e]);
              }
            }
            bench::publish_row(boot, result, std::move(row), on_row);
          }
      boot.barrier([&] { engine.progress(); });  // neither frees its memory while in use
    }
  }
  return result;
}

}  // namespace fabflow
