// `fabflow advise FAMILY`: measures every candidate design of a family for the user's workload
// on this machine, within a time budget, and says which one wins and which ones are tied with
// it (the search: include/fabflow/bench/advise.h). Each round runs `fabflow bench FAMILY` as a
// child per provider, with every surviving candidate in one run, three times; the rows give one
// sample per candidate and run. The answer is printed as a table (or --json) and kept as a
// profile file (docs/advise.md).
#include <fabflow/bench/advise.h>
#include <fabflow/flow.h>
#include <fabflow/status.h>
#include <fabflow/version.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/plot.h"
#include "cli/subprocess.h"

namespace fabflow::cli {
namespace {

namespace fs = std::filesystem;
using bench::advise::Better;
using bench::advise::Candidate;
namespace advise = bench::advise;
using ojson = nlohmann::ordered_json;

// ---- the families ----

struct Objective {
  const char* name;   // throughput | p50 | p99
  const char* field;  // the row field compared (dots descend)
  const char* unit;   // for the table
  Better better;
  std::vector<const char*> extra;  // bench flags this objective needs
  const char* effort_flag;         // the work per run, doubled every round
  std::uint64_t effort;            // its first value
};

struct Family {
  const char* name;
  const char* candidate_flag;  // how the bench is told the designs to run
  std::vector<std::string> (*candidates)();
  std::string (*name_of)(const ojson& row);  // the candidate a row belongs to
  std::vector<Objective> objectives;
};

// A string field of a row, or "" (absent or null: the socket baseline has no preset).
std::string text(const ojson& row, const char* key) {
  const auto it = row.find(key);
  return it != row.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::vector<std::string> queue_candidates() {
  std::vector<std::string> out;
  for (const auto& d : flow::Design::all()) out.push_back(d.name());
  out.insert(out.end(), {"batching", "datamover", "socket"});
  return out;
}
std::string queue_name(const ojson& row) {
  const std::string preset = text(row, "preset");
  if (!preset.empty() && preset != "basic") return preset;  // --design batching / datamover
  return text(row, "design");
}

std::vector<std::string> rr_candidates() {
  std::vector<std::string> out;
  for (const char* m : {"private", "dispatcher"})
    for (const char* p : {"WriteWrite", "SendSend", "WriteSend", "SendWrite"})
      out.push_back(std::string(p) + "/" + m);
  return out;
}
std::string rr_name(const ojson& row) { return text(row, "pattern") + "/" + text(row, "model"); }

std::vector<std::string> kv_candidates() { return {"herd", "read", "atomic"}; }
std::string kv_name(const ojson& row) { return text(row, "design"); }

std::vector<std::string> bulk_candidates() {
  return {"copy",     "eager",         "rndv-write",       "rndv-read", "leave-pinned",
          "pipeline", "pipeline-read", "caching-pipeline", "auto"};
}
std::string bulk_name(const ojson& row) { return text(row, "protocol"); }

const std::vector<Family>& families() {
  static const std::vector<Family> kAll = {
      {"queue",
       "--design",
       queue_candidates,
       queue_name,
       {{"throughput", "items_per_s", "items/s", Better::higher, {}, "--items", 20000},
        {"p50", "transfer_ns.p50", "ns", Better::lower, {"--pingpong"}, "--round-trips", 2000},
        {"p99", "transfer_ns.p99", "ns", Better::lower, {"--pingpong"}, "--round-trips", 2000}}},
      {"rr",
       "--pattern",
       rr_candidates,
       rr_name,
       {{"throughput", "requests_per_s", "requests/s", Better::higher, {}, "-I", 2000},
        {"p50", "latency_ns.p50", "ns", Better::lower, {}, "-I", 2000},
        {"p99", "latency_ns.p99", "ns", Better::lower, {}, "-I", 2000}}},
      {"kv",
       "--design",
       kv_candidates,
       kv_name,
       {{"throughput", "requests_per_s", "requests/s", Better::higher, {}, "-I", 2000},
        {"p50", "get.latency_ns.p50", "ns", Better::lower, {}, "-I", 2000},
        {"p99", "get.latency_ns.p99", "ns", Better::lower, {}, "-I", 2000}}},
      {"bulk",
       "--protocol",
       bulk_candidates,
       bulk_name,
       {{"throughput", "pingpong_mb_s", "MB/s", Better::higher, {}, "--bytes", 64ull << 20},
        {"p50", "half_rtt_us", "us", Better::lower, {}, "--bytes", 64ull << 20}}},
  };
  return kAll;
}

const Family& family(const std::string& name) {
  std::string names;
  for (const auto& f : families()) {
    if (name == f.name) return f;
    names += (names.empty() ? "" : ", ") + std::string(f.name);
  }
  throw UsageError("advise: unknown family '" + name + "' (use " + names + ")");
}

const Objective& objective(const Family& f, const std::string& name) {
  std::string names;
  for (const auto& o : f.objectives) {
    if (name == o.name) return o;
    names += (names.empty() ? "" : ", ") + std::string(o.name);
  }
  throw UsageError("advise " + std::string(f.name) + ": objective '" + name +
                   "' is not measured by this bench (use " + names + ")");
}

// ---- flags ----

struct AdviseFlags {
  std::string family;
  std::string providers = "shm";
  std::string objective = "throughput";
  std::string budget = "2m";
  std::string size;
  std::string candidates;  // empty: every candidate of the family
  std::string profile;     // empty: the cache folder's advise-<family>.json
  bool no_profile = false;
  bool json = false;
  std::string show;                   // print a saved profile instead of measuring
  std::string map;                    // BASE of a map over sizes x objectives
  std::vector<std::string> workload;  // after "--": passed to the bench as given
};

double parse_budget(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit = end ? std::string(end) : "";
  double s = -1;
  if (end != text.c_str() && v > 0) {
    if (unit == "s" || unit.empty()) s = v;
    if (unit == "m") s = v * 60;
    if (unit == "h") s = v * 3600;
  }
  if (!(s >= 1 && s <= 24 * 3600))
    throw UsageError("--budget '" + text + "': give seconds or minutes, 1s to 24h (90s, 2m)");
  return s;
}

// ---- one round ----

double field_number(const ojson& row, const std::string& path) {
  const ojson* at = &row;
  std::size_t start = 0;
  while (true) {
    const auto dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? dot : dot - start);
    if (!at->is_object() || !at->contains(key)) return std::nan("");
    at = &(*at)[key];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return at->is_number() ? at->get<double>() : std::nan("");
}

std::string joined(const std::vector<std::string>& v, char sep = ',') {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : std::string(1, sep)) + s;
  return out;
}

class Search {
 public:
  Search(const AdviseFlags& f, const Family& fam, const Objective& obj)
      : f_(f), fam_(fam), obj_(obj), exe_(exe_path()) {}

  std::vector<Candidate> candidates;
  ojson environment;  // of the first row seen
  std::vector<std::string> notes;
  int rounds = 0;
  double seconds = 0;

  void run(double budget_s) {
    const auto start = std::chrono::steady_clock::now();
    auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    std::uint64_t effort = obj_.effort;
    while (true) {
      ++rounds;
      const double t0 = elapsed();
      const std::size_t ran = run_round(effort);
      const double took = elapsed() - t0;
      advise::drop_clear_losers(candidates, obj_.better, rounds);
      const std::size_t live = static_cast<std::size_t>(std::count_if(
          candidates.begin(), candidates.end(), [](const auto& c) { return c.live(); }));
      std::cerr << "[advise " << fam_.name << "] round " << rounds << ": " << ran
                << " candidate(s), " << fam_.candidate_flag << " ... " << obj_.effort_flag << " "
                << effort << ", " << std::fixed << std::setprecision(1) << took << " s; " << live
                << " left\n"
                << std::defaultfloat;
      if (live <= 1) break;
      // The next round runs the survivors with twice the work: about twice as long each.
      const double next =
          ran ? took * 2.0 * static_cast<double>(live) / static_cast<double>(ran) : 0;
      if (elapsed() + next > budget_s) {
        if (rounds == 1 && elapsed() > budget_s)
          notes.push_back("the budget was too short for more than one round (it took " +
                          std::to_string(static_cast<int>(elapsed() + 0.5)) + " s)");
        break;
      }
      effort *= 2;
    }
    seconds = elapsed();
  }

 private:
  static constexpr int kRunsPerRound = 3;

  std::size_t run_round(std::uint64_t effort) {
    std::map<std::size_t, std::vector<double>> fresh;
    std::size_t ran = 0;
    for (const auto& provider : split(f_.providers, ',')) {
      std::vector<std::size_t> live;
      for (std::size_t i = 0; i < candidates.size(); ++i)
        if (candidates[i].provider == provider && candidates[i].live()) live.push_back(i);
      if (live.empty()) continue;
      ran += live.size();
      for (int r = 0; r < kRunsPerRound; ++r) {
        // Each run starts at another candidate, so that no design always runs first.
        std::rotate(live.begin(),
                    live.begin() + static_cast<std::ptrdiff_t>(live.size() * r / kRunsPerRound),
                    live.end());
        run_child_for(provider, live, effort, fresh);
      }
    }
    for (auto& [i, samples] : fresh) {
      candidates[i].samples = std::move(samples);
      ++candidates[i].rounds;
    }
    for (std::size_t i = 0; i < candidates.size(); ++i)
      if (candidates[i].live() && !fresh.count(i)) candidates[i].samples.clear();
    return ran;
  }

  void run_child_for(const std::string& provider, const std::vector<std::size_t>& live,
                     std::uint64_t effort, std::map<std::size_t, std::vector<double>>& fresh) {
    std::vector<std::string> names;
    for (std::size_t i : live) names.push_back(candidates[i].name);
    ChildOptions c;
    c.argv = {exe_.string(), "bench", fam_.name, "-p", provider};
    if (std::string(fam_.name) == "rr") {
      // rr runs the product of patterns and models: name both sets.
      std::vector<std::string> patterns, models;
      for (const auto& n : names) {
        const auto slash = n.find('/');
        const std::string p = n.substr(0, slash), m = n.substr(slash + 1);
        if (std::find(patterns.begin(), patterns.end(), p) == patterns.end()) patterns.push_back(p);
        if (std::find(models.begin(), models.end(), m) == models.end()) models.push_back(m);
      }
      c.argv.insert(c.argv.end(), {"--pattern", joined(patterns), "--model", joined(models)});
    } else {
      c.argv.insert(c.argv.end(), {fam_.candidate_flag, joined(names)});
    }
    c.argv.insert(c.argv.end(), {obj_.effort_flag, std::to_string(effort)});
    for (const char* x : obj_.extra) c.argv.emplace_back(x);
    if (!f_.size.empty()) c.argv.insert(c.argv.end(), {"-S", f_.size});
    c.argv.insert(c.argv.end(), f_.workload.begin(), f_.workload.end());
    c.argv.emplace_back("--json");
    c.timeout = std::chrono::seconds(600);
    c.capture_stderr = true;
    std::size_t rows = 0;
    ChildResult res = run_child(c, [&](const std::string& line) {
      ojson row = ojson::parse(line, nullptr, false);
      if (row.is_discarded() || !row.is_object()) return;
      const std::string name = fam_.name_of(row);
      for (std::size_t i : live) {
        Candidate& cand = candidates[i];
        if (cand.name != name) continue;
        ++rows;
        if (row.contains("unsupported") && row["unsupported"].is_string()) {
          cand.refused = row["unsupported"].get<std::string>();
          continue;
        }
        const double v = field_number(row, obj_.field);
        if (std::isfinite(v)) fresh[i].push_back(v);
        if (environment.is_null() && row.contains("environment")) environment = row["environment"];
      }
    });
    if (interrupted()) throw UsageError("advise: interrupted");
    if (res.status != 0 || res.timed_out) {
      std::string why = first_error_line(res.err);
      if (rows == 0)
        throw UsageError("advise: the bench refused the workload on " + provider + ": " + why);
      for (std::size_t i : live)
        if (!fresh.count(i) && candidates[i].refused.empty())
          candidates[i].failed = "its run failed: " + why;
    }
  }

  static std::string first_error_line(const std::string& err) {
    std::istringstream in(err);
    std::string line, last;
    while (std::getline(in, line)) {
      if (line.rfind("fabflow: error: ", 0) == 0) return line.substr(16);
      if (!line.empty()) last = line;
    }
    return last.empty() ? "no message" : last;
  }

  const AdviseFlags& f_;
  const Family& fam_;
  const Objective& obj_;
  fs::path exe_;
};

// ---- the answer ----

// A measured value with its unit: times in ns, us or ms; rates and sizes with k, M, G.
std::string value_text(double v, const std::string& unit) {
  std::ostringstream s;
  s << std::setprecision(3);
  const double a = std::fabs(v);
  if (unit == "ns") {
    if (a >= 1e6)
      s << v / 1e6 << " ms";
    else if (a >= 1e3)
      s << v / 1e3 << " us";
    else
      s << v << " ns";
    return s.str();
  }
  if (a >= 1e9)
    s << v / 1e9 << " G ";
  else if (a >= 1e6)
    s << v / 1e6 << " M ";
  else if (a >= 1e4)
    s << v / 1e3 << " k ";
  else
    s << v << " ";
  return s.str() + unit;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

ojson answer_json(const AdviseFlags& f, const Objective& obj, const Search& s, double budget_s) {
  const auto ranking = advise::rank(s.candidates, obj.better);
  auto entry = [&](std::size_t i, const std::string& status) {
    const Candidate& c = s.candidates[i];
    const auto sum = advise::summarize(c.samples);
    return ojson{{"provider", c.provider}, {"design", c.name}, {"median", sum.median},
                 {"low", sum.low},         {"high", sum.high}, {"samples", c.samples},
                 {"rounds", c.rounds},     {"status", status}};
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
             {"field", obj.field},
             {"unit", obj.unit},
             {"better", obj.better == Better::higher ? "higher" : "lower"},
             {"providers", split(f.providers, ',')},
             {"workload", {{"size", f.size}, {"args", f.workload}}},
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
  if (ranking.winner != static_cast<std::size_t>(-1))
    j["winner"] = s.candidates[ranking.winner].provider + ":" + s.candidates[ranking.winner].name;
  return j;
}

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

void print_answer(const ojson& a, std::ostream& out) {
  out << "advise " << a["family"].get<std::string>() << ": objective "
      << a["objective"].get<std::string>() << " (" << a["field"].get<std::string>() << ", "
      << a["better"].get<std::string>() << " is better), " << a["rounds"] << " round(s) in "
      << std::fixed << std::setprecision(0) << a["seconds"].get<double>() << " s of "
      << a["budget_s"].get<double>() << " s" << std::defaultfloat << "\n";
  std::vector<std::vector<std::string>> rows = {
      {"rank", "provider", "design", "median", "runs range", "runs", "status"}};
  int rank = 0;
  const std::string unit = a["unit"].get<std::string>();
  for (const auto& r : a["ranked"])
    rows.push_back({std::to_string(++rank), r["provider"].get<std::string>(),
                    r["design"].get<std::string>(), value_text(r["median"].get<double>(), unit),
                    value_text(r["low"].get<double>(), unit) + " .. " +
                        value_text(r["high"].get<double>(), unit),
                    std::to_string(r["samples"].size()), r["status"].get<std::string>()});
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
  out << "advice: " << recommendation(a) << "\n";
}

fs::path default_profile(const std::string& family) {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path dir =
      cache && *cache ? fs::path(cache) : fs::path(home && *home ? home : "/tmp") / ".cache";
  return dir / "fabflow" / ("advise-" + family + ".json");
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

int run_advise(AdviseFlags f) {
  if (!f.show.empty()) {
    const ojson a = read_profile(f.show);
    if (f.json)
      std::cout << a.dump() << "\n";
    else
      print_answer(a, std::cout);
    return 0;
  }
  if (f.family.empty()) throw UsageError("advise: name a family (queue, rr, kv, bulk) or --show");
  const Family& fam = family(f.family);
  const auto objectives = split(f.objective, ',');
  for (const auto& o : objectives) objective(fam, o);
  const double budget_s = parse_budget(f.budget);
  auto providers = split(f.providers, ',');
  if (providers.empty() ||
      std::any_of(providers.begin(), providers.end(), [](const auto& p) { return p.empty(); }))
    throw UsageError("advise: -p needs one or more providers, comma-separated");
  std::sort(providers.begin(), providers.end());
  if (std::adjacent_find(providers.begin(), providers.end()) != providers.end())
    throw UsageError("advise: -p names a provider twice");
  for (const auto& p : providers) {
    TransportOptions probe;
    probe.provider = p;
    probe_transport(probe);  // an unknown provider is one line before anything runs
  }
  std::vector<std::string> names = fam.candidates();
  if (!f.candidates.empty()) {
    std::vector<std::string> chosen;
    for (const auto& c : split(f.candidates, ',')) {
      if (std::find(names.begin(), names.end(), c) == names.end())
        throw UsageError("advise " + f.family + ": '" + c + "' is not a candidate (" +
                         joined(names, ' ') + ")");
      if (std::find(chosen.begin(), chosen.end(), c) != chosen.end())
        throw UsageError("advise: --candidates names '" + c + "' twice");
      chosen.push_back(c);
    }
    names = chosen;
  }
  if (!f.map.empty()) {
    return run_advise_map({f.family, f.providers, f.candidates,
                           f.size.empty() ? std::vector<std::string>{} : split(f.size, ','),
                           objectives, f.workload, budget_s, f.map, f.json});
  }
  if (objectives.size() != 1)
    throw UsageError("advise: --objective takes one objective (several need --map)");
  if (f.size.find(',') != std::string::npos)
    throw UsageError("advise: -S takes one size (several need --map)");
  const Objective& obj = objective(fam, f.objective);
  Search s(f, fam, obj);
  for (const auto& p : split(f.providers, ','))
    for (const auto& n : names) s.candidates.push_back({p, n, {}, 0, 0, {}, {}});
  s.run(budget_s);
  const ojson a = answer_json(f, obj, s, budget_s);
  if (a["winner"].is_null()) {
    for (const auto& r : a["refused"])
      std::cerr << "fabflow: " << r["design"].get<std::string>() << " on "
                << r["provider"].get<std::string>() << ": " << r["why"].get<std::string>() << "\n";
    throw Error("advise " + f.family + ": no candidate could be measured for this workload");
  }
  if (!f.no_profile) {
    const fs::path path = f.profile.empty() ? default_profile(f.family) : fs::path(f.profile);
    write_profile(a, path);
    if (!f.json) std::cerr << "[advise " << f.family << "] profile: " << path.string() << "\n";
  }
  if (f.json)
    std::cout << a.dump() << "\n";
  else
    print_answer(a, std::cout);
  return 0;
}

// Why a profile cannot answer for this machine and workload ("" when it can).
std::string profile_mismatch(const ojson& a, const std::string& family, const std::string& provider,
                             const std::string& size, const std::string& objective) {
  if (a.value("family", std::string()) != family) return "it is for another family";
  if (a.value("fabflow_version", std::string()) != FABFLOW_VERSION)
    return "it was measured by fabflow " + a.value("fabflow_version", std::string("?"));
  const RunEnvironment& here = machine_environment();
  const ojson& fp = a.contains("fingerprint") ? a["fingerprint"] : ojson::object();
  if (fp.value("cpu_model", std::string()) != here.cpu_model ||
      fp.value("cores", 0u) != here.cores || fp.value("kernel", std::string()) != here.kernel)
    return "it was measured on another machine (" + fp.value("cpu_model", std::string("?")) + ", " +
           std::to_string(fp.value("cores", 0u)) + " cores, kernel " +
           fp.value("kernel", std::string("?")) + ")";
  const auto providers = a.value("providers", std::vector<std::string>());
  if (std::find(providers.begin(), providers.end(), provider) == providers.end())
    return "it did not measure " + provider;
  const ojson& w = a.contains("workload") ? a["workload"] : ojson::object();
  if (w.value("size", std::string()) != size)
    return "it measured size '" + w.value("size", std::string()) + "', not '" + size + "'";
  if (w.contains("args") && w["args"].is_array() && !w["args"].empty())
    return "its workload had more bench flags (" +
           joined(w["args"].get<std::vector<std::string>>(), ' ') + ")";
  const auto wanted = split(objective, ',');
  if (std::find(wanted.begin(), wanted.end(), a.value("objective", std::string())) == wanted.end())
    return "it ranks by " + a.value("objective", std::string()) + ", not " + objective;
  return "";
}

}  // namespace

AutoChoice choose_design(const std::string& family, const std::string& provider,
                         const std::string& size, const std::string& objective,
                         const std::string& fallback, const std::string& fallback_rule) {
  const fs::path path = default_profile(family);
  std::string why_not;
  std::ifstream in(path);
  if (!in) {
    why_not = "no profile at " + path.string() + " (fabflow advise " + family + " writes one)";
  } else {
    const ojson a = ojson::parse(in, nullptr, false);
    if (a.is_discarded() || !a.is_object() || a.value("type", std::string()) != "advice" ||
        !a.contains("ranked") || !a["ranked"].is_array()) {
      why_not = "the profile " + path.string() + " is not an advise profile: ignored";
    } else {
      why_not = profile_mismatch(a, family, provider, size, objective);
      if (why_not.empty()) {
        const ojson* best = nullptr;
        const ojson* next = nullptr;
        for (const auto& r : a["ranked"]) {
          if (!r.is_object() || r.value("provider", std::string()) != provider ||
              !r.contains("design") || !r["design"].is_string() || !r.contains("median") ||
              !r["median"].is_number())
            continue;
          (best ? next : best) = &r;
          if (next) break;
        }
        if (!best) {
          why_not = "the profile ranks no design on " + provider;
        } else {
          const std::string unit = a.value("unit", std::string());
          std::string why = "profile " + path.string() + " (" +
                            a.value("created", std::string("?")) + "): median " +
                            value_text((*best)["median"].get<double>(), unit);
          if (next)
            why += ", next " + (*next)["design"].get<std::string>() + " " +
                   value_text((*next)["median"].get<double>(), unit) +
                   ((*next).value("status", std::string()) == "tied" ? " (tied)" : "");
          return {(*best)["design"].get<std::string>(), why};
        }
      }
    }
  }
  return {fallback, "the rule: " + fallback_rule + "; no profile used: " + why_not};
}

void add_advise(CLI::App& app, Runner& run) {
  auto* a = app.add_subcommand(
      "advise", "which design wins your workload here: measures the candidates within a budget");
  auto f = std::make_shared<AdviseFlags>();
  a->add_option("family", f->family, "queue, rr, kv or bulk");
  a->add_option("-p,--provider", f->providers,
                "provider(s) to compare, comma-separated (default shm)");
  a->add_option("--objective", f->objective,
                "throughput (default), p50 or p99 (bulk: throughput, p50)");
  a->add_option("--budget", f->budget, "time for the search: 90s, 2m (default 2m)");
  a->add_option("-S,--size", f->size, "item, response or message size of the workload");
  a->add_option("--candidates", f->candidates, "only these designs, comma-separated");
  a->add_option("--save", f->profile,
                "where the answer is kept (default: ~/.cache/fabflow/advise-FAMILY.json)");
  a->add_flag("--no-save", f->no_profile, "keep no answer");
  a->add_flag("--json", f->json, "the answer as one JSON object");
  a->add_option("--show", f->show, "print a saved profile's answer; measures nothing");
  a->add_option("--map", f->map,
                "BASE: the winner for each size of -S and each --objective, in BASE.json and "
                "drawn in BASE.png");
  a->add_option("workload", f->workload, "after --: more bench flags of the workload")
      ->expected(-1);
  a->callback([&run, f] { run = [f] { return run_advise(*f); }; });
}

}  // namespace fabflow::cli
