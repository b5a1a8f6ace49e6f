// `fabflow bench inbound`: clients' one-sided operations and sends to one server, multi-process
// through the CLI on local, shm and tcp (whose msg endpoint has no atomics: one line per
// operation), the exactly-once checks of the counters and of the stamped sends, and bad input
// giving one line and exit status 2.
#include <fabflow/bench/inbound.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::lines;
using testing::run_cli;
using namespace std::chrono_literals;

std::vector<nlohmann::json> rows_of(const CliResult& r) {
  std::vector<nlohmann::json> out;
  for (const auto& line : lines(r.out)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(InboundPlacement, CounterOffsetsAndRegion) {
  EXPECT_EQ(counter_offsets(3, 64, Aliasing::none), (std::vector<std::uint64_t>{0, 64, 128}));
  auto same = counter_offsets(1, 8, Aliasing::same_low12);
  auto different = counter_offsets(1, 8, Aliasing::different_low12);
  ASSERT_EQ(same.size(), 2u);
  ASSERT_EQ(different.size(), 2u);
  EXPECT_EQ(same[0] % 4096, same[1] % 4096);
  EXPECT_NE(different[0] % 4096, different[1] % 4096);
  // Both pairs span two pages and two cache lines: only the 12 low bits differ.
  EXPECT_NE(same[0] / 4096, same[1] / 4096);
  EXPECT_NE(different[0] / 4096, different[1] / 4096);
  InboundParams p;
  p.ops = {Op::fadd};
  p.counters = {1, 1024};
  p.stride = 256;
  EXPECT_EQ(counter_region_bytes(p), 1024u * 256u);
  p.ops = {Op::read};
  EXPECT_EQ(counter_region_bytes(p), 0u);
}

struct Case {
  const char* provider;
  const char* endpoint;
};

class InboundCli : public ::testing::TestWithParam<Case> {};

// Every operation, two clients, two sizes / counter counts, the aliasing probe: every row
// complete, and each atomics row's counters sum to what the clients added.
TEST_P(InboundCli, EveryOperationAndTheExactlyOnceCheck) {
  const Case& c = GetParam();
  CliResult r =
      run_cli({"fabflow",  "bench",      "inbound", "-p",        c.provider, "-e",
               c.endpoint, "-o",         "all",     "--clients", "2",        "-S",
               "8,256",    "--counters", "1,64",    "--stride",  "64",       "--probe-aliasing",
               "-I",       "400",        "-w",      "50",        "--window", "8",
               "--json",   "--no-pin"},
              60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto rows = rows_of(r);
  // read, write, send x 2 sizes; fadd, cswap x (2 counter counts + 2 probe pairs).
  ASSERT_EQ(rows.size(), 14u) << r.out;
  int atomics = 0, probes = 0, sends = 0;
  for (const auto& j : rows) {
    EXPECT_EQ(j["bench"], "inbound");
    EXPECT_FALSE(j.contains("unsupported")) << j.dump();
    EXPECT_EQ(j["clients"], 2);
    EXPECT_EQ(j["ops"], 800);
    EXPECT_GT(j["ops_per_s"].get<double>(), 0);
    ASSERT_EQ(j["per_client"].size(), 2u);
    for (const auto& cl : j["per_client"]) {
      EXPECT_EQ(cl["ops"], 400);
      EXPECT_GT(cl["latency_ns"]["p50"].get<double>(), 0);
    }
    EXPECT_LE(j["latency_ns"]["p50"].get<double>(), j["latency_ns"]["p99"].get<double>());
    const std::string op = j["op"];
    if (op == "fadd" || op == "cswap") {
      ++atomics;
      EXPECT_EQ(j["type"], "atomics");
      EXPECT_EQ(j["exactly_once"], "passed") << j.dump();
      EXPECT_EQ(j["counter_sum"], j["expected_sum"]);
      if (op == "fadd") {
        EXPECT_EQ(j["expected_sum"], 2 * 450);  // warm-up counts too
      }
      if (op == "cswap") {
        EXPECT_GT(j["expected_sum"].get<std::uint64_t>(), 0u);
      }
      if (j["probe"].get<bool>()) {
        ++probes;
        EXPECT_EQ(j["counters"], 2);
      }
    } else if (op == "send") {
      ++sends;
      EXPECT_EQ(j["type"], "inbound");
      EXPECT_EQ(j["rate_of"], "server");
      EXPECT_EQ(j["sent"], 2 * 450);
      // 8-byte messages carry no stamp; 256-byte ones say whose and which they are.
      if (j["size_bytes"] == 256) {
        EXPECT_EQ(j["exactly_once"], "passed") << j.dump();
        EXPECT_EQ(j["received"], 2 * 450);
      } else {
        EXPECT_EQ(j["exactly_once"], "n/a") << j.dump();
      }
    } else {
      EXPECT_EQ(j["type"], "inbound");
      EXPECT_FALSE(j.contains("exactly_once"));
    }
  }
  EXPECT_EQ(sends, 2);
  EXPECT_EQ(atomics, 8);
  EXPECT_EQ(probes, 4);
  std::set<std::string> aliasing;
  for (const auto& j : rows)
    if (j.contains("aliasing")) aliasing.insert(j["aliasing"].get<std::string>());
  EXPECT_EQ(aliasing, (std::set<std::string>{"none", "same_low12", "different_low12"}));
}

INSTANTIATE_TEST_SUITE_P(Providers, InboundCli,
                         ::testing::Values(Case{"local", "auto"}, Case{"shm", "rdm"}),
                         [](const auto& info) { return std::string(info.param.provider); });

// tcp's msg endpoint has no atomics: one row per atomic operation saying why, read still runs.
TEST(InboundCliTcp, AtomicsUnsupportedLinesAndReads) {
  CliResult r =
      run_cli({"fabflow", "bench", "inbound", "-p", "tcp", "-e", "msg", "-o", "read,fadd,cswap",
               "--clients", "1", "-I", "200", "-w", "20", "--json", "--no-pin"},
              60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto rows = rows_of(r);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  int unsupported = 0;
  for (const auto& j : rows) {
    if (j.contains("unsupported")) {
      ++unsupported;
      EXPECT_EQ(j["type"], "atomics");
      EXPECT_NE(j["unsupported"].get<std::string>().find("atomics"), std::string::npos);
    } else {
      EXPECT_EQ(j["op"], "read");
      EXPECT_EQ(j["ops"], 200);
    }
  }
  EXPECT_EQ(unsupported, 2);
  // The table form: one line per operation.
  CliResult t = run_cli(
      {"fabflow", "bench", "inbound", "-p", "tcp", "-e", "msg", "-o", "fadd,cswap", "--no-pin"},
      30s);
  ASSERT_EQ(t.status, 0) << t.err;
  auto out = lines(t.out);
  ASSERT_EQ(out.size(), 2u) << t.out;
  for (const auto& line : out) EXPECT_NE(line.find("unsupported: "), std::string::npos) << line;
}

// Table 5's RECV half on tcp, connected and reliable-datagram endpoints: header-only and 32-byte
// sends from three clients, each window of receives posted per client, every stamped message
// read once.
TEST(InboundCliTcp, HeaderOnlyAndStampedSendsReachTheServerOnce) {
  for (const char* endpoint : {"msg", "rdm"}) {
    CliResult r =
        run_cli({"fabflow", "bench", "inbound", "-p",   "tcp",       "-e",     endpoint,
                 "-o",      "send",  "-S",      "0,32", "--clients", "3",      "--window",
                 "16",      "-I",    "300",     "-w",   "30",        "--json", "--no-pin"},
                60s);
    ASSERT_FALSE(r.timed_out) << r.err;
    ASSERT_EQ(r.status, 0) << endpoint << ": " << r.err;
    auto rows = rows_of(r);
    ASSERT_EQ(rows.size(), 2u) << r.out;
    EXPECT_EQ(rows[0]["size_bytes"], 0);
    EXPECT_EQ(rows[0]["exactly_once"], "n/a");
    EXPECT_EQ(rows[1]["size_bytes"], 32);
    EXPECT_EQ(rows[1]["exactly_once"], "passed") << rows[1].dump();
    for (const auto& j : rows) {
      EXPECT_EQ(j["ops"], 900);
      EXPECT_EQ(j["sent"], 990);
      EXPECT_GT(j["ops_per_s"].get<double>(), 0);
      EXPECT_GT(j["seconds"].get<double>(), 0);
    }
  }
}

void expect_usage_error(const std::vector<std::string>& args, const std::string& needle) {
  CliResult r = run_cli(args, 10s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_LT(r.seconds, 5.0);
  auto err = lines(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
  EXPECT_NE(err[0].find(needle), std::string::npos) << err[0];
}

TEST(InboundCliBadInput, OneLineAndExitTwo) {
  const std::vector<std::string> b = {"fabflow", "bench", "inbound", "-p", "local"};
  auto with = [&](std::vector<std::string> more) {
    auto v = b;
    v.insert(v.end(), more.begin(), more.end());
    return v;
  };
  expect_usage_error(with({"-o", "fadd", "--counters", "1M", "--stride", "512"}), "256M");
  expect_usage_error(with({"-o", "fadd", "--counters", "2M"}), "--counters");
  expect_usage_error(with({"-o", "fadd", "--counters", "0"}), "--counters");
  expect_usage_error(with({"-o", "fadd", "--stride", "12"}), "multiple of 8");
  expect_usage_error(with({"--clients", "0"}), "--clients");
  expect_usage_error(with({"--clients", "64"}), "--clients");
  expect_usage_error(with({"--clients", "two"}), "--clients");
  expect_usage_error(with({"-o", "writedata"}), "read, write, send, fadd and cswap");
  expect_usage_error(with({"-o", "send", "-S", "128K"}), "64K");
  expect_usage_error(with({"-o", "send,write", "-S", "0"}), "size 0");
  expect_usage_error(with({"-o", "fadd", "-S", "64"}), "8-byte");
  expect_usage_error(with({"-S", "8M"}), "4M");
  expect_usage_error({"fabflow", "bench", "inbound", "-p", "nosuch"}, "available:");
}

}  // namespace
}  // namespace fabflow
