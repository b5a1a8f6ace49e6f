// The transfer engine's merge of contiguous transfers (docs/transfer-engine.md, "Contiguous
// transfers"): consecutive entries of a batch that continue each other on both sides, the same
// local memory, the same registration of the peer's and the same direction, become one run,
// which the engine then cuts into operations of at most its max_operation like any transfer.
// Pure functions of the batch: no transport, no state.
#pragma once

#include <fabflow/bulk/transfer.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace fabflow::bulk::detail {

// Entries [first, first + count) of a batch as one transfer.
struct Run {
  std::size_t first = 0, count = 0;
  std::uint64_t local_offset = 0, remote_offset = 0, length = 0;
};

// Both name the same registration of the peer's memory: the same peer and memory, and on every
// endpoint the same key, base and length (two imports of one descriptor are the same).
inline bool same_remote(const RemoteRegion& a, const RemoteRegion& b) noexcept {
  if (&a == &b) return true;
  if (a.peer != b.peer || a.id != b.id || a.length != b.length ||
      a.endpoints.size() != b.endpoints.size())
    return false;
  for (std::size_t e = 0; e < a.endpoints.size(); ++e) {
    const RemoteMemory &x = a.endpoints[e], &y = b.endpoints[e];
    if (x.base != y.base || x.length != y.length || x.key != y.key || x.peer != y.peer)
      return false;
  }
  return true;
}

// Whether `next` starts where `run` (the entries before it, of which `last` is the final one)
// ends, on both sides, through the same memories and in the same direction. Offsets are checked
// against overflow; the engine has range-checked every entry before.
inline bool continues(const Run& run, const TransferRequest& last,
                      const TransferRequest& next) noexcept {
  if (next.local != last.local || next.direction != last.direction || !next.remote ||
      !last.remote || !same_remote(*next.remote, *last.remote))
    return false;
  const std::uint64_t local_end = run.local_offset + run.length;
  const std::uint64_t remote_end = run.remote_offset + run.length;
  return local_end >= run.local_offset && remote_end >= run.remote_offset &&
         next.local_offset == local_end && next.remote_offset == remote_end;
}

// The batch as runs, in its order: every entry in exactly one run, a run's entries consecutive.
// With `merge` false, one run per entry. Only adjacent entries merge: a batch whose contiguous
// transfers are listed out of order keeps them apart (the engine does not sort, so the order in
// which the batch's operations are posted is the order of its entries).
inline std::vector<Run> contiguous_runs(std::span<const TransferRequest> batch, bool merge = true) {
  std::vector<Run> runs;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const TransferRequest& r = batch[i];
    if (merge && !runs.empty() && continues(runs.back(), batch[i - 1], r)) {
      runs.back().length += r.length;
      ++runs.back().count;
      continue;
    }
    runs.push_back({i, 1, r.local_offset, r.remote_offset, r.length});
  }
  return runs;
}

}  // namespace fabflow::bulk::detail
