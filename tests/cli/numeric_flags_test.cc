// Every numeric flag of every bench subcommand refuses what lies outside its declared range:
// -1, one past the maximum, a non-number and 0 where 0 is out of range each give one line
// naming the flag, the range and the value, exit code 2, within a second. The table below is
// checked against the help text, so a numeric flag added without a row here fails the test.
#include <gtest/gtest.h>

#include <atomic>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::lines;
using testing::run_cli;
using namespace std::chrono_literals;

struct NumericFlag {
  const char* name;  // long name
  const char* min;
  const char* max;
  const char* past_max;
};

struct Subcommand {
  const char* name;
  std::vector<NumericFlag> flags;
};

const std::vector<Subcommand>& table() {
  static const std::vector<Subcommand> t = {
      {"raw",
       {{"--timeout", "100", "3600000", "3600001"},
        {"--iterations", "1", "1000000000000", "1000000000001"},
        {"--duration", "0.001", "3600", "3600.5"},
        {"--warmup", "0", "1000000000000", "1000000000001"},
        {"--window", "1", "4096", "4097"},
        {"--signal", "1", "4096", "4097"},
        {"--batch", "1", "4096", "4097"},
        {"--queues", "1", "64", "65"},
        {"--threads", "1", "64", "65"}}},
      {"queue",
       {{"--timeout", "100", "3600000", "3600001"},
        {"--items", "2", "1000000000000", "1000000000001"},
        {"--round-trips", "1", "1000000000000", "1000000000001"},
        {"--warmup", "0", "1000000000000", "1000000000001"},
        {"--burst", "1", "4096", "4097"},
        {"--lazy-refresh", "0", "1", "1.5"},
        {"--recv-pool", "0", "16777216", "16777217"},
        {"--reference-rounds", "1", "1000", "1001"}}},
      {"rr",
       {{"--timeout", "100", "3600000", "3600001"},
        {"--reference-rounds", "1", "1000", "1001"},
        {"--requesters", "1", "63", "64"},
        {"--responders", "1", "63", "64"},
        {"--threads", "1", "64", "65"},
        {"--request-bytes", "1", "4194304", "4194305"},
        {"--requests", "1", "1000000000000", "1000000000001"},
        {"--warmup", "0", "1000000000000", "1000000000001"},
        {"--depth", "1", "64", "65"},
        {"--signal", "1", "64", "65"},
        {"--seed", "0", "9223372036854775807", "9223372036854775808"}}},
      {"seq",
       {{"--timeout", "100", "3600000", "3600001"},
        {"--workers", "1", "64", "65"},
        {"--clients", "1", "63", "64"},
        {"--outstanding", "1", "1024", "1025"},
        {"--batch", "1", "4096", "4097"},
        {"--queues", "1", "16", "17"},
        {"--requests", "1", "1000000000000", "1000000000001"},
        {"--warmup", "0", "1000000000000", "1000000000001"}}},
      {"inbound",
       {{"--timeout", "100", "3600000", "3600001"},
        {"--clients", "1", "63", "64"},
        {"--iterations", "1", "1000000000000", "1000000000001"},
        {"--warmup", "0", "1000000000000", "1000000000001"},
        {"--window", "1", "4096", "4097"},
        {"--stride", "8", "4096", "4097"},
        {"--seed", "0", "9223372036854775807", "9223372036854775808"}}},
      {"lat",
       {{"--timeout", "100", "3600000", "3600001"},
        {"--iterations", "1", "1000000000000", "1000000000001"},
        {"--reap-every", "1", "256", "257"},
        {"--recv-batch", "1", "64", "65"},
        {"--rate", "0", "1e+09", "2e9"},
        {"--rto-min", "1", "60000", "60001"},
        {"--warmup", "0", "1000000000000", "1000000000001"}}},
      {"kv",
       {{"--timeout", "100", "3600000", "3600001"},
        {"--servers", "1", "16", "17"},
        {"--workers", "1", "64", "65"},
        {"--clients", "1", "63", "64"},
        {"--keys", "1", "1073741824", "1073741825"},
        {"--value-size", "1", "4096", "4097"},
        {"--put-fraction", "0", "1", "1.5"},
        {"--zipf", "0", "0.99", "1"},
        {"--batch", "1", "4096", "4097"},
        {"--outstanding", "1", "256", "257"},
        {"--rate", "0", "1e+09", "2e9"},
        {"--requests", "1", "1000000000000", "1000000000001"},
        {"--warmup", "0", "1000000000000", "1000000000001"},
        {"--seed", "0", "9223372036854775807", "9223372036854775808"},
        {"--lock-lease", "1", "3600000", "3600001"}}},
      {"bulk",
       {{"--timeout", "100", "3600000", "3600001"},
        {"--reuse", "0", "1000000000000", "1000000000001"},
        {"--depth", "1", "64", "65"},
        {"--frag-growth", "1", "16", "16.5"},
        {"--window", "1", "64", "65"}}},
      {"beff",
       {{"--timeout", "100", "3600000", "3600001"},
        {"--ranks", "2", "64", "65"},
        {"--reuse", "0", "1000000000000", "1000000000001"},
        {"--max-iters", "2", "1000000000000", "1000000000001"},
        {"--random", "0", "16", "17"},
        {"--seed", "0", "9223372036854775807", "9223372036854775808"}}},
      {"xfer",
       {{"--timeout", "100", "3600000", "3600001"},
        {"--max-batches", "1", "1000000000000", "1000000000001"},
        {"--outstanding", "1", "4096", "4097"},
        {"--endpoints", "1", "16", "17"}}},
  };
  return t;
}

// The long names of the options whose help type is N or X (flags.h: numeric flags).
std::set<std::string> numeric_flags_in_help(const std::string& sub) {
  CliResult r = run_cli({"fabflow", "bench", sub, "--help"}, 10s);
  EXPECT_EQ(r.status, 0) << r.err;
  std::set<std::string> out;
  const std::regex option(R"(^\s+(?:-\w,)?(--[\w-]+) [NX]\s)");
  for (const auto& line : lines(r.out)) {
    std::smatch m;
    if (std::regex_search(line, m, option)) out.insert(m[1]);
  }
  return out;
}

TEST(NumericFlags, TableCoversEveryNumericFlagInTheHelp) {
  for (const auto& sub : table()) {
    std::set<std::string> mine;
    for (const auto& f : sub.flags) mine.insert(f.name);
    EXPECT_EQ(numeric_flags_in_help(sub.name), mine) << "bench " << sub.name;
  }
}

// Each CLI process here only parses its flags, but any process that loads libfabric spends about
// 0.2 s asleep at start (Debian's libfabric loads PSM's libinfinipath, whose constructor times
// the CPU clock with usleep): the runs go four at a time so those sleeps overlap.
TEST(NumericFlags, OutOfRangeValuesAreRefusedWithOneLine) {
  struct Case {
    const Subcommand* sub;
    const NumericFlag* flag;
    std::string value;
    CliResult result;
  };
  std::vector<Case> cases;
  for (const auto& sub : table())
    for (const auto& f : sub.flags) {
      std::vector<std::string> bad = {"-1", f.past_max, "many"};
      if (std::string(f.min) != "0") bad.push_back("0");
      for (auto& value : bad) cases.push_back({&sub, &f, std::move(value), {}});
    }
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> runners;
  for (int t = 0; t < 4; ++t)
    runners.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < cases.size();) {
        Case& c = cases[i];
        c.result = run_cli({"fabflow", "bench", c.sub->name, c.flag->name, c.value}, 5s);
      }
    });
  for (auto& t : runners) t.join();
  for (const Case& c : cases) {
    const CliResult& r = c.result;
    const std::string what =
        std::string("bench ") + c.sub->name + " " + c.flag->name + " " + c.value;
    ASSERT_FALSE(r.timed_out) << what;
    EXPECT_EQ(r.status, 2) << what << ": " << r.err;
    EXPECT_LT(r.seconds, 1.0) << what;
    auto err = lines(r.err);
    ASSERT_EQ(err.size(), 1u) << what << ": " << r.err;
    const std::string& line = err[0];
    EXPECT_EQ(line.rfind("fabflow: error: ", 0), 0u) << line;
    EXPECT_NE(line.find(c.flag->name), std::string::npos) << line;
    EXPECT_NE(line.find(std::string(c.flag->min) + ".." + c.flag->max), std::string::npos) << line;
    EXPECT_NE(line.find("'" + c.value + "'"), std::string::npos) << line;
  }
}

// The text flags that carry numbers are checked by their subcommand with the same one line.
TEST(NumericFlags, NumbersInsideTextFlagsAreRefused) {
  const std::vector<std::vector<std::string>> cases = {
      {"raw", "-S", "-1"},
      {"raw", "-S", "many"},
      {"queue", "--capacity", "-1"},
      {"queue", "-S", "-5"},
      {"rr", "--empty-mailboxes", "-3"},
      {"rr", "-S", "0"},
      {"inbound", "-S", "0"},
      {"inbound", "--counters", "0"},
      {"inbound", "--counters", "many"},
      {"xfer", "-S", "0"},
      {"xfer", "--batch", "many"},
      {"kv", "-S", "64"},
  };
  for (const auto& c : cases) {
    CliResult r = run_cli({"fabflow", "bench", c[0], c[1], c[2]}, 5s);
    ASSERT_FALSE(r.timed_out) << c[0] << " " << c[1];
    EXPECT_EQ(r.status, 2) << c[0] << " " << c[1] << " " << c[2] << ": " << r.err;
    auto err = lines(r.err);
    ASSERT_EQ(err.size(), 1u) << r.err;
    EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
  }
}

// Flags with one meaning have one name in every subcommand.
TEST(NumericFlags, SharedFlagsHaveTheSameNames) {
  for (const char* sub : {"raw", "queue", "rr", "seq"}) {
    CliResult r = run_cli({"fabflow", "bench", sub, "--help"}, 10s);
    for (const char* flag : {"-p,--provider", "-e,--endpoint", "-S,--size", "--progress", "--json",
                             "--no-pin", "--netns", "--timeout", "-w,--warmup", "--reference"})
      EXPECT_NE(r.out.find(flag), std::string::npos) << "bench " << sub << " lacks " << flag;
  }
  for (const char* sub : {"raw", "rr"}) {
    CliResult r = run_cli({"fabflow", "bench", sub, "--help"}, 10s);
    for (const char* flag : {"--signal N", "--inject TEXT:{off,on}"})
      EXPECT_NE(r.out.find(flag), std::string::npos) << "bench " << sub << " lacks " << flag;
  }
  CliResult lat = run_cli({"fabflow", "bench", "lat", "--help"}, 10s);
  for (const char* flag :
       {"-p,--provider", "-e,--endpoint", "-S,--size", "--json", "--no-pin", "--netns", "--timeout",
        "-w,--warmup", "-I,--iterations", "--inject TEXT:{off,on}[,..]"})
    EXPECT_NE(lat.out.find(flag), std::string::npos) << "bench lat lacks " << flag;
}

}  // namespace
}  // namespace fabflow
