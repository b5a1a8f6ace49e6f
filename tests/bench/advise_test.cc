// The advise search on synthetic measurements: summaries, a clear winner, a tie, a candidate
// that failed mid-run, latency (lower is better), and the ranking of dropped candidates.
#include <fabflow/bench/advise.h>
#include <gtest/gtest.h>

namespace fabflow::bench::advise {
namespace {

Candidate cand(const std::string& name, std::vector<double> samples) {
  Candidate c;
  c.provider = "local";
  c.name = name;
  c.samples = std::move(samples);
  c.rounds = 1;
  return c;
}

TEST(AdviseSearch, SummaryIsMedianAndRange) {
  const Summary odd = summarize({3, 1, 2});
  EXPECT_EQ(odd.median, 2);
  EXPECT_EQ(odd.low, 1);
  EXPECT_EQ(odd.high, 3);
  EXPECT_EQ(odd.n, 3u);
  EXPECT_EQ(summarize({4, 1, 2, 3}).median, 2.5);
  EXPECT_EQ(summarize({}).n, 0u);
}

TEST(AdviseSearch, AClearWinnerDropsTheOthers) {
  std::vector<Candidate> c = {cand("slow", {1, 1.1, 1.2}), cand("fast", {5, 5.1, 5.3}),
                              cand("mid", {2, 2.5, 3})};
  EXPECT_EQ(leader(c, Better::higher), 1u);
  EXPECT_EQ(drop_clear_losers(c, Better::higher, 1), 2u);
  EXPECT_EQ(c[0].dropped_after, 1);
  EXPECT_TRUE(c[1].live());
  const Ranking r = rank(c, Better::higher);
  EXPECT_EQ(r.winner, 1u);
  EXPECT_TRUE(r.tied.empty());
  // Dropped ones follow, by median within a round.
  EXPECT_EQ(r.order, (std::vector<std::size_t>{1, 2, 0}));
}

TEST(AdviseSearch, OverlappingRunsAreATie) {
  std::vector<Candidate> c = {cand("a", {5, 6, 7}), cand("b", {4, 5.5, 6.5}), cand("c", {1, 2, 3})};
  EXPECT_EQ(drop_clear_losers(c, Better::higher, 1), 1u);  // only c is clear of the leader
  const Ranking r = rank(c, Better::higher);
  EXPECT_EQ(r.winner, 0u);
  EXPECT_EQ(r.tied, (std::vector<std::size_t>{1}));
}

TEST(AdviseSearch, LowerIsBetterForLatency) {
  std::vector<Candidate> c = {cand("slow", {900, 950, 1000}), cand("quick", {400, 420, 450})};
  EXPECT_EQ(leader(c, Better::lower), 1u);
  drop_clear_losers(c, Better::lower, 1);
  EXPECT_EQ(c[0].dropped_after, 1);
  EXPECT_EQ(rank(c, Better::lower).winner, 1u);
  // The same numbers with higher-is-better pick the other one: the direction matters.
  std::vector<Candidate> d = {cand("slow", {900, 950, 1000}), cand("quick", {400, 420, 450})};
  EXPECT_EQ(rank(d, Better::higher).winner, 0u);
}

TEST(AdviseSearch, ACandidateWithoutResultsFailsAndIsNotRanked) {
  std::vector<Candidate> c = {cand("ok", {5, 5, 5}), cand("broke", {})};
  EXPECT_EQ(drop_clear_losers(c, Better::higher, 2), 1u);
  EXPECT_EQ(c[1].failed, "no result in round 2");
  EXPECT_FALSE(c[1].live());
  const Ranking r = rank(c, Better::higher);
  EXPECT_EQ(r.order, (std::vector<std::size_t>{0}));
  EXPECT_EQ(r.winner, 0u);
}

TEST(AdviseSearch, RefusedCandidatesAndNothingMeasured) {
  std::vector<Candidate> c = {cand("refused", {}), cand("also", {})};
  c[0].refused = "the provider has no read";
  c[1].refused = "the provider has no read";
  EXPECT_EQ(drop_clear_losers(c, Better::higher, 1), 0u);
  EXPECT_EQ(leader(c, Better::higher), static_cast<std::size_t>(-1));
  const Ranking r = rank(c, Better::higher);
  EXPECT_TRUE(r.order.empty());
  EXPECT_EQ(r.winner, static_cast<std::size_t>(-1));
}

TEST(AdviseSearch, HeldOnLongerRanksHigher) {
  std::vector<Candidate> c = {cand("w", {9, 9, 9}), cand("early", {8.5, 8.5, 8.5}),
                              cand("late", {3, 3, 3})};
  c[1].dropped_after = 1;
  c[2].dropped_after = 3;
  EXPECT_EQ(rank(c, Better::higher).order, (std::vector<std::size_t>{0, 2, 1}));
}

}  // namespace
}  // namespace fabflow::bench::advise
