// bench beff: Rabenseifner's effective bandwidth benchmark (b_eff) over the large-message
// channel, per protocol (seed 004, section 6.2 and its table). N ranks exchange messages in
// ring patterns (the ranks split into rings of 2, 4, 8 ... and N; each rank sends to both
// neighbours) and random patterns (all ranks in one ring of seeded random order), at every size
// from 1 byte doubling to Lmax. Bandwidth = bytes all ranks sent / the slowest rank's time;
// b_eff = the logarithmic average of the ring patterns' and the random patterns' averages over
// sizes (formula: docs/bench-output.md), and b_eff at Lmax.
#pragma once

#include <fabflow/bench/common.h>
#include <fabflow/bulk.h>
#include <fabflow/names.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace fabflow {

class Bootstrap;

enum class BeffPatternKind : std::uint8_t { ring, random };
inline constexpr NameTable<BeffPatternKind, 2> kBeffPatternKindNames{
    {{{"ring", BeffPatternKind::ring}, {"random", BeffPatternKind::random}}}};
constexpr const auto& name_table(BeffPatternKind) noexcept { return kBeffPatternKindNames; }

// One communication pattern: every rank sends one message to right[rank] and one to its left
// neighbour (the rank whose right it is), and receives one from each.
struct BeffPattern {
  BeffPatternKind kind = BeffPatternKind::ring;
  std::string name;        // "ring-2", "ring-4", "random-1", ...
  int ring_size = 0;       // ring: the nominal ring size (the last ring takes the remainder)
  std::vector<int> right;  // a permutation of 0..n-1 without fixed points
  std::vector<int> left;   // its inverse
};

// The patterns of b_eff on `n` ranks (2 <= n): rings of 2, 4, 8 ... below n and one of all n
// (a size whose partition repeats an earlier one is left out), then `random` random rings drawn
// from `seed` (the same on every rank and every run).
std::vector<BeffPattern> beff_patterns(int n, unsigned random, std::uint64_t seed);

inline constexpr int kBeffMaxRanks = 64;

struct BeffParams {
  bench::Target target;  // provider, endpoint, CPUs, timeout
  std::vector<bulk::Protocol> protocols{std::begin(bulk::kAllProtocols),
                                        std::end(bulk::kAllProtocols)};
  std::size_t lmax = std::size_t{4} << 20;  // with no sizes: 1, 2, 4 ... lmax
  std::vector<std::size_t> sizes;           // given: these (Lmax = the largest)
  unsigned random_patterns = 3;
  std::uint64_t seed = 1;
  // Bytes each rank sends per point, which sets the iterations (each iteration: one message
  // to each neighbour), within min_iterations..max_iterations.
  std::uint64_t bytes_per_point = std::uint64_t{16} << 20;
  std::uint64_t min_iterations = 2, max_iterations = 100;
  // A buffer serves this many iterations before a freshly mapped one replaces it (outside the
  // timing). 0: never replaced.
  std::uint64_t reuse = 0;
  bool pin = false;      // --mr-pin
  bool pingpong = true;  // also the ping-pong bandwidth of ranks 0 and 1 at Lmax
};

struct BeffRow {
  bulk::Protocol protocol = bulk::Protocol::copy;
  BeffPatternKind kind = BeffPatternKind::ring;
  std::string pattern;  // the pattern's name; "all" for a size not run in any pattern
  int ring_size = 0;
  std::size_t size = 0;
  std::string unsupported;  // non-empty: not run, with the reason
  std::uint64_t iterations = 0;
  double seconds = 0;                    // the slowest rank's timed loop
  double accumulated_mb_s = 0;           // bytes all ranks sent / seconds, MB = 10^6 bytes
  double per_process_mb_s = 0;           // accumulated / ranks
  double registrations_per_message = 0;  // all ranks, timed loop
  std::uint64_t cache_hits = 0, cache_misses = 0, cache_invalidations = 0;
};

// Per protocol. Accumulated MB/s; per process is each divided by the ranks.
struct BeffSummary {
  bulk::Protocol protocol = bulk::Protocol::copy;
  std::string unsupported;              // non-empty: some size was not run, no b_eff
  double beff = 0;                      // logavg(logavg_rings(avg_L), logavg_random(avg_L))
  double beff_lmax = 0;                 // the same of the bandwidths at Lmax
  double beff_lmax_rings = 0;           // logavg_rings at Lmax
  double ring_avg = 0, random_avg = 0;  // logavg over ring / random patterns of avg_L
  std::optional<double> pingpong_lmax;  // ranks 0 and 1: Lmax over half the round trip
};

struct BeffResult {
  RunEnvironment env;
  BeffParams params;  // sizes filled in
  int ranks = 0;
  bulk::ChannelOptions options;  // resolved
  std::string rendezvous_path, cache_state;
  std::vector<BeffPattern> patterns;
  std::vector<BeffRow> rows;  // rank 0
  std::vector<BeffSummary> summaries;
};

// b_eff of one protocol's rows (every pattern at every size of `sizes`); unsupported when a
// row is missing or was not run.
BeffSummary summarize_beff(bulk::Protocol protocol, const std::vector<BeffRow>& rows,
                           const std::vector<BeffPattern>& patterns,
                           const std::vector<std::size_t>& sizes);

// Collective over every rank of `boot` (2 or more). Throws UsageError / Error / PeerError.
// `on_row` and `on_summary` see each row and summary on rank 0.
BeffResult run_beff(
    const BeffParams& params, Bootstrap& boot,
    const std::function<void(const BeffResult&, const BeffRow&)>& on_row = {},
    const std::function<void(const BeffResult&, const BeffSummary&)>& on_summary = {});

void print_beff_header(std::ostream& out, const BeffResult& result);
void print_beff_row(std::ostream& out, const BeffResult& result, const BeffRow& row);
// The summary table (seed 004's layout: accumulated, then per process), after every row.
void print_beff_summary(std::ostream& out, const BeffResult& result);
void print_beff_json(std::ostream& out, const BeffResult& result, const BeffRow& row);
// One "beff_summary" line per measure (b_eff, b_eff_lmax, b_eff_lmax_rings, pingpong_lmax).
void print_beff_summary_json(std::ostream& out, const BeffResult& result,
                             const BeffSummary& summary);

}  // namespace fabflow
