// auto's reading of an advise profile: when it is trusted, what it answers, and the choice
// made of it and the caller's rule (fabflow/advice.h).
#include <fabflow/advice.h>

#include <gtest/gtest.h>

#include "support/advice_support.h"

namespace fabflow::advice {
namespace {

using fabflow::testing::advice_profile;
using fabflow::testing::write_temp;

const std::vector<fabflow::testing::RankedRow> kRows{
    {"local", "push1-push-push", 6.0e6, "winner"},
    {"local", "push1-watermark-pull", 5.9e6, "tied"},
    {"shm", "pull-pull-pull", 2.0e6, "winner"}};

Query query(const std::string& path, const std::string& provider = "local", std::size_t size = 64) {
  Query q;
  q.family = "queue";
  q.provider = provider;
  q.size = size;
  q.profile = path;
  return q;
}

TEST(AdviceProfile, AProfileOfThisMachineRanksTheProvidersDesigns) {
  const auto path = write_temp("fits.json", advice_profile(kRows).dump());
  const ProfileAnswer a = read_profile(query(path));
  ASSERT_EQ(a.why_not, "");
  ASSERT_EQ(a.ranked.size(), 2u);
  EXPECT_EQ(a.ranked[0].design, "push1-push-push");
  EXPECT_EQ(a.ranked[1].design, "push1-watermark-pull");
  EXPECT_TRUE(a.ranked[1].tied);
  EXPECT_NE(a.source.find(path), std::string::npos);
  const ProfileAnswer shm = read_profile(query(path, "shm"));
  ASSERT_EQ(shm.ranked.size(), 1u);
  EXPECT_EQ(shm.ranked[0].design, "pull-pull-pull");
}

TEST(AdviceProfile, SizesCompareAsBytes) {
  const auto path = write_temp("4k.json", advice_profile(kRows, "4K").dump());
  EXPECT_EQ(read_profile(query(path, "local", 4096)).why_not, "");
  EXPECT_NE(read_profile(query(path, "local", 4000)).why_not.find("size '4K', not 4000 bytes"),
            std::string::npos);
}

// Each reason a profile is not trusted, and the words that say it.
TEST(AdviceProfile, AForeignStaleOrCorruptProfileIsIgnoredWithItsReason) {
  auto why = [](const nlohmann::json& p, const Query& q0) {
    Query q = q0;
    q.profile = write_temp("bad.json", p.dump());
    const ProfileAnswer a = read_profile(q);
    EXPECT_TRUE(a.ranked.empty());
    return a.why_not;
  };
  const Query q = query("");
  auto other_machine = advice_profile(kRows);
  other_machine["fingerprint"]["cores"] = 4096;
  EXPECT_NE(why(other_machine, q).find("another machine"), std::string::npos);
  auto other_version = advice_profile(kRows);
  other_version["fabflow_version"] = "0.0.1";
  EXPECT_NE(why(other_version, q).find("measured by fabflow 0.0.1"), std::string::npos);
  EXPECT_NE(why(advice_profile(kRows), query("", "tcp")).find("did not measure tcp"),
            std::string::npos);
  auto more_flags = advice_profile(kRows);
  more_flags["workload"]["args"] = {"--batching"};
  EXPECT_NE(why(more_flags, q).find("more bench flags (--batching)"), std::string::npos);
  Query p99 = q;
  p99.objectives = {"p99"};
  EXPECT_NE(why(advice_profile(kRows), p99).find("ranks by throughput, not p99"),
            std::string::npos);
  EXPECT_NE(why(advice_profile(kRows, "64", "rr"), q).find("another family"), std::string::npos);
  auto no_rows = advice_profile({{"shm", "pull-pull-pull", 1, "winner"}});
  no_rows["providers"].push_back("local");
  EXPECT_NE(why(no_rows, q).find("ranks no design on local"), std::string::npos);

  Query corrupt = q;
  corrupt.profile = write_temp("corrupt.json", "{\"type\": \"advice\", \"ranked\": [");
  EXPECT_NE(read_profile(corrupt).why_not.find("is not an advise profile: ignored"),
            std::string::npos);
  Query missing = q;
  missing.profile = ::testing::TempDir() + "/fabflow-no-such-profile.json";
  EXPECT_NE(read_profile(missing).why_not.find("no profile at"), std::string::npos);
}

TEST(AdviceProfile, TheDefaultProfileLivesInTheUsersCacheFolder) {
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_CACHE_HOME", "/somewhere/cache", 1);
  EXPECT_EQ(default_profile("kv").string(), "/somewhere/cache/fabflow/advise-kv.json");
  if (old)
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else
    ::unsetenv("XDG_CACHE_HOME");
}

TEST(AdviceChoice, TheProfilesBestDesignThatCanOpenWins) {
  const auto path = write_temp("choose.json", advice_profile(kRows).dump());
  const ProfileAnswer a = read_profile(query(path));
  auto all = [](const std::string&) { return std::string(); };
  const Choice best = choose(a, {"rule-design"}, "the rule", all);
  EXPECT_EQ(best.design, "push1-push-push");
  EXPECT_TRUE(best.from_profile);
  EXPECT_NE(best.why.find("median 6 M items/s, next push1-watermark-pull 5.9 M items/s (tied)"),
            std::string::npos)
      << best.why;

  auto no_push = [](const std::string& d) {
    return d == "push1-push-push" ? std::string("no write here") : std::string();
  };
  const Choice second = choose(a, {"rule-design"}, "the rule", no_push);
  EXPECT_EQ(second.design, "push1-watermark-pull");
  EXPECT_NE(second.why.find("ahead of it push1-push-push cannot open here: no write here"),
            std::string::npos)
      << second.why;
}

TEST(AdviceChoice, WithoutAUsableProfileTheRuleDecidesAndSaysWhy) {
  ProfileAnswer none;
  none.why_not = "no profile at /x";
  auto refuse_first = [](const std::string& d) {
    return d == "first" ? std::string("cannot") : std::string();
  };
  const Choice c = choose(none, {"first", "second"}, "first, else second", refuse_first);
  EXPECT_EQ(c.design, "second");
  EXPECT_FALSE(c.from_profile);
  EXPECT_EQ(c.why, "the rule: first, else second; no profile used: no profile at /x");

  auto refuse_all = [](const std::string& d) { return "no " + d; };
  const Choice nothing = choose(none, {"first", "second"}, "rule", refuse_all);
  EXPECT_EQ(nothing.design, "");
  EXPECT_NE(nothing.why.find("first: no first; second: no second"), std::string::npos)
      << nothing.why;
}

}  // namespace
}  // namespace fabflow::advice
