// `fabflow bench xfer` through the CLI: every size, batch and direction measured on local, shm
// and tcp, with the memcpy reference; bad inputs giving one error line and exit 2.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <vector>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::lines;
using testing::run_cli;
using namespace std::chrono_literals;

class XferCli : public ::testing::TestWithParam<const char*> {};

TEST_P(XferCli, EverySizeBatchAndDirectionIsMeasured) {
  CliResult r =
      run_cli({"fabflow", "bench", "xfer", "-p", GetParam(), "-S", "4K,256K", "--batch", "1,8",
               "--direction", "write,read", "--bytes", "2M", "--reference", "--json"},
              120s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  std::set<std::tuple<std::size_t, std::size_t, std::string>> points;
  for (const auto& l : lines(r.out)) {
    const auto j = nlohmann::json::parse(l);
    ASSERT_EQ(j["bench"], "xfer");
    ASSERT_FALSE(j.contains("unsupported")) << l;
    const std::size_t size = j["size"], batch = j["batch"];
    points.insert({size, batch, j["direction"]});
    // At least 8 batches each, every transfer counted: bytes / seconds is the rate.
    ASSERT_GE(j["batches"].get<std::uint64_t>(), 8u) << l;
    const double bytes = static_cast<double>(size * batch) * j["batches"].get<double>();
    EXPECT_NEAR(j["mb_s"].get<double>(), bytes / j["seconds"].get<double>() / 1e6,
                j["mb_s"].get<double>() * 1e-6)
        << l;
    EXPECT_GT(j["transfers_per_s"].get<double>(), 0) << l;
    EXPECT_GT(j["batch_ns"]["p50"].get<double>(), 0) << l;
    EXPECT_GT(j["memcpy_mb_s"].get<double>(), 0) << l;
    // The two-sided best of the same size, measured in this run.
    EXPECT_GT(j["two_sided_mb_s"].get<double>(), 0) << l;
    EXPECT_NE(j["two_sided_protocol"].get<std::string>(), "eager") << l;
    EXPECT_TRUE(j["two_sided_phase"] == "pingpong" || j["two_sided_phase"] == "stream") << l;
    // The provider's raw write of the same size, same run (every engine transport writes).
    EXPECT_GT(j["raw_write_mb_s"].get<double>(), 0) << l;
    EXPECT_GE(j["cpu_ns_per_byte"]["initiator"].get<double>(), 0) << l;
  }
  EXPECT_EQ(points.size(), 8u) << r.out;
}

// --endpoints 2: the engine stripes a 1 MiB WRITE over both tcp endpoints; every byte is
// counted on one of them.
TEST(XferCliEndpoints, TwoEndpointsCarryTheBytes) {
  CliResult r = run_cli({"fabflow", "bench", "xfer", "-p", "tcp", "-S", "1M", "--endpoints", "2",
                         "--bytes", "16M", "--json"},
                        60s);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto rows = lines(r.out);
  ASSERT_EQ(rows.size(), 1u) << r.out;
  const auto j = nlohmann::json::parse(rows[0]);
  EXPECT_EQ(j["endpoints"], 2);
  const auto bytes = j["endpoint_bytes"].get<std::vector<std::uint64_t>>();
  ASSERT_EQ(bytes.size(), 2u);
  EXPECT_GT(bytes[0], 0u);
  EXPECT_GT(bytes[1], 0u);
  const std::uint64_t all = (1u << 20) * j["batches"].get<std::uint64_t>();
  EXPECT_GE(bytes[0] + bytes[1], all);  // the timed batches, and the untimed ones before
}

// --operation-size 0,256K on tcp: one point per size; a 1 MiB transfer goes as one operation
// by default (tcp's preferred size, 1 MiB) and as four when 256 KiB is asked for.
TEST(XferCliOperationSize, EachSizeIsAPointPostedInItsOperations) {
  CliResult r = run_cli({"fabflow", "bench", "xfer", "-p", "tcp", "-S", "1M", "--operation-size",
                         "0,256K", "--bytes", "16M", "--json"},
                        60s);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto rows = lines(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto j = nlohmann::json::parse(rows[i]);
    EXPECT_EQ(j["operation_size"], i == 0 ? 0u : 256u << 10) << rows[i];
    EXPECT_EQ(j["max_operation"], i == 0 ? 1u << 20 : 256u << 10) << rows[i];
    // The timed batches and the untimed tenth before them, one transfer each.
    const std::uint64_t n = j["batches"];
    const std::uint64_t transfers = n + std::max<std::uint64_t>(1, n / 10);
    const auto ops = j["endpoint_operations"].get<std::vector<std::uint64_t>>();
    ASSERT_EQ(ops.size(), 1u) << rows[i];
    EXPECT_EQ(ops[0], transfers * (i == 0 ? 1 : 4)) << rows[i];
  }
}

// --layout contiguous,scattered on tcp: one point per layout, in that order, over the same
// memory; 16 transfers of 64 KiB a batch, merged into one 1 MiB operation (tcp's preferred
// size) when contiguous, each an operation of its own when scattered.
TEST(XferCliLayout, EachLayoutIsAPoint) {
  CliResult r = run_cli({"fabflow", "bench", "xfer", "-p", "tcp", "-S", "64K", "--batch", "16",
                         "--layout", "contiguous,scattered", "--bytes", "8M", "--json"},
                        60s);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto rows = lines(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto j = nlohmann::json::parse(rows[i]);
    EXPECT_EQ(j["layout"], i == 0 ? "contiguous" : "scattered") << rows[i];
    const std::uint64_t n = j["batches"];
    const std::uint64_t batches = n + std::max<std::uint64_t>(1, n / 10);
    const auto ops = j["endpoint_operations"].get<std::vector<std::uint64_t>>();
    ASSERT_EQ(ops.size(), 1u) << rows[i];
    EXPECT_EQ(ops[0], batches * (i == 0 ? 1 : 16)) << rows[i];
    EXPECT_EQ(j["footprint_bytes"].get<std::uint64_t>() % ((i == 0 ? 1 : 2) * 16 * 65536), 0u)
        << rows[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, XferCli, ::testing::Values("local", "shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

TEST(XferCliBadInput, IsOneLine) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--batch", "0"}, "--batch takes transfer counts"},
      {{"--batch", "70000"}, "outside 1 B .. 1 GiB"},
      {{"-S", "512M", "--batch", "4"}, "outside 1 B .. 1 GiB"},
      {{"--direction", "sideways"}, "sideways"},
      {{"--layout", "diagonal"}, "diagonal"},
      {{"-p", "nosuch"}, "nosuch"},
      {{"--endpoints", "0"}, "--endpoints"},
      {{"--endpoints", "17"}, "--endpoints"},
      {{"--operation-size", "100"}, "--operation-size takes 0"},
      {{"--operation-size", "2G"}, "--operation-size takes 0"},
      {{"--operation-size", "big"}, "--operation-size takes sizes"},
  };
  for (const auto& [args, want] : cases) {
    std::vector<std::string> argv{"fabflow", "bench", "xfer"};
    argv.insert(argv.end(), args.begin(), args.end());
    CliResult r = run_cli(argv, 20s);
    EXPECT_EQ(r.status, 2) << args[0] << ": " << r.err;
    const auto err = lines(r.err);
    ASSERT_EQ(err.size(), 1u) << r.err;
    EXPECT_NE(err[0].find(want), std::string::npos) << err[0];
  }
}

}  // namespace
}  // namespace fabflow
