// Multi-process tests of `fabflow bench rr` through the CLI: all 8 pattern x model
// combinations reported (measured or refused with a reason), N:1 aggregate bandwidth, the
// empty-mailbox steps, the raw reference, bad inputs giving one error line and exit 2, and a
// requester or responder killed mid-run reported within a bounded time.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::lines;
using testing::run_bench_json;
using testing::run_cli;
using namespace std::chrono_literals;

std::string requests(const char* fallback) {
  const char* v = std::getenv("FABFLOW_RR_REQUESTS");
  return v && *v ? v : fallback;
}

void expect_measured(const nlohmann::json& j) {
  EXPECT_EQ(j["bench"], "rr");
  for (const char* k : {"pattern", "model", "topology", "requesters", "responders",
                        "response_bytes", "MBps", "requests_per_s", "latency_ns", "cpu"})
    ASSERT_TRUE(j.contains(k)) << k << " in " << j.dump();
  EXPECT_GT(j["MBps"].get<double>(), 0);
  EXPECT_GT(j["requests_per_s"].get<double>(), 0);
  for (const char* k : {"mean", "p50", "p90", "p99", "p999", "max"})
    EXPECT_GT(j["latency_ns"][k].get<double>(), 0) << k;
  for (const char* side : {"requester", "responder"}) {
    const auto& c = j["cpu"][side];
    EXPECT_GT(c["cpu_ns_per_msg"].get<double>(), 0) << side;
    // Hardware counters are a number where the machine has them, null where not.
    EXPECT_TRUE(c["instructions_per_msg"].is_null() || c["instructions_per_msg"].is_number());
    EXPECT_TRUE(c["cycles_per_msg"].is_null() || c["cycles_per_msg"].is_number());
  }
}

TEST(RrCli, AllPatternsAndModelsOnOneToOne) {
  for (const char* provider : {"shm", "tcp"}) {
    auto rows =
        run_bench_json("rr", {"-p", provider, "--pattern", "all", "--model", "all", "--topology",
                              "1:1", "-S", "64", "--requests", requests("300"), "--verify"});
    ASSERT_EQ(rows.size(), 8u) << provider;
    std::set<std::string> seen;
    for (const auto& j : rows) {
      seen.insert(j["pattern"].get<std::string>() + "/" + j["model"].get<std::string>());
      if (j.contains("unsupported")) {
        EXPECT_FALSE(j["unsupported"].get<std::string>().empty());
        continue;
      }
      expect_measured(j);
      EXPECT_EQ(j["verified"], true);
    }
    EXPECT_EQ(seen.size(), 8u) << provider;
  }
}

// --callgrind: Ir per message on both sides, and where the responder's went, shares that add up
// to the whole; without it the row says null.
TEST(RrCli, CallgrindReportsTheRespondersProfile) {
  if (::access("/usr/bin/valgrind", X_OK) != 0) GTEST_SKIP() << "valgrind is not installed";
  for (const char* provider : {"local", "shm"}) {
    auto rows = run_bench_json("rr", {"-p", provider, "--pattern", "SendSend", "-S", "4K",
                                      "--requests", "100", "-w", "10", "--callgrind"});
    ASSERT_EQ(rows.size(), 1u) << provider;
    const auto& j = rows[0];
    EXPECT_GT(j["cpu"]["responder"]["callgrind_ir_per_msg"].get<double>(), 0) << j.dump();
    const auto& prof = j["responder_profile"];
    ASSERT_TRUE(prof.is_object()) << j.dump();
    EXPECT_GT(prof["total_ir"].get<double>(), 0);
    double sum = 0;
    for (const char* place : {"transport", "libc", "fabflow", "other"}) {
      const double share = prof["share"][place].get<double>();
      EXPECT_GE(share, 0) << place;
      sum += share;
    }
    EXPECT_NEAR(sum, 1.0, 1e-9) << prof.dump();
    EXPECT_NEAR(prof["share"]["transport_and_libc"].get<double>(),
                prof["share"]["transport"].get<double>() + prof["share"]["libc"].get<double>(),
                1e-9);
    ASSERT_FALSE(prof["top"].empty());
    double previous = 1;
    for (const auto& f : prof["top"]) {
      EXPECT_FALSE(f["function"].get<std::string>().empty());
      EXPECT_LE(f["share"].get<double>(), previous);
      previous = f["share"].get<double>();
    }
  }
  auto plain = run_bench_json(
      "rr", {"-p", "local", "--pattern", "SendSend", "-S", "64", "--requests", "100"});
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_TRUE(plain[0]["responder_profile"].is_null());
}

TEST(RrCli, RefusedCombinationIsALineWithAReason) {
  auto rows = run_bench_json("rr", {"-p", "shm", "--pattern", "SendSend,WriteWrite", "--mailbox",
                                    "dense", "-S", "64", "--requests", "200"});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_NE(rows[0]["unsupported"].get<std::string>().find("dense"), std::string::npos);
  expect_measured(rows[1]);
}

TEST(RrCli, NToOneReportsAggregateBandwidth) {
  auto rows =
      run_bench_json("rr", {"-p", "tcp", "--topology", "N:1", "--requesters", "3", "-S", "1K",
                            "--requests", requests("500"), "--pattern", "WriteWrite,SendSend"});
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& j : rows) {
    expect_measured(j);
    EXPECT_EQ(j["requesters"], 3);
    EXPECT_EQ(j["responders"], 1);
    EXPECT_EQ(j["topology"], "N:1");
    EXPECT_EQ(j["requests"], 3 * std::stoi(requests("500")));
    EXPECT_EQ(j["requester_threads_per_responder"], 3.0);
  }
  // A SEND request has no mailbox to find empty.
  EXPECT_TRUE(rows[0]["empty_mailbox_share"].is_number()) << rows[0].dump();
  EXPECT_TRUE(rows[1]["empty_mailbox_share"].is_null()) << rows[1].dump();
}

TEST(RrCli, EmptyMailboxStepsAndRawReference) {
  auto rows = run_bench_json("rr", {"-p", "shm", "--topology", "N:M", "--requesters", "2",
                                    "--responders", "2", "--threads", "2", "--empty-mailboxes",
                                    "0,50,90", "-S", "4K", "--requests", requests("300")});
  ASSERT_EQ(rows.size(), 3u);
  std::uint64_t last = 0;
  for (const auto& j : rows) {
    expect_measured(j);
    EXPECT_GE(j["empty_mailboxes"].get<std::uint64_t>(), last);
    last = j["empty_mailboxes"].get<std::uint64_t>();
  }
  EXPECT_EQ(rows[0]["empty_mailboxes"], 0);
  EXPECT_EQ(rows[2]["empty_mailboxes"], 36);  // 2 requesters x 2 threads x depth 1 = 4 active
  for (const auto& j : rows) {
    EXPECT_EQ(j["requester_threads_per_responder"], 2.0);  // 2 x 2 over 2 responders
    // Every request was found by a scan, so there were at least as many scans as requests
    // answered by each responder in the fullest case, and the shares are fractions.
    EXPECT_GT(j["responder_scans"].get<std::uint64_t>(), 0u);
    EXPECT_GE(j["empty_scan_share"].get<double>(), 0.0);
    EXPECT_LT(j["empty_scan_share"].get<double>(), 1.0);
    EXPECT_LE(j["empty_mailbox_share"].get<double>(), 1.0);
  }
  // 36 of every responder's 40 mailboxes never hold a request: at least 90 % are read empty.
  EXPECT_GE(rows[2]["empty_mailbox_share"].get<double>(), 0.9) << rows[2].dump();

  // Idle requesters (Fig. 9b as the paper ran it): at 0 % no thread waits; at 60 % the waits
  // before 4 x 300 requests number about 1.5 per request (0 has odds of 0.4^1200).
  auto idle = run_bench_json(
      "rr", {"-p", "shm", "--topology", "N:1", "--requesters", "2", "--threads", "2",
             "--idle-requesters", "0,60", "-S", "4K", "--requests", "300", "-w", "20"});
  ASSERT_EQ(idle.size(), 2u);
  for (const auto& j : idle) expect_measured(j);
  EXPECT_EQ(idle[0]["idle_requesters_pct"], 0);
  EXPECT_EQ(idle[0]["idle_turns"], 0);
  EXPECT_EQ(idle[1]["idle_requesters_pct"], 60);
  EXPECT_EQ(idle[1]["idle_wait_ns"], 8000);
  EXPECT_GT(idle[1]["idle_turns"].get<std::uint64_t>(), 600u);
  EXPECT_LT(idle[1]["idle_turns"].get<std::uint64_t>(), 3600u);

  auto ref = run_bench_json(
      "rr", {"-p", "shm", "-S", "64", "--requests", requests("1000"), "--reference"});
  ASSERT_EQ(ref.size(), 1u);
  expect_measured(ref[0]);
  ASSERT_TRUE(ref[0]["raw_write_rtt_ns"].is_object());
  EXPECT_GT(ref[0]["raw_write_rtt_ns"]["p50"].get<double>(), 0);

  // Each row's reference is its own measurement, taken next to it (one copied into every row
  // would repeat the same mean and maximum to the nanosecond).
  auto two = run_bench_json("rr", {"-p", "local", "-S", "64", "--pattern", "WriteWrite,SendSend",
                                   "--requests", requests("1000"), "--reference"});
  ASSERT_EQ(two.size(), 2u);
  for (const auto& j : two) ASSERT_TRUE(j["raw_write_rtt_ns"].is_object());
  EXPECT_NE(two[0]["raw_write_rtt_ns"].dump(), two[1]["raw_write_rtt_ns"].dump());

  // The row and its reference run in interleaved rounds sharing the requests: every figure
  // pools all rounds (1000 = 250 x 4), the ratio is the median of the rounds' own.
  auto rounds = run_bench_json("rr", {"-p", "local", "-S", "64", "--requests", "1000",
                                      "--reference", "--reference-rounds", "4"});
  ASSERT_EQ(rounds.size(), 1u);
  const auto& r = rounds[0];
  EXPECT_EQ(r["reference_rounds"], 4);
  EXPECT_EQ(r["requests"], 1000);
  EXPECT_EQ(r["latency_ns"]["samples"], 1000);
  EXPECT_EQ(r["raw_write_rtt_ns"]["samples"], 1000);
  auto each = r["round_p50_vs_raw_write_p50"].get<std::vector<double>>();
  ASSERT_EQ(each.size(), 4u);
  std::sort(each.begin(), each.end());
  EXPECT_DOUBLE_EQ(r["p50_vs_raw_write_p50"].get<double>(), (each[1] + each[2]) / 2);
}

TEST(RrCli, BadInputsGiveOneErrorLineAndExit2) {
  const std::vector<std::vector<std::string>> cases = {
      {"--pattern", "ReadRead"},
      {"--model", "shared"},
      {"--topology", "2:3"},
      {"--topology", "1:1", "--requesters", "3"},
      {"--topology", "N:1", "--responders", "2"},
      {"--topology", "N:M", "--responders", "1"},
      {"-S", "5M"},
      {"-S", "0"},
      {"--request-bytes", "0"},
      {"--empty-mailboxes", "100"},
      {"--topology", "N:1", "--idle-requesters", "100"},
      {"--topology", "N:1", "--idle-requesters", "-5"},
      {"--idle-requesters", "50"},
      {"--topology", "N:1", "--reference"},
      {"--mailbox", "tiny"},
      {"-p", "nosuchprovider"},
  };
  for (const auto& extra : cases) {
    std::vector<std::string> args = {"fabflow", "bench", "rr"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = run_cli(args, 10s);
    ASSERT_FALSE(r.timed_out) << extra[1];
    EXPECT_EQ(r.status, 2) << extra[1] << ": " << r.err;
    auto err = lines(r.err);
    ASSERT_EQ(err.size(), 1u) << r.err;
    EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
  }
}

// Kills rank `victim` (0: a requester, 1: the responder) once the run is under way: the
// survivors report an error well within the launcher's bound instead of hanging.
void kill_rr_rank_mid_run(int victim, const char* pattern) {
  const auto run = testing::kill_rank_mid_run({"fabflow", "bench", "rr", "-p", "shm", "--pattern",
                                               pattern, "-S", "64", "--requests", "2000000000"},
                                              {victim, 700ms});
  ASSERT_NO_FATAL_FAILURE(testing::expect_one_error_line(run.result));
  EXPECT_LT(run.result.seconds, 12.0);
}

TEST(RrCliPeerDeath, ResponderKilledMidRun) {
  kill_rr_rank_mid_run(1, "WriteWrite");
  kill_rr_rank_mid_run(1, "SendSend");
}
TEST(RrCliPeerDeath, RequesterKilledMidRun) {
  kill_rr_rank_mid_run(0, "WriteWrite");
  kill_rr_rank_mid_run(0, "SendSend");
}

}  // namespace
}  // namespace fabflow
