// The b_eff benchmark (Rabenseifner; seed 004, section 6.2): for each protocol, pattern and
// size, every rank posts its two receives and two sends (to and from both neighbours) and waits
// for them, `iterations` times after one untimed iteration, timed from a barrier; rank 0 takes
// the slowest rank's time. docs/bench-output.md.
#include <fabflow/bench/beff.h>
#include <fabflow/bootstrap.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "bench/engine.h"
#include "bench/mapped_buffer.h"

namespace fabflow {
namespace {

using bulk::Protocol;

constexpr std::uint32_t kToRight = 1, kToLeft = 2;
constexpr std::size_t kPage = 4096;

using Mapped = bench::MappedBuffer;

// What one rank tells rank 0 about one point (plain bytes through the bootstrap).
struct Report {
  double seconds = 0;
  std::uint64_t registrations = 0, hits = 0, misses = 0, invalidations = 0;
};

void barrier(Bootstrap& boot, bulk::Channel& ch) {
  boot.barrier([&] {
    ch.progress();
    if (ch.options().yield_when_idle) std::this_thread::yield();  // more ranks than CPUs
  });
}

// Rings over `order` (rank ids): consecutive groups of `ring` ranks, the last group taking the
// remainder; right[order[i]] is the next in its group, cyclically.
std::vector<int> rings(const std::vector<int>& order, int ring) {
  const int n = static_cast<int>(order.size());
  std::vector<int> right(static_cast<std::size_t>(n));
  const int groups = std::max(1, n / ring);
  for (int g = 0; g < groups; ++g) {
    const int first = g * ring, last = g == groups - 1 ? n : first + ring;  // [first, last)
    for (int i = first; i < last; ++i)
      right[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] =
          order[static_cast<std::size_t>(i + 1 < last ? i + 1 : first)];
  }
  return right;
}

std::vector<int> inverse(const std::vector<int>& right) {
  std::vector<int> left(right.size());
  for (std::size_t r = 0; r < right.size(); ++r)
    left[static_cast<std::size_t>(right[r])] = static_cast<int>(r);
  return left;
}

double logavg(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

// One point of one pattern on this rank: its four buffers and requests.
struct Exchange {
  bulk::Channel& ch;
  const BeffPattern& pat;
  Protocol protocol;
  std::size_t size;
  int rank;
  Mapped to_right, to_left, from_left, from_right;

  Exchange(bulk::Channel& c, const BeffPattern& p, Protocol proto, std::size_t n, int r)
      : ch(c), pat(p), protocol(proto), size(n), rank(r) {
    renew();
  }
  void renew() {
    to_right = Mapped(size, rank + 1);
    to_left = Mapped(size, rank + 1);
    from_left = Mapped(size, 0);
    from_right = Mapped(size, 0);
  }
  void once() {
    const int right = pat.right[static_cast<std::size_t>(rank)];
    const int left = pat.left[static_cast<std::size_t>(rank)];
    bulk::RequestPtr r[4] = {
        ch.irecv(left, kToRight, from_left.span()),
        ch.irecv(right, kToLeft, from_right.span()),
        ch.isend(right, kToRight, to_right.span(), protocol),
        ch.isend(left, kToLeft, to_left.span(), protocol),
    };
    for (auto& q : r) ch.wait(q);
  }
};

// Mean seconds of one Lmax ping-pong round trip between ranks 0 and 1 over two (on rank 0).
double pingpong(bulk::Channel& ch, Bootstrap& boot, Protocol protocol, std::size_t size,
                std::uint64_t iterations, const Clock& clock) {
  const int rank = boot.rank();
  double s = 0;
  if (rank <= 1) {
    Mapped buf(size, rank + 1);
    auto once = [&] {
      if (rank == 0) {
        ch.send(1, kToRight, buf.span(), protocol);
        ch.recv(1, kToRight, buf.span());
      } else {
        ch.recv(0, kToRight, buf.span());
        ch.send(0, kToRight, buf.span(), protocol);
      }
    };
    once();
    const std::uint64_t t0 = clock.now();
    for (std::uint64_t i = 0; i < iterations; ++i) once();
    s = clock.to_ns(clock.now() - t0) / 1e9 / static_cast<double>(iterations) / 2;
    barrier(boot, ch);
  } else {
    boot.barrier();  // sleeps in the bootstrap: the CPUs are ranks 0 and 1's meanwhile
  }
  return s;
}

}  // namespace

std::vector<BeffPattern> beff_patterns(int n, unsigned random, std::uint64_t seed) {
  if (n < 2) throw UsageError("bench beff: needs at least 2 ranks");
  std::vector<int> identity(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) identity[static_cast<std::size_t>(r)] = r;
  std::vector<BeffPattern> out;
  std::vector<int> sizes;
  for (int s = 2; s < n; s *= 2) sizes.push_back(s);
  sizes.push_back(n);
  for (int s : sizes) {
    BeffPattern p;
    p.kind = BeffPatternKind::ring;
    p.ring_size = s;
    p.name = "ring-" + std::to_string(s);
    p.right = rings(identity, s);
    // A size whose rings come out as an earlier size's (the remainder absorbed) is that one.
    if (std::any_of(out.begin(), out.end(),
                    [&](const BeffPattern& q) { return q.right == p.right; }))
      continue;
    p.left = inverse(p.right);
    out.push_back(std::move(p));
  }
  // Fisher-Yates over mt19937_64 by hand: the same order from the same seed everywhere.
  std::mt19937_64 gen(seed);
  for (unsigned k = 0; k < random; ++k) {
    std::vector<int> order = identity;
    for (std::size_t i = order.size() - 1; i > 0; --i)
      std::swap(order[i], order[static_cast<std::size_t>(gen() % (i + 1))]);
    BeffPattern p;
    p.kind = BeffPatternKind::random;
    p.name = "random-" + std::to_string(k + 1);
    p.right = rings(order, n);
    p.left = inverse(p.right);
    out.push_back(std::move(p));
  }
  return out;
}

BeffSummary summarize_beff(Protocol protocol, const std::vector<BeffRow>& rows,
                           const std::vector<BeffPattern>& patterns,
                           const std::vector<std::size_t>& sizes) {
  BeffSummary s;
  s.protocol = protocol;
  if (sizes.empty() || patterns.empty()) {
    s.unsupported = "no sizes or patterns";
    return s;
  }
  const std::size_t lmax = *std::max_element(sizes.begin(), sizes.end());
  std::vector<double> ring_avg, random_avg, ring_lmax, random_lmax;
  for (const BeffPattern& p : patterns) {
    double sum = 0;
    std::optional<double> at_lmax;
    for (std::size_t size : sizes) {
      auto it = std::find_if(rows.begin(), rows.end(), [&](const BeffRow& r) {
        return r.protocol == protocol && r.size == size &&
               (r.pattern == p.name || r.pattern == "all");
      });
      if (it == rows.end() || !it->unsupported.empty() || !(it->accumulated_mb_s > 0)) {
        s.unsupported =
            "not run at " + std::to_string(size) + " bytes" +
            (it != rows.end() && !it->unsupported.empty() ? ": " + it->unsupported : std::string());
        return s;
      }
      sum += it->accumulated_mb_s;
      if (size == lmax) at_lmax = it->accumulated_mb_s;
    }
    const double avg = sum / static_cast<double>(sizes.size());
    (p.kind == BeffPatternKind::ring ? ring_avg : random_avg).push_back(avg);
    (p.kind == BeffPatternKind::ring ? ring_lmax : random_lmax).push_back(*at_lmax);
  }
  s.ring_avg = logavg(ring_avg);
  s.beff_lmax_rings = logavg(ring_lmax);
  if (random_avg.empty()) {  // --random 0: rings only
    s.beff = s.ring_avg;
    s.beff_lmax = s.beff_lmax_rings;
  } else {
    s.random_avg = logavg(random_avg);
    s.beff = std::sqrt(s.ring_avg * s.random_avg);
    s.beff_lmax = std::sqrt(s.beff_lmax_rings * logavg(random_lmax));
  }
  return s;
}

BeffResult run_beff(const BeffParams& given, Bootstrap& boot,
                    const std::function<void(const BeffResult&, const BeffRow&)>& on_row,
                    const std::function<void(const BeffResult&, const BeffSummary&)>& on_summary) {
  const int n = boot.size();
  if (n < 2 || n > kBeffMaxRanks)
    throw UsageError("bench beff: runs on 2-" + std::to_string(kBeffMaxRanks) + " ranks");
  BeffParams params = given;
  if (params.sizes.empty()) {
    if (params.lmax < 1) throw UsageError("bench beff: Lmax must be at least 1 byte");
    for (std::size_t s = 1; s < params.lmax; s *= 2) params.sizes.push_back(s);
    params.sizes.push_back(params.lmax);
  }
  std::sort(params.sizes.begin(), params.sizes.end());
  params.sizes.erase(std::unique(params.sizes.begin(), params.sizes.end()), params.sizes.end());
  params.lmax = params.sizes.back();
  if (params.lmax > (std::size_t{1} << 30))
    throw UsageError("bench beff: Lmax " + std::to_string(params.lmax) + " is above 1 GiB");
  if (params.protocols.empty()) throw UsageError("bench beff: no protocol given");
  if (params.min_iterations < 1 || params.max_iterations < params.min_iterations)
    throw UsageError("bench beff: bad iteration bounds");

  Clock clock;
  BeffResult result = bench::start_result<BeffResult>(params, boot, clock);
  result.ranks = n;
  result.patterns = beff_patterns(n, params.random_patterns, params.seed);
  bulk::ChannelOptions co;
  co.pin = params.pin;
  // More ranks than this host has CPUs: idle waits give the CPU to the ranks with work.
  co.yield_when_idle = static_cast<unsigned>(boot.size()) > std::thread::hardware_concurrency();
  const bench::BulkEnds ends = bench::open_bulk(params.target, boot, co, result);
  Transport* t = ends.transport.get();
  bulk::Channel* ch = ends.channel.get();
  const int rank = boot.rank();
  auto emit = [&](BeffRow row) { bench::publish_row(boot, result, std::move(row), on_row); };

  for (Protocol proto : params.protocols) {
    const std::size_t first_row = result.rows.size();
    for (std::size_t size : params.sizes) {
      const std::uint64_t iterations =
          std::clamp<std::uint64_t>(params.bytes_per_point / (2 * std::max<std::size_t>(size, 1)),
                                    params.min_iterations, params.max_iterations);
      if (proto == Protocol::eager && size > result.options.eager_limit) {
        BeffRow row;
        row.protocol = proto;
        row.pattern = "all";
        row.size = size;
        row.unsupported = "eager carries at most the eager limit (" +
                          std::to_string(result.options.eager_limit) + " bytes)";
        emit(std::move(row));
        continue;
      }
      for (const BeffPattern& pat : result.patterns) {
        Exchange x(*ch, pat, proto, size, rank);
        x.once();  // untimed: connections, first registrations
        barrier(boot, *ch);
        ch->reset_stats();
        double untimed = 0;
        const std::uint64_t t0 = clock.now();
        for (std::uint64_t i = 0; i < iterations; ++i) {
          if (params.reuse > 0 && i > 0 && i % params.reuse == 0) {
            const std::uint64_t u0 = clock.now();
            x.renew();
            untimed += clock.to_ns(clock.now() - u0);
          }
          x.once();
        }
        Report mine;
        mine.seconds = (clock.to_ns(clock.now() - t0) - untimed) / 1e9;
        const bulk::Stats& st = ch->stats();
        mine.registrations = st.registrations;
        mine.hits = st.cache_hits;
        mine.misses = st.cache_misses;
        mine.invalidations = st.cache_invalidations;
        barrier(boot, *ch);  // every peer done with this rank's buffers
        auto all = allgather_value(boot, mine, "bench beff: report");
        BeffRow row;
        row.protocol = proto;
        row.kind = pat.kind;
        row.pattern = pat.name;
        row.ring_size = pat.ring_size;
        row.size = size;
        row.iterations = iterations;
        std::uint64_t regs = 0;
        for (const Report& r : all) {
          row.seconds = std::max(row.seconds, r.seconds);
          regs += r.registrations;
          row.cache_hits += r.hits;
          row.cache_misses += r.misses;
          row.cache_invalidations += r.invalidations;
        }
        const double messages = 2.0 * n * static_cast<double>(iterations);
        row.registrations_per_message = static_cast<double>(regs) / messages;
        if (row.seconds > 0) {
          row.accumulated_mb_s = messages * static_cast<double>(size) / row.seconds / 1e6;
          row.per_process_mb_s = row.accumulated_mb_s / n;
        }
        emit(std::move(row));
      }
    }
    std::optional<double> pp;
    if (params.pingpong &&
        !(proto == Protocol::eager && params.lmax > result.options.eager_limit)) {
      const std::uint64_t iterations = std::clamp<std::uint64_t>(
          params.bytes_per_point / (2 * params.lmax), params.min_iterations, params.max_iterations);
      const double half = pingpong(*ch, boot, proto, params.lmax, iterations, clock);
      if (rank == 0 && half > 0) pp = static_cast<double>(params.lmax) / half / 1e6;
    }
    if (rank != 0) continue;
    std::vector<BeffRow> mine(result.rows.begin() + static_cast<std::ptrdiff_t>(first_row),
                              result.rows.end());
    BeffSummary s = summarize_beff(proto, mine, result.patterns, params.sizes);
    s.pingpong_lmax = pp;
    result.summaries.push_back(s);
    if (on_summary) on_summary(result, result.summaries.back());
  }
  boot.barrier([&] { t->progress(); });
  return result;
}

}  // namespace fabflow
