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
    "id": ")" + id + R"(", "title": "T", "caption": "C",
    "fidelity": {"kind": "faithful"}, "bench": "raw",
    "args": {"-o": "write", "-I": "1000"},
    "sweep": [{"flag": "-S", "values": ["64", "4K"]}],
    "quick": {"args": {"-I": "10"}, "sweep": {"-S": ["64"]}},
    "rows": {"type": "bandwidth"},
    "plot": {"kind": "line", "x": "size_bytes", "y": "MBps"},
    "claim": {"text": "X", "paper": {"place": "L1", "quote": "Q"},
              "check": {"kind": "at_least", "y": "MBps", "value": 0}}
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

ExperimentEntry parsed_entry(const ojson& e) {
  TempDir dir;
  return load_catalogue(write(dir, "900.json", catalogue_with({e}).dump())).entries.at(0);
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
std::function<void(ojson&)> set_in(const char* object, const char* key, ojson value) {
  return [object, key, value](ojson& e) { e[object][key] = value; };
}
std::function<void(ojson&)> not_measurable(const char* why) {
  return set("fidelity", {{"kind", "not_measurable"}, {"note", why}});
}

// A valid reference (the PCIe model's SEND limit by payload), spoiled by `spoil`.
std::function<void(ojson&)> reference(std::function<void(ojson&)> spoil) {
  return [spoil](ojson& e) {
    e["reference"] = ojson::parse(R"({"model": "pcie", "label": "PCIe limit", "x": "-S",
        "args": {"-o": "send", "--transport": "ud"},
        "curves": [{"series": {"op": "write"}, "args": {"--batch": "16"}}]})");
    spoil(e["reference"]);
  };
}

const BadCase kBadCases[] = {
    {"reference_unknown_model", reference([](ojson& r) { r["model"] = "roofline"; }),
     "entry '900-a'", "reference: unknown model 'roofline' (models: pcie)"},
    {"reference_not_object", set("reference", "pcie"), "entry '900-a'",
     "reference must be an object"},
    {"reference_unknown_field", reference([](ojson& r) { r["y"] = "x"; }), "entry '900-a'",
     "unknown field \"y\" in reference"},
    {"reference_without_label", reference([](ojson& r) { r.erase("label"); }), "entry '900-a'",
     "reference.label is missing"},
    {"reference_x_not_the_entrys", reference([](ojson& r) { r["x"] = "--batch"; }), "entry '900-a'",
     "reference.x is --batch, which the entry neither sets nor sweeps"},
    {"reference_x_not_a_list_flag", reference([](ojson& r) { r["x"] = "-o"; }), "entry '900-a'",
     "reference.x must name"},
    {"reference_unknown_model_flag", reference([](ojson& r) { r["args"]["--speed"] = "1"; }),
     "entry '900-a'", "'fabflow model pcie' has no flag --speed"},
    {"reference_bad_model_value", reference([](ojson& r) { r["args"]["--transport"] = "xrc"; }),
     "entry '900-a'", "--transport 'xrc': expected one of"},
    {"reference_sets_its_x", reference([](ojson& r) { r["args"]["-S"] = "64"; }), "entry '900-a'",
     "reference.args sets -S, the x the entry's values give"},
    {"reference_verb_the_transport_lacks",
     reference([](ojson& r) { r["curves"][0]["args"]["-o"] = "write"; }), "entry '900-a'",
     "reference.curves[0]: "},
    {"reference_without_curves", reference([](ojson& r) { r["curves"] = ojson::array(); }),
     "entry '900-a'", "reference.curves must list the curves"},
    {"reference_curve_without_series", reference([](ojson& r) { r["curves"][0].erase("series"); }),
     "entry '900-a'", "reference.curves[0].series must name the measured series"},
    {"reference_bad_value", reference([](ojson& r) { r["value"] = "bound"; }), "entry '900-a'",
     "reference.value must be one of ceiling_ops_per_s|payload_MBps"},
    {"reference_with_y_divide_by",
     [](ojson& e) {
       reference([](ojson&) {})(e);
       e["plot"]["y_divide_by"] = "size_bytes";
     },
     "entry '900-a'", "reference: plot.y_divide_by"},
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
    {"missing_fidelity", erase("fidelity"), "entry '900-a'", "missing \"fidelity\""},
    {"fidelity_not_object", set("fidelity", "faithful"), "entry '900-a'",
     "\"fidelity\" must be an object"},
    {"fidelity_kind", set_in("fidelity", "kind", "close"), "entry '900-a'",
     "fidelity.kind must be one of faithful|substitute|not_measurable"},
    {"fidelity_unknown_field", set_in("fidelity", "why", "x"), "entry '900-a'",
     "unknown field \"why\" in fidelity"},
    {"substitute_without_note", set_in("fidelity", "kind", "substitute"), "entry '900-a'",
     "fidelity substitute needs a \"note\" saying what it measures instead"},
    {"not_measurable_without_note", set_in("fidelity", "kind", "not_measurable"), "entry '900-a'",
     "fidelity not_measurable needs a \"note\" saying why it cannot be measured"},
    {"old_not_measurable_field", set("not_measurable", "a NIC"), "entry '900-a'",
     "unknown field \"not_measurable\""},
    {"claim_without_paper", [](ojson& e) { e["claim"].erase("paper"); }, "entry '900-a'",
     "claim.paper is missing"},
    {"claim_paper_without_quote", [](ojson& e) { e["claim"]["paper"].erase("quote"); },
     "entry '900-a'", "claim.paper.quote is missing or empty"},
    {"claim_paper_empty_place", [](ojson& e) { e["claim"]["paper"]["place"] = ""; },
     "entry '900-a'", "claim.paper.place is missing or empty"},
};

INSTANTIATE_TEST_SUITE_P(Experiment, BadCatalogue, ::testing::ValuesIn(kBadCases),
                         [](const auto& info) { return std::string(info.param.name); });

// A reference is the model's command at the entry's x values (--quick's too), and its rows are
// what that command computes: here the seed's batched UD SEND limit (docs/pcie-model.md).
TEST(ExperimentCatalogue, ReferenceEvaluatesTheModelAtTheEntrysX) {
  ojson e = valid_entry();
  reference([](ojson& r) { r["value"] = "ceiling_ops_per_s"; })(e);
  e["sweep"][0]["values"] = {"60", "4K"};
  e["quick"]["sweep"]["-S"] = {"60"};
  const ExperimentEntry x = parsed_entry(e);
  ASSERT_TRUE(x.reference.has_value());
  EXPECT_EQ(x.reference->value, "ceiling_ops_per_s");
  EXPECT_EQ(reference_argv(x, 0, false, 2),
            (std::vector<std::string>{"model", "pcie", "-o", "send", "--transport", "ud", "--batch",
                                      "16", "-S", "60,4K"}));
  EXPECT_EQ(reference_argv(x, 0, true, 2).back(), "60");
  const auto rows = reference_rows(x, 0, false, 2);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].work.payload_bytes, 60u);
  EXPECT_EQ(rows[1].work.payload_bytes, 4096u);
  EXPECT_EQ(rows[0].work.batch, 16u);
  EXPECT_EQ(rows[0].work.path, model::WqePath::doorbell);
  EXPECT_NEAR(rows[0].cost.ceiling_ops_per_s, 103.56e6,
              0.01e6);  // the seed's 105 less the doorbell
  EXPECT_GT(rows[0].cost.ceiling_ops_per_s, rows[1].cost.ceiling_ops_per_s);
  EXPECT_FALSE(parsed_entry(valid_entry()).reference.has_value());
}

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
  not_measurable("needs an RDMA NIC")(e);
  TempDir dir;
  auto c = load_catalogue(write(dir, "900.json", catalogue_with({e}).dump()));
  EXPECT_FALSE(runnable(c.entries.at(0)));
  EXPECT_EQ(status_text(c.entries.at(0)), "not measurable here: needs an RDMA NIC");
  EXPECT_EQ(c.entries.at(0).fidelity, Fidelity::not_measurable);
  EXPECT_STREQ(fidelity_name(c.entries.at(0).fidelity), "not_measurable");
}

TEST(ExperimentCatalogue, FidelityKindsAndNotes) {
  ojson e = valid_entry();
  EXPECT_EQ(parsed_entry(e).fidelity, Fidelity::faithful);
  EXPECT_TRUE(parsed_entry(e).fidelity_note.empty());
  e["fidelity"] = {{"kind", "substitute"}, {"note", "kernel TCP instead of RC timeouts"}};
  const ExperimentEntry x = parsed_entry(e);
  EXPECT_EQ(x.fidelity, Fidelity::substitute);
  EXPECT_STREQ(fidelity_name(x.fidelity), "substitute");
  EXPECT_EQ(x.fidelity_note, "kernel TCP instead of RC timeouts");
  EXPECT_TRUE(runnable(x));
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
  not_measurable("a second host")(later);
  write(dir, "901.json", catalogue_with({later}, "901").dump());
  ojson far = valid_entry("900-c");
  not_measurable("no NIC here")(far);
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

using Args = std::vector<std::string>;

TEST(ExperimentSweep, CartesianProductOutermostFirst) {
  ojson e = valid_entry();
  e["args"] = {{"-o", "write"}, {"--pingpong", ""}};
  e["sweep"] = ojson::parse(R"([{"flag": "--requesters", "values": ["1", "2"]},
                                {"flag": "-S", "values": ["64", "4K", 8192]}])");
  e.erase("quick");
  auto points = expand(parsed_entry(e), false, 2);
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
  const ExperimentEntry x = parsed_entry(e);

  auto full = expand(x, false, 2);
  ASSERT_EQ(full.size(), 2u);
  EXPECT_EQ(full[1].args, (Args{"-o", "write", "-I", "1000", "-S", "4K"}));

  auto quick = expand(x, true, 2);
  ASSERT_EQ(quick.size(), 1u);
  // The override stays in the catalogue's place; new flags come after the fixed ones.
  EXPECT_EQ(quick[0].args, (Args{"-o", "write", "-I", "10", "--window", "8", "-S", "64"}));

  ojson j = entry_json(x, true, 2);
  EXPECT_FALSE(j.contains("quick"));
  EXPECT_EQ(j["args"].dump(), R"({"-o":"write","-I":"10","--window":"8"})");
  EXPECT_EQ(j["sweep"].dump(), R"([{"flag":"-S","values":["64"]}])");
  EXPECT_EQ(j["plot"]["kind"], "line");
  EXPECT_TRUE(entry_json(x, false, 2).contains("quick"));
}

TEST(ExperimentSweep, NoSweepIsOnePoint) {
  ojson e = valid_entry();
  e.erase("sweep");
  e.erase("quick");
  auto points = expand(parsed_entry(e), true, 2);
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(points[0].args, (Args{"-o", "write", "-I", "1000"}));
  EXPECT_TRUE(points[0].values.empty());
  e["sweep"] = ojson::array();
  EXPECT_EQ(expand(parsed_entry(e), false, 2).size(), 1u);
}

// Values written relative to the machine resolve for the cores a run may use (or --cores).
TEST(ExperimentSweep, ValuesRelativeToTheCores) {
  ojson e = valid_entry();
  e.erase("quick");
  e["args"] = {{"-o", "write"}, {"--threads", "cores/2"}, {"--window", "max(4, cores - 2*3)"}};
  e["sweep"] = ojson::parse(R"([{"flag": "--workers", "values": ["1..cores-1"]},
                                {"flag": "--clients", "values": ["1..cores x2", "cores", "3*cores"]}])");
  const ExperimentEntry x = parsed_entry(e);
  auto values = [&](unsigned cores, std::size_t var) {
    return effective(x, false, cores).sweep.at(var).values;
  };
  EXPECT_EQ(values(16, 0), (Args{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12",
                                 "13", "14", "15"}));
  EXPECT_EQ(values(16, 1), (Args{"1", "2", "4", "8", "16", "48"}));  // duplicates go
  EXPECT_EQ(values(12, 1), (Args{"1", "2", "4", "8", "12", "36"}));  // the end value is kept
  EXPECT_EQ(values(2, 0), (Args{"1"}));
  EXPECT_EQ(effective(x, false, 16).args.at(1).second, "8");
  EXPECT_EQ(effective(x, false, 3).args.at(1).second, "1");  // / rounds down
  EXPECT_EQ(effective(x, false, 3).args.at(2).second, "4");
  EXPECT_EQ(effective(x, false, 16).args.at(2).second, "10");
  EXPECT_EQ(expand(x, false, 4).size(), 3u * 4u);
  // Nothing left on one core: one line naming the entry and the sweep.
  const std::string msg = load_error([&] { effective(x, false, 1); });
  EXPECT_EQ(msg, "900-a: sweep --workers has no values on 1 core(s)");
  // Written values stay as written in the entry the runner records.
  EXPECT_EQ(entry_json(x, false, 8)["sweep"][0]["values"].dump(),
            R"(["1","2","3","4","5","6","7"])");
}

TEST(ExperimentCatalogue, BadRelativeValuesAreRefusedAtLoad) {
  for (const auto& [value, needle] : std::vector<std::pair<std::string, std::string>>{
           {"cores-", "expected a number or 'cores'"},
           {"cores/0", "division by zero"},
           {"(cores", "a '(' without its ')'"},
           {"cores x", "unexpected 'x'"},
           {"0..cores x2", "a doubling range must start at 1 or more"},
           {"1..corez", "expected a number or 'cores'"},
           {"max(cores)", "max needs (a, b)"}}) {
    ojson e = valid_entry();
    e["sweep"][0]["values"] = {value};
    TempDir dir;
    const std::string path = write(dir, "900.json", catalogue_with({e}).dump());
    const std::string msg = load_error([&] { load_catalogue(path); });
    EXPECT_EQ(msg.rfind(path + ": entry '900-a': sweep -S: '" + value + "': ", 0), 0u) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
  ojson e = valid_entry();
  e["args"]["--threads"] = "1..cores";
  TempDir dir;
  const std::string msg =
      load_error([&] { load_catalogue(write(dir, "900.json", catalogue_with({e}).dump())); });
  EXPECT_NE(msg.find("args --threads: '1..cores': a range is a sweep's"), std::string::npos) << msg;
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
