// Multi-process tests of `fabflow bench raw` and `fabflow info` through the CLI: every
// operation on shm, tcp msg and tcp rdm; JSON fields; and every bad input giving one error
// line and a non-zero exit within 10 s.
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/run_cli.h"

// A namespace of its own: the test files are compiled together in unity batches.
namespace fabflow::raw_cli_test {
namespace {

using testing::CliResult;
using testing::lines;
using testing::run_cli;
using namespace std::chrono_literals;

struct Case {
  const char* provider;
  const char* endpoint;
  const char* op;
};

std::string label(const Case& c) {
  std::string s = std::string(c.provider) + "_" + c.endpoint + "_" + c.op;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

bool atomic(const std::string& op) { return op == "fadd" || op == "cswap"; }

class RawCli : public ::testing::TestWithParam<Case> {};

TEST_P(RawCli, RunsAndReportsEveryField) {
  const Case& c = GetParam();
  CliResult r = run_cli({"fabflow", "bench", "raw", "-p", c.provider, "-e", c.endpoint, "-o", c.op,
                         "-I", "300", "-w", "50", "--json"},
                        60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  if (std::string(c.provider) == "tcp" && std::string(c.endpoint) == "msg" && atomic(c.op)) {
    EXPECT_EQ(r.status, 2);
    auto err = lines(r.err);
    ASSERT_EQ(err.size(), 1u) << r.err;
    EXPECT_NE(err[0].find("atomics"), std::string::npos) << err[0];
    return;
  }
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  for (const auto& line : out) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["op"], c.op);
    EXPECT_EQ(j["endpoint"], c.endpoint);
    EXPECT_NE(j["provider"].get<std::string>().find(c.provider), std::string::npos);
    EXPECT_EQ(j["size_bytes"], atomic(c.op) ? 8 : 64);
    EXPECT_EQ(j["iterations"], 300);
    EXPECT_TRUE(j["instructions_per_msg"].is_null());
    if (j["type"] == "latency") {
      for (const char* k : {"mean", "p50", "p90", "p99", "p999", "max"}) {
        ASSERT_TRUE(j["latency_ns"].contains(k)) << k;
        EXPECT_GT(j["latency_ns"][k].get<double>(), 0) << k;
      }
      EXPECT_LE(j["latency_ns"]["p50"].get<double>(), j["latency_ns"]["p99"].get<double>());
      EXPECT_LE(j["latency_ns"]["p99"].get<double>(), j["latency_ns"]["max"].get<double>());
    } else {
      EXPECT_EQ(j["type"], "bandwidth");
      EXPECT_GT(j["MBps"].get<double>(), 0);
      EXPECT_GT(j["msgs_per_s"].get<double>(), 0);
    }
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (auto [p, e] : {std::pair{"shm", "rdm"}, std::pair{"tcp", "msg"}, std::pair{"tcp", "rdm"}})
    for (const char* op : {"send", "write", "writedata", "read", "fadd", "cswap"})
      cases.push_back({p, e, op});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Ops, RawCli, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return label(info.param); });

// Batches rotated over several endpoints (--queues): every queue's share arrives (the target
// counts them all), and the rows say how many queues, whether batching, and what the provider
// does with FI_MORE.
struct QueueCase {
  const char* provider;
  const char* op;
  const char* more_hint;
};

class RawQueuesCli : public ::testing::TestWithParam<QueueCase> {};

TEST_P(RawQueuesCli, BatchesRotateOverQueues) {
  const QueueCase& c = GetParam();
  // 1001 posts: the last batch is short and lands on the second of three queues.
  CliResult r =
      run_cli({"fabflow", "bench",   "raw",  "-p",       c.provider, "-o",       c.op,  "-t",
               "bw",      "-S",      "0,64", "-I",       "1001",     "-w",       "100", "--window",
               "16",      "--batch", "4",    "--signal", "3",        "--queues", "3",   "--json"},
              60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  for (const auto& line : out) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["type"], "bandwidth");
    EXPECT_EQ(j["queues"], 3);
    EXPECT_EQ(j["batch"], 4);
    EXPECT_EQ(j["batching"], true);
    EXPECT_EQ(j["more_hint"], c.more_hint);
    EXPECT_EQ(j["iterations"], 1001);
    EXPECT_GT(j["msgs_per_s"].get<double>(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Queues, RawQueuesCli,
    ::testing::Values(QueueCase{"local", "send", "ignored by transport (no doorbell)"},
                      QueueCase{"local", "writedata", "ignored by transport (no doorbell)"},
                      QueueCase{"shm", "send", "ignored by provider"},
                      QueueCase{"shm", "writedata", "ignored by provider"}),
    [](const auto& info) { return std::string(info.param.provider) + "_" + info.param.op; });

// Runs the CLI expecting a failure: one error line, non-zero exit, within 10 s.
void expect_one_line_failure(const std::vector<std::string>& args, const std::string& needle,
                             const std::map<std::string, std::string>& env = {}) {
  CliResult r = run_cli(args, 20s, env);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.status, 0);
  EXPECT_LT(r.seconds, 10.0);
  auto err = lines(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
  EXPECT_NE(err[0].find(needle), std::string::npos) << err[0];
}

TEST(RawCliBadInput, UnknownProviderListsAvailableOnes) {
  expect_one_line_failure({"fabflow", "bench", "raw", "-p", "nosuch"}, "available:");
}

TEST(RawCliBadInput, AtomicsOnTcpMsg) {
  expect_one_line_failure({"fabflow", "bench", "raw", "-p", "tcp", "-e", "msg", "-o", "fadd"},
                          "atomics");
}

TEST(RawCliBadInput, EndpointTypeTheProviderLacks) {
  expect_one_line_failure({"fabflow", "bench", "raw", "-p", "shm", "-e", "msg"}, "shm");
}

TEST(RawCliBadInput, BadSizesAndFlags) {
  // 0 bytes is a header-only send or writedata; any other operation refuses it.
  expect_one_line_failure({"fabflow", "bench", "raw", "-p", "shm", "-o", "read", "-S", "0"},
                          "size 0");
  expect_one_line_failure({"fabflow", "bench", "raw", "-p", "shm", "--queues", "0"}, "--queues");
  expect_one_line_failure({"fabflow", "bench", "raw", "-p", "shm", "-S", "12x"}, "size");
  expect_one_line_failure({"fabflow", "bench", "raw", "-p", "shm", "-S", "8G"}, "limit");
  expect_one_line_failure({"fabflow", "bench", "raw", "-p", "shm", "-o", "jump"}, "--op");
  expect_one_line_failure({"fabflow", "bench", "raw", "-p", "shm", "--window", "0"}, "window");
  expect_one_line_failure({"fabflow", "bench", "raw", "-p", "shm", "-o", "fadd", "-S", "64"},
                          "8-byte");
  expect_one_line_failure({"fabflow", "bench", "raw", "--bogus"}, "bogus");
}

TEST(RawCliBadInput, UnreachableCoordinator) {
  expect_one_line_failure({"fabflow", "bench", "raw", "-p", "shm"}, "cannot reach",
                          {{"FABFLOW_RANK", "1"},
                           {"FABFLOW_SIZE", "2"},
                           {"FABFLOW_COORD", "127.0.0.1:1"},
                           {"FABFLOW_SECRET", "s3cret"},
                           {"FABFLOW_BOOTSTRAP_TIMEOUT_MS", "2000"}});
}

TEST(RawCliBadInput, WrongSecretIsRejected) {
  std::string coord = "127.0.0.1:" + std::to_string(testing::free_loopback_port());
  std::map<std::string, std::string> env0{{"FABFLOW_RANK", "0"},
                                          {"FABFLOW_SIZE", "2"},
                                          {"FABFLOW_COORD", coord},
                                          {"FABFLOW_SECRET", "right"},
                                          {"FABFLOW_BOOTSTRAP_TIMEOUT_MS", "4000"}};
  CliResult r0;
  std::thread rank0([&] { r0 = run_cli({"fabflow", "bench", "raw", "-p", "shm"}, 20s, env0); });
  auto env1 = env0;
  env1["FABFLOW_RANK"] = "1";
  env1["FABFLOW_SECRET"] = "wrong";
  // Rank 0 may not listen yet: the joiner retries until its timeout.
  expect_one_line_failure({"fabflow", "bench", "raw", "-p", "shm"}, "secret", env1);
  rank0.join();
  EXPECT_FALSE(r0.timed_out);
  EXPECT_NE(r0.status, 0);
  EXPECT_LT(r0.seconds, 10.0);
}

// One rank is SIGKILLed mid-run: one error line, a bounded time, and no shm region of either
// rank left in /dev/shm (the launcher removes the killed rank's).
void kill_raw_rank_mid_run(int victim) {
  const auto run = testing::kill_rank_mid_run(
      {"fabflow", "bench", "raw", "-p", "shm", "-o", "send", "-t", "lat", "-I", "2000000000"},
      {victim, 500ms});
  ASSERT_NO_FATAL_FAILURE(testing::expect_one_error_line(run.result));
  EXPECT_LT(run.result.seconds, 12.0);
  EXPECT_EQ(run.ranks.size(), 2u);
  for (pid_t pid : run.ranks)
    EXPECT_EQ(testing::shm_regions_of(pid), std::vector<std::string>{}) << "rank pid " << pid;
}

TEST(RawCliBadInput, TargetKilledMidRun) { kill_raw_rank_mid_run(1); }
TEST(RawCliBadInput, InitiatorKilledMidRun) { kill_raw_rank_mid_run(0); }

TEST(InfoCli, ListsLocalTcpAndShmWithInjectSizes) {
  CliResult r = run_cli({"fabflow", "info", "--json"}, 30s);
  ASSERT_EQ(r.status, 0) << r.err;
  bool tcp = false, shm = false, local = false;
  for (const auto& line : lines(r.out)) {
    auto j = nlohmann::json::parse(line);
    ASSERT_TRUE(j.contains("inject_size"));
    tcp |= j["provider"] == "tcp" && j["inject_size"].get<int>() > 0;
    shm |= j["provider"] == "shm" && j["inject_size"].get<int>() > 0;
    local |= j["provider"] == "local" && j["inject_size"].get<int>() > 0;
  }
  EXPECT_TRUE(tcp);
  EXPECT_TRUE(shm);
  EXPECT_TRUE(local) << r.out;
  CliResult table = run_cli({"fabflow", "info"}, 30s);
  ASSERT_EQ(table.status, 0);
  EXPECT_NE(table.out.find("shm"), std::string::npos);
  EXPECT_NE(table.out.find("\nlocal "), std::string::npos) << table.out;
}

TEST(RawCliDuration, CalibratesIterationsToTheDuration) {
  CliResult r = run_cli({"fabflow", "bench", "raw", "-p", "shm", "-o", "send", "-S", "64,1K", "-D",
                         "0.2", "-w", "200", "--json"},
                        60s);
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 4u) << r.out;
  for (const auto& line : out) {
    auto j = nlohmann::json::parse(line);
    EXPECT_GE(j["iterations"].get<std::uint64_t>(), 100u) << line;
  }
}

TEST(RawCliReference, FiPingpongRunsBesideFabflow) {
  CliResult r = run_cli({"fabflow", "bench", "raw", "-p", "shm", "-o", "send", "-I", "2000", "-t",
                         "lat", "--reference", "--json"},
                        60s);
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  auto ref = nlohmann::json::parse(out[1]);
  EXPECT_EQ(ref["type"], "reference");
  EXPECT_EQ(ref["tool"], "fi_pingpong");
  EXPECT_EQ(ref["size_bytes"], 64);
  EXPECT_GT(ref["usec_per_xfer"].get<double>(), 0);
  EXPECT_GT(ref["ratio"].get<double>(), 0);
}

TEST(RawCliNetns, TcpAcrossNamespaces) {
  if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  CliResult r = run_cli({"fabflow", "bench", "raw", "-p", "tcp", "-o", "send,write", "-I", "300",
                         "-w", "50", "--netns", "--json"},
                        60s);
  if (r.status == 2 && r.err.find("--netns") != std::string::npos)
    GTEST_SKIP() << "namespaces unavailable here: " << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines(r.out).size(), 4u) << r.out;
}

}  // namespace
}  // namespace fabflow::raw_cli_test
