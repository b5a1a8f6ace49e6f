// Multi-process tests of `fabflow bench bulk` through the CLI: every protocol on local, shm and
// tcp moves data (eager refused above its limit), the cache counters and the --reference
// columns are there, --mr-pin is labelled, buffer replacement reaches the registration cache,
// bad input is one error line and exit 2, RLIMIT_MEMLOCK too small for --mr-pin is one clear
// line, and userfaultfd denied turns the cache off with the reason while leave-pinned still works.
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

const std::set<std::string> kProtocols = {"copy",          "eager",           "rndv-write",
                                          "rndv-read",     "leave-pinned",    "pipeline",
                                          "pipeline-read", "caching-pipeline"};

TEST(BulkCli, EveryProtocolOnLocalShmTcpMovesData) {
  auto rows = run_bench_json(
      "bulk", {"-p", "local,shm,tcp", "--protocol", "all", "-S", "4K,300K", "--bytes", "1M"});
  std::map<std::string, std::set<std::string>> seen;  // provider -> protocols
  for (const auto& j : rows) {
    ASSERT_EQ(j["bench"], "bulk");
    ASSERT_EQ(j["type"], "bulk") << j.dump();
    const std::string provider = j["provider"], protocol = j["protocol"];
    const std::size_t size = j["size"];
    seen[provider].insert(protocol);
    EXPECT_TRUE(kProtocols.count(protocol)) << protocol;
    EXPECT_EQ(j["mr_pin"], false);
    EXPECT_EQ(j["reuse"], 0);
    EXPECT_EQ(j["eager_limit"], 16384);
    EXPECT_FALSE(j["cache_state"].get<std::string>().empty());
    EXPECT_FALSE(j["rendezvous_path"].get<std::string>().empty());
    if (protocol == "eager" && size > j["eager_limit"].get<std::size_t>()) {
      ASSERT_TRUE(j.contains("unsupported")) << j.dump();
      EXPECT_NE(j["unsupported"].get<std::string>().find("eager limit"), std::string::npos);
      continue;
    }
    ASSERT_FALSE(j.contains("unsupported"))
        << provider << " " << protocol << " " << size << ": " << j["unsupported"];
    EXPECT_GE(j["messages"].get<std::uint64_t>(), 4u);
    EXPECT_GT(j["pingpong_mb_s"].get<double>(), 0) << provider << " " << protocol;
    EXPECT_GT(j["half_rtt_us"].get<double>(), 0);
    EXPECT_GT(j["stream_mb_s"].get<double>(), 0) << provider << " " << protocol;
    EXPECT_GE(j["registrations_per_message"].get<double>(), 0);
    EXPECT_GT(j["cpu_ns_per_byte"]["sender"].get<double>(), 0);
    EXPECT_GT(j["cpu_ns_per_byte"]["receiver"].get<double>(), 0);
    for (const char* c : {"hits", "misses", "evictions", "invalidations"})
      EXPECT_TRUE(j["cache"][c].is_number_unsigned()) << protocol << " " << c;
    for (const char* side : {"stream_sender", "stream_receiver"})
      EXPECT_TRUE(j[side]["registrations"].is_number_unsigned()) << side;
    EXPECT_TRUE(j["memcpy_mb_s"].is_null());  // only with --reference
    EXPECT_TRUE(j["copy_pingpong_mb_s"].is_null());
    EXPECT_TRUE(j["raw_write_mb_s"].is_null());
  }
  for (const char* p : {"local", "shm", "tcp"}) EXPECT_EQ(seen[p], kProtocols) << p;
}

// A buffer replaced after every message (--reuse 1) is unmapped under the cache: with fabric
// RMA (shm registers; local moves by cross-memory attach and registers nothing) the cache of
// leave-pinned and caching-pipeline sees misses and invalidations, and registrations happen.
TEST(BulkCli, ReuseOneReachesTheRegistrationCache) {
  auto rows = run_bench_json("bulk", {"-p", "shm", "--protocol", "leave-pinned,caching-pipeline",
                                      "-S", "300K", "--bytes", "1M", "--reuse", "1"});
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& j : rows) {
    ASSERT_FALSE(j.contains("unsupported")) << j.dump();
    EXPECT_EQ(j["reuse"], 1);
    EXPECT_EQ(j["rendezvous_path"], "fabric RMA");
    EXPECT_EQ(j["cache_state"].get<std::string>().rfind("on", 0), 0u) << j["cache_state"];
    EXPECT_GT(j["cache"]["misses"].get<std::uint64_t>() +
                  j["cache"]["invalidations"].get<std::uint64_t>(),
              0u)
        << j["protocol"] << " " << j["cache"].dump();
    EXPECT_GT(j["registrations_per_message"].get<double>(), 0) << j["protocol"];
  }
}

TEST(BulkCli, ReferenceColumnsInTableAndJson) {
  CliResult r = run_cli({"fabflow", "bench", "bulk", "-p", "shm", "--protocol", "pipeline", "-S",
                         "300K", "--bytes", "1M", "--reference"},
                        60s);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("memcpy MB/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("raw write MB/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# registration cache: "), std::string::npos) << r.out;
  auto rows = run_bench_json("bulk", {"-p", "local,shm", "--protocol", "copy", "-S", "300K",
                                      "--bytes", "1M", "--reference"});
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& j : rows) {
    EXPECT_GT(j["memcpy_mb_s"].get<double>(), 0) << j["provider"];
    EXPECT_GT(j["copy_pingpong_mb_s"].get<double>(), 0) << j["provider"];
    // The raw write is measured, or refused with its reason.
    if (j["raw_write_mb_s"].is_null())
      EXPECT_FALSE(j["raw_write_unsupported"].get<std::string>().empty()) << j["provider"];
    else
      EXPECT_GT(j["raw_write_mb_s"].get<double>(), 0) << j["provider"];
  }
}

// --memory fabflow: both ranks' buffers are the channel's memory, registered once; on local a
// rendezvous is copied through the peer's mapping (mapped_bytes, no cross-memory attach), on
// shm nothing is registered per message. The ratio to memcpy is printed with --reference.
TEST(BulkCli, FabflowMemoryMovesDataWithoutRegistrationOrCrossMemoryAttach) {
  auto rows = run_bench_json("bulk", {"-p", "local,shm", "--protocol", "rndv-write,pipeline-read",
                                      "-S", "300K", "--bytes", "1M", "--memory", "fabflow"});
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& j : rows) {
    ASSERT_FALSE(j.contains("unsupported")) << j.dump();
    EXPECT_EQ(j["memory"], "fabflow");
    EXPECT_GT(j["stream_mb_s"].get<double>(), 0) << j.dump();
    EXPECT_EQ(j["registrations_per_message"].get<double>(), 0) << j.dump();
    if (j["provider"] == "local" &&
        j["rendezvous_path"].get<std::string>().rfind("cross-memory attach", 0) == 0) {
      EXPECT_EQ(j["stream_receiver"]["cma_bytes"].get<std::uint64_t>() +
                    j["stream_sender"]["cma_bytes"].get<std::uint64_t>(),
                0u)
          << j.dump();
      EXPECT_GT(j["stream_receiver"]["mapped_bytes"].get<std::uint64_t>() +
                    j["stream_sender"]["mapped_bytes"].get<std::uint64_t>(),
                0u)
          << j.dump();
    }
  }
  CliResult r = run_cli({"fabflow", "bench", "bulk", "-p", "local", "--protocol", "rndv-write",
                         "-S", "300K", "--bytes", "1M", "--memory", "fabflow", "--reference"},
                        60s);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("of memcpy pp|stream"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# buffers: the channel's memory"), std::string::npos) << r.out;
}

// --split-copy-min reaches the channel: on local between fabflow memories a read rendezvous of
// 2 MiB is copied by both ranks by default (the sender copies too) and by the receiver alone
// with 0; the JSON says which threshold ran.
TEST(BulkCli, SplitCopyMinTurnsSplitCopiesOnAndOff) {
  for (const char* min : {"", "0"}) {
    std::vector<std::string> args = {"-p", "local",   "--protocol", "rndv-read", "-S",
                                     "2M", "--bytes", "8M",         "--memory",  "fabflow"};
    if (*min) args.insert(args.end(), {"--split-copy-min", min});
    auto rows = run_bench_json("bulk", args);
    ASSERT_EQ(rows.size(), 1u) << min;
    const auto& j = rows[0];
    if (j["rendezvous_path"].get<std::string>().rfind("cross-memory attach", 0) != 0)
      GTEST_SKIP() << "cross-memory attach refused here: " << j["rendezvous_path"];
    const bool split = *min == '\0';
    EXPECT_EQ(j["split_copy_min"].get<std::size_t>(), split ? std::size_t{1} << 20 : 0u);
    EXPECT_EQ(j["stream_sender"]["mapped_bytes"].get<std::uint64_t>() > 0, split) << j.dump();
    EXPECT_GT(j["stream_receiver"]["mapped_bytes"].get<std::uint64_t>(), 0u) << j.dump();
  }
}

TEST(BulkCli, MrPinRunsAndIsLabelled) {
  auto rows = run_bench_json("bulk", {"-p", "shm", "--protocol", "rndv-write,pipeline,leave-pinned",
                                      "-S", "300K", "--bytes", "1M", "--mr-pin"});
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& j : rows) {
    ASSERT_FALSE(j.contains("unsupported")) << j.dump();
    EXPECT_EQ(j["mr_pin"], true);
    EXPECT_GT(j["pingpong_mb_s"].get<double>(), 0);
  }
  CliResult r = run_cli({"fabflow", "bench", "bulk", "-p", "shm", "--protocol", "pipeline", "-S",
                         "300K", "--bytes", "1M", "--mr-pin"},
                        60s);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("registration pinning (--mr-pin): on"), std::string::npos) << r.out;
}

TEST(BulkCli, BadInputsGiveOneErrorLineAndExit2) {
  const std::vector<std::vector<std::string>> cases = {
      {"--protocol", "carrier-pigeon"},
      {"-S", "2G"},
      {"--frag-size", "1000"},
      {"--eager-limit", "1M"},
      {"--depth", "0"},
      {"--window", "0"},
      {"-p", "nosuchprovider"},
      {"--bytes", "0"},
      {"--reuse", "-1"},
      {"--frag-growth", "0.5"},
      {"--memory", "gpu"},
      {"--memory", ""},
      {"--memory", "fabflow", "--reuse", "2"},
      {"--split-copy-min", "-1"},
      {"--split-copy-min", "1M,2M"},
  };
  for (const auto& extra : cases) {
    std::vector<std::string> args = {"fabflow", "bench", "bulk"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = run_cli(args, 10s);
    ASSERT_FALSE(r.timed_out) << extra[0] << " " << extra[1];
    EXPECT_EQ(r.status, 2) << extra[0] << " " << extra[1] << ": " << r.err;
    auto err = lines(r.err);
    ASSERT_EQ(err.size(), 1u) << extra[0] << " " << extra[1] << ": " << r.err;
    if (extra[0] == "--memory") {
      EXPECT_NE(err[0].find("--memory"), std::string::npos) << err[0];
    }
    EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
  }
}

// --mr-pin under an RLIMIT_MEMLOCK of 64 KiB: one line giving the limit and the need, a
// non-zero exit, no hang. shm registers (local would move by cross-memory attach).
TEST(BulkCli, MemlockTooSmallForMrPinIsOneClearLine) {
  // Without CAP_IPC_LOCK (root has it, and with it the kernel and verbs ignore the limit):
  // setpriv takes it out of the bounding set, so the bench and its ranks run without it.
  std::vector<std::string> args = {"/usr/bin/setpriv",
                                   "--bounding-set=-ipc_lock",
                                   "/usr/bin/prlimit",
                                   "--memlock=65536:65536",
                                   FABFLOW_BIN,
                                   "bench",
                                   "bulk",
                                   "-p",
                                   "shm",
                                   "--mr-pin",
                                   "--protocol",
                                   "rndv-write",
                                   "-S",
                                   "1M",
                                   "--bytes",
                                   "4M",
                                   "--timeout",
                                   "10000"};
  // Where bench bulk raises the limit itself (as root it may), it is told to keep it.
  if (run_cli({"fabflow", "bench", "bulk", "--help"}, 10s).out.find("--keep-memlock") !=
      std::string::npos)
    args.push_back("--keep-memlock");
  CliResult r = run_cli(args, 60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.status, 0);
  auto err = lines(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
  EXPECT_NE(err[0].find("RLIMIT_MEMLOCK is 65536 bytes"), std::string::npos) << err[0];
  EXPECT_NE(err[0].find("needs"), std::string::npos) << err[0];
  EXPECT_LT(r.seconds, 30.0);
}

// userfaultfd denied (FABFLOW_NO_USERFAULTFD=1): the cache is off with the reason, in the
// header and the JSON, and leave-pinned still moves data, registering every time.
TEST(BulkCli, UserfaultfdDeniedTurnsTheCacheOffWithTheReason) {
  const std::map<std::string, std::string> env = {{"FABFLOW_NO_USERFAULTFD", "1"}};
  auto rows = run_bench_json(
      "bulk",
      {"-p", "shm", "--protocol", "leave-pinned,caching-pipeline", "-S", "300K", "--bytes", "1M"},
      150s, env);
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& j : rows) {
    const std::string state = j["cache_state"];
    EXPECT_EQ(state.rfind("off", 0), 0u) << state;
    EXPECT_NE(state.find("FABFLOW_NO_USERFAULTFD"), std::string::npos) << state;
    ASSERT_FALSE(j.contains("unsupported")) << j.dump();
    EXPECT_GT(j["pingpong_mb_s"].get<double>(), 0);
    EXPECT_EQ(j["cache"]["hits"], 0);
    EXPECT_GT(j["registrations_per_message"].get<double>(), 0) << j["protocol"];
  }
  CliResult r = run_cli({"fabflow", "bench", "bulk", "-p", "shm", "--protocol", "leave-pinned",
                         "-S", "300K", "--bytes", "1M"},
                        60s, env);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("# registration cache: off: userfaultfd"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace fabflow
