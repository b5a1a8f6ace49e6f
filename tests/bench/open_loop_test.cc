// The open-loop schedule of bench lat (RawParams::rate): when each ping is due, and when the
// sender has fallen behind a rate it cannot hold rather than paused.
#include <fabflow/bench/raw.h>
#include <gtest/gtest.h>

namespace fabflow {
namespace {

TEST(OpenLoopSchedule, PingsAreDueAtStartPlusIPeriods) {
  const OpenLoopSchedule s{1000, 2.5};  // 2.5 ticks apart
  EXPECT_EQ(s.due(0), 1000u);
  EXPECT_EQ(s.due(1), 1002u);  // 1002.5, truncated
  EXPECT_EQ(s.due(2), 1005u);
  EXPECT_EQ(s.due(1000000), 1000u + 2500000u);  // no drift from adding periods one by one
}

TEST(OpenLoopSchedule, APauseIsNotAnOverloadButAGrowingLagIs) {
  const OpenLoopSchedule s{0, 100};  // one ping every 100 ticks
  constexpr double kMinSlack = 1000;
  // On time, and a lag up to the slack early in the run (a pause the samples will show).
  EXPECT_TRUE(s.on_time(10, s.due(10), kMinSlack));
  EXPECT_TRUE(s.on_time(10, s.due(10) + 1000, kMinSlack));
  EXPECT_FALSE(s.on_time(10, s.due(10) + 1001, kMinSlack));
  // Late in a long run the slack is a tenth of the time since the start.
  EXPECT_TRUE(s.on_time(100000, s.due(100000) + 1000000, kMinSlack));  // lag 1e6 of 1.1e7
  // A sender at 80 % of the rate: its lag is a fifth of the elapsed time, and fails.
  const std::uint64_t sent = 80000;
  const std::uint64_t now = 10000000;  // 1e7 ticks: 100000 pings were due, 80000 went out
  EXPECT_FALSE(s.on_time(sent, now, kMinSlack));
}

}  // namespace
}  // namespace fabflow
