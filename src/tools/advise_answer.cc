// The answer of `fabflow advise`: the ranked candidates as JSON and as a table with the
// one-line recommendation, the profile file that keeps it, and `--design auto`, which reads a
// profile back when it fits this machine and workload (docs/advise.md).
#include <fabflow/bench/common.h>
#include <fabflow/status.h>
#include <fabflow/version.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "tools/advise.h"
#include "tools/advise_internal.h"

namespace fabflow::tools {
namespace advise_detail {
namespace fs = std::filesystem;
namespace advise = bench::advise;

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

ojson answer_json(const AdviseRequest& f, const Objective& obj, const SearchOutcome& s,
                  double budget_s) {
  const auto ranking = advise::rank(s.candidates, obj.better);
  auto entry = [&](std::size_t i, const std::string& status) {
    const Candidate& c = s.candidates[i];
    const auto sum = advise::summarize(c.samples);
    ojson e{{"provider", c.provider}, {"design", c.name}, {"median", sum.median},
            {"low", sum.low},         {"high", sum.high}, {"samples", c.samples},
            {"rounds", c.rounds},     {"status", status}, {"cpu", nullptr}};
    // The median CPU time per operation of each side over the same runs.
    if (!s.cpu_unit.empty() && !c.cpu[0].empty() && !c.cpu[1].empty())
      e["cpu"] = {{s.cpu_sides[0], advise::summarize(c.cpu[0]).median},
                  {s.cpu_sides[1], advise::summarize(c.cpu[1]).median}};
    return e;
  };
  ojson ranked = ojson::array(), ties = ojson::array(), refused = ojson::array();
  for (std::size_t i : ranking.order) {
    const Candidate& c = s.candidates[i];
    std::string status =
        i == ranking.winner                                                            ? "winner"
        : std::find(ranking.tied.begin(), ranking.tied.end(), i) != ranking.tied.end() ? "tied"
        : c.dropped_after ? "dropped after round " + std::to_string(c.dropped_after)
                          : "behind";
    ranked.push_back(entry(i, status));
    if (status == "tied") ties.push_back(c.provider + ":" + c.name);
  }
  for (const Candidate& c : s.candidates)
    if (!c.refused.empty() || !c.failed.empty())
      refused.push_back({{"provider", c.provider},
                         {"design", c.name},
                         {"why", c.refused.empty() ? c.failed : c.refused}});
  ojson fingerprint = ojson::object();
  for (const char* k : {"cpu_model", "cores", "kernel", "libfabric_version", "fabflow_version"})
    if (s.environment.is_object() && s.environment.contains(k)) fingerprint[k] = s.environment[k];
  ojson j = {{"type", "advice"},
             {"family", f.family},
             {"objective", obj.name},
             {"field", std::string(obj.field) == kBothSides
                           ? s.cpu_sides[0] + " + " + s.cpu_sides[1] + " CPU per operation"
                           : std::string(obj.field)},
             {"unit", obj.unit},
             {"cpu_unit", s.cpu_unit.empty() ? ojson(nullptr) : ojson(s.cpu_unit)},
             {"better", obj.better == Better::higher ? "higher" : "lower"},
             {"providers", split(f.providers, ',')},
             {"workload",
              {{"size", f.size},
               {"args", f.workload},
               {"passive", f.passive.empty() ? ojson(nullptr) : ojson(f.passive)},
               {"candidates", f.candidates.empty() ? ojson(nullptr) : ojson(f.candidates)}}},
             {"budget_s", budget_s},
             {"seconds", s.seconds},
             {"rounds", s.rounds},
             {"created", utc_now()},
             {"fabflow_version", FABFLOW_VERSION},
             {"fingerprint", fingerprint},
             {"winner", nullptr},
             {"ties", ties},
             {"ranked", ranked},
             {"refused", refused},
             {"notes", s.notes}};
  // Where the paper's design stands here: its best-ranked candidate's status.
  if (!s.prior.empty()) {
    std::string where = "not a candidate of this search";
    for (const auto& e : ranked)
      if (e["design"] == s.prior) {
        where = e["status"].get<std::string>() + " on " + e["provider"].get<std::string>();
        break;
      }
    if (where.rfind("not", 0) == 0)
      for (const auto& r : refused)
        if (r["design"] == s.prior) {
          where =
              "refused on " + r["provider"].get<std::string>() + ": " + r["why"].get<std::string>();
          break;
        }
    j["prior"] = {{"design", s.prior}, {"source", s.prior_source}, {"here", where}};
  }
  if (ranking.winner != static_cast<std::size_t>(-1))
    j["winner"] = s.candidates[ranking.winner].provider + ":" + s.candidates[ranking.winner].name;
  return j;
}

namespace {

// The one-line recommendation with its reason.
std::string recommendation(const ojson& a) {
  if (a["winner"].is_null()) return "no candidate could be measured";
  const auto& ranked = a["ranked"];
  const auto& w = ranked[0];
  const std::string unit = a["unit"].get<std::string>();
  std::string out = "use " + w["design"].get<std::string>() + " on " +
                    w["provider"].get<std::string>() + ": median " +
                    value_text(w["median"].get<double>(), unit);
  if (ranked.size() > 1) {
    const auto& next = ranked[1];
    const double m = w["median"].get<double>(), n = next["median"].get<double>();
    const double gap = n != 0 ? std::fabs(m - n) / std::fabs(n) * 100 : 0;
    std::ostringstream g;
    g << std::fixed << std::setprecision(0) << gap;
    out += ", " + g.str() + "% " + (a["better"] == "higher" ? "above" : "below") + " the next (" +
           next["design"].get<std::string>() + " on " + next["provider"].get<std::string>() + ")";
  }
  if (a["ties"].empty())
    out += "; its runs are clear of every other candidate's";
  else
    out += "; tied within the runs' spread with " + std::to_string(a["ties"].size()) +
           " other(s): " + a["ties"][0].get<std::string>() + (a["ties"].size() > 1 ? ", ..." : "");
  return out;
}

}  // namespace

void print_answer(const ojson& a, std::ostream& out) {
  out << "advise " << a["family"].get<std::string>() << ": objective "
      << a["objective"].get<std::string>() << " (" << a["field"].get<std::string>() << ", "
      << a["better"].get<std::string>() << " is better), " << a["rounds"] << " round(s) in "
      << std::fixed << std::setprecision(0) << a["seconds"].get<double>() << " s of "
      << a["budget_s"].get<double>() << " s" << std::defaultfloat << "\n";
  std::vector<std::vector<std::string>> rows = {
      {"rank", "provider", "design", "median", "runs range", "runs", "status"}};
  // CPU per operation of each side (median of the same runs), where the family measures it.
  const bool cpu = a.contains("cpu_unit") && a["cpu_unit"].is_string();
  std::vector<std::string> sides;
  for (const auto& r : a["ranked"])
    if (sides.empty() && r.contains("cpu") && r["cpu"].is_object())
      for (const auto& [side, v] : r["cpu"].items()) sides.push_back(side);
  if (cpu && sides.size() == 2)
    rows[0].push_back("cpu per op (" + sides[0] + " | " + sides[1] + ")");
  int rank = 0;
  const std::string unit = a["unit"].get<std::string>();
  for (const auto& r : a["ranked"]) {
    rows.push_back({std::to_string(++rank), r["provider"].get<std::string>(),
                    r["design"].get<std::string>(), value_text(r["median"].get<double>(), unit),
                    value_text(r["low"].get<double>(), unit) + " .. " +
                        value_text(r["high"].get<double>(), unit),
                    std::to_string(r["samples"].size()), r["status"].get<std::string>()});
    if (rows[0].size() == rows.back().size() + 1) {
      const ojson& c = r.contains("cpu") ? r["cpu"] : ojson();
      const bool both = c.is_object() && c.contains(sides[0]) && c[sides[0]].is_number() &&
                        c.contains(sides[1]) && c[sides[1]].is_number();
      rows.back().push_back(
          both ? value_text(c[sides[0]].get<double>(), "") + "| " +
                     value_text(c[sides[1]].get<double>(), a["cpu_unit"].get<std::string>())
               : "n/a");
    }
  }
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c)
      out << row[c] << (c + 1 < row.size() ? std::string(width[c] - row[c].size() + 2, ' ') : "");
    out << "\n";
  }
  for (const auto& r : a["refused"])
    out << "not a candidate: " << r["design"].get<std::string>() << " on "
        << r["provider"].get<std::string>() << ": " << r["why"].get<std::string>() << "\n";
  for (const auto& n : a["notes"]) out << "note: " << n.get<std::string>() << "\n";
  if (a.contains("prior") && a["prior"].is_object() && a["prior"].contains("here"))
    out << "the papers' design: " << a["prior"].value("design", std::string("?")) << " ("
        << a["prior"].value("source", std::string())
        << "); here: " << a["prior"].value("here", std::string()) << "\n";
  out << "advice: " << recommendation(a) << "\n";
}

void write_profile(const ojson& a, const fs::path& path) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << a.dump(2) << "\n";
    if (!out.flush()) throw Error("advise: cannot write the profile " + tmp.string());
  }
  fs::rename(tmp, path, ec);
  if (ec) throw Error("advise: cannot write the profile " + path.string() + ": " + ec.message());
}

ojson read_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("advise --show: cannot read " + path);
  ojson a = ojson::parse(in, nullptr, false);
  if (a.is_discarded() || !a.is_object() || a.value("type", std::string()) != "advice" ||
      !a.contains("ranked") || !a["ranked"].is_array() || !a.contains("refused") ||
      !a.contains("unit") || !a.contains("winner"))
    throw UsageError("advise --show: " + path + " is not an advise profile");
  return a;
}

}  // namespace advise_detail

AutoChoice choose_design(const std::string& family, const std::string& provider,
                         const std::string& size, const std::string& objective,
                         const std::string& fallback, const std::string& fallback_rule,
                         const std::function<std::string(const std::string&)>& allowed) {
  advice::Query q;
  q.family = family;
  q.provider = provider;
  q.size = size.empty() ? 0 : parse_sizes(size).front();
  q.objectives = advise_detail::split(objective, ',');
  const advice::Choice c = advice::choose(
      advice::read_profile(q), {fallback}, fallback_rule,
      allowed ? allowed : [](const std::string&) { return std::string(); });
  return {c.design, c.why};
}

}  // namespace fabflow::tools
