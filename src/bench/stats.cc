// Sample statistics, size parsing and the sample clock.
#include <fabflow/bench/common.h>
#include <fabflow/status.h>

#include <time.h>
#include <x86intrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <numeric>
#include <sstream>
#include <thread>

namespace fabflow {

namespace {

// The bucket of a sample (-1: below 1 ns) and a bucket's edges.
int bucket_of(double ns) {
  if (!(ns >= 1)) return -1;
  return static_cast<int>(std::floor(std::log2(ns) * kBucketsPerOctave));
}
double bucket_edge(int k) {
  return k < 0 ? 0 : std::exp2(static_cast<double>(k) / kBucketsPerOctave);
}

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2) return *mid;
  return (*mid + *std::max_element(v.begin(), mid)) / 2;
}

LatencyStats summarize(std::vector<double>& s) {
  LatencyStats r;
  if (s.empty()) return r;
  std::sort(s.begin(), s.end());
  auto rank = [&](double q) {
    // Nearest-rank percentile: the smallest sample with at least q of the samples <= it.
    auto idx = static_cast<std::size_t>(std::ceil(q * static_cast<double>(s.size())));
    return s[std::min(s.size() - 1, idx == 0 ? 0 : idx - 1)];
  };
  r.samples = s.size();
  r.mean = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(s.size());
  if (s.size() > 1) {
    double squares = 0;
    for (double v : s) squares += (v - r.mean) * (v - r.mean);
    r.stdev = std::sqrt(squares / static_cast<double>(s.size() - 1));
  }
  r.min = s.front();
  r.p50 = rank(0.50);
  r.p90 = rank(0.90);
  r.p99 = rank(0.99);
  r.p999 = rank(0.999);
  r.p9999 = rank(0.9999);
  r.max = s.back();
  // Sorted, so each bucket is one run of samples.
  for (std::size_t i = 0; i < s.size();) {
    const int k = bucket_of(s[i]);
    std::size_t j = i + 1;
    while (j < s.size() && bucket_of(s[j]) == k) ++j;
    r.histogram.push_back({bucket_edge(k), k < 0 ? 1.0 : bucket_edge(k + 1), j - i});
    i = j;
  }
  return r;
}

LatencyStats LatencyStats::scaled(double k) const {
  LatencyStats r = *this;
  for (double* v : {&r.mean, &r.stdev, &r.min, &r.p50, &r.p90, &r.p99, &r.p999, &r.p9999, &r.max})
    *v *= k;
  for (auto& b : r.histogram) {
    b.lower_ns *= k;
    b.upper_ns *= k;
  }
  return r;
}

namespace {

std::size_t parse_one_size(const std::string& text) {
  if (text.empty()) throw UsageError("size is empty");
  std::size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos, 10);
  } catch (const std::exception&) {
    throw UsageError("bad size '" + text + "' (use e.g. 64, 4K, 1M)");
  }
  if (text[0] == '-') throw UsageError("bad size '" + text + "' (negative)");
  std::string suffix = text.substr(pos);
  unsigned long long mult = 1;
  if (suffix == "K" || suffix == "k" || suffix == "KiB")
    mult = 1ull << 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB")
    mult = 1ull << 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB")
    mult = 1ull << 30;
  else if (!suffix.empty())
    throw UsageError("bad size '" + text + "' (use e.g. 64, 4K, 1M)");
  if (v == 0) throw UsageError("bad size '" + text + "' (must be at least 1 byte)");
  if (v > (1ull << 40) / mult) throw UsageError("bad size '" + text + "' (too large)");
  return static_cast<std::size_t>(v * mult);
}

}  // namespace

std::vector<std::size_t> parse_sizes(const std::string& text) {
  std::vector<std::size_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos) {
      out.push_back(parse_one_size(item));
      continue;
    }
    std::size_t lo = parse_one_size(item.substr(0, colon));
    std::size_t hi = parse_one_size(item.substr(colon + 1));
    if (lo > hi) throw UsageError("bad size sweep '" + item + "' (start above end)");
    for (std::size_t s = lo; s <= hi; s *= 2) out.push_back(s);
  }
  if (out.empty()) throw UsageError("no sizes given");
  return out;
}

Clock::Clock() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  bool constant = false, nonstop = false;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    constant = line.find(" constant_tsc") != std::string::npos;
    nonstop = line.find(" nonstop_tsc") != std::string::npos;
    break;
  }
  if (!(constant && nonstop)) {
    name_ = "CLOCK_MONOTONIC";
    return;
  }
  // Three readings of (CLOCK_MONOTONIC_RAW, TSC), 10 ms apart: two windows, one rate each.
  // Each reading brackets the kernel clock between two TSC reads and keeps the tightest of a
  // few tries, so that a preemption between the two clocks (common on a busy VM) cannot skew
  // a window: a 40 us gap in one reading used to show as 4000 ppm.
  auto raw_ns = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
  };
  auto paired = [&](double& ns, std::uint64_t& tick) {
    std::uint64_t best_gap = ~std::uint64_t{0};
    for (int attempt = 0; attempt < 8; ++attempt) {
      const std::uint64_t before = __rdtsc();
      const double at = raw_ns();
      const std::uint64_t after = __rdtsc();
      if (after < before || after - before >= best_gap) continue;
      best_gap = after - before;
      ns = at;
      tick = before + (after - before) / 2;
    }
  };
  double ns[3] = {};
  std::uint64_t ticks[3] = {};
  for (int i = 0; i < 3; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    paired(ns[i], ticks[i]);
  }
  if (ticks[1] <= ticks[0] || ticks[2] <= ticks[1] || ns[2] <= ns[0]) {
    name_ = "CLOCK_MONOTONIC";
    return;
  }
  tsc_ = true;
  ns_per_tick_ = (ns[2] - ns[0]) / static_cast<double>(ticks[2] - ticks[0]);
  const double first = (ns[1] - ns[0]) / static_cast<double>(ticks[1] - ticks[0]);
  const double second = (ns[2] - ns[1]) / static_cast<double>(ticks[2] - ticks[1]);
  error_ppm_ = std::abs(first - second) / ns_per_tick_ * 1e6;
  std::ostringstream n;
  n << std::fixed << std::setprecision(3) << "TSC (" << 1.0 / ns_per_tick_
    << " GHz, calibrated against CLOCK_MONOTONIC_RAW, windows agree within " << std::setprecision(0)
    << std::max(error_ppm_, 1.0) << " ppm)";
  name_ = n.str();
}

std::uint64_t Clock::now() const noexcept {
  if (tsc_) return __rdtsc();
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace fabflow
