// Provider profiles through the CLI: `fabflow info --profile NAME` prints every capability with
// its source; every bench family runs under every built-in profile on local, each design either
// verified or refused with one line naming what the profile lacks; bad profile input is one
// error line and exit 2.
#include <gtest/gtest.h>

#include <fabflow/profile.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/launcher_test_util.h"
#include "support/run_cli.h"

namespace fabflow {
namespace {

using launcher_test::TempDir;
using testing::CliResult;
using testing::expect_usage_line;
using testing::lines;
using testing::run_cli;
using namespace std::chrono_literals;

TEST(ProfileCli, InfoPrintsEveryCapabilityWithItsSource) {
  for (const auto& name : builtin_profile_names()) {
    CliResult r = run_cli({"fabflow", "info", "--profile", name, "--json"}, 30s);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["profile"], name);
    ASSERT_EQ(j["capabilities"].size(), 19u) << name;
    for (const auto& c : j["capabilities"])
      EXPECT_FALSE(c["source"].get<std::string>().empty()) << name << " " << c["field"];
    EXPECT_FALSE(j["fabflow_does"].empty());
    CliResult text = run_cli({"fabflow", "info", "--profile", name}, 30s);
    ASSERT_EQ(text.status, 0) << text.err;
    EXPECT_NE(text.out.find("source: "), std::string::npos);
    EXPECT_NE(text.out.find("What fabflow does about it:"), std::string::npos);
  }
}

TEST(ProfileCliBadInput, UnknownAndMalformedProfilesAreOneLine) {
  expect_usage_line(run_cli({"fabflow", "info", "--profile", "infiniband"}, 30s),
                    "unknown profile 'infiniband' (known: cxi, efa");
  expect_usage_line(
      run_cli({"fabflow", "bench", "queue", "-p", "local", "--profile", "infiniband"}, 30s),
      "unknown profile 'infiniband'");
  TempDir dir;
  const std::string bad = dir.file("bad.json");
  std::ofstream(bad) << R"({"name": "x", "provider": "y", "summary": "z", "capabilities": {}})";
  expect_usage_line(run_cli({"fabflow", "bench", "rr", "-p", "local", "--profile", bad}, 30s),
                    "capabilities.endpoint_types: missing");
}

// Every queue design point under every built-in profile on local (tcp msg for verbs-rc): a row
// each, verified (it
// has throughput) or unsupported with the profile's or the design's reason; nothing fails.
TEST(ProfileCli, EveryQueueDesignRunsOrIsRefusedUnderEveryProfile) {
  for (const auto& name : builtin_profile_names()) {
    // A profile of connected endpoints only (verbs-rc) runs over tcp's msg endpoints.
    const bool msg_only = !load_profile(name).has(EndpointType::rdm);
    const std::string provider = msg_only ? "tcp" : "local";
    std::vector<std::string> argv = {"fabflow", "bench", "queue", "-p", provider};
    if (msg_only) argv.insert(argv.end(), {"-e", "msg"});
    argv.insert(argv.end(), {"--profile", name, "--design", "all", "--items", "200", "--json"});
    CliResult r = run_cli(argv, 120s);
    ASSERT_EQ(r.status, 0) << name << ": " << r.err;
    int verified = 0, refused = 0;
    for (const auto& line : lines(r.out)) {
      const auto row = nlohmann::json::parse(line);
      if (row.contains("unsupported")) {
        ++refused;
        EXPECT_FALSE(row["unsupported"].get<std::string>().empty());
      } else {
        ++verified;
        EXPECT_EQ(row["provider"], provider + " as " + name);
        EXPECT_EQ(row["items"], 200) << name << " " << row["design"];
      }
    }
    EXPECT_EQ(verified + refused, 34) << name;  // 33 points and the socket reference
    EXPECT_GE(verified, 10) << name;
  }
}

// cxi has no fi_writedata: the immediate-data designs are refused by the profile, by name.
TEST(ProfileCli, TheProfileNamesWhatItLacks) {
  CliResult r = run_cli({"fabflow", "bench", "queue", "-p", "local", "--profile", "cxi", "--design",
                         "push1-imm-pull", "--items", "100", "--json"},
                        60s);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto row = nlohmann::json::parse(lines(r.out).at(0));
  EXPECT_EQ(row["unsupported"], "profile cxi (cxi) has no writedata (capabilities.ops)");
}

// cxi's receive queue holds 512 receives: a push2 ring the bench sizes itself (no --capacity)
// is sized down to it and runs; one of 1024 asked for is refused in one line naming the
// profile, its limit, what the design needs and the flags that lower it.
TEST(ProfileCli, APush2RingFitsTheProfilesReceiveQueueOrIsRefusedNamingIt) {
  CliResult fit = run_cli({"fabflow", "bench", "queue", "-p", "local", "--profile", "cxi",
                           "--design", "push2-event-pull", "--items", "200", "--json"},
                          60s);
  ASSERT_EQ(fit.status, 0) << fit.err;
  const auto row = nlohmann::json::parse(lines(fit.out).at(0));
  EXPECT_FALSE(row.contains("unsupported")) << row.dump();
  EXPECT_EQ(row["capacity"], 512);
  EXPECT_EQ(row["items"], 200);
  CliResult asked =
      run_cli({"fabflow", "bench", "queue", "-p", "local", "--profile", "cxi", "--design",
               "push2-event-pull", "--capacity", "1024", "--items", "200", "--json"},
              60s);
  ASSERT_EQ(asked.status, 0) << asked.err;
  EXPECT_EQ(nlohmann::json::parse(lines(asked.out).at(0))["unsupported"],
            "cxi profile: receive queue of 512, push2-event-pull needs 1024 receives posted (one "
            "per ring slot): lower --capacity or --recv-pool to 512");
}

// The other families under every profile: they complete, each design verified or refused
// with its reason (bulk on shm: local cannot register user memory for a peer, which the
// profiles' providers do; docs/portability.md). Family defaults, but kv's shorter run.
TEST(ProfileCli, OtherFamiliesRunUnderEveryProfile) {
  const std::vector<std::vector<std::string>> families = {
      {"rr", "-p", "local"},
      {"seq", "-p", "local"},
      {"kv", "-p", "local", "--design", "all", "--clients", "2", "--workers", "2", "--keys", "500",
       "-I", "200", "-w", "20"},
      {"bulk", "-p", "shm", "-S", "64,1M", "--bytes", "2M"}};
  for (const auto& name : builtin_profile_names()) {
    // A profile of connected endpoints only (verbs-rc) runs over tcp's msg endpoints.
    const bool msg_only = !load_profile(name).has(EndpointType::rdm);
    for (auto f : families) {
      if (msg_only) {
        f[2] = "tcp";  // {family, "-p", provider, ...}
        f.insert(f.begin() + 3, {"-e", "msg"});
      }
      std::vector<std::string> argv = {"fabflow", "bench"};
      argv.insert(argv.end(), f.begin(), f.end());
      argv.insert(argv.end(), {"--profile", name, "--json"});
      CliResult r = run_cli(argv, 120s);
      EXPECT_EQ(r.status, 0) << name << " " << f[0] << ": " << r.err;
      EXPECT_FALSE(r.out.empty()) << name << " " << f[0];
    }
  }
}

}  // namespace
}  // namespace fabflow
