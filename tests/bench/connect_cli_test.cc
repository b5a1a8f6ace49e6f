// `fabflow bench connect` through the CLI: on local, shm and tcp every connection made and
// timed, every idle row held with what each side holds per peer; bad counts refused in one line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <map>
#include <string>

#include "support/run_cli.h"

namespace fabflow::connect_cli_test {
namespace {

using testing::run_bench_json;
using testing::run_cli;
using namespace std::chrono_literals;

TEST(ConnectCli, EveryConnectionIsTimedAndEveryIdlePeerCounted) {
  auto rows = run_bench_json(
      "connect", {"-p", "local,shm,tcp", "--connections", "30", "--warmup", "5", "--peers", "1,8"});
  std::map<std::string, int> connect_rows, idle_rows;
  for (const auto& j : rows) {
    ASSERT_EQ(j["bench"], "connect") << j.dump();
    const std::string provider = j["provider"];
    if (j["type"] == "connect_time") {
      ++connect_rows[provider];
      EXPECT_EQ(j["connections"], 30);
      EXPECT_EQ(j["latency_ns"]["samples"], 30);
      const double p50 = j["latency_ns"]["p50"];
      EXPECT_GT(p50, 1e3) << provider;  // a connection is more than a microsecond
      EXPECT_LE(p50, j["latency_ns"]["p99"].get<double>());
      EXPECT_NE(j["transport"].get<std::string>().find(provider), std::string::npos) << j.dump();
      continue;
    }
    ASSERT_EQ(j["type"], "idle_peers") << j.dump();
    ++idle_rows[provider];
    EXPECT_TRUE(j["failed"].is_null()) << j.dump();
    // Each idle peer holds something on both sides: at least one fd (its session's socket) and
    // its session's heartbeat thread.
    for (const char* side : {"server", "client"}) {
      EXPECT_GE(j[side]["fds_per_peer"].get<double>(), 1.0) << side << " " << j.dump();
      EXPECT_GE(j[side]["threads_per_peer"].get<double>(), 1.0) << side << " " << j.dump();
    }
  }
  for (const char* p : {"local", "shm", "tcp"}) {
    EXPECT_EQ(connect_rows[p], 1) << p;
    EXPECT_EQ(idle_rows[p], 2) << p;
  }
}

TEST(ConnectCli, BadCountsAreOneLine) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--peers", "0"},
                                                                {"--peers", "1,x"},
                                                                {"--peers", ","},
                                                                {"--connections", "0"},
                                                                {"-S", "64"}}) {
    std::vector<std::string> cmd{"fabflow", "bench", "connect", "-p", "local"};
    cmd.insert(cmd.end(), args.begin(), args.end());
    const auto r = run_cli(cmd, 20s);
    EXPECT_EQ(r.status, 2) << args[0] << " " << args[1] << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace fabflow::connect_cli_test
