// `fabflow experiment list|run` and `fabflow report` through the CLI: listing a catalogue with
// statuses, one-line errors (unknown id, unknown bench flag, unwritable -o, empty report folder)
// before anything runs, and one tiny real experiment end to end on the local transport.
#include <fabflow/version.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "support/launcher_test_util.h"
#include "support/run_cli.h"

namespace fabflow {
namespace {

namespace fs = std::filesystem;
using launcher_test::TempDir;
using testing::CliResult;
using testing::lines;
using testing::run_cli;
using namespace std::chrono_literals;

const fs::path kSource = fs::path(__FILE__).parent_path().parent_path().parent_path();
const std::string kCatalogue = (kSource / "tests" / "bench" / "catalogue").string();

// `fabflow experiment <args>`.
CliResult experiment(std::vector<std::string> args, std::chrono::seconds timeout = 20s,
                     const std::map<std::string, std::string>& env = {}) {
  args.insert(args.begin(), {"fabflow", "experiment"});
  return run_cli(args, timeout, env);
}

void expect_one_error_line(const CliResult& r, int status,
                           const std::vector<std::string>& needles) {
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, status) << r.err;
  auto err = lines(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
  for (const auto& n : needles)
    EXPECT_NE(err[0].find(n), std::string::npos) << n << " in " << err[0];
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(ExperimentCli, ListShowsEveryIdWithItsFidelity) {
  CliResult r = experiment({"list", "--catalogue", kCatalogue});
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 6u) << r.out;
  EXPECT_EQ(out[0].rfind("900  ", 0), 0u) << out[0];
  auto has = [&](const std::string& line, const std::string& first, const std::string& second) {
    EXPECT_NE(line.find(first), std::string::npos) << line;
    EXPECT_NE(line.find(second), std::string::npos) << line;
  };
  has(out[1], "900-tiny", "faithful");
  has(out[2], "900-later", "not_measurable");
  has(out[3], "", "not measurable here: waits for a second host");
  has(out[4], "900-elsewhere", "not_measurable");
  has(out[5], "", "not measurable here: needs an RDMA NIC");

  r = experiment({"list", "--json"}, 20s, {{"FABFLOW_CATALOGUE", kCatalogue}});
  ASSERT_EQ(r.status, 0) << r.err;
  auto json = lines(r.out);
  ASSERT_EQ(json.size(), 3u) << r.out;
  auto first = nlohmann::json::parse(json[0]);
  EXPECT_EQ(first["id"], "900-tiny");
  EXPECT_EQ(first["runnable"], true);
  EXPECT_EQ(first["fidelity"], "faithful");
  EXPECT_EQ(nlohmann::json::parse(json[1])["fidelity_note"], "waits for a second host");
}

TEST(ExperimentCli, UnknownIdExitsTwoBeforeRunning) {
  TempDir out;
  CliResult r = experiment(
      {"run", "900-tiny,900-nosuch", "--catalogue", kCatalogue, "-o", out.file("results")});
  expect_one_error_line(r, 2, {"'900-nosuch'"});
  EXPECT_FALSE(fs::exists(out.file("results")));
}

TEST(ExperimentCli, NamedEntryThatCannotRunExitsTwo) {
  CliResult r = experiment({"run", "900-later", "--catalogue", kCatalogue});
  expect_one_error_line(r, 2, {"900-later", "waits for a second host"});
}

TEST(ExperimentCli, UnknownBenchFlagNamesFileEntryAndFlag) {
  TempDir dir;
  std::ifstream in(kCatalogue + "/900.json");
  auto cat = nlohmann::ordered_json::parse(in);
  cat["experiments"][0]["args"]["--no-such-flag"] = "1";
  std::ofstream(dir.file("900.json")) << cat.dump(2);
  CliResult r = experiment({"run", "all", "--catalogue", dir.path(), "-o", dir.file("results")});
  expect_one_error_line(r, 2, {dir.file("900.json"), "'900-tiny'", "--no-such-flag"});

  // A hidden option of the launched ranks is not a catalogue flag either.
  cat = nlohmann::ordered_json::parse(std::ifstream(kCatalogue + "/900.json"));
  cat["experiments"][0]["quick"]["args"] = {{"--launched-op", "write"}};
  std::ofstream(dir.file("900.json")) << cat.dump(2);
  r = experiment({"run", "900-tiny", "--catalogue", dir.path()});
  expect_one_error_line(r, 2, {"--launched-op"});
}

TEST(ExperimentCli, FlagGivenOrDeniedAValueAgainstItsKind) {
  TempDir dir;
  auto cat = nlohmann::ordered_json::parse(std::ifstream(kCatalogue + "/900.json"));
  cat["experiments"][0]["args"]["--reference"] = "yes";
  std::ofstream(dir.file("900.json")) << cat.dump(2);
  CliResult r = experiment({"run", "900-tiny", "--catalogue", dir.path()});
  expect_one_error_line(r, 2, {"--reference takes no value"});

  cat = nlohmann::ordered_json::parse(std::ifstream(kCatalogue + "/900.json"));
  cat["experiments"][0]["args"]["--window"] = "";
  std::ofstream(dir.file("900.json")) << cat.dump(2);
  r = experiment({"run", "900-tiny", "--catalogue", dir.path()});
  expect_one_error_line(r, 2, {"--window needs a value"});
}

TEST(ExperimentCli, DryRunPrintsTheCommandLinesOnly) {
  TempDir dir;
  CliResult r = experiment(
      {"run", "all", "--quick", "--dry-run", "--catalogue", kCatalogue, "-o", dir.file("results")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines(r.out),
            (std::vector<std::string>{
                "900-tiny: fabflow bench raw -o write -I 200 -w 50 -S 64 -p shm --json",
                "900-tiny: reference 'PCIe limit (model)' ({\"op\":\"write\"}): fabflow model "
                "pcie -o write --transport rc -S 64",
                "900-later: not run: not measurable here: waits for a second host",
                "900-elsewhere: not run: not measurable here: needs an RDMA NIC"}));
  EXPECT_FALSE(fs::exists(dir.file("results")));
}

// The repository's catalogue (experiments/) against the real CLI: every runnable entry's flags
// exist and take values as given.
TEST(ExperimentCli, RepositoryCatalogueMatchesTheCli) {
  if (!fs::is_directory(kSource / "experiments")) GTEST_SKIP() << "no experiments/ in this tree";
  const std::string catalogue = (kSource / "experiments").string();
  CliResult r = experiment({"run", "all", "--dry-run", "--catalogue", catalogue});
  EXPECT_EQ(r.status, 0) << r.err;
  r = experiment({"run", "all", "--quick", "--dry-run", "--catalogue", catalogue});
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST(ExperimentCli, UnwritableOutputFolder) {
  TempDir dir;
  std::ofstream(dir.file("a-file")) << "x";
  // Below a regular file: fails even for root, unlike a permission bit.
  CliResult r = experiment({"run", "900-tiny", "--catalogue", kCatalogue, "-p", "local", "-o",
                            dir.file("a-file/results")});
  expect_one_error_line(r, 2, {"-o " + dir.file("a-file/results")});
}

TEST(ExperimentCli, ReportNeedsAFolderWithJsonl) {
  TempDir dir;
  expect_one_error_line(run_cli({"fabflow", "report", dir.file("nope")}, 20s), 2, {"not a folder"});
  expect_one_error_line(run_cli({"fabflow", "report", dir.path()}, 20s), 2, {"has no .jsonl"});
}

TEST(ExperimentCli, FailedOrStoppedPointIsReportedAndTheRunGoesOn) {
  TempDir dir;
  auto cat = nlohmann::ordered_json::parse(std::ifstream(kCatalogue + "/900.json"));
  auto tiny = cat["experiments"][0];
  auto bad = tiny;
  bad["id"] = "900-bad";
  bad["args"]["-o"] = "nosuch";
  auto slow = tiny;
  slow["id"] = "900-slow";
  slow["args"] = {{"-o", "write"}, {"-t", "bw"}, {"-D", "60"}};
  slow["sweep"] = nlohmann::ordered_json::array();
  slow.erase("quick");
  slow.erase("reference");  // its x, -S, is no longer swept
  cat["experiments"] = {bad, slow, tiny};
  std::ofstream(dir.file("900.json")) << cat.dump(2);
  const std::string out = dir.file("results");
  // The slow point would run 60 s; 5 s stops it while leaving the tiny point (under a
  // second in a release build) room under the sanitizers on a loaded machine.
  CliResult r = experiment({"run", "900-bad,900-slow,900-tiny", "--quick", "--catalogue",
                            dir.path(), "-p", "local", "-o", out, "--point-timeout", "5"},
                           60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("fabflow: error: 900-bad point 1: fabflow bench raw -o nosuch -I 200 -w 50 "
                       "-S 64 -p local --json failed (exit 2)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("fabflow: error: 900-slow point 1: fabflow bench raw -o write -t bw -D 60 "
                       "-p local --json took longer than 5 s"),
            std::string::npos)
      << r.err;
  EXPECT_LT(r.seconds, 30);
  auto rows = [&](const std::string& id) {
    std::ifstream in(out + "/" + id + ".jsonl");
    std::size_t n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  };
  EXPECT_EQ(rows("900-bad"), 1u);  // the header line only
  EXPECT_EQ(rows("900-slow"), 1u);
  // The header, latency and bandwidth of the one quick point, and the reference's row.
  EXPECT_EQ(rows("900-tiny"), 4u);
  EXPECT_NE(r.out.find("900-bad   0/1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("900-tiny  1/1"), std::string::npos) << r.out;
}

// A point whose endpoint type the provider does not offer is a refused row, and the run goes on
// (shm has rdm endpoints only); the entry then reports what it could measure.
TEST(ExperimentCli, APointTheProviderCannotOpenIsRefusedAndTheRunGoesOn) {
  TempDir dir;
  auto cat = nlohmann::ordered_json::parse(std::ifstream(kCatalogue + "/900.json"));
  auto tiny = cat["experiments"][0];
  tiny["id"] = "900-endpoints";
  tiny["args"]["-S"] = "64";
  tiny["sweep"] = nlohmann::ordered_json::array({{{"flag", "-e"}, {"values", {"msg", "rdm"}}}});
  tiny.erase("quick");
  tiny.erase("reference");
  cat["experiments"] = {tiny};
  std::ofstream(dir.file("900.json")) << cat.dump(2);
  const std::string out = dir.file("results");
  CliResult r = experiment(
      {"run", "900-endpoints", "--catalogue", dir.path(), "-p", "shm", "-o", out, "--repeat", "1"},
      60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.err.find("point 1 refused on this provider: provider 'shm' offers no msg endpoints"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("fabflow: error: 900-endpoints"), std::string::npos) << r.err;
  std::ifstream in(out + "/900-endpoints.jsonl");
  std::size_t refused = 0, measured = 0;
  for (std::string line; std::getline(in, line);) {
    const auto row = nlohmann::json::parse(line);
    if (row.value("refused_point", false)) {
      ++refused;
      EXPECT_EQ(row["point"]["-e"], "msg");
      EXPECT_NE(row["unsupported"].get<std::string>().find("offers no msg"), std::string::npos);
    } else if (row.value("type", "") != "experiment") {
      ++measured;
      EXPECT_EQ(row["point"]["-e"], "rdm");
    }
  }
  EXPECT_EQ(refused, 1u);
  EXPECT_GE(measured, 1u);
  EXPECT_NE(r.out.find("900-endpoints  2/2"), std::string::npos) << r.out;
}

// Whether python3 can import matplotlib and the plot module of this source tree.
// Whether one of the interpreters the runner tries (python3 on PATH, then Debian's) draws.
bool can_draw() {
  CliResult r = run_cli({"/bin/sh", "-c",
                         "python3 -c 'import matplotlib, fabflow_plot' 2>/dev/null || "
                         "/usr/bin/python3 -c 'import matplotlib, fabflow_plot'"},
                        60s, {{"PYTHONPATH", (kSource / "python").string()}});
  return r.status == 0;
}

// Without --quick every point runs three times (the repeats a verdict weighs against noise).
TEST(ExperimentCli, RunsOneTinyExperimentEndToEnd) {
  TempDir dir;
  const std::string out = dir.file("results");
  CliResult r = experiment({"run", "900-tiny", "--catalogue", kCatalogue, "-p", "local", "-o", out},
                           120s, {{"FABFLOW_PYTHONPATH", (kSource / "python").string()}});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.err.find("[900-tiny] point 2/2 (repeat 3/3): -S 128  elapsed "), std::string::npos)
      << r.err;

  std::ifstream in(out + "/900-tiny.jsonl");
  ASSERT_TRUE(in) << r.err;
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  auto head = nlohmann::json::parse(line);
  EXPECT_EQ(head["type"], "experiment");
  EXPECT_EQ(head["id"], "900-tiny");
  EXPECT_EQ(head["provider"], "local");
  EXPECT_EQ(head["quick"], false);
  EXPECT_EQ(head["repeat"], 3);
  EXPECT_EQ(head["entry"]["title"], "Write bandwidth of two small sizes");
  EXPECT_EQ(head["command_lines"][0],
            "fabflow bench raw -o write -I 200 -w 50 -S 64 -p local --json");
  EXPECT_EQ(head["environment"]["fabflow_version"], FABFLOW_VERSION);
  EXPECT_EQ(head["reference_command_lines"],
            nlohmann::json({"fabflow model pcie -o write --transport rc -S 64,128"}));
  std::size_t rows = 0;
  std::set<std::string> sizes;
  std::set<int> repeats;
  std::map<int, double> model_MBps;  // the reference's rows, by size
  while (std::getline(in, line)) {
    auto row = nlohmann::json::parse(line);
    if (row.contains("reference_model")) {
      // The model's row, as `fabflow model pcie --json` prints it, with the plot's y.
      EXPECT_EQ(row["reference_model"], "pcie");
      EXPECT_EQ(row["reference_label"], "PCIe limit (model)");
      EXPECT_EQ(row["op"], "write");
      EXPECT_EQ(row["transport"], "rc");
      EXPECT_EQ(row["MBps"], row["payload_MBps"]);
      EXPECT_EQ(row["experiment"], "900-tiny");
      model_MBps[row["size_bytes"].get<int>()] = row["MBps"].get<double>();
      continue;
    }
    ++rows;
    EXPECT_EQ(row["experiment"], "900-tiny");
    repeats.insert(row["repeat_index"].get<int>());
    const std::string size = row["point"]["-S"];
    EXPECT_EQ(row["point.-S"], size);
    EXPECT_EQ(row["point_index"], size == "64" ? 0 : 1);
    EXPECT_EQ(row["size_bytes"], std::stoi(size));
    sizes.insert(size);
  }
  EXPECT_EQ(rows, 12u);  // a latency and a bandwidth row per point and repeat
  EXPECT_EQ(repeats, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(sizes, (std::set<std::string>{"64", "128"}));
  ASSERT_EQ(model_MBps.size(), 2u);
  CliResult model = run_cli(
      {"fabflow", "model", "pcie", "-o", "write", "--transport", "rc", "-S", "64,128", "--json"},
      20s);
  ASSERT_EQ(model.status, 0) << model.err;
  for (const auto& l : lines(model.out)) {
    auto m = nlohmann::json::parse(l);
    EXPECT_EQ(model_MBps.at(m["size_bytes"].get<int>()), m["payload_MBps"].get<double>()) << l;
  }

  if (!can_draw()) {
    EXPECT_EQ(r.status, 3) << r.err;  // measured, but no figures here
    GTEST_SKIP() << "python3 with matplotlib and python/fabflow_plot are needed for the figures";
  }
  EXPECT_EQ(r.status, 0) << r.err;
  for (const char* ext : {".png", ".svg", ".html"})
    EXPECT_TRUE(fs::exists(out + "/900-tiny" + ext)) << ext;
  const auto at = r.out.find("900-tiny: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string verdict = r.out.substr(at, r.out.find('\n', at) - at);

  // `experiment judge` re-draws and re-judges the saved rows, running no bench: the same
  // verdict line, word for word.
  for (const std::string& f : {out + "/900-tiny.png", out + "/900-tiny.html"}) fs::remove(f);
  CliResult j =
      experiment({"judge", out}, 60s, {{"FABFLOW_PYTHONPATH", (kSource / "python").string()}});
  EXPECT_EQ(j.status, 0) << j.err;
  EXPECT_NE(j.out.find(verdict + "\n"), std::string::npos) << verdict << "\n" << j.out;
  EXPECT_NE(j.out.find("judged 1 of 1 experiments"), std::string::npos) << j.out;
  EXPECT_TRUE(fs::exists(out + "/900-tiny.png"));
  EXPECT_EQ(j.err.find("point"), std::string::npos) << j.err;  // nothing was run
  expect_one_error_line(experiment({"judge", out, "900-other"}, 20s), 2,
                        {"holds no rows of '900-other'"});
  expect_one_error_line(experiment({"judge", dir.file("nope")}, 20s), 2, {"no folder"});
}

// `fabflow plot`: the CDF and histogram of a bench's latency rows; a file without such rows or
// no file at all is one line.
TEST(PlotCli, DistributionOfABenchsLatencyRows) {
  TempDir dir;
  const std::string rows = dir.file("lat.jsonl");
  CliResult lat = run_cli({"fabflow", "bench", "lat", "-p", "local", "-m", "send,write", "--inject",
                           "off", "--sockets", "none", "-S", "64", "-I", "500", "--json"},
                          60s);
  ASSERT_EQ(lat.status, 0) << lat.err;
  {
    std::ofstream f(rows);
    f << lat.out;
  }
  const std::map<std::string, std::string> env = {
      {"FABFLOW_PYTHONPATH", (kSource / "python").string()}};
  CliResult r = run_cli({"fabflow", "plot", rows, "-o", dir.file("d")}, 60s, env);
  ASSERT_FALSE(r.timed_out) << r.err;
  if (!can_draw()) {
    EXPECT_EQ(r.status, 3) << r.err;
    GTEST_SKIP() << "python3 with matplotlib and python/fabflow_plot are needed for the figures";
  }
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* name : {"d-cdf.png", "d-cdf.svg", "d-hist.png", "d-hist.svg"})
    EXPECT_TRUE(fs::exists(dir.file(name))) << name;
  EXPECT_EQ(r.out, dir.file("d-cdf.png") + "\n" + dir.file("d-hist.png") + "\n");

  const std::string empty = dir.file("empty.jsonl");
  { std::ofstream(empty) << "{\"type\": \"throughput\"}\n"; }
  for (const std::string& file : {empty, dir.file("missing.jsonl")}) {
    CliResult bad = run_cli({"fabflow", "plot", file}, 60s, env);
    ASSERT_NO_FATAL_FAILURE(testing::expect_one_error_line(bad));
    EXPECT_NE(bad.status, 0);
  }
}

}  // namespace
}  // namespace fabflow
