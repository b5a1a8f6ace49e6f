// Multi-process tests of `fabflow bench kv` through the CLI: every design on local, shm and tcp
// measured with the verifying mode passed (or refused with its reason), two servers, the
// memcached reference, bad inputs giving one error line and exit 2, and a client or a server
// killed mid-run reported within a bounded time.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <map>
#include <set>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::lines;
using testing::run_bench_json;
using testing::run_cli;
using namespace std::chrono_literals;

TEST(KvCli, EveryDesignOnLocalShmTcpPassesTheVerifyingMode) {
  auto rows = run_bench_json("kv", {"-p",
                                    "local,shm,tcp",
                                    "--design",
                                    "all",
                                    "--clients",
                                    "2",
                                    "--workers",
                                    "2",
                                    "--outstanding",
                                    "2",
                                    "--keys",
                                    "500",
                                    "--put-fraction",
                                    "0.3",
                                    "--zipf",
                                    "0.9",
                                    "-I",
                                    "400",
                                    "-w",
                                    "50"});
  std::map<std::string, std::set<std::string>> seen;
  for (const auto& j : rows) {
    ASSERT_EQ(j["bench"], "kv");
    ASSERT_EQ(j["type"], "kv") << j.dump();
    const std::string provider = j["provider"], design = j["design"];
    seen[provider].insert(design);
    if (j.contains("unsupported")) {
      EXPECT_EQ(design, "atomic") << provider;
      EXPECT_NE(j["unsupported"].get<std::string>().find("cswap"), std::string::npos);
      continue;
    }
    EXPECT_TRUE(j["verified"].get<bool>()) << provider << " " << design << ": " << j["check"];
    EXPECT_EQ(j["check"], "passed");
    EXPECT_EQ(j["history_check"], "linearizable");
    EXPECT_EQ(j["requests"], 800);
    EXPECT_EQ(j["history_checked"], 900);  // warm-up included
    EXPECT_EQ(j["get"]["count"].get<int>() + j["put"]["count"].get<int>(), 800);
    EXPECT_GT(j["put"]["count"].get<int>(), 150);  // 30 % of 800, loosely
    EXPECT_GT(j["requests_per_s"].get<double>(), 0);
    EXPECT_GT(j["get"]["latency_ns"]["p50"].get<double>(), 0);
    EXPECT_GT(j["cpu_ns_per_op"]["client"].get<double>(), 0);
    if (design == "herd") {
      EXPECT_TRUE(j["reads_per_get"].is_null());
      EXPECT_GE(j["mean_batch"].get<double>(), 1.0);
      EXPECT_EQ(j["variant"], "herd-batched");
    } else if (design == "read") {
      EXPECT_GE(j["reads_per_get"].get<double>(), 2.0);
    } else {
      EXPECT_GE(j["reads_per_get"].get<double>(), 1.0);
      EXPECT_EQ(j["cache_misses"], 0);
    }
  }
  for (const char* p : {"local", "shm", "tcp"}) EXPECT_EQ(seen[p].size(), 3u) << p;
}

TEST(KvCli, TwoServersUnbatched) {
  auto rows =
      run_bench_json("kv", {"-p", "local", "--design", "herd,read", "--servers", "2", "--clients",
                            "2", "--batch", "1", "--keys", "300", "-I", "300", "-w", "30"});
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& j : rows) {
    EXPECT_EQ(j["check"], "passed") << j.dump();
    EXPECT_EQ(j["servers"], 2);
  }
  EXPECT_EQ(rows[0]["variant"], "herd-unbatched");
  EXPECT_EQ(rows[0]["mean_batch"], 1.0);
}

// scripts/setup.sh installs memcached: the reference must be measured, under the same
// workload, with every GET found whole.
TEST(KvCli, MemcachedReferenceBesideTheRows) {
  CliResult r =
      run_cli({"fabflow", "bench", "kv", "-p", "local", "--design", "read", "--clients", "2",
               "--keys", "2000", "-I", "2000", "-w", "100", "--reference", "memcached"},
              60s);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("reference: memcached"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check passed"), std::string::npos) << r.out;
  auto rows = run_bench_json(
      "kv", {"-p", "local", "--design", "herd", "--clients", "2", "--keys", "2000", "-I", "2000",
             "-w", "100", "--put-fraction", "0.3", "--zipf", "0.9", "--reference", "memcached"});
  ASSERT_EQ(rows.size(), 2u);
  const auto& m = rows[1];
  EXPECT_EQ(m["type"], "kv_reference");
  EXPECT_EQ(m["reference"], "memcached");
  ASSERT_EQ(m["skipped"], "") << m.dump();
  EXPECT_EQ(m["version"].get<std::string>().rfind("memcached ", 0), 0u) << m["version"];
  EXPECT_EQ(m["requests"], 4000);
  EXPECT_EQ(m["clients"], 2);
  EXPECT_GT(m["requests_per_s"].get<double>(), 0);
  EXPECT_GT(m["get_latency_ns"]["p50"].get<double>(), 0);
  EXPECT_EQ(m["gets"].get<int>() + m["puts"].get<int>(), 4000);
  EXPECT_GT(m["puts"].get<int>(), 800);  // 30 % of 4000, loosely
  EXPECT_EQ(m["misses"], 0);
  EXPECT_EQ(m["bad_values"], 0);
  EXPECT_EQ(m["keys"], 2000);
  EXPECT_EQ(m["zipf"], 0.9);
}

TEST(KvCli, MemcachedMissingIsSaidAndTheRunGoesOn) {
  CliResult r = run_cli({"fabflow", "bench", "kv", "-p", "local", "--design", "herd", "--clients",
                         "1", "--keys", "100", "-I", "100", "-w", "10", "--reference", "memcached"},
                        60s, {{"PATH", "/nonexistent"}});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("memcached not measured: 'memcached' not found on PATH"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("herd-batched"), std::string::npos) << r.out;
}

// The whole concurrent history of four clients, half PUTs on Zipf(0.99) keys, is linearizable
// on local, shm and tcp, for every design (issue 44, item 6); --check per-get runs the weaker
// check (tests/kv/linearizable_test.cc shows histories it passes and this one fails).
TEST(KvCli, FourClientsHalfPutsHotKeysAreLinearizable) {
  auto rows = run_bench_json(
      "kv", {"-p", "local,shm,tcp", "--design", "all", "--check", "linearizable", "--clients", "4",
             "--put-fraction", "0.5", "--zipf", "0.99", "--keys", "200", "-I", "300", "-w", "50",
             // Not a test of leases: one long enough for a loaded 2-core machine (docs/kv.md).
             "--lock-lease", "5000"});
  std::set<std::string> verified;
  for (const auto& j : rows) {
    if (j.contains("unsupported")) continue;
    EXPECT_EQ(j["history_check"], "linearizable");
    EXPECT_EQ(j["check"], "passed") << j["provider"] << " " << j["design"];
    EXPECT_EQ(j["history_checked"], 4 * 350);
    if (j["design"] == "atomic") EXPECT_EQ(j["lock_lease_ms"], 5000);
    if (j["verified"].get<bool>()) verified.insert(j["provider"].get<std::string>());
  }
  EXPECT_EQ(verified, (std::set<std::string>{"local", "shm", "tcp"}));
  auto per_get = run_bench_json("kv", {"-p", "local", "--design", "herd", "--check", "per-get",
                                       "--keys", "100", "-I", "200", "-w", "20"});
  ASSERT_EQ(per_get.size(), 1u);
  EXPECT_EQ(per_get[0]["history_check"], "per-get");
  EXPECT_EQ(per_get[0]["check"], "passed");
}

TEST(KvCli, BadInputsGiveOneErrorLineAndExit2) {
  const std::vector<std::vector<std::string>> cases = {
      {"--design", "btree"},    {"--clients", "0"},
      {"--servers", "0"},       {"--value-size", "0"},
      {"--put-fraction", "2"},  {"--zipf", "1.5"},
      {"--reference", "redis"}, {"-S", "64"},
      {"-p", "nosuchprovider"}, {"--check", "serializable"},
  };
  for (const auto& extra : cases) {
    std::vector<std::string> args = {"fabflow", "bench", "kv", "--keys", "100"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = run_cli(args, 10s);
    ASSERT_FALSE(r.timed_out) << extra[1];
    EXPECT_EQ(r.status, 2) << extra[1] << ": " << r.err;
    auto err = lines(r.err);
    ASSERT_EQ(err.size(), 1u) << r.err;
    EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
  }
}

// The seed's DrTM-KV emulation (--put-emulation two-atomics): a PUT is two compare-and-swaps
// and no WRITE, and stores nothing, so the history check (which reads PUTs' values back) is
// refused: the row says "not verified", and every GET must have returned the loaded value. The
// default PUT in the same run shape: a compare-and-swap that learns the item's word, the lock,
// the WRITE, the unlock, and the history checked. One client: no lock is ever contended, so
// the counts per PUT are exact.
TEST(KvCli, TwoAtomicsPutsAreTwoAtomicsAndRefuseTheHistoryCheck) {
  for (const char* emulation : {"two-atomics", "lock-write-unlock"}) {
    auto rows = run_bench_json(
        "kv", {"-p", "local", "--design", "atomic", "--clients", "1", "--keys", "500",
               "--put-fraction", "0.5", "-I", "400", "-w", "50", "--put-emulation", emulation});
    ASSERT_EQ(rows.size(), 1u) << emulation;
    const auto& j = rows[0];
    EXPECT_EQ(j["put_emulation"], emulation);
    EXPECT_GT(j["put"]["count"].get<int>(), 100) << j.dump();
    EXPECT_EQ(j["reads_per_get"], 1.0) << j.dump();
    if (std::string(emulation) == "two-atomics") {
      EXPECT_EQ(j["atomics_per_put"], 2.0) << j.dump();
      EXPECT_EQ(j["writes_per_put"], 0.0) << j.dump();
      EXPECT_FALSE(j["verified"].get<bool>());
      EXPECT_EQ(j["history_checked"], 0);
      EXPECT_EQ(
          j["check"].get<std::string>().rfind("not verified: two-atomics PUTs store no value", 0),
          0u)
          << j["check"];
    } else {
      EXPECT_EQ(j["atomics_per_put"], 3.0) << j.dump();
      EXPECT_EQ(j["writes_per_put"], 1.0) << j.dump();
      EXPECT_TRUE(j["verified"].get<bool>()) << j["check"];
      EXPECT_EQ(j["check"], "passed");
      EXPECT_EQ(j["history_checked"], 450);
    }
  }
}

// Only the atomic design has the emulation: a run that names another design is refused before
// anything starts, with one line.
TEST(KvCli, TwoAtomicsIsRefusedForOtherDesigns) {
  for (const char* design : {"all", "herd", "read", "atomic,read"}) {
    CliResult r = run_cli({"fabflow", "bench", "kv", "-p", "local", "--keys", "100", "--design",
                           design, "--put-emulation", "two-atomics"},
                          10s);
    ASSERT_FALSE(r.timed_out) << design;
    EXPECT_EQ(r.status, 2) << design << ": " << r.err;
    auto err = lines(r.err);
    ASSERT_EQ(err.size(), 1u) << r.err;
    EXPECT_NE(err[0].find("--put-emulation two-atomics"), std::string::npos) << err[0];
  }
  CliResult r = run_cli({"fabflow", "bench", "kv", "--put-emulation", "three-atomics"}, 10s);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
}

// Kills rank `victim` (2: the server of two clients, 1: a client) once the run is under way:
// the survivors report one error line well within the bound instead of hanging.
void kill_kv_rank_mid_run(int victim, const char* design) {
  const auto run = testing::kill_rank_mid_run(
      {"fabflow", "bench", "kv", "-p", "shm", "--design", design, "--clients", "2", "--keys",
       "1000", "-I", "2000000000", "--timeout", "2000"},
      {victim, 700ms});
  ASSERT_NO_FATAL_FAILURE(testing::expect_one_error_line(run.result));
  EXPECT_LT(run.result.seconds, 12.0);
}

TEST(KvCliPeerDeath, ServerKilledMidRun) {
  kill_kv_rank_mid_run(2, "herd");
  kill_kv_rank_mid_run(2, "atomic");
}
TEST(KvCliPeerDeath, ClientKilledMidRun) { kill_kv_rank_mid_run(1, "read"); }

}  // namespace
}  // namespace fabflow
