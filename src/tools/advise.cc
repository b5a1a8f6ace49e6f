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
#include <utility>

#include "tools/advise.h"
#include "tools/advise_internal.h"
#include "tools/plot.h"
#include "tools/subprocess.h"

namespace fabflow::tools {

namespace advise_detail {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace advise_detail

namespace {

namespace fs = std::filesystem;
namespace advise = bench::advise;
using namespace advise_detail;

// ---- the families ----

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

// Why a queue candidate cannot keep `end` (consumer, producer or both) passive, doing no work
// outside its enqueues or dequeues (seed 003's passivity, L237); "" when it can.
std::string passivity_refusal(const std::string& candidate, const std::string& end) {
  const bool consumer = end != "producer", producer = end != "consumer";
  if (producer && candidate == "datamover")
    return "--passive " + end + ": the data mover is a thread at the producer, an active producer";
  if (producer && candidate == "batching")
    return "--passive " + end +
           ": batching holds items in the producer's buffer until its next push, which needs an "
           "active producer (seed 003, L291)";
  const auto d = flow::Design::parse(candidate);
  if (consumer && d && d->data == flow::DataFlow::pull)
    return "--passive " + end +
           ": a Pull data flow needs an active consumer, or a consumer that stops leaves the "
           "producer's buffer full (seed 003, L293)";
  return "";
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
        {"p99", "transfer_ns.p99", "ns", Better::lower, {"--pingpong"}, "--round-trips", 2000}},
       {},
       {},
       nullptr,
       "push1-watermark-pull",
       "seed 003: watermarking is \"an ideal choice\" for transfer notification (L636), Push-1 "
       "matches Push-2's throughput with lower dequeue latency (L672), Pull gives \"very fast "
       "network-oblivious dequeue operations\" (L712)"},
      {"rr",
       "--pattern",
       rr_candidates,
       rr_name,
       {{"throughput", "requests_per_s", "requests/s", Better::higher, {}, "-I", 2000},
        {"p50", "latency_ns.p50", "ns", Better::lower, {}, "-I", 2000},
        {"p99", "latency_ns.p99", "ns", Better::lower, {}, "-I", 2000},
        {"cpu", kBothSides, "ns/msg", Better::lower, {}, "-I", 2000}},
       {"requester", "responder"},
       {"cpu.requester.cpu_ns_per_msg", "cpu.responder.cpu_ns_per_msg"},
       "ns/msg",
       "WriteWrite/private",
       "seed 000: \"all combinations using a WRITE to implement the response outperform the "
       "versions in which SEND is used\" (L171); WriteWrite is the best of them there"},
      {"kv",
       "--design",
       kv_candidates,
       kv_name,
       {{"throughput", "requests_per_s", "requests/s", Better::higher, {}, "-I", 2000},
        {"p50", "get.latency_ns.p50", "ns", Better::lower, {}, "-I", 2000},
        {"p99", "get.latency_ns.p99", "ns", Better::lower, {}, "-I", 2000},
        {"cpu", kBothSides, "ns/op", Better::lower, {}, "-I", 2000}},
       {"client", "server"},
       {"cpu_ns_per_op.client", "cpu_ns_per_op.server"},
       "ns/op",
       "herd",
       "seed 001: \"RPCs over RDMA is the best design for a networked key-value store\" (L11, "
       "Section 4)"},
      {"bulk",
       "--protocol",
       bulk_candidates,
       bulk_name,
       {{"throughput", "pingpong_mb_s", "MB/s", Better::higher, {}, "--bytes", 64ull << 20},
        {"p50", "half_rtt_us", "us", Better::lower, {}, "--bytes", 64ull << 20},
        {"cpu", kBothSides, "ns/B", Better::lower, {}, "--bytes", 64ull << 20}},
       {"sender", "receiver"},
       {"cpu_ns_per_byte.sender", "cpu_ns_per_byte.receiver"},
       "ns/B",
       "caching-pipeline",
       "seed 004: the pipeline with its memory cache (leave pinned) \"outperforms all the other "
       "protocols by a significant margin\" (L143), with buffers reused"},
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

class Search : public SearchOutcome {
 public:
  Search(const AdviseRequest& f, const Family& fam, const Objective& obj)
      : f_(f), fam_(fam), obj_(obj), exe_(exe_path()) {
    if (fam.prior) {
      prior = fam.prior;
      prior_source = fam.prior_source;
    }
    if (fam.cpu_unit) {
      cpu_sides = {fam.cpu_sides[0], fam.cpu_sides[1]};
      cpu_unit = fam.cpu_unit;
    }
  }

  void run(double budget_s) {
    start_ = std::chrono::steady_clock::now();
    budget_s_ = budget_s;
    std::uint64_t effort = least_effort();
    while (true) {
      ++rounds;
      const double t0 = elapsed();
      const std::uint64_t first_effort = effort;
      const std::size_t ran = run_round(effort);
      const double took = elapsed() - t0;
      advise::drop_clear_losers(candidates, obj_.better, rounds);
      const std::size_t live = static_cast<std::size_t>(std::count_if(
          candidates.begin(), candidates.end(), [](const auto& c) { return c.live(); }));
      std::cerr << "[advise " << fam_.name << "] round " << rounds << ": " << ran
                << " candidate(s), " << fam_.candidate_flag << " ... " << obj_.effort_flag << " "
                << (first_effort == effort ? "" : std::to_string(first_effort) + " to ") << effort
                << ", " << std::fixed << std::setprecision(1) << took << " s; " << live << " left\n"
                << std::defaultfloat;
      if (live <= 1) break;
      // The next round runs the survivors with twice the work: about twice as long each.
      const double next =
          ran ? took * 2.0 * static_cast<double>(live) / static_cast<double>(ran) : 0;
      if (elapsed() + next > budget_s) break;
      effort *= 2;
    }
    seconds = elapsed();
    if (rounds == 1 && seconds > budget_s)
      notes.push_back("the budget was too short for more than one round (the first took " +
                      std::to_string(static_cast<int>(seconds + 0.5)) + " s)");
  }

 private:
  static constexpr int kRunsPerRound = 3;
  // The first round may spend this share of the budget. Its first run does a sixteenth of the
  // objective's work; the runs after it do as much (a power of two times that, at most the
  // objective's) as the time measured so far says fits the share.
  static constexpr double kFirstRoundShare = 0.5;
  static constexpr std::uint64_t kLeastEffortDivisor = 16;

  // The objective's figure in a row: its field, or the CPU per operation of both sides.
  double objective_value(const ojson& row) const {
    if (std::string(obj_.field) != kBothSides) return field_number(row, obj_.field);
    return field_number(row, fam_.cpu_fields[0]) + field_number(row, fam_.cpu_fields[1]);
  }

  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  std::uint64_t least_effort() const {
    return std::max<std::uint64_t>(1, obj_.effort / kLeastEffortDivisor);
  }

  // After a run of the first round that took `took` seconds with `effort`, with `left` runs to
  // go: the effort of the next run. Throws when even the least effort cannot finish the round
  // within the budget, with the figures that say so.
  std::uint64_t pace_first_round(std::uint64_t effort, double took, std::size_t left) const {
    const double now = elapsed();
    const double need = now + static_cast<double>(left) * took;
    if (effort == least_effort() && need > budget_s_)
      throw UsageError("advise: a budget of " + std::to_string(static_cast<long>(budget_s_)) +
                       " s is too short here: one run of the bench took " +
                       std::to_string(static_cast<long>(took + 0.5)) + " s with " +
                       obj_.effort_flag + " " + std::to_string(effort) + ", so the first round (" +
                       std::to_string(kRunsPerRound) + " runs per provider) needs about " +
                       std::to_string(static_cast<long>(need)) + " s; give --budget " +
                       std::to_string(static_cast<long>(need * 2 + 1)) +
                       "s or more, or fewer providers or --candidates");
    // Time is taken as proportional to the work: an overestimate where setup dominates.
    const double share = budget_s_ * kFirstRoundShare - now;
    const double per_unit = took / static_cast<double>(effort);
    std::uint64_t next = least_effort();
    while (next * 2 <= obj_.effort &&
           static_cast<double>(left) * per_unit * static_cast<double>(next * 2) <= share)
      next *= 2;
    return next;
  }

  // One round's measurements of a candidate.
  struct Fresh {
    std::vector<double> samples;
    std::array<std::vector<double>, 2> cpu;
  };

  // Runs every live candidate kRunsPerRound times per provider. In the first round `effort`
  // is paced to the budget (pace_first_round) and comes back as the last value used.
  std::size_t run_round(std::uint64_t& effort) {
    std::map<std::size_t, Fresh> fresh;
    std::vector<std::pair<std::string, std::vector<std::size_t>>> plan;
    std::size_t ran = 0;
    for (const auto& provider : split(f_.providers, ',')) {
      std::vector<std::size_t> live;
      for (std::size_t i = 0; i < candidates.size(); ++i)
        if (candidates[i].provider == provider && candidates[i].live()) live.push_back(i);
      if (live.empty()) continue;
      ran += live.size();
      plan.emplace_back(provider, std::move(live));
    }
    std::size_t left = plan.size() * kRunsPerRound;
    for (auto& [provider, live] : plan) {
      for (int r = 0; r < kRunsPerRound; ++r) {
        // Each run starts at another candidate, so that no design always runs first.
        std::rotate(live.begin(),
                    live.begin() + static_cast<std::ptrdiff_t>(live.size() * r / kRunsPerRound),
                    live.end());
        const double t0 = elapsed();
        run_child_for(provider, live, effort, fresh);
        if (rounds == 1 && --left > 0) effort = pace_first_round(effort, elapsed() - t0, left);
      }
    }
    for (auto& [i, got] : fresh) {
      candidates[i].samples = std::move(got.samples);
      candidates[i].cpu = std::move(got.cpu);
      ++candidates[i].rounds;
    }
    for (std::size_t i = 0; i < candidates.size(); ++i)
      if (candidates[i].live() && !fresh.count(i)) candidates[i].samples.clear();
    return ran;
  }

  void run_child_for(const std::string& provider, const std::vector<std::size_t>& live,
                     std::uint64_t effort, std::map<std::size_t, Fresh>& fresh) {
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
    // A first-round run may not outlast the budget: it is stopped there, and the search with it.
    const double left_s = std::ceil(budget_s_ - elapsed());
    c.timeout = std::chrono::seconds(rounds == 1 ? static_cast<long>(std::max(1.0, left_s)) : 600);
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
        if (environment.is_null() && row.contains("environment")) environment = row["environment"];
        const double v = objective_value(row);
        if (!std::isfinite(v)) continue;
        fresh[i].samples.push_back(v);
        for (std::size_t side = 0; side < 2 && fam_.cpu_unit; ++side) {
          const double cpu = field_number(row, fam_.cpu_fields[side]);
          if (std::isfinite(cpu)) fresh[i].cpu[side].push_back(cpu);
        }
      }
    });
    if (interrupted()) throw UsageError("advise: interrupted");
    if (res.timed_out && rounds == 1)
      throw UsageError("advise: a budget of " + std::to_string(static_cast<long>(budget_s_)) +
                       " s is too short here: one run of the bench (" +
                       std::to_string(live.size()) + " candidate(s) on " + provider + ", " +
                       obj_.effort_flag + " " + std::to_string(effort) +
                       ") did not finish within it; give a longer --budget, or fewer providers "
                       "or --candidates");
    if (res.status != 0 || res.timed_out) {
      std::string why = child_error(res.err);
      if (rows == 0)
        throw UsageError("advise: the bench refused the workload on " + provider + ": " + why);
      for (std::size_t i : live)
        if (!fresh.count(i) && candidates[i].refused.empty())
          candidates[i].failed = "its run failed: " + why;
    }
  }

  const AdviseRequest& f_;
  const Family& fam_;
  const Objective& obj_;
  fs::path exe_;
  std::chrono::steady_clock::time_point start_;
  double budget_s_ = 0;
};

// A workload file's value as text: a string, a number, or a list of strings joined by commas.
std::string workload_text(const ojson& v, const std::string& key, const std::string& file) {
  const auto bad = [&] {
    return UsageError("advise --workload: " + file + ": '" + key +
                      "' must be a string or a list of strings");
  };
  std::string out;
  if (v.is_string()) {
    out = v.get<std::string>();
  } else if (v.is_number_unsigned()) {
    out = std::to_string(v.get<std::uint64_t>());
  } else if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_string()) throw bad();
      out += (out.empty() ? "" : ",") + e.get<std::string>();
    }
  } else {
    throw bad();
  }
  if (out.size() > 4096)
    throw UsageError("advise --workload: " + file + ": '" + key + "' is too long");
  return out;
}

// Fills what the command line left out from --workload FILE: a workload file ({"family",
// "providers", "size", "objective", "candidates", "budget", "passive", "args"}) or a kept answer
// (its family, providers, objective and workload, the candidates it was limited to included), so
// that a search can be repeated as it was.
void merge_workload_file(AdviseRequest& f) {
  const std::string& file = f.workload_file;
  std::ifstream in(file);
  if (!in) throw UsageError("advise --workload: cannot read " + file);
  const ojson w = ojson::parse(in, nullptr, false);
  if (w.is_discarded() || !w.is_object())
    throw UsageError("advise --workload: " + file + " is not a JSON object");
  ojson given = ojson::object();
  if (w.value("type", std::string()) == "advice") {  // a kept answer
    for (const char* k : {"family", "providers", "objective"})
      if (w.contains(k)) given[k] = w[k];
    if (w.contains("workload") && w["workload"].is_object())
      for (const char* k : {"size", "args", "passive", "candidates"})
        if (w["workload"].contains(k) && !w["workload"][k].is_null()) given[k] = w["workload"][k];
  } else {
    for (const auto& [k, v] : w.items()) {
      static const std::vector<std::string> kKeys = {
          "family", "providers", "size", "objective", "candidates", "budget", "passive", "args"};
      if (std::find(kKeys.begin(), kKeys.end(), k) == kKeys.end())
        throw UsageError("advise --workload: " + file + ": unknown key '" + k + "' (" +
                         joined(kKeys, ' ') + ")");
      given[k] = v;
    }
  }
  const auto take = [&](const char* key, std::string& into) {
    if (into.empty() && given.contains(key)) into = workload_text(given[key], key, file);
  };
  take("family", f.family);
  take("providers", f.providers);
  take("size", f.size);
  take("objective", f.objective);
  take("candidates", f.candidates);
  take("budget", f.budget);
  take("passive", f.passive);
  if (f.workload.empty() && given.contains("args")) {
    if (!given["args"].is_array())
      throw UsageError("advise --workload: " + file + ": 'args' must be a list of strings");
    for (const auto& a : given["args"]) {
      if (!a.is_string())
        throw UsageError("advise --workload: " + file + ": 'args' must be a list of strings");
      f.workload.push_back(a.get<std::string>());
    }
  }
}

// --vary NAME=V1,V2,...: the bench flag (-N for a one-letter name, --NAME else) and its values.
void parse_vary(const AdviseRequest& f, AdviseMapRequest* r) {
  const auto eq = f.vary.find('=');
  const std::string name = f.vary.substr(0, eq);
  const bool named = !name.empty() && name[0] != '-' &&
                     name.find_first_not_of(
                         "abcdefghijklmnopqrstuvwxyz"
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") == std::string::npos;
  if (eq == std::string::npos || !named || eq + 1 == f.vary.size())
    throw UsageError(
        "advise: --vary takes NAME=V1,V2,... (a bench flag without its dashes, e.g. --vary "
        "capacity=16,1024), got '" +
        f.vary + "'");
  r->vary_flag = (name.size() == 1 ? "-" : "--") + name;
  r->vary_values = split(f.vary.substr(eq + 1), ',');
  for (const auto& v : r->vary_values)
    if (v.empty()) throw UsageError("advise: --vary has an empty value in '" + f.vary + "'");
  if (r->objectives.size() != 1)
    throw UsageError("advise: --vary maps sizes against the values of " + r->vary_flag +
                     " for one objective; give one --objective");
  if (std::find(f.workload.begin(), f.workload.end(), r->vary_flag) != f.workload.end())
    throw UsageError("advise: " + r->vary_flag + " is varied by --vary and given after -- too");
}

}  // namespace

int run_advise(AdviseRequest f) {
  if (!f.show.empty()) {
    const ojson a = read_profile(f.show);
    if (f.json)
      std::cout << a.dump() << "\n";
    else
      print_answer(a, std::cout);
    return 0;
  }
  if (!f.workload_file.empty()) merge_workload_file(f);
  if (f.providers.empty()) f.providers = "shm";
  if (f.objective.empty()) f.objective = "throughput";
  if (f.budget.empty()) f.budget = "2m";
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
  if (!f.passive.empty()) {
    if (f.family != "queue")
      throw UsageError("advise: --passive applies to queue (the ends of a flow queue), not " +
                       f.family);
    if (f.passive != "consumer" && f.passive != "producer" && f.passive != "both")
      throw UsageError("advise: --passive takes consumer, producer or both, got '" + f.passive +
                       "'");
    if (f.passive != "producer" &&
        std::find(f.workload.begin(), f.workload.end(), "--active-consumer") != f.workload.end())
      throw UsageError("advise: --passive " + f.passive +
                       " and --active-consumer (a helper thread at the consumer) contradict");
  }
  if (!f.vary.empty() && f.map.empty())
    throw UsageError("advise: --vary draws a map: give --map BASE too");
  if (!f.map.empty()) {
    AdviseMapRequest r{
        f.family,     f.providers,
        f.candidates, f.size.empty() ? std::vector<std::string>{} : split(f.size, ','),
        objectives,   f.workload};
    r.passive = f.passive;
    if (!f.vary.empty()) parse_vary(f, &r);
    r.budget_s = budget_s;
    r.out = f.map;
    r.json = f.json;
    return run_advise_map(r);
  }
  if (objectives.size() != 1)
    throw UsageError("advise: --objective takes one objective (several need --map)");
  if (f.size.find(',') != std::string::npos)
    throw UsageError("advise: -S takes one size (several need --map)");
  const Objective& obj = objective(fam, f.objective);
  Search s(f, fam, obj);
  for (const auto& p : split(f.providers, ','))
    for (const auto& n : names) {
      Candidate c;
      c.provider = p;
      c.name = n;
      if (!f.passive.empty()) c.refused = passivity_refusal(n, f.passive);
      s.candidates.push_back(std::move(c));
    }
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

}  // namespace fabflow::tools
