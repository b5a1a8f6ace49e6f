// Sample statistics (nearest-rank percentiles, standard deviation, the log-bucketed histogram),
// the TSC calibration, the timing-hazard warnings and the --sizes parser.
#include <fabflow/bench/common.h>
#include <fabflow/status.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "bench/report.h"
#include "common/fd.h"
#include "common/idle_poll.h"

namespace fabflow {
namespace {

TEST(StatsSummarize, NearestRankPercentilesOfOneToAThousand) {
  std::vector<double> s(1000);
  std::iota(s.begin(), s.end(), 1.0);
  std::shuffle(s.begin(), s.end(), std::mt19937(42));
  LatencyStats r = summarize(s);
  EXPECT_EQ(r.samples, 1000u);
  EXPECT_DOUBLE_EQ(r.mean, 500.5);
  EXPECT_EQ(r.min, 1);
  EXPECT_EQ(r.p50, 500);
  EXPECT_EQ(r.p90, 900);
  EXPECT_EQ(r.p99, 990);
  EXPECT_EQ(r.p999, 999);
  EXPECT_EQ(r.max, 1000);
  EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
}

// The median of the per-round ratios (bench queue / rr --reference): the middle value, or the
// mean of the middle two, in any input order; nothing gives 0.
TEST(StatsMedian, MiddleValueOrMeanOfTheMiddleTwo) {
  EXPECT_EQ(median({}), 0);
  EXPECT_EQ(median({7}), 7);
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({1.5, 9, 0.5, 2.5}), 2);
  EXPECT_EQ(median({5, 1, 4, 2, 3, 100, -7}), 3);
}

TEST(StatsSummarize, NearestRankRoundsUpOnSmallSets) {
  std::vector<double> s{10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  LatencyStats r = summarize(s);
  EXPECT_EQ(r.p50, 5);
  EXPECT_EQ(r.p90, 9);
  EXPECT_EQ(r.p99, 10);
  EXPECT_EQ(r.p999, 10);
  EXPECT_DOUBLE_EQ(r.mean, 5.5);

  std::vector<double> three{30, 10, 20};
  r = summarize(three);
  EXPECT_EQ(r.p50, 20);
  EXPECT_EQ(r.p90, 30);
}

TEST(StatsSummarize, EmptyInputGivesZeros) {
  std::vector<double> s;
  LatencyStats r = summarize(s);
  EXPECT_EQ(r.samples, 0u);
  for (double v : {r.mean, r.min, r.p50, r.p90, r.p99, r.p999, r.max}) EXPECT_EQ(v, 0);
}

TEST(StatsSummarize, OneSampleIsEveryStatistic) {
  std::vector<double> s{7.25};
  LatencyStats r = summarize(s);
  EXPECT_EQ(r.samples, 1u);
  for (double v : {r.mean, r.min, r.p50, r.p90, r.p99, r.p999, r.max}) EXPECT_EQ(v, 7.25);
}

TEST(StatsSummarize, TheFarTailAndSpreadOfOneToTenThousand) {
  std::vector<double> s(10000);
  std::iota(s.begin(), s.end(), 1.0);
  std::shuffle(s.begin(), s.end(), std::mt19937(7));
  LatencyStats r = summarize(s);
  EXPECT_EQ(r.p999, 9990);
  EXPECT_EQ(r.p9999, 9999);
  // The sample standard deviation of 1..n is sqrt(n (n + 1) / 12).
  EXPECT_NEAR(r.stdev, std::sqrt(10000.0 * 10001.0 / 12.0), 1e-6);
}

TEST(StatsSummarize, FewerThanTenThousandSamplesMakeP9999TheMaximum) {
  std::vector<double> s(9999);
  std::iota(s.begin(), s.end(), 1.0);
  EXPECT_EQ(summarize(s).p9999, 9999);
  std::vector<double> small{5, 1, 3};
  LatencyStats r = summarize(small);
  EXPECT_EQ(r.p9999, 5);
  EXPECT_EQ(r.p999, 5);
  EXPECT_DOUBLE_EQ(r.stdev, 2);
}

TEST(StatsSummarize, ExponentialSamplesHaveTheirKnownQuantiles) {
  // Exponential with mean 1000 ns: the q-quantile is -1000 ln(1 - q), the stdev 1000.
  std::mt19937_64 rng(11);
  std::exponential_distribution<double> exp(1.0 / 1000);
  std::vector<double> s(1'000'000);
  for (double& v : s) v = exp(rng);
  LatencyStats r = summarize(s);
  EXPECT_NEAR(r.mean, 1000, 10);
  EXPECT_NEAR(r.stdev, 1000, 15);
  EXPECT_NEAR(r.p50, 1000 * std::log(2.0), 10);
  EXPECT_NEAR(r.p99, 1000 * std::log(100.0), 60);
  EXPECT_NEAR(r.p999, 1000 * std::log(1000.0), 250);
}

TEST(StatsHistogram, LogBucketsCountEverySampleOnce) {
  std::vector<double> s(1000);
  std::iota(s.begin(), s.end(), 1.0);
  s.push_back(0.25);  // below 1 ns: the [0, 1) bucket
  s.push_back(0.5);
  LatencyStats r = summarize(s);
  ASSERT_FALSE(r.histogram.empty());
  std::uint64_t total = 0, from_256_to_512 = 0;
  double previous_upper = 0;
  for (const auto& b : r.histogram) {
    EXPECT_GT(b.count, 0u);
    EXPECT_GE(b.lower_ns, previous_upper);  // ascending, no overlap
    EXPECT_LT(b.lower_ns, b.upper_ns);
    // About 9 % wide (2^(1/8)), except [0, 1).
    if (b.lower_ns >= 1) {
      EXPECT_NEAR(b.upper_ns / b.lower_ns, std::exp2(1.0 / 8), 1e-9);
    }
    total += b.count;
    if (b.lower_ns >= 256 && b.upper_ns <= 512 + 1e-9) from_256_to_512 += b.count;
    previous_upper = b.upper_ns;
  }
  EXPECT_EQ(total, s.size());
  EXPECT_EQ(from_256_to_512, 256u);  // one octave, eight buckets
  EXPECT_EQ(r.histogram.front().lower_ns, 0);
  EXPECT_EQ(r.histogram.front().upper_ns, 1);
  EXPECT_EQ(r.histogram.front().count, 2u);
  EXPECT_EQ(r.histogram[1].lower_ns, 1);  // sample 1 alone in [1, 2^(1/8))
  EXPECT_EQ(r.histogram[1].count, 1u);
  EXPECT_LE(r.histogram.size(), 8u * 10 + 1);  // 1000 ns spans ten octaves
}

TEST(StatsHistogram, ScaledByTwoIsTheHistogramOfDoubledSamples) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> dist(7, 0.5);
  std::vector<double> s(20000);
  for (double& v : s) v = dist(rng);
  std::vector<double> doubled = s;
  for (double& v : doubled) v *= 2;
  const LatencyStats half = summarize(s).scaled(2);
  const LatencyStats whole = summarize(doubled);
  EXPECT_DOUBLE_EQ(half.p50, whole.p50);
  EXPECT_DOUBLE_EQ(half.p9999, whole.p9999);
  EXPECT_NEAR(half.stdev, whole.stdev, 1e-9 * whole.stdev);
  ASSERT_EQ(half.histogram.size(), whole.histogram.size());
  for (std::size_t i = 0; i < half.histogram.size(); ++i) {
    EXPECT_NEAR(half.histogram[i].lower_ns, whole.histogram[i].lower_ns, 1e-9 * whole.max);
    EXPECT_EQ(half.histogram[i].count, whole.histogram[i].count) << i;
  }
}

// The latency object of the JSON lines goes back to the same figures and histogram (bench kv
// passes memcached's figures to its rank this way); figures without a histogram stay without.
TEST(StatsJson, LatencyGoesToItsJsonObjectAndBack) {
  std::vector<double> s = {5, 1, 3, 1000, 42, 0.5, 7.25};
  const LatencyStats l = summarize(s);
  const nlohmann::json j = l;
  EXPECT_EQ(j, report::latency_json(l));
  EXPECT_EQ(j["samples"], 7);
  EXPECT_DOUBLE_EQ(j["p50"].get<double>(), l.p50);
  ASSERT_EQ(j["histogram"].size(), l.histogram.size());
  const auto back = nlohmann::json::parse(j.dump()).get<LatencyStats>();
  for (auto figure : {&LatencyFigures::mean, &LatencyFigures::stdev, &LatencyFigures::min,
                      &LatencyFigures::p50, &LatencyFigures::p90, &LatencyFigures::p99,
                      &LatencyFigures::p999, &LatencyFigures::p9999, &LatencyFigures::max})
    EXPECT_DOUBLE_EQ(back.*figure, l.*figure);
  EXPECT_EQ(back.samples, l.samples);
  ASSERT_EQ(back.histogram.size(), l.histogram.size());
  for (std::size_t i = 0; i < l.histogram.size(); ++i) {
    EXPECT_DOUBLE_EQ(back.histogram[i].lower_ns, l.histogram[i].lower_ns) << i;
    EXPECT_DOUBLE_EQ(back.histogram[i].upper_ns, l.histogram[i].upper_ns) << i;
    EXPECT_EQ(back.histogram[i].count, l.histogram[i].count) << i;
  }
  const LatencyStats figures{static_cast<const LatencyFigures&>(l)};
  const nlohmann::json fj = figures;
  EXPECT_FALSE(fj.contains("histogram"));
  EXPECT_TRUE(fj.get<LatencyStats>().histogram.empty());
  EXPECT_DOUBLE_EQ(fj.get<LatencyStats>().p99, l.p99);
}

TEST(StatsClock, TheTscAgreesWithTheRawMonotonicClock) {
  const Clock clock;
  if (!clock.tsc()) GTEST_SKIP() << "no invariant TSC here: " << clock.name();
  EXPECT_LT(clock.calibration_error_ppm(), 1000) << clock.name();
  EXPECT_NE(clock.name().find("CLOCK_MONOTONIC_RAW"), std::string::npos) << clock.name();
  // 50 ms measured by both: the calibrated TSC within 0.5 % of the kernel's raw clock. Each
  // end brackets the kernel clock between two TSC reads and keeps the tightest of a few tries,
  // so a preemption between the two clocks on a busy machine does not decide the outcome.
  auto raw = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
  };
  auto paired = [&](double& ns, std::uint64_t& tick) {
    std::uint64_t best_gap = ~std::uint64_t{0};
    for (int attempt = 0; attempt < 8; ++attempt) {
      const std::uint64_t before = clock.now();
      const double at = raw();
      const std::uint64_t after = clock.now();
      if (after < before || after - before >= best_gap) continue;
      best_gap = after - before;
      ns = at;
      tick = before + (after - before) / 2;
    }
  };
  double r0 = 0, r1 = 0;
  std::uint64_t t0 = 0, t1 = 0;
  paired(r0, t0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  paired(r1, t1);
  EXPECT_NEAR(clock.to_ns(t1 - t0) / (r1 - r0), 1.0, 0.005);
}

TEST(StatsEnvironment, TimingHazardsAreWarnedOnce) {
  RunEnvironment env;
  env.build_type = "Release";
  env.tsc_invariant = true;
  env.pinned = true;
  env.governor = "performance";
  env.irqs_on_pinned = 0;
  EXPECT_TRUE(environment_warnings(env).empty());
  env.governor = "powersave";
  env.pinned_smt_siblings = true;
  env.cpu_initiator = 0;
  env.cpu_target = 4;
  env.irqs_on_pinned = 5000;
  env.irqs_per_s_on_pinned = 2500;
  const auto w = environment_warnings(env);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_NE(w[0].find("governor 'powersave'"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("cpu 0 and cpu 4, two hardware threads of one core"), std::string::npos)
      << w[1];
  EXPECT_NE(w[2].find("5000 device interrupts"), std::string::npos) << w[2];
}

// Others' CPU: a process outside the run that spins during it is counted, and once this
// process has waited for it (a bench an experiment run started) its time is the run's own.
TEST(StatsEnvironment, OthersCpuCountsProcessesOutsideTheRun) {
  RunEnvironment env;
  env.cores = 2;
  start_others_cpu(env);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    timespec t{};
    do ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    while (t.tv_sec < 1);  // one second of CPU time
    ::_exit(0);
  }
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  measure_others_cpu(env);  // the child exited but was not waited for: someone else's time
  ASSERT_GE(env.others_cpu, 0);
  const double others_s = env.others_cpu * env.cpu_window_s;
  EXPECT_GE(others_s, 0.9) << env.others_cpu << " cores over " << env.cpu_window_s << " s";
  EXPECT_EQ(env.busy(), env.others_cpu >= 0.25);  // the rule, not the load average
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  measure_others_cpu(env);  // waited for: this process' children's time, ours
  EXPECT_LE(env.others_cpu * env.cpu_window_s, others_s - 0.8)
      << env.others_cpu << " cores over " << env.cpu_window_s << " s";
}

// A table's header comes before the run has ended: a high load average at the start (the runs
// before this one) is not judged busy then; at the end, with others' CPU unmeasured, it is.
TEST(StatsEnvironment, TheStartsLoadAverageAloneIsNotBusy) {
  RunEnvironment env;
  env.cores = 2;
  env.load_start = 6;
  EXPECT_FALSE(env.busy());
  env.load_end = 6;
  EXPECT_TRUE(env.busy());
  env.others_cpu = 0.1;  // measured: the rule
  EXPECT_FALSE(env.busy());
  env.others_cpu = 0.3;
  EXPECT_TRUE(env.busy());
}

// A pinned run whose idle CPUs may halt is warned about, with the reason no request was held.
TEST(StatsEnvironment, HaltingIdleCpusAreWarnedWhenPinned) {
  RunEnvironment env;
  env.build_type = "Release";
  env.tsc_invariant = true;
  env.governor = "performance";
  env.cpu_idle = "default";
  env.cpu_idle_why_not = "/dev/cpu_dma_latency: Permission denied";
  env.pinned = true;
  auto w = environment_warnings(env);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("idle CPUs may halt (/dev/cpu_dma_latency: Permission denied)"),
            std::string::npos)
      << w[0];
  env.cpu_idle = "poll";
  EXPECT_TRUE(environment_warnings(env).empty());
}

// The PM QoS request is made where the device is writable (root, here), reads 0 us while held
// and is recorded for the environment; elsewhere it says why not.
TEST(StatsEnvironment, IdlePollingIsHeldWhereTheDeviceIsWritable) {
  const bool writable = ::access("/dev/cpu_dma_latency", W_OK) == 0;
  {
    IdlePolling idle;
    EXPECT_EQ(idle.held(), writable) << idle.why_not();
    EXPECT_EQ(cpu_idle_state(), writable ? "poll" : "default");
    RunEnvironment env;
    note_cpu_idle(env);
    EXPECT_EQ(env.cpu_idle, cpu_idle_state());
    if (writable) {
      Fd fd(::open("/dev/cpu_dma_latency", O_RDONLY | O_CLOEXEC));
      ASSERT_GE(fd.get(), 0);
      std::int32_t us = -1;
      ASSERT_EQ(::read(fd.get(), &us, sizeof us), static_cast<ssize_t>(sizeof us));
      EXPECT_EQ(us, 0);  // the smallest request held on the machine: ours is 0
    } else {
      EXPECT_FALSE(idle.why_not().empty());
    }
  }
  EXPECT_EQ(cpu_idle_state(), "default");
}

using Sizes = std::vector<std::size_t>;

TEST(StatsParseSizes, PlainNumbersAndSuffixes) {
  EXPECT_EQ(parse_sizes("64"), Sizes{64});
  EXPECT_EQ(parse_sizes("1"), Sizes{1});
  EXPECT_EQ(parse_sizes("4K"), Sizes{4096});
  EXPECT_EQ(parse_sizes("4k"), Sizes{4096});
  EXPECT_EQ(parse_sizes("1M"), Sizes{1u << 20});
  EXPECT_EQ(parse_sizes("2G"), Sizes{std::size_t{2} << 30});
}

TEST(StatsParseSizes, ListsKeepTheirOrder) {
  EXPECT_EQ(parse_sizes("64,4096"), (Sizes{64, 4096}));
  EXPECT_EQ(parse_sizes("1M,8,4K"), (Sizes{1u << 20, 8, 4096}));
}

TEST(StatsParseSizes, SweepsArePowersOfTwo) {
  Sizes want;
  for (std::size_t s = 4; s <= 65536; s *= 2) want.push_back(s);
  EXPECT_EQ(parse_sizes("4:64K"), want);
  EXPECT_EQ(parse_sizes("8:8"), Sizes{8});
  EXPECT_EQ(parse_sizes("1:4,100"), (Sizes{1, 2, 4, 100}));
}

TEST(StatsParseSizes, MalformedInputIsAUsageError) {
  for (const char* bad : {"", "abc", "0", "-5", "4K:1", "1T", "64,,x", "4Kx", ":64", "4:", "0:8",
                          "99999999999999999999"})
    EXPECT_THROW(parse_sizes(bad), UsageError) << "'" << bad << "'";
}

}  // namespace
}  // namespace fabflow
