// The experiment catalogue: every malformed catalogue gives its own one-line error naming the
// file and the entry; sweep expansion (product order, --quick reductions, no sweep); lookup.
#include <fabflow/bench/experiment.h>
#include <fabflow/status.h>
#include <fabflow/version.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "support/launcher_test_util.h"

namespace fabflow::bench {
namespace {

using launcher_test::TempDir;
using ojson = nlohmann::ordered_json;

ojson valid_entry(const std::string& id = "900-a") {
  return ojson::parse(R"({
    "id": ")" + id + R"(", "title": "T", "caption": "C", "bench": "raw",
    "args": {"-o": "write", "-I": "1000"},
    "sweep": [{"flag": "-S", "values": ["64", "4K"]}],
    "quick": {"args": {"-I": "10"}, "sweep": {"-S": ["64"]}},
    "rows": {"type": "bandwidth"},
    "plot": {"kind": "line", "x": "size_bytes", "y": "MBps"},
    "claim": {"text": "X", "check": {"kind": "at_least", "y": "MBps", "value": 0}}
  })");
}

ojson catalogue_with(std::vector<ojson> entries, const std::string& seed = "900") {
  return {{"seed", seed}, {"paper", "P"}, {"experiments", std::move(entries)}};
}

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.file(name)) << text;
  return dir.file(name);
}

// The UsageError message of loading `path`, or "" when it loaded.
std::string load_error(const std::function<void()>& load) {
  try {
    load();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

struct BadCase {
  const char* name;
  std::function<void(ojson&)> spoil;  // spoils the one entry of a valid catalogue
  const char* entry;                  // how the message names the entry
  const char* needle;
};

class BadCatalogue : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadCatalogue, GivesItsOwnOneLineError) {
  const BadCase& c = GetParam();
  TempDir dir;
  ojson e = valid_entry();
  c.spoil(e);
  const std::string path = write(dir, "900.json", catalogue_with({e}).dump(2));
  const std::string msg = load_error([&] { load_catalogue(path); });
  ASSERT_FALSE(msg.empty()) << "loaded";
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind(path + ": " + c.entry + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
}

std::function<void(ojson&)> erase(const char* key) {
  return [key](ojson& e) { e.erase(key); };
}
std::function<void(ojson&)> set(const char* key, ojson value) {
  return [key, value](ojson& e) { e[key] = value; };
}

const BadCase kBadCases[] = {
    {"missing_id", erase("id"), "entry #0", "missing \"id\""},
    {"empty_id", set("id", ""), "entry #0", "\"id\" is empty"},
    {"missing_title", erase("title"), "entry '900-a'", "missing \"title\""},
    {"empty_title", set("title", ""), "entry '900-a'", "\"title\" is empty"},
    {"missing_caption", erase("caption"), "entry '900-a'", "missing \"caption\""},
    {"missing_bench", erase("bench"), "entry '900-a'", "missing \"bench\""},
    {"missing_plot", erase("plot"), "entry '900-a'", "missing \"plot\""},
    {"missing_claim", erase("claim"), "entry '900-a'", "missing \"claim\""},
    {"id_without_seed", set("id", "901-a"), "entry '901-a'", "seed '900-'"},
    {"id_with_space", set("id", "900-a b"), "entry '900-a b'", "only letters"},
    {"unknown_bench", set("bench", "nosuch"), "entry '900-a'", "unknown bench 'nosuch'"},
    {"sweep_without_values", [](ojson& e) { e["sweep"][0].erase("values"); }, "entry '900-a'",
     "sweep -S has no values"},
    {"sweep_with_empty_values", [](ojson& e) { e["sweep"][0]["values"] = ojson::array(); },
     "entry '900-a'", "sweep -S has no values"},
    {"quick_sweep_not_swept", [](ojson& e) { e["quick"]["sweep"]["-I"] = {"1"}; }, "entry '900-a'",
     "quick.sweep names -I, which is not swept"},
    {"args_set_provider", [](ojson& e) { e["args"]["-p"] = "tcp"; }, "entry '900-a'", "sets -p"},
    {"args_set_json", [](ojson& e) { e["args"]["--json"] = ""; }, "entry '900-a'", "sets --json"},
    {"sweep_sets_provider", [](ojson& e) { e["sweep"][0]["flag"] = "--provider"; }, "entry '900-a'",
     "sets --provider"},
    {"quick_args_set_provider", [](ojson& e) { e["quick"]["args"]["-p"] = "tcp"; }, "entry '900-a'",
     "quick.args sets -p"},
    {"plot_kind", [](ojson& e) { e["plot"]["kind"] = "pie"; }, "entry '900-a'",
     "plot.kind must be one of line|bar|table"},
    {"check_kind", [](ojson& e) { e["claim"]["check"]["kind"] = "about"; }, "entry '900-a'",
     "claim.check.kind must be one of at_most|at_least|greater|less|trend"},
    {"unknown_field", [](ojson& e) { e["needs"] = "#11"; }, "entry '900-a'",
     "unknown field \"needs\" (fields: id|title|"},
    {"swept_and_fixed", [](ojson& e) { e["args"]["-S"] = "64"; }, "entry '900-a'",
     "-S is both in args and swept"},
    {"flag_without_dash", [](ojson& e) { e["args"]["size"] = "64"; }, "entry '900-a'",
     "'size' is not a flag"},
};

INSTANTIATE_TEST_SUITE_P(Experiment, BadCatalogue, ::testing::ValuesIn(kBadCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ExperimentCatalogue, NotJsonNamesTheFileAndTheByte) {
  TempDir dir;
  const std::string path = write(dir, "900.json", "{\"seed\": \"900\",\n  \"experiments\": [,]}");
  const std::string msg = load_error([&] { load_catalogue(path); });
  EXPECT_EQ(msg.rfind(path + ": not JSON (byte ", 0), 0u) << msg;
  EXPECT_EQ(msg.find("[json.exception"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// Found by fuzz/catalogue.cc: a number too large for a double is not a parse error to
// nlohmann-json but out_of_range, which escaped as an uncaught exception. Every input of
// fuzz/regressions/catalogue/ is replayed: one line, no crash.
TEST(ExperimentCatalogue, FuzzRegressionsGiveOneLine) {
  const std::filesystem::path dir =
      std::filesystem::path(FABFLOW_SOURCE_DIR) / "fuzz" / "regressions" / "catalogue";
  std::size_t replayed = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(f.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string msg = load_error([&] { parse_catalogue(text, "regression.json"); });
    EXPECT_EQ(msg.rfind("regression.json: not ", 0), 0u) << f.path() << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    ++replayed;
  }
  EXPECT_GE(replayed, 2u);
}

TEST(ExperimentCatalogue, DuplicateIdAcrossFiles) {
  TempDir dir;
  write(dir, "900.json", catalogue_with({valid_entry("900-a")}).dump());
  const std::string second = write(dir, "901.json", catalogue_with({valid_entry("900-a")}).dump());
  const std::string msg = load_error([&] { load_catalogues(dir.path()); });
  EXPECT_EQ(msg.rfind(second + ": entry '900-a': duplicate id (also in ", 0), 0u) << msg;
}

TEST(ExperimentCatalogue, DuplicateIdInOneFile) {
  TempDir dir;
  const std::string path =
      write(dir, "900.json", catalogue_with({valid_entry("900-a"), valid_entry("900-a")}).dump());
  const std::string msg = load_error([&] { load_catalogue(path); });
  EXPECT_EQ(msg, path + ": entry '900-a': duplicate id (also entry #0)");
}

TEST(ExperimentCatalogue, AnEntryNotMeasurableHereIsListedNotRun) {
  ojson e = valid_entry();
  e["not_measurable"] = "needs an RDMA NIC";
  TempDir dir;
  auto c = load_catalogue(write(dir, "900.json", catalogue_with({e}).dump()));
  EXPECT_FALSE(runnable(c.entries.at(0)));
  EXPECT_EQ(status_text(c.entries.at(0)), "not measurable here: needs an RDMA NIC");
}

TEST(ExperimentCatalogue, EmptyFolderAndMissingFolder) {
  TempDir dir;
  EXPECT_NE(load_error([&] { load_catalogues(dir.path()); }).find("has no *.json"),
            std::string::npos);
  EXPECT_NE(load_error([&] { load_catalogues(dir.file("nope")); }).find("does not exist"),
            std::string::npos);
}

TEST(ExperimentCatalogue, LoadsFilesInNameOrderAndFindsIds) {
  TempDir dir;
  ojson later = valid_entry("901-b");
  later["not_measurable"] = "a second host";
  write(dir, "901.json", catalogue_with({later}, "901").dump());
  ojson far = valid_entry("900-c");
  far["not_measurable"] = "no NIC here";
  write(dir, "900.json", catalogue_with({valid_entry("900-a"), far}).dump());
  write(dir, "notes.txt", "not a catalogue");
  auto cats = load_catalogues(dir.path());
  ASSERT_EQ(cats.size(), 2u);
  EXPECT_EQ(cats[0].seed, "900");
  EXPECT_EQ(cats[0].paper, "P");
  EXPECT_EQ(cats[1].seed, "901");
  EXPECT_EQ(cats[0].entries[1].file, dir.file("900.json"));

  const ExperimentEntry* a = find_experiment(cats, "900-a");
  const ExperimentEntry* b = find_experiment(cats, "901-b");
  const ExperimentEntry* c = find_experiment(cats, "900-c");
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(find_experiment(cats, "900"), nullptr);
  EXPECT_EQ(find_experiment(cats, "nosuch"), nullptr);
  EXPECT_TRUE(runnable(*a));
  EXPECT_EQ(status_text(*a), "runnable");
  EXPECT_FALSE(runnable(*b));
  EXPECT_EQ(status_text(*b), "not measurable here: a second host");
  EXPECT_EQ(status_text(*c), "not measurable here: no NIC here");
}

ExperimentEntry parsed(const ojson& e) {
  TempDir dir;
  return load_catalogue(write(dir, "900.json", catalogue_with({e}).dump())).entries.at(0);
}

using Args = std::vector<std::string>;

TEST(ExperimentSweep, CartesianProductOutermostFirst) {
  ojson e = valid_entry();
  e["args"] = {{"-o", "write"}, {"--pingpong", ""}};
  e["sweep"] = ojson::parse(R"([{"flag": "--requesters", "values": ["1", "2"]},
                                {"flag": "-S", "values": ["64", "4K", 8192]}])");
  e.erase("quick");
  auto points = expand(parsed(e), false);
  ASSERT_EQ(points.size(), 6u);
  const char* expected[6][2] = {{"1", "64"}, {"1", "4K"}, {"1", "8192"},
                                {"2", "64"}, {"2", "4K"}, {"2", "8192"}};
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(points[i].args, (Args{"-o", "write", "--pingpong", "--requesters", expected[i][0],
                                    "-S", expected[i][1]}))
        << i;
    EXPECT_EQ(points[i].values,
              (FlagValues{{"--requesters", expected[i][0]}, {"-S", expected[i][1]}}));
  }
}

TEST(ExperimentSweep, QuickOverridesArgsAndSweepValues) {
  ojson e = valid_entry();
  e["quick"]["args"]["--window"] = "8";
  const ExperimentEntry x = parsed(e);

  auto full = expand(x, false);
  ASSERT_EQ(full.size(), 2u);
  EXPECT_EQ(full[1].args, (Args{"-o", "write", "-I", "1000", "-S", "4K"}));

  auto quick = expand(x, true);
  ASSERT_EQ(quick.size(), 1u);
  // The override stays in the catalogue's place; new flags come after the fixed ones.
  EXPECT_EQ(quick[0].args, (Args{"-o", "write", "-I", "10", "--window", "8", "-S", "64"}));

  ojson j = entry_json(x, true);
  EXPECT_FALSE(j.contains("quick"));
  EXPECT_EQ(j["args"].dump(), R"({"-o":"write","-I":"10","--window":"8"})");
  EXPECT_EQ(j["sweep"].dump(), R"([{"flag":"-S","values":["64"]}])");
  EXPECT_EQ(j["plot"]["kind"], "line");
  EXPECT_TRUE(entry_json(x, false).contains("quick"));
}

TEST(ExperimentSweep, NoSweepIsOnePoint) {
  ojson e = valid_entry();
  e.erase("sweep");
  e.erase("quick");
  auto points = expand(parsed(e), true);
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(points[0].args, (Args{"-o", "write", "-I", "1000"}));
  EXPECT_TRUE(points[0].values.empty());
  e["sweep"] = ojson::array();
  EXPECT_EQ(expand(parsed(e), false).size(), 1u);
}

TEST(ExperimentRows, TaggedWithThePoint) {
  ojson row = {{"type", "bandwidth"}, {"MBps", 1.5}};
  tag_row(row, "900-a", 3, {{"-S", "64"}, {"--requesters", "2"}}, 1);
  EXPECT_EQ(row.dump(),
            R"({"type":"bandwidth","MBps":1.5,"experiment":"900-a","point_index":3,)"
            R"("point":{"-S":"64","--requesters":"2"},"repeat_index":1,"point.-S":"64",)"
            R"("point.--requesters":"2"})");
}

TEST(ExperimentRows, EnvironmentNamesTheBuild) {
  auto env = experiment_environment();
  EXPECT_EQ(env["fabflow_version"], FABFLOW_VERSION);
  EXPECT_EQ(env["build_type"], FABFLOW_BUILD_TYPE);
}

}  // namespace
}  // namespace fabflow::bench
