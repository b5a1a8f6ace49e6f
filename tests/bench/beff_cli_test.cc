// `fabflow bench beff` through the CLI: 3 and 4 ranks on local and tcp with two small sizes,
// every protocol measured in every pattern with its b_eff summary (eager at the size above its
// limit reported as not run); the patterns and the b_eff formula on their own; bad inputs giving
// one error line and exit 2.
#include <fabflow/bench/beff.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <set>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::lines;
using testing::run_cli;
using namespace std::chrono_literals;

void check_run(const std::string& provider, int ranks) {
  CliResult r = run_cli(
      {"fabflow", "bench", "beff", "-n", std::to_string(ranks), "-p", provider, "-S", "1K,64K",
       "--bytes", "256K", "--max-iters", "2", "--random", "2", "--json", "--timeout", "10000"},
      120s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  const auto patterns = beff_patterns(ranks, 2, 1);
  std::map<std::string, int> rows;                   // protocol -> measured rows
  std::map<std::string, std::set<std::string>> sum;  // protocol -> measures
  for (const auto& l : lines(r.out)) {
    auto j = nlohmann::json::parse(l);
    ASSERT_EQ(j["bench"], "beff");
    EXPECT_EQ(j["ranks"], ranks);
    EXPECT_EQ(j["lmax"], 65536);
    const std::string proto = j["protocol"];
    if (j["type"] == "beff") {
      if (j.contains("unsupported")) {
        EXPECT_EQ(proto, "eager") << j.dump();
        EXPECT_EQ(j["size"], 65536);
        continue;
      }
      ++rows[proto];
      EXPECT_GE(j["iterations"].get<std::uint64_t>(), 2u);
      const double acc = j["accumulated_mb_s"];
      EXPECT_GT(acc, 0) << j.dump();
      EXPECT_NEAR(j["per_process_mb_s"].get<double>() * ranks, acc, acc * 1e-9);
      // accumulated = 2 messages per rank and iteration, over the slowest rank's seconds.
      const double bytes = 2.0 * ranks * j["iterations"].get<double>() * j["size"].get<double>();
      EXPECT_NEAR(bytes / j["seconds"].get<double>() / 1e6, acc, acc * 1e-6);
    } else {
      ASSERT_EQ(j["type"], "beff_summary") << j.dump();
      sum[proto].insert(j["measure"].get<std::string>());
      // Eager cannot carry Lmax (64K here): no b_eff, nothing at Lmax, no ping-pong at Lmax.
      if (proto == "eager") {
        EXPECT_TRUE(j.contains("unsupported")) << j.dump();
      } else {
        ASSERT_FALSE(j.contains("unsupported")) << j.dump();
        EXPECT_GT(j["mb_s"].get<double>(), 0) << j.dump();
      }
    }
  }
  for (bulk::Protocol p : bulk::kAllProtocols) {
    const std::string name(bulk::to_string(p));
    const int sizes = p == bulk::Protocol::eager ? 1 : 2;
    EXPECT_EQ(rows[name], sizes * static_cast<int>(patterns.size())) << provider << " " << name;
    EXPECT_EQ(sum[name].size(), 4u) << provider << " " << name;
  }
}

TEST(BeffCli, ThreeAndFourRanksOnLocal) {
  check_run("local", 3);
  check_run("local", 4);
}

TEST(BeffCli, ThreeAndFourRanksOnTcp) {
  check_run("tcp", 3);
  check_run("tcp", 4);
}

TEST(BeffCli, TableShowsTheSummary) {
  CliResult r =
      run_cli({"fabflow", "bench", "beff", "-n", "3", "-p", "local", "-S", "1K,8K", "--protocol",
               "copy,caching-pipeline", "--bytes", "64K", "--max-iters", "2"},
              60s);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("# fabflow"), std::string::npos);
  EXPECT_NE(r.out.find("ring-2:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("accumulated"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("per process"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("- caching-pipeline"), std::string::npos) << r.out;
}

TEST(BeffCliPatterns, RingsAndRandomRingsAreFixedPointFreePermutations) {
  for (int n : {2, 3, 4, 5, 8, 13}) {
    const auto ps = beff_patterns(n, 3, 7);
    int rings = 0;
    for (const auto& p : ps) {
      rings += p.kind == BeffPatternKind::ring;
      std::set<int> seen(p.right.begin(), p.right.end());
      ASSERT_EQ(seen.size(), static_cast<std::size_t>(n)) << p.name;
      for (int r = 0; r < n; ++r) {
        EXPECT_NE(p.right[r], r) << p.name;
        EXPECT_EQ(p.left[p.right[r]], r) << p.name;
      }
    }
    EXPECT_EQ(static_cast<int>(ps.size()) - rings, 3);
    EXPECT_EQ(beff_patterns(n, 3, 7)[ps.size() - 1].right, ps.back().right);  // seeded
  }
  // 4 ranks: two rings of 2 and one of 4; 3 ranks: one ring of 3 (a ring of 2 would leave one).
  auto four = beff_patterns(4, 0, 1);
  ASSERT_EQ(four.size(), 2u);
  EXPECT_EQ(four[0].right, (std::vector<int>{1, 0, 3, 2}));
  EXPECT_EQ(four[1].right, (std::vector<int>{1, 2, 3, 0}));
  EXPECT_EQ(beff_patterns(3, 0, 1).size(), 1u);
  EXPECT_THROW(beff_patterns(1, 0, 1), UsageError);
}

TEST(BeffCliPatterns, SummaryIsTheLogAverageOfPerPatternAveragesOverSizes) {
  const auto ps = beff_patterns(4, 1, 1);  // ring-2, ring-4, random-1
  ASSERT_EQ(ps.size(), 3u);
  const std::vector<std::size_t> sizes{1, 2};
  // pattern -> bandwidth at sizes 1 and 2
  const std::map<std::string, std::pair<double, double>> b{
      {"ring-2", {10, 30}}, {"ring-4", {40, 120}}, {"random-1", {5, 15}}};
  std::vector<BeffRow> rows;
  for (const auto& [name, v] : b)
    for (std::size_t s : sizes) {
      BeffRow r;
      r.protocol = bulk::Protocol::pipeline;
      r.pattern = name;
      r.size = s;
      r.accumulated_mb_s = s == 1 ? v.first : v.second;
      rows.push_back(r);
    }
  BeffSummary s = summarize_beff(bulk::Protocol::pipeline, rows, ps, sizes);
  ASSERT_TRUE(s.unsupported.empty()) << s.unsupported;
  const double rings = std::sqrt(20.0 * 80.0), random = 10.0;
  EXPECT_NEAR(s.ring_avg, rings, 1e-9);
  EXPECT_NEAR(s.random_avg, random, 1e-9);
  EXPECT_NEAR(s.beff, std::sqrt(rings * random), 1e-9);
  EXPECT_NEAR(s.beff_lmax_rings, std::sqrt(30.0 * 120.0), 1e-9);
  EXPECT_NEAR(s.beff_lmax, std::sqrt(std::sqrt(30.0 * 120.0) * 15.0), 1e-9);
  rows.pop_back();
  EXPECT_FALSE(summarize_beff(bulk::Protocol::pipeline, rows, ps, sizes).unsupported.empty());
}

TEST(BeffCli, BadInputsGiveOneErrorLineAndExit2) {
  const std::vector<std::vector<std::string>> cases = {
      {"-n", "1"},
      {"-n", "65"},
      {"--protocol", "teleport"},
      {"--lmax", "2G"},
      {"--bytes", "0"},
      {"-S", "1K", "--lmax", "4M"},
      {"--random", "17"},
      {"-p", "nosuchprovider"},
  };
  for (const auto& extra : cases) {
    std::vector<std::string> args = {"fabflow", "bench", "beff"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = run_cli(args, 20s);
    EXPECT_EQ(r.status, 2) << extra[0] << " " << extra[1] << ": " << r.err;
    auto err = lines(r.err);
    ASSERT_EQ(err.size(), 1u) << r.err;
    EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
  }
}

}  // namespace
}  // namespace fabflow
