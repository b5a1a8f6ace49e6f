// `fabflow advise` through the CLI: a short search on local answers with a winner among the
// candidates, keeps a profile that --show reads back, and each bad input is one error line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "support/advice_support.h"
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

TEST(AdviseCli, ShortSearchOnLocalAnswersAndKeepsAProfile) {
  TempDir dir;
  const std::string profile = dir.file("advice.json");
  CliResult r = run_cli({"fabflow", "advise", "queue", "-p", "local", "-S", "64", "--candidates",
                         "push1-watermark-pull,push2-event-pull,socket", "--budget", "20s",
                         "--save", profile, "--json"},
                        120s);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto a = nlohmann::json::parse(r.out);
  EXPECT_EQ(a["type"], "advice");
  EXPECT_EQ(a["objective"], "throughput");
  ASSERT_TRUE(a["winner"].is_string()) << r.out;
  const std::string winner = a["winner"];
  EXPECT_NE(
      std::string("local:push1-watermark-pull,local:push2-event-pull,local:socket").find(winner),
      std::string::npos)
      << winner;
  ASSERT_EQ(a["ranked"].size(), 3u) << r.out;
  EXPECT_EQ(a["ranked"][0]["status"], "winner");
  for (const auto& c : a["ranked"]) {
    EXPECT_EQ(c["samples"].size(), 3u);
    EXPECT_LE(c["low"].get<double>(), c["median"].get<double>());
    EXPECT_LE(c["median"].get<double>(), c["high"].get<double>());
    EXPECT_GT(c["low"].get<double>(), 0);
  }
  // The candidates still running come in the order of their medians (throughput: the highest
  // first), those dropped after them. Which design wins is this machine's answer (on an idle
  // one the socket baseline is far behind; under load it need not be), never the test's.
  double previous = std::numeric_limits<double>::infinity();
  bool dropped_seen = false;
  for (const auto& c : a["ranked"]) {
    if (c["status"].get<std::string>().rfind("dropped", 0) == 0) {
      dropped_seen = true;
      continue;
    }
    EXPECT_FALSE(dropped_seen) << "a running candidate ranked after a dropped one: " << r.out;
    EXPECT_LE(c["median"].get<double>(), previous) << r.out;
    previous = c["median"].get<double>();
  }
  EXPECT_LE(a["seconds"].get<double>(), 20.0 + 40.0);  // one round may run past the budget
  // The paper's design is shown beside the answer with where it stands here (it was a
  // candidate, so it has a status of this search).
  EXPECT_EQ(a["prior"]["design"], "push1-watermark-pull") << r.out;
  EXPECT_NE(a["prior"]["source"].get<std::string>().find("seed 003"), std::string::npos);
  const std::string here = a["prior"]["here"];
  EXPECT_TRUE(here.rfind("winner on local", 0) == 0 || here.rfind("tied on local", 0) == 0 ||
              here.rfind("behind on local", 0) == 0 || here.rfind("dropped after round", 0) == 0)
      << here;

  // --workload repeats the kept search: family, provider, size and objective from the answer;
  // a flag given on the command line wins.
  CliResult again =
      run_cli({"fabflow", "advise", "--workload", profile, "--candidates",
               "push1-watermark-pull,socket", "--budget", "6s", "--no-save", "--json"},
              120s);
  ASSERT_EQ(again.status, 0) << again.err;
  const auto b = nlohmann::json::parse(again.out);
  EXPECT_EQ(b["family"], "queue");
  EXPECT_EQ(b["providers"], nlohmann::json::array({"local"}));
  EXPECT_EQ(b["workload"]["size"], "64");
  EXPECT_EQ(b["budget_s"], 6);
  EXPECT_EQ(b["ranked"].size(), 2u) << again.out;

  // --show prints the kept answer without measuring.
  CliResult shown = run_cli({"fabflow", "advise", "--show", profile}, 20s);
  ASSERT_EQ(shown.status, 0) << shown.err;
  EXPECT_NE(shown.out.find("advice: use "), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("socket"), std::string::npos) << shown.out;
  EXPECT_TRUE(shown.err.empty()) << shown.err;
}

// --passive consumer leaves out the designs that need an active consumer, each with its reason,
// and the kept answer says the constraint; the cpu objective ranks by both sides' CPU time.
TEST(AdviseCli, PassiveConsumerAndTheCpuObjective) {
  TempDir dir;
  const std::string profile = dir.file("passive.json");
  CliResult r = run_cli({"fabflow", "advise", "queue", "-p", "local", "-S", "64", "--candidates",
                         "push1-watermark-pull,pull-pull-pull,socket", "--passive", "consumer",
                         "--budget", "6s", "--save", profile, "--json"},
                        120s);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto a = nlohmann::json::parse(r.out);
  ASSERT_EQ(a["refused"].size(), 1u) << r.out;
  EXPECT_EQ(a["refused"][0]["design"], "pull-pull-pull");
  EXPECT_NE(a["refused"][0]["why"].get<std::string>().find("needs an active consumer"),
            std::string::npos);
  EXPECT_EQ(a["ranked"].size(), 2u) << r.out;
  EXPECT_NE(a["winner"], "local:pull-pull-pull");
  EXPECT_EQ(a["workload"]["passive"], "consumer");
  EXPECT_EQ(a["workload"]["candidates"], "push1-watermark-pull,pull-pull-pull,socket");
  // Repeating the kept search keeps its constraint and its candidates.
  CliResult again = run_cli(
      {"fabflow", "advise", "--workload", profile, "--budget", "4s", "--no-save", "--json"}, 120s);
  ASSERT_EQ(again.status, 0) << again.err;
  const auto b = nlohmann::json::parse(again.out);
  EXPECT_EQ(b["workload"]["passive"], "consumer");
  EXPECT_EQ(b["ranked"].size() + b["refused"].size(), 3u) << again.out;

  CliResult cpu =
      run_cli({"fabflow", "advise", "kv", "-p", "local", "--objective", "cpu", "--candidates",
               "herd,read", "--budget", "8s", "--no-save", "--json", "--", "--keys", "1000"},
              120s);
  ASSERT_EQ(cpu.status, 0) << cpu.err;
  const auto c = nlohmann::json::parse(cpu.out);
  EXPECT_EQ(c["objective"], "cpu");
  EXPECT_EQ(c["unit"], "ns/op");
  EXPECT_EQ(c["better"], "lower");
  ASSERT_EQ(c["ranked"].size(), 2u) << cpu.out;
  for (const auto& e : c["ranked"]) {
    // The figure is the two sides' CPU per operation added.
    const double both = e["cpu"]["client"].get<double>() + e["cpu"]["server"].get<double>();
    EXPECT_GT(e["median"].get<double>(), 0);
    EXPECT_GT(both, 0);
  }
}

// `bench queue --design auto` takes the profile's best design when the profile fits this machine
// and workload, and the default rule otherwise, saying which and why.
TEST(AdviseCli, DesignAutoUsesAFittingProfileOnly) {
  TempDir dir;
  const std::map<std::string, std::string> env = {{"XDG_CACHE_HOME", dir.path()}};
  CliResult none = run_cli({"fabflow", "bench", "queue", "-p", "local", "--design", "auto", "-S",
                            "64", "--items", "2000", "--json"},
                           60s, env);
  ASSERT_EQ(none.status, 0) << none.err;
  EXPECT_NE(none.err.find("fabflow: auto on local: push1-watermark-pull (the rule: "),
            std::string::npos)
      << none.err;
  EXPECT_NE(none.err.find("no profile at " + dir.path()), std::string::npos) << none.err;

  CliResult a = run_cli({"fabflow", "advise", "queue", "-p", "local", "-S", "64", "--candidates",
                         "socket,push1-pull-pull", "--budget", "10s", "--json"},
                        120s, env);
  ASSERT_EQ(a.status, 0) << a.err;
  const std::string winner = nlohmann::json::parse(a.out)["winner"];
  ASSERT_TRUE(std::filesystem::exists(dir.file("fabflow/advise-queue.json")));
  CliResult chosen = run_cli({"fabflow", "bench", "queue", "-p", "local", "--design", "auto", "-S",
                              "64", "--items", "2000", "--json"},
                             60s, env);
  ASSERT_EQ(chosen.status, 0) << chosen.err;
  EXPECT_NE(chosen.err.find("fabflow: auto on local: " + winner.substr(6) + " (profile "),
            std::string::npos)
      << winner << "\n"
      << chosen.err;
  const auto row = nlohmann::json::parse(lines(chosen.out).at(0));
  EXPECT_EQ(row["design"].get<std::string>() == "socket"
                ? "local:socket"
                : "local:" + row["design"].get<std::string>(),
            winner);

  // Another size: the profile does not answer for it.
  CliResult other = run_cli({"fabflow", "bench", "queue", "-p", "local", "--design", "auto", "-S",
                             "4K", "--items", "500", "--json"},
                            60s, env);
  ASSERT_EQ(other.status, 0) << other.err;
  EXPECT_NE(other.err.find("it measured size '64', not 4096 bytes"), std::string::npos)
      << other.err;
  // A damaged profile is ignored, never trusted.
  std::ofstream(dir.file("fabflow/advise-queue.json")) << "{\"type\": \"advice\", \"ranked\": 3}";
  CliResult bad = run_cli({"fabflow", "bench", "queue", "-p", "local", "--design", "auto", "-S",
                           "64", "--items", "500", "--json"},
                          60s, env);
  ASSERT_EQ(bad.status, 0) << bad.err;
  EXPECT_NE(bad.err.find("is not an advise profile: ignored"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("auto on local: push1-watermark-pull"), std::string::npos) << bad.err;
}

// `bench rr --pattern auto` and `bench kv --design auto`: the profile's design (a pattern of
// the run's model for rr), else the rule, said on stderr and run.
TEST(AdviseCli, PatternAndDesignAutoInTheRrAndKvBenches) {
  TempDir dir;
  const std::map<std::string, std::string> env = {{"XDG_CACHE_HOME", dir.path()}};
  auto row_of = [](const CliResult& r) { return nlohmann::json::parse(lines(r.out).at(0)); };
  CliResult rule = run_cli({"fabflow", "bench", "rr", "-p", "local", "--pattern", "auto", "-S",
                            "64", "-I", "300", "-w", "30", "--json"},
                           60s, env);
  ASSERT_EQ(rule.status, 0) << rule.err;
  EXPECT_NE(rule.err.find("fabflow: auto on local: WriteWrite (the rule: WriteWrite"),
            std::string::npos)
      << rule.err;
  EXPECT_EQ(row_of(rule)["pattern"], "WriteWrite") << rule.out;

  std::filesystem::create_directories(dir.file("fabflow"));
  std::ofstream(dir.file("fabflow/advise-rr.json"))
      << fabflow::testing::advice_profile(
             {{"local", "SendSend/dispatcher", 9e5, "winner"}, {"local", "SendWrite/private", 8e5}},
             "64", "rr")
             .dump();
  CliResult chosen = run_cli({"fabflow", "bench", "rr", "-p", "local", "--pattern", "auto", "-S",
                              "64", "-I", "300", "-w", "30", "--json"},
                             60s, env);
  ASSERT_EQ(chosen.status, 0) << chosen.err;
  EXPECT_NE(chosen.err.find("fabflow: auto on local: SendWrite (profile "), std::string::npos)
      << chosen.err;
  EXPECT_NE(chosen.err.find("SendSend/dispatcher cannot open here: measured with another model"),
            std::string::npos)
      << chosen.err;
  EXPECT_EQ(row_of(chosen)["pattern"], "SendWrite") << chosen.out;

  std::ofstream(dir.file("fabflow/advise-kv.json"))
      << fabflow::testing::advice_profile({{"local", "read", 9e5, "winner"}}, "", "kv").dump();
  CliResult kv = run_cli({"fabflow", "bench", "kv", "-p", "local", "--design", "auto", "-I", "300",
                          "-w", "30", "--json"},
                         60s, env);
  ASSERT_EQ(kv.status, 0) << kv.err;
  EXPECT_NE(kv.err.find("fabflow: auto on local: read (profile "), std::string::npos) << kv.err;
  EXPECT_EQ(row_of(kv)["design"], "read") << kv.out;

  expect_usage_line(run_cli({"fabflow", "bench", "rr", "-p", "local", "--pattern", "auto",
                             "--model", "all", "-S", "64"},
                            20s, env),
                    "--pattern auto chooses for one --model");
  expect_usage_line(
      run_cli({"fabflow", "bench", "rr", "-p", "local", "--pattern", "auto"}, 20s, env),
      "--pattern auto chooses for one response size: give one -S");
}

// --map: one search per size (and objective), kept in BASE.json and drawn in BASE.png.
TEST(AdviseCli, MapAnswersEveryCellAndDrawsIt) {
  TempDir dir;
  const std::string base = dir.file("map");
  CliResult r = run_cli({"fabflow", "advise", "queue", "-p", "local", "-S", "64,4K", "--candidates",
                         "push1-watermark-pull,socket", "--budget", "12s", "--map", base, "--json"},
                        180s);
  ASSERT_TRUE(r.status == 0 || r.status == 3) << r.err;  // 3: no matplotlib here, no figure
  const auto m = nlohmann::json::parse(r.out);
  EXPECT_EQ(m["type"], "advice_map");
  EXPECT_EQ(m["sizes"], nlohmann::json::array({"64", "4K"}));
  EXPECT_EQ(m["cell_budget_s"], 6);
  ASSERT_EQ(m["cells"].size(), 2u) << r.out;
  for (const auto& cell : m["cells"]) {
    const auto& a = cell["answer"];
    ASSERT_TRUE(a.contains("winner")) << cell.dump();
    EXPECT_EQ(a["workload"]["size"], cell["size"]);
    EXPECT_EQ(a["ranked"].size(), 2u);
  }
  // Where the answer changes: the sizes in order, cut into runs that share a winner.
  std::vector<std::string> covered;
  for (const auto& run : m["winner_runs"]) {
    EXPECT_EQ(run["objective"], "throughput");
    for (const auto& size : run["sizes"]) {
      covered.push_back(size.get<std::string>());
      for (const auto& cell : m["cells"])
        if (cell["size"] == size) {
          EXPECT_EQ(cell["answer"]["winner"], run["winner"]) << m.dump();
        }
    }
  }
  EXPECT_EQ(covered, (std::vector<std::string>{"64", "4K"})) << m.dump();
  EXPECT_NE(r.err.find("[advise map]"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(base + ".json"));
  if (r.status == 0) {
    EXPECT_TRUE(std::filesystem::exists(base + ".png")) << r.err;
    EXPECT_TRUE(std::filesystem::exists(base + ".svg")) << r.err;
  }
}

// --map --vary: the columns are the values of one bench flag; each cell's search ran with it,
// and with the --passive constraint.
TEST(AdviseCli, MapVariesABenchFlag) {
  TempDir dir;
  const std::string base = dir.file("vary");
  CliResult r = run_cli({"fabflow", "advise", "queue", "-p", "local", "-S", "64", "--candidates",
                         "push1-watermark-pull,socket,pull-pull-pull", "--passive", "consumer",
                         "--budget", "12s", "--vary", "capacity=16,256", "--map", base, "--json"},
                        180s);
  ASSERT_TRUE(r.status == 0 || r.status == 3) << r.err;
  const auto m = nlohmann::json::parse(r.out);
  EXPECT_EQ(m["passive"], "consumer");
  EXPECT_EQ(m["vary"]["flag"], "--capacity");
  EXPECT_EQ(m["vary"]["values"], nlohmann::json::array({"16", "256"}));
  ASSERT_EQ(m["cells"].size(), 2u) << r.out;
  for (const auto& cell : m["cells"]) {
    const auto& a = cell["answer"];
    ASSERT_TRUE(a.contains("winner")) << cell.dump();
    // The cell's search measured the bench with --capacity at the cell's value.
    EXPECT_EQ(a["workload"]["args"], nlohmann::json::array({"--capacity", cell["vary"]}))
        << cell.dump();
    EXPECT_EQ(a["workload"]["passive"], "consumer");
    ASSERT_EQ(a["refused"].size(), 1u) << cell.dump();
    EXPECT_EQ(a["refused"][0]["design"], "pull-pull-pull");
  }
  ASSERT_FALSE(m["winner_runs"].empty());
  EXPECT_TRUE(m["winner_runs"][0].contains("vary")) << m.dump();
}

TEST(AdviseCli, BadInputIsOneLine) {
  TempDir dir;
  expect_usage_line(run_cli({"fabflow", "advise", "tree"}, 20s), "unknown family 'tree'");
  expect_usage_line(run_cli({"fabflow", "advise"}, 20s), "name a family");
  expect_usage_line(
      run_cli({"fabflow", "advise", "bulk", "-p", "local", "--objective", "p99"}, 20s),
      "objective 'p99' is not measured");
  expect_usage_line(run_cli({"fabflow", "advise", "queue", "-p", "local", "--budget", "0s"}, 20s),
                    "--budget '0s'");
  expect_usage_line(run_cli({"fabflow", "advise", "queue", "-p", "local", "--budget", "2x"}, 20s),
                    "--budget '2x'");
  expect_usage_line(run_cli({"fabflow", "advise", "queue", "-p", "nosuch"}, 20s), "nosuch");
  expect_usage_line(
      run_cli({"fabflow", "advise", "rr", "-p", "local", "--passive", "consumer"}, 20s),
      "--passive applies to queue");
  expect_usage_line(
      run_cli({"fabflow", "advise", "queue", "-p", "local", "--passive", "sideways"}, 20s),
      "consumer, producer or both");
  expect_usage_line(run_cli({"fabflow", "advise", "queue", "-p", "local", "--passive", "both", "--",
                             "--active-consumer"},
                            20s),
                    "contradict");
  expect_usage_line(
      run_cli({"fabflow", "advise", "queue", "-p", "local", "--objective", "cpu"}, 20s),
      "objective 'cpu' is not measured");
  expect_usage_line(run_cli({"fabflow", "advise", "queue", "-p", "local,local"}, 20s),
                    "names a provider twice");
  expect_usage_line(
      run_cli({"fabflow", "advise", "queue", "-p", "local", "--candidates", "fast-queue"}, 20s),
      "'fast-queue' is not a candidate");
  expect_usage_line(
      run_cli({"fabflow", "advise", "queue", "-p", "local", "--candidates", "socket,socket"}, 20s),
      "names 'socket' twice");
  // A budget that one run shows too short (it took longer than the budget allows the round, or
  // was stopped at the budget): one line (nine runs of eight rr candidates take longer than a
  // second anywhere).
  expect_usage_line(
      run_cli({"fabflow", "advise", "rr", "-p", "local,shm,tcp", "--budget", "1s", "--no-save"},
              60s),
      "a budget of 1 s is too short here: one run of the bench");
  // A workload flag the bench refuses: its own line, passed on.
  expect_usage_line(run_cli({"fabflow", "advise", "queue", "-p", "local", "--candidates", "socket",
                             "--no-save", "--", "--api", "bogus"},
                            60s),
                    "the bench refused the workload on local");
  expect_usage_line(
      run_cli({"fabflow", "bench", "queue", "-p", "local", "--design", "auto", "-S", "64,4K"}, 20s),
      "--design auto chooses for one item size");
  // Several sizes or objectives make a map; the map needs sizes and time for every cell.
  expect_usage_line(run_cli({"fabflow", "advise", "queue", "-p", "local", "-S", "64,4K"}, 20s),
                    "-S takes one size (several need --map)");
  expect_usage_line(
      run_cli({"fabflow", "advise", "queue", "-p", "local", "--objective", "throughput,p99"}, 20s),
      "--objective takes one objective (several need --map)");
  expect_usage_line(
      run_cli({"fabflow", "advise", "queue", "-p", "local", "--map", dir.file("m")}, 20s),
      "give the sizes to map with -S");
  expect_usage_line(
      run_cli({"fabflow", "advise", "queue", "-p", "local", "-S", "64,4K", "--objective",
               "throughput,p99", "--budget", "12s", "--map", dir.file("m")},
              20s),
      "less than 5 s to each of the 4 cells");
  expect_usage_line(run_cli({"fabflow", "advise", "queue", "-p", "local", "-S", "64", "--map",
                             dir.file("no/such/folder/m")},
                            20s),
                    "does not exist");
  // --vary: with --map, NAME=V1,V2, one objective, a flag not also given after --.
  expect_usage_line(run_cli({"fabflow", "advise", "queue", "-p", "local", "-S", "64", "--vary",
                             "capacity=16,256"},
                            20s),
                    "--vary draws a map: give --map BASE too");
  for (const char* bad : {"capacity", "=16", "--capacity=16", "capacity="})
    expect_usage_line(run_cli({"fabflow", "advise", "queue", "-p", "local", "-S", "64", "--vary",
                               bad, "--map", dir.file("m")},
                              20s),
                      "--vary takes NAME=V1,V2");
  expect_usage_line(run_cli({"fabflow", "advise", "queue", "-p", "local", "-S", "64", "--objective",
                             "throughput,p99", "--vary", "capacity=16,256", "--map", dir.file("m")},
                            20s),
                    "give one --objective");
  expect_usage_line(run_cli({"fabflow", "advise", "queue", "-p", "local", "-S", "64", "--vary",
                             "capacity=16,256", "--map", dir.file("m"), "--", "--capacity", "8"},
                            20s),
                    "--capacity is varied by --vary and given after -- too");
  // --workload FILE: a file that cannot be read, is not an object, or names what it should not.
  expect_usage_line(run_cli({"fabflow", "advise", "--workload", dir.file("none.json")}, 20s),
                    "cannot read");
  const std::vector<std::pair<std::string, std::string>> bad_workloads = {
      {"[1, 2]", "is not a JSON object"},
      {R"({"famly": "queue"})", "unknown key 'famly'"},
      {R"({"family": "queue", "args": "--api copy"})", "'args' must be a list of strings"},
      {R"({"family": "queue", "budget": {}})", "'budget' must be a string"},
  };
  for (const auto& [content, says] : bad_workloads) {
    std::ofstream(dir.file("workload.json"), std::ios::trunc) << content;
    expect_usage_line(run_cli({"fabflow", "advise", "--workload", dir.file("workload.json")}, 20s),
                      says);
  }
  std::ofstream(dir.file("not.json")) << "{\"type\": \"something\"}";
  expect_usage_line(run_cli({"fabflow", "advise", "--show", dir.file("not.json")}, 20s),
                    "is not an advise profile");
  expect_usage_line(run_cli({"fabflow", "advise", "--show", dir.file("none.json")}, 20s),
                    "cannot read");
}

}  // namespace
}  // namespace fabflow
