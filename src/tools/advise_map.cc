// `fabflow advise FAMILY --map BASE`: the design space as a map of this machine. Every cell of
// the grid (each size of -S against each objective of --objective, or with --vary against each
// value of one bench flag for one objective) is one advise search, run as
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

#include "tools/advise.h"
#include "tools/plot.h"
#include "tools/subprocess.h"

namespace fabflow::tools {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

// The shortest search that can measure anything: one round of three runs per candidate.
constexpr double kCellSeconds = 5;

// One cell: the child's advice, or {"failed": why}.
ojson run_cell(const AdviseMapRequest& r, const std::string& size, const std::string& objective,
               const std::string& vary_value, double budget_s) {
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
  if (!r.passive.empty()) c.argv.insert(c.argv.end(), {"--passive", r.passive});
  if (!r.workload.empty() || !r.vary_flag.empty()) {
    c.argv.emplace_back("--");
    c.argv.insert(c.argv.end(), r.workload.begin(), r.workload.end());
    if (!r.vary_flag.empty()) c.argv.insert(c.argv.end(), {r.vary_flag, vary_value});
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

// The map's columns: the values of the varied flag, or the objectives.
std::vector<std::string> columns(const ojson& m) {
  return m.contains("vary") ? m["vary"]["values"].get<std::vector<std::string>>()
                            : m["objectives"].get<std::vector<std::string>>();
}
// The column a cell is in.
std::string column_of(const ojson& m, const ojson& cell) {
  return (m.contains("vary") ? cell["vary"] : cell["objective"]).get<std::string>();
}

// Where the answer changes: for each column, the sizes in their order cut into runs with the
// same winner ("-" where no winner was found), e.g. push1-watermark-pull for 64, 1K, then
// push1-push-push for 4K, 16K.
ojson winner_runs(const ojson& m) {
  ojson runs = ojson::array();
  const char* key = m.contains("vary") ? "vary" : "objective";
  for (const auto& column : columns(m)) {
    for (const auto& size : m["sizes"]) {
      std::string winner = "-";
      for (const auto& cell : m["cells"])
        if (cell["size"] == size && column_of(m, cell) == column && cell["answer"].is_object() &&
            cell["answer"].contains("winner") && cell["answer"]["winner"].is_string())
          winner = cell["answer"]["winner"].get<std::string>();
      if (runs.empty() || runs.back()[key] != column || runs.back()["winner"] != winner)
        runs.push_back({{key, column}, {"winner", winner}, {"sizes", ojson::array()}});
      runs.back()["sizes"].push_back(size);
    }
  }
  return runs;
}

void print_map(const ojson& m, std::ostream& out) {
  const auto sizes = m["sizes"].get<std::vector<std::string>>();
  const auto cols = columns(m);
  const bool vary = m.contains("vary");
  const std::string what = vary ? m["vary"]["flag"].get<std::string>() : "objective";
  std::vector<std::vector<std::string>> rows = {{"size"}};
  for (const auto& c : cols) rows[0].push_back(vary ? what + " " + c : c);
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
  out << "advise " << m["family"].get<std::string>() << " map: the winner per size and " << what
      << (vary ? " (" + m["objectives"][0].get<std::string>() + ")" : "")
      << (m.contains("passive") ? ", " + m["passive"].get<std::string>() + " passive" : "") << "\n";
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c)
      out << row[c] << (c + 1 < row.size() ? std::string(width[c] - row[c].size() + 2, ' ') : "");
    out << "\n";
  }
  // What changes the answer along the sizes, column by column.
  const char* key = vary ? "vary" : "objective";
  std::string column;
  for (const auto& run : m["winner_runs"]) {
    if (run[key] != column) {
      out << (column.empty() ? "" : "\n");
      column = run[key].get<std::string>();
      out << (vary ? what + " " : "") << column << ": ";
    } else {
      out << "; then ";
    }
    std::string run_sizes;
    for (const auto& size : run["sizes"])
      run_sizes += (run_sizes.empty() ? "" : ", ") + size.get<std::string>();
    out << run["winner"].get<std::string>() << " at " << run_sizes;
  }
  out << "\n";
  for (const auto& cell : m["cells"])
    if (cell["answer"].contains("failed"))
      out << "no answer at " << cell["size"].get<std::string>() << ", " << (vary ? what + " " : "")
          << column_of(m, cell) << ": " << cell["answer"]["failed"].get<std::string>() << "\n";
}

}  // namespace

int run_advise_map(const AdviseMapRequest& r) {
  if (r.sizes.empty())
    throw UsageError("advise --map: give the sizes to map with -S (for example -S 64,1K,16K)");
  if (r.objectives.empty()) throw UsageError("advise --map: give one or more --objective");
  const bool vary = !r.vary_flag.empty();
  const std::vector<std::string>& cols = vary ? r.vary_values : r.objectives;
  const double cells = static_cast<double>(r.sizes.size() * cols.size());
  const double per_cell = std::floor(r.budget_s / cells);
  if (per_cell < kCellSeconds)
    throw UsageError("advise --map: a budget of " + std::to_string(static_cast<long>(r.budget_s)) +
                     " s leaves less than " + std::to_string(static_cast<int>(kCellSeconds)) +
                     " s to each of the " + std::to_string(static_cast<int>(cells)) +
                     " cells; give a longer --budget or fewer sizes, objectives or values");
  const fs::path base(r.out);
  if (base.has_parent_path() && !fs::is_directory(base.parent_path()))
    throw UsageError("advise --map: the folder " + base.parent_path().string() + " does not exist");

  ojson m = {{"type", "advice_map"},      {"family", r.family},         {"providers", r.providers},
             {"sizes", r.sizes},          {"objectives", r.objectives}, {"budget_s", r.budget_s},
             {"cell_budget_s", per_cell}, {"cells", ojson::array()}};
  if (vary) m["vary"] = {{"flag", r.vary_flag}, {"values", r.vary_values}};
  if (!r.passive.empty()) m["passive"] = r.passive;
  int done = 0;
  for (const auto& size : r.sizes)
    for (const auto& column : cols) {
      const std::string& objective = vary ? r.objectives[0] : column;
      std::cerr << "[advise map] cell " << ++done << "/" << static_cast<int>(cells) << ": size "
                << size << ", " << (vary ? r.vary_flag + " " + column : objective) << " ("
                << per_cell << " s)\n";
      ojson answer = run_cell(r, size, objective, vary ? column : "", per_cell);
      std::cerr << "[advise map]   " << cell_text(answer) << "\n";
      ojson cell = {{"size", size}, {"objective", objective}};
      if (vary) cell["vary"] = column;
      cell["answer"] = std::move(answer);
      m["cells"].push_back(std::move(cell));
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

}  // namespace fabflow::tools
