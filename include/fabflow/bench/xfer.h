// bench xfer: the transfer engine (fabflow/bulk/transfer.h) between ranks 0 and 1. Rank 0
// submits batches of one-sided WRITEs (or READs) of `size` bytes each between its memory and
// rank 1's, each batch with a notification, and waits for each; rank 1 takes the
// notifications. Per point: bandwidth, transfers and batches per second, the batch's
// completion time (submit to done at rank 0) and both ranks' CPU time per byte; --reference
// adds, in the same run, a memcpy of the batch's bytes and the two-sided best of each size
// (bench bulk's protocols over a transport of their own, ping-pong and streaming: the fastest)
// and the raw RMA write of that size over the same transport (the provider's streaming rate).
// With several endpoints the engine stripes each batch over them; with several operation sizes
// each batch size runs once per size the engine splits transfers into; with both layouts, once
// with the batch's transfers contiguous (which the engine merges) and once scattered.
#pragma once

#include <fabflow/bench/common.h>
#include <fabflow/bulk/transfer.h>
#include <fabflow/names.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace fabflow {

class Bootstrap;

// Where a batch's transfers lie, the same on both ranks: contiguous, each right after the one
// before it (the engine merges such runs into fewer operations); scattered, a gap of one
// transfer's size after each (no two of them adjacent).
enum class XferLayout : std::uint8_t { contiguous, scattered };
inline constexpr NameTable<XferLayout, 2> kXferLayoutNames{
    {{{"contiguous", XferLayout::contiguous}, {"scattered", XferLayout::scattered}}}};
constexpr const auto& name_table(XferLayout) noexcept { return kXferLayoutNames; }

struct XferParams {
  bench::Target target;                   // provider, endpoint, CPUs, timeout
  std::vector<std::size_t> sizes{65536};  // bytes per transfer
  std::vector<std::size_t> batches{1};    // transfers per batch
  std::vector<bulk::Direction> directions{bulk::Direction::write};
  std::vector<XferLayout> layouts{XferLayout::contiguous};   // one point each
  std::uint64_t bytes_per_point = std::uint64_t{256} << 20;  // sets the batch count per point
  std::uint64_t min_batches = 8, max_batches = 100000;
  std::size_t max_outstanding = 64;  // the engine's operations in flight, per endpoint
  std::size_t endpoints = 1;         // transports the engine stripes over (1-16)
  // EngineOptions::max_operation, one point per value: transfers split into operations of at
  // most this many bytes (0: the engine's default, the transport's preferred size).
  std::vector<std::size_t> operation_sizes{0};
  bool reference = false;
  // Every transfer carries a pattern that changes per batch, checked where it lands outside
  // the timed sections (a WRITE's by rank 1 at the batch's notification, a READ's by rank 0
  // when the batch completed): every byte of a transfer of up to a page, a rotating sample of a
  // larger one (one page in 16, at most 16, and the last page; src/bench/message_pattern.h).
  // false: no check.
  bool verify = true;
};

struct XferRow {
  std::size_t size = 0, batch = 0;
  bulk::Direction direction = bulk::Direction::write;
  XferLayout layout = XferLayout::contiguous;
  std::size_t operation_size = 0;  // as asked (0: the engine's default)
  std::size_t max_operation = 0;   // the engine's largest operation at this point
  std::string unsupported;         // non-empty: not run, with the reason
  std::uint64_t batches = 0;
  std::size_t footprint_bytes = 0;  // the memory the point's batches walk through, each rank
  double seconds = 0;
  double mb_s = 0;  // transfer bytes per second, MB = 10^6 bytes
  double transfers_per_s = 0;
  LatencyStats batch_ns;  // submit to completion at rank 0
  double cpu_ns_per_byte_initiator = 0, cpu_ns_per_byte_target = 0;
  std::optional<double> memcpy_mb_s;          // --reference: the batch's bytes copied in memory
  std::vector<std::uint64_t> endpoint_bytes;  // rank 0's transfer bytes per endpoint, this point
  // Rank 0's operations posted per endpoint, this point (the untimed batches too).
  std::vector<std::uint64_t> endpoint_operations;
  // --reference: the fastest two-sided figure of bench bulk at this transfer size, measured in
  // the same run, with its protocol and phase ("pingpong" or "stream").
  std::optional<double> two_sided_mb_s;
  std::string two_sided_protocol, two_sided_phase;
  // --reference: the provider's own streaming RMA write at the transfer size in the same run
  // (bench bulk's raw write: a window of writes from one region, no engine, no protocol), the
  // ceiling both the engine and the two-sided protocols move their bytes under; null where the
  // transport has no RMA write.
  std::optional<double> raw_write_mb_s;
};

struct XferResult {
  RunEnvironment env;
  XferParams params;
  std::vector<XferRow> rows;  // rank 0
};

// Collective over two ranks. Throws UsageError / Error / PeerError. `on_row` sees each row on
// rank 0.
XferResult run_xfer(const XferParams& params, Bootstrap& boot,
                    const std::function<void(const XferResult&, const XferRow&)>& on_row = {});

void print_xfer_header(std::ostream& out, const XferResult& result);
void print_xfer_row(std::ostream& out, const XferResult& result, const XferRow& row);
void print_xfer_json(std::ostream& out, const XferResult& result, const XferRow& row);

}  // namespace fabflow
