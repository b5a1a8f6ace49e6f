// `fabflow model pcie` through the CLI: the JSON fields and the seed's figures in them, the
// table, unsupported combinations as rows, the figure, and each bad input giving one error
// line and exit code 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::lines;
using testing::run_cli;
using namespace std::chrono_literals;

std::vector<nlohmann::json> json_lines(const CliResult& r) {
  std::vector<nlohmann::json> out;
  for (const auto& line : lines(r.out)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(ModelCli, JsonHasEveryFieldAndTheSeedsFigures) {
  CliResult r = run_cli(
      {"fabflow", "model", "pcie", "--transport", "ud", "-S", "60", "--batch", "1,16", "--json"},
      10s);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto rows = json_lines(r);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  for (const auto& j : rows) {
    for (const char* field : {"type",
                              "model",
                              "generation",
                              "lanes",
                              "op",
                              "transport",
                              "size_bytes",
                              "inline",
                              "inlined",
                              "method",
                              "batch",
                              "signal_every",
                              "wqe_bytes",
                              "wqe_lines",
                              "mmio_writes_per_op",
                              "h2d_bytes_per_op",
                              "d2h_bytes_per_op",
                              "limits_ops_per_s",
                              "ceiling_ops_per_s",
                              "bound",
                              "payload_MBps",
                              "link",
                              "fabflow_version"})
      EXPECT_TRUE(j.contains(field)) << field << " missing in " << j.dump();
    EXPECT_EQ(j["type"], "model");
    EXPECT_EQ(j["generation"], "gen3");
    EXPECT_EQ(j["lanes"], 16);
    EXPECT_EQ(j["wqe_lines"], 2);
    EXPECT_TRUE(j["limits_ops_per_s"]["nic"].is_null());
    EXPECT_NEAR(j["link"]["useful_dma_read_MBps"].get<double>(), 13443, 13443 * 0.05);
    EXPECT_NEAR(j["link"]["mmio_lines_per_s"].get<double>(), 175e6, 175e6 * 0.05);
  }
  EXPECT_EQ(rows[0]["method"], "mmio");
  EXPECT_EQ(rows[0]["bound"], "mmio");
  EXPECT_NEAR(rows[0]["ceiling_ops_per_s"].get<double>(), 87.5e6, 87.5e6 * 0.05);
  EXPECT_EQ(rows[1]["method"], "doorbell");
  EXPECT_EQ(rows[1]["bound"], "h2d");
  EXPECT_NEAR(rows[1]["ceiling_ops_per_s"].get<double>(), 105e6, 105e6 * 0.05);
}

TEST(ModelCli, TableAndUnsupportedRows) {
  CliResult r =
      run_cli({"fabflow", "model", "pcie", "-o", "all", "--transport", "ud", "-S", "0,60"}, 10s);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("PCIe gen3 x16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ceiling"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("unsupported: UD carries only send and recv"), std::string::npos) << r.out;

  r = run_cli({"fabflow", "model", "pcie", "-o", "read", "--transport", "ud", "--json"}, 10s);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto rows = json_lines(r);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].contains("unsupported"));
  EXPECT_FALSE(rows[0].contains("ceiling_ops_per_s"));
}

TEST(ModelCli, PlotWritesTheFigureWhereMatplotlibIsInstalled) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("fabflow-model-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string png = (dir / "pcie.png").string();
  CliResult r = run_cli({"fabflow", "model", "pcie", "--transport", "ud", "-S", "0,8,60,256,1K",
                         "--method", "mmio,doorbell", "--batch", "16", "--plot", png},
                        60s);
  const bool drawn = r.status == 0;
  if (drawn) {
    EXPECT_TRUE(std::filesystem::exists(png));
    EXPECT_TRUE(std::filesystem::exists(dir / "pcie.jsonl"));
  } else {
    EXPECT_EQ(r.status, 3) << r.err;  // no python3 or matplotlib: one line, the data kept
    EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
  }
  std::filesystem::remove_all(dir);
  if (!drawn) GTEST_SKIP() << "no figure drawn here: " << r.err;
}

TEST(ModelCli, BadInputIsOneErrorLineAndExitCode2) {
  const std::vector<std::vector<std::string>> cases = {
      {"--gen", "gen9"},     {"--gen", "gen3.5"}, {"--lanes", "0"},     {"--lanes", "64"},
      {"-S", "-5"},          {"-S", "4X"},        {"--batch", "0"},     {"--op", "fetch"},
      {"--transport", "dc"}, {"--signal", "0"},   {"--nic-mops", "-1"}, {"--plot", "out.jpg"}};
  for (const auto& args : cases) {
    std::vector<std::string> argv = {"fabflow", "model", "pcie"};
    argv.insert(argv.end(), args.begin(), args.end());
    CliResult r = run_cli(argv, 10s);
    const std::string what = args[0] + " " + args[1];
    EXPECT_EQ(r.status, 2) << what << ": " << r.err;
    EXPECT_EQ(r.out, "") << what;
    const auto err = lines(r.err);
    ASSERT_EQ(err.size(), 1u) << what << ": " << r.err;
    EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
  }
}

}  // namespace
}  // namespace fabflow
