// `fabflow advise FAMILY --map BASE`: the design space as a map of this machine. Every cell of
// the grid (each size of -S against each objective of --objective) is one advise search, run as
// a child `fabflow advise ... --json --no-save` with an equal share of the budget; the cells'
// answers are kept in BASE.json and drawn in BASE.png and BASE.svg (one colour per winning
// design, cells whose winner is tied with another hatched; python/fabflow_plot/advise_map.py).
#include <fabflow/status.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/plot.h"
#include "cli/subprocess.h"

namespace fabflow::cli {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

// The shortest search that can measure anything: one round of three runs per candidate.
constexpr double kCellSeconds = 5;

// One cell: the child's advice, or {"failed": why}.
ojson run_cell(const AdviseMapRequest& r, const std::string& size, const std::string& objective,
               double budget_s) {
  ChildOptions c;
  c.argv = {exe_path().string(),
            "advise",
            r.family,
            "-p",
            r.providers,
            "--objective",
            objective,
            "-S",
            size,
            "--budget",
            std::to_string(static_cast<long>(budget_s)) + "s",
            "--no-save",
            "--json"};
  if (!r.candidates.empty()) c.argv.insert(c.argv.end(), {"--candidates", r.candidates});
  if (!r.workload.empty()) {
    c.argv.emplace_back("--");
    c.argv.insert(c.argv.end(), r.workload.begin(), r.workload.end());
  }
  c.capture_stderr = true;
  c.timeout = std::chrono::seconds(static_cast<long>(budget_s * 3 + 120));
  ojson answer;
  const ChildResult res = run_child(c, [&](const std::string& line) {
    ojson j = ojson::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("type", std::string()) == "advice")
      answer = std::move(j);
  });
  if (interrupted()) throw UsageError("advise --map: interrupted");
  if (res.status == 0 && answer.is_object()) return answer;
  return ojson{{"failed", res.timed_out ? "the search ran past its time" : child_error(res.err)}};
}

std::string cell_text(const ojson& cell) {
  if (!cell.is_object() || cell.contains("failed") || cell["winner"].is_null()) return "-";
  std::string text = cell["winner"].get<std::string>();
  if (!cell["ties"].empty()) text += " (tied with " + std::to_string(cell["ties"].size()) + ")";
  return text;
}

// Where the answer changes: for each objective, the sizes in their order cut into runs with the
// same winner ("-" where no winner was found), e.g. push1-watermark-pull for 64, 1K, then
// push1-push-push for 4K, 16K.
ojson winner_runs(const ojson& m) {
  ojson runs = ojson::array();
  for (const auto& objective : m["objectives"]) {
    for (const auto& size : m["sizes"]) {
      std::string winner = "-";
      for (const auto& cell : m["cells"])
        if (cell["size"] == size && cell["objective"] == objective && cell["answer"].is_object() &&
            cell["answer"].contains("winner") && cell["answer"]["winner"].is_string())
          winner = cell["answer"]["winner"].get<std::string>();
      if (runs.empty() || runs.back()["objective"] != objective || runs.back()["winner"] != winner)
        runs.push_back({{"objective", objective}, {"winner", winner}, {"sizes", ojson::array()}});
      runs.back()["sizes"].push_back(size);
    }
  }
  return runs;
}

void print_map(const ojson& m, std::ostream& out) {
  const auto sizes = m["sizes"].get<std::vector<std::string>>();
  const auto objectives = m["objectives"].get<std::vector<std::string>>();
  std::vector<std::vector<std::string>> rows = {{"size"}};
  for (const auto& o : objectives) rows[0].push_back(o);
  for (const auto& s : sizes) rows.push_back({s});
  for (const auto& cell : m["cells"]) {
    const std::string size = cell["size"].get<std::string>();
    const auto row =
        static_cast<std::size_t>(std::find(sizes.begin(), sizes.end(), size) - sizes.begin() + 1);
    rows[row].push_back(cell_text(cell["answer"]));
  }
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  out << "advise " << m["family"].get<std::string>() << " map: the winner per size and objective\n";
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c)
      out << row[c] << (c + 1 < row.size() ? std::string(width[c] - row[c].size() + 2, ' ') : "");
    out << "\n";
  }
  // What changes the answer along the sizes, objective by objective.
  std::string objective;
  for (const auto& run : m["winner_runs"]) {
    if (run["objective"] != objective) {
      objective = run["objective"].get<std::string>();
      out << (objective == m["objectives"][0] ? "" : "\n") << objective << ": ";
    } else {
      out << "; then ";
    }
    std::string sizes;
    for (const auto& size : run["sizes"])
      sizes += (sizes.empty() ? "" : ", ") + size.get<std::string>();
    out << run["winner"].get<std::string>() << " at " << sizes;
  }
  out << "\n";
  for (const auto& cell : m["cells"])
    if (cell["answer"].contains("failed"))
      out << "no answer at " << cell["size"].get<std::string>() << ", "
          << cell["objective"].get<std::string>() << ": "
          << cell["answer"]["failed"].get<std::string>() << "\n";
}

}  // namespace

int run_advise_map(const AdviseMapRequest& r) {
  if (r.sizes.empty())
    throw UsageError("advise --map: give the sizes to map with -S (for example -S 64,1K,16K)");
  if (r.objectives.empty()) throw UsageError("advise --map: give one or more --objective");
  const double cells = static_cast<double>(r.sizes.size() * r.objectives.size());
  const double per_cell = std::floor(r.budget_s / cells);
  if (per_cell < kCellSeconds)
    throw UsageError("advise --map: a budget of " + std::to_string(static_cast<long>(r.budget_s)) +
                     " s leaves less than " + std::to_string(static_cast<int>(kCellSeconds)) +
                     " s to each of the " + std::to_string(static_cast<int>(cells)) +
                     " cells; give a longer --budget or fewer sizes or objectives");
  const fs::path base(r.out);
  if (base.has_parent_path() && !fs::is_directory(base.parent_path()))
    throw UsageError("advise --map: the folder " + base.parent_path().string() + " does not exist");

  ojson m = {{"type", "advice_map"},      {"family", r.family},         {"providers", r.providers},
             {"sizes", r.sizes},          {"objectives", r.objectives}, {"budget_s", r.budget_s},
             {"cell_budget_s", per_cell}, {"cells", ojson::array()}};
  int done = 0;
  for (const auto& size : r.sizes)
    for (const auto& objective : r.objectives) {
      std::cerr << "[advise map] cell " << ++done << "/" << static_cast<int>(cells) << ": size "
                << size << ", " << objective << " (" << per_cell << " s)\n";
      ojson answer = run_cell(r, size, objective, per_cell);
      std::cerr << "[advise map]   " << cell_text(answer) << "\n";
      m["cells"].push_back(
          {{"size", size}, {"objective", objective}, {"answer", std::move(answer)}});
    }
  m["winner_runs"] = winner_runs(m);
  const fs::path json_path = base.string() + ".json";
  {
    std::ofstream out(json_path, std::ios::trunc);
    out << m.dump(1) << "\n";
    if (!out.flush()) throw Error("advise --map: cannot write " + json_path.string());
  }
  if (r.json)
    std::cout << m.dump() << "\n";
  else
    print_map(m, std::cout);
  std::cerr << "[advise map] map: " << json_path.string() << "\n";
  const bool answered = std::any_of(m["cells"].begin(), m["cells"].end(), [](const ojson& c) {
    return !c["answer"].contains("failed") && !c["answer"]["winner"].is_null();
  });
  if (!answered) throw Error("advise --map: no cell could be answered for this workload");

  Plotter plot("the map stays in " + json_path.string());
  int status = 1;
  std::string err;
  if (!plot.run(
          {"advise-map", json_path.string(), "--out", base.string()},
          [](const std::string& line) { std::cerr << "[advise map] figure: " << line << "\n"; },
          &status, &err))
    return kNoFigures;
  std::cerr << err;
  return status == 0 ? 0 : 1;
}

}  // namespace fabflow::cli
