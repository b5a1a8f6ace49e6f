// `fabflow bench raw --threads N`: several initiator threads stream at once, each over its own
// endpoints; the rows carry the aggregate and every thread's share, say whether each thread had a
// core of its own, and bad input gives one error line.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "support/run_cli.h"

// A namespace of its own: the test files are compiled together in unity batches.
namespace fabflow::raw_threads_cli_test {
namespace {

using testing::CliResult;
using testing::lines;
using testing::run_cli;
using namespace std::chrono_literals;

std::size_t cpus_allowed() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return static_cast<std::size_t>(CPU_COUNT(&set));
}

struct ThreadsCase {
  const char* provider;
  const char* op;
  bool active_target;  // send / writedata: the target sinks in a thread per initiator thread
};

class RawThreadsCli : public ::testing::TestWithParam<ThreadsCase> {};

TEST_P(RawThreadsCli, EveryThreadStreamsAndTheRowSumsThem) {
  const ThreadsCase& c = GetParam();
  constexpr unsigned kThreads = 3;
  constexpr unsigned kIters = 1501;  // per thread; not a multiple of the window
  CliResult r = run_cli({"fabflow",
                         "bench",
                         "raw",
                         "-p",
                         c.provider,
                         "-o",
                         c.op,
                         "-t",
                         "bw",
                         "-S",
                         "64",
                         "-I",
                         std::to_string(kIters),
                         "-w",
                         "100",
                         "--window",
                         "16",
                         "--threads",
                         std::to_string(kThreads),
                         "--json"},
                        60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 1u) << r.out;
  auto j = nlohmann::json::parse(out[0]);
  EXPECT_EQ(j["type"], "bandwidth");
  EXPECT_EQ(j["threads"], kThreads);
  EXPECT_EQ(j["iterations"], kIters * kThreads);
  ASSERT_EQ(j["per_thread"].size(), kThreads) << out[0];
  double sum = 0, longest = 0;
  for (const auto& t : j["per_thread"]) {
    EXPECT_EQ(t["iterations"], kIters);
    EXPECT_GT(t["msgs_per_s"].get<double>(), 0);
    EXPECT_NEAR(t["MBps"].get<double>(), t["msgs_per_s"].get<double>() * 64 / 1e6,
                t["MBps"].get<double>() * 1e-9);
    sum += t["msgs_per_s"].get<double>();
    longest = std::max(longest, t["seconds"].get<double>());
  }
  // The aggregate spans every thread: all operations over the last thread's end.
  EXPECT_NEAR(j["seconds"].get<double>(), longest, longest * 1e-9);
  EXPECT_NEAR(j["msgs_per_s"].get<double>(), kIters * kThreads / longest,
              j["msgs_per_s"].get<double>() * 1e-9);
  EXPECT_LE(j["msgs_per_s"].get<double>(), sum * (1 + 1e-9));
  EXPECT_LE(j["thread_msgs_per_s"]["min"].get<double>(),
            j["thread_msgs_per_s"]["max"].get<double>());
  // A core for every busy thread: 3 initiator threads and 1 (passive) or 3 (active) target ones.
  const std::size_t busy = kThreads + (c.active_target ? kThreads : 1);
  EXPECT_EQ(j["threads_pinned"], cpus_allowed() >= busy) << out[0];
  std::set<int> distinct;
  for (const auto& t : j["per_thread"]) {
    const int cpu = t["cpu"];
    EXPECT_EQ(cpu >= 0, j["threads_pinned"].get<bool>());
    distinct.insert(cpu);
  }
  if (j["threads_pinned"].get<bool>()) {
    EXPECT_EQ(distinct.size(), kThreads);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Threads, RawThreadsCli,
    ::testing::Values(ThreadsCase{"local", "send", true}, ThreadsCase{"local", "write", false},
                      ThreadsCase{"shm", "writedata", true}, ThreadsCase{"shm", "read", false}),
    [](const auto& info) { return std::string(info.param.provider) + "_" + info.param.op; });

// One thread keeps the single-thread row, with its share.
TEST(RawThreadsCliOne, OneThreadRowCarriesItsShare) {
  CliResult r = run_cli({"fabflow", "bench", "raw", "-p", "local", "-o", "write", "-t", "bw", "-I",
                         "500", "-w", "50", "--json"},
                        60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(lines(r.out).at(0));
  EXPECT_EQ(j["threads"], 1);
  ASSERT_EQ(j["per_thread"].size(), 1u);
  EXPECT_EQ(j["per_thread"][0]["iterations"], 500);
  EXPECT_DOUBLE_EQ(j["per_thread"][0]["msgs_per_s"].get<double>(), j["msgs_per_s"].get<double>());
}

void expect_threads_failure(const std::vector<std::string>& args, const std::string& needle) {
  CliResult r = run_cli(args, 20s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.status, 0);
  auto err = lines(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
  EXPECT_NE(err[0].find(needle), std::string::npos) << err[0];
}

TEST(RawThreadsCliBadInput, ThreadsNeedTheBandwidthTestAndIterations) {
  expect_threads_failure({"fabflow", "bench", "raw", "-p", "local", "--threads", "2"}, "-t bw");
  expect_threads_failure({"fabflow", "bench", "raw", "-p", "local", "-t", "lat", "--threads", "2"},
                         "-t bw");
  expect_threads_failure(
      {"fabflow", "bench", "raw", "-p", "local", "-t", "bw", "--threads", "2", "-D", "1"},
      "--duration");
  expect_threads_failure({"fabflow", "bench", "raw", "-p", "local", "--threads", "0"}, "--threads");
  expect_threads_failure({"fabflow", "bench", "raw", "-p", "local", "--threads", "two"},
                         "--threads");
}

}  // namespace
}  // namespace fabflow::raw_threads_cli_test
