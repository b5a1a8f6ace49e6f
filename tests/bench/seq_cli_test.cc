// Multi-process tests of `fabflow bench seq` through the CLI: every design on local, shm and
// tcp measured with the exactly-once check passed, or refused with its reason; the fetch-add
// reference; bad inputs giving one error line and exit 2; a client or the server killed
// mid-run reported within a bounded time.
#include <gtest/gtest.h>

#include <signal.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
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

TEST(SeqCli, EveryDesignOnLocalShmTcpPassesTheExactlyOnceCheck) {
  auto rows = run_bench_json(
      "seq", {"-p", "local,shm,tcp", "--design", "all", "--clients", "2", "--workers", "2",
              "--queues", "2", "--outstanding", "2", "-I", "300", "-w", "50"});
  std::map<std::string, std::set<std::string>> seen;  // provider -> designs
  for (const auto& j : rows) {
    ASSERT_EQ(j["bench"], "seq");
    ASSERT_EQ(j["type"], "sequencer") << j.dump();
    const std::string provider = j["provider"], design = j["design"];
    seen[provider].insert(design);
    if (j.contains("unsupported")) {
      // Only atomics may be missing (tcp has none); the reason names the operation.
      EXPECT_EQ(design, "atomic") << provider;
      EXPECT_NE(j["unsupported"].get<std::string>().find("fadd"), std::string::npos);
      continue;
    }
    EXPECT_TRUE(j["exactly_once"].get<bool>()) << provider << " " << design << ": " << j["check"];
    EXPECT_EQ(j["check"], "passed");
    EXPECT_EQ(j["requests"], 600);
    EXPECT_EQ(j["served"], 700);  // warm-up included
    EXPECT_EQ(j["counter_final"].get<std::uint64_t>() - j["counter_first"].get<std::uint64_t>(),
              700u);
    EXPECT_EQ(j["order_violations"], 0);
    EXPECT_GT(j["requests_per_s"].get<double>(), 0);
    EXPECT_GT(j["latency_ns"]["p50"].get<double>(), 0);
    EXPECT_GT(j["cpu_ns_per_request"]["client"].get<double>(), 0);
    if (design == "atomic") {
      EXPECT_TRUE(j["responses_per_batch"].is_null());
    } else {
      EXPECT_GE(j["responses_per_batch"].get<double>(), 1.0);
    }
    if (design == "spec") {
      EXPECT_EQ(j["spec_miss_fraction"].get<double>(), 0.0);
    }
    EXPECT_EQ(j["batching"], design == "rpc-batch" || design == "spec");
    // queues 2 marks multi-queue; atomics have no queues of their own.
    EXPECT_EQ(j["variant"], design == "atomic" ? design : design + "-multiqueue");
  }
  for (const char* p : {"local", "shm", "tcp"}) EXPECT_EQ(seen[p].size(), 4u) << p;
}

TEST(SeqCli, ReferenceRowAndRatioLine) {
  CliResult r = run_cli({"fabflow", "bench", "seq", "-p", "local", "--design", "rpc,atomic",
                         "--clients", "2", "-I", "300", "-w", "50", "--reference"},
                        60s);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("reference: bare fetch-add by 2 threads"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("passed"), std::string::npos) << r.out;
  auto rows = run_bench_json("seq", {"-p", "local", "--design", "atomic", "--clients", "2", "-I",
                                     "300", "-w", "50", "--reference"});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["type"], "sequencer_reference");
  EXPECT_EQ(rows[0]["threads"], 2);
  EXPECT_GT(rows[0]["ops_per_s"].get<double>(), 0);
  EXPECT_EQ(rows[1]["reference_ops_per_s"], rows[0]["ops_per_s"]);
}

TEST(SeqCli, BadInputsGiveOneErrorLineAndExit2) {
  const std::vector<std::vector<std::string>> cases = {
      {"--design", "paxos"}, {"--clients", "0"},         {"--workers", "0"},
      {"--queues", "17"},    {"--outstanding", "0"},     {"--batch", "0"},
      {"-S", "64"},          {"--respond", "sometimes"}, {"-p", "nosuchprovider"},
  };
  for (const auto& extra : cases) {
    std::vector<std::string> args = {"fabflow", "bench", "seq"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = run_cli(args, 10s);
    ASSERT_FALSE(r.timed_out) << extra[1];
    EXPECT_EQ(r.status, 2) << extra[1] << ": " << r.err;
    auto err = lines(r.err);
    ASSERT_EQ(err.size(), 1u) << r.err;
    EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
  }
}

// Kills rank `victim` (2: the server of two clients, 1: a client) once the run is under way:
// the survivors report an error well within the bound instead of hanging.
void kill_seq_rank_mid_run(int victim, const char* design) {
  const auto run =
      testing::kill_rank_mid_run({"fabflow", "bench", "seq", "-p", "shm", "--design", design,
                                  "--clients", "2", "-I", "2000000000", "--timeout", "2000"},
                                 {victim, 700ms});
  ASSERT_NO_FATAL_FAILURE(testing::expect_one_error_line(run.result));
  EXPECT_LT(run.result.seconds, 12.0);
}

TEST(SeqCliPeerDeath, ServerKilledMidRun) {
  kill_seq_rank_mid_run(2, "rpc-batch");
  kill_seq_rank_mid_run(2, "spec");
}
TEST(SeqCliPeerDeath, ClientKilledMidRun) {
  kill_seq_rank_mid_run(1, "rpc");
  kill_seq_rank_mid_run(1, "spec");
}

}  // namespace
}  // namespace fabflow
