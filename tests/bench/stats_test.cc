// Sample statistics (nearest-rank percentiles) and the --sizes parser.
#include <fabflow/bench/common.h>
#include <fabflow/status.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

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
