// `fabflow experiment list|run|judge`, `report` and `plot`: their flags, the check of every
// catalogue entry's flags against the real `fabflow bench` parser, the list and the run's
// summary. The runner itself is src/tools/experiment.cc (docs/experiments.md).
#include "tools/experiment.h"

#include <fabflow/bench/experiment.h>
#include <fabflow/status.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/flags.h"
#include "common/affinity.h"
#include "tools/plot.h"

namespace fabflow::cli {
namespace {

using bench::ExperimentEntry;
using ojson = nlohmann::ordered_json;
using tools::Outcome;

// ---- experiment list ----

struct ListFlags {
  std::string catalogue;
  bool json = false;
};

int run_list(const ListFlags& f) {
  const auto catalogues = tools::find_catalogues(f.catalogue);
  if (f.json) {
    for (const auto& c : catalogues)
      for (const auto& x : c.entries)
        std::cout << ojson{{"id", x.id},
                           {"seed", c.seed},
                           {"title", x.title},
                           {"bench", x.bench},
                           {"fidelity", bench::fidelity_name(x.fidelity)},
                           {"fidelity_note", x.fidelity_note},
                           {"runnable", bench::runnable(x)},
                           {"status", bench::status_text(x)},
                           {"file", x.file}}
                         .dump()
                  << "\n";
    return 0;
  }
  // One line per entry: id, fidelity, title; an entry that cannot run says why on the next.
  std::size_t id_w = 2;
  for (const auto& c : catalogues)
    for (const auto& x : c.entries) id_w = std::max(id_w, x.id.size());
  const std::size_t fidelity_w = std::strlen("not_measurable");
  for (const auto& c : catalogues) {
    std::cout << c.seed << (c.paper.empty() ? "" : "  " + c.paper) << "\n";
    for (const auto& x : c.entries) {
      std::string id = x.id;
      id.resize(id_w, ' ');
      std::string fidelity = bench::fidelity_name(x.fidelity);
      fidelity.resize(fidelity_w, ' ');
      std::cout << "  " << id << "  " << fidelity << "  " << x.title << "\n";
      if (!bench::runnable(x))
        std::cout << "  " << std::string(id_w + 2, ' ') << bench::status_text(x) << "\n";
    }
  }
  return 0;
}

// ---- experiment run ----

// The runner's options as the flags give them, and the flags that choose what it runs.
struct RunFlags : tools::RunOptions {
  RunFlags() {
    repeat = 0;  // 0: kDefaultRepeats, or 1 with --quick
    cores = 0;   // 0: the CPUs this process may use
    provider = "shm";
    out = "fabflow-results";
  }
  std::string ids;
  std::string catalogue;
  bool dry_run = false;
};

// Checks every flag of the entry against the real `fabflow bench <bench>` options, so that a
// catalogue typo stops the run before anything starts.
void check_flags(const ExperimentEntry& x, const CLI::App& bench_app) {
  const std::string where = x.file + ": entry '" + x.id + "'";
  auto found =
      bench_app.get_subcommands([&](const CLI::App* a) { return a->get_name() == x.bench; });
  if (found.empty()) throw UsageError(where + ": fabflow has no 'bench " + x.bench + "'");
  const CLI::App& app = *found.front();
  bench::FlagValues all = x.args;
  all.insert(all.end(), x.quick_args.begin(), x.quick_args.end());
  for (const auto& v : x.sweep)
    for (const auto& value : v.values) all.emplace_back(v.flag, value);
  for (const auto& [flag, value] : all) {
    const CLI::Option* opt = app.get_option_no_throw(flag);
    // Hidden options (empty group) are the launcher's own, not for catalogues.
    if (!opt || !opt->nonpositional() || opt->get_group().empty())
      throw UsageError(where + ": 'fabflow bench " + x.bench + "' has no flag " + flag);
    const bool takes_value = opt->get_expected_max() > 0;  // add_flag sets expected(0)
    if (takes_value && value.empty()) throw UsageError(where + ": " + flag + " needs a value");
    if (!takes_value && !value.empty())
      throw UsageError(where + ": " + flag + " takes no value (give \"\")");
  }
}

void print_summary(const std::vector<Outcome>& outcomes,
                   const std::vector<const ExperimentEntry*>& skipped, const std::string& dir) {
  std::vector<std::vector<std::string>> rows = {{"id", "points", "seconds", "verdict", "files"}};
  for (const auto& o : outcomes) {
    std::string files;
    for (const auto& f : o.files) files += (files.empty() ? "" : " ") + f;
    std::ostringstream secs;
    secs.precision(1);
    secs << std::fixed << o.seconds;
    rows.push_back({o.id, std::to_string(o.points_done) + "/" + std::to_string(o.points),
                    secs.str(), o.verdict, files});
  }
  std::vector<std::size_t> w(rows[0].size(), 0);
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
  std::cout << "\n";
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) {
      std::string cell = r[i];
      if (i + 1 < r.size()) cell.resize(w[i], ' ');
      line += (i ? "  " : "") + cell;
    }
    std::cout << line << "\n";
  }
  std::cout << "(files in " << dir << ")\n";
  if (!skipped.empty()) {
    std::cout << "\nnot run:\n";
    for (const auto* x : skipped)
      std::cout << "  " << x->id << "  " << bench::status_text(*x) << "\n";
  }
  std::cout << std::flush;
}

int run_experiments(RunFlags f, const CLI::App& bench_app) {
  if (f.repeat == 0) f.repeat = f.quick ? 1 : tools::kDefaultRepeats;
  if (f.cores == 0) f.cores = static_cast<unsigned>(allowed_cpus().size());
  if (f.provider.empty() || f.provider.find(',') != std::string::npos)
    throw UsageError("-p takes one provider (run once per provider, into separate -o folders)");
  const auto catalogues = tools::find_catalogues(f.catalogue);
  std::vector<const ExperimentEntry*> skipped;
  const auto selected = tools::select_experiments(
      catalogues, f.ids == "all", f.ids == "all" ? std::vector<std::string>{} : split(f.ids, ','),
      skipped);
  for (const auto* x : selected) check_flags(*x, bench_app);
  if (f.dry_run) {
    for (const auto* x : selected) {
      for (const auto& p : bench::expand(*x, f.quick, f.cores))
        std::cout << x->id << ": "
                  << tools::command_line(tools::bench_argv(*x, p, f.provider, "fabflow")) << "\n";
      const auto model = tools::reference_command_lines(*x, f.quick, f.cores);
      for (std::size_t i = 0; i < model.size(); ++i)
        std::cout << x->id << ": reference '" << x->reference->label << "' ("
                  << x->reference->curves[i].series.dump() << "): " << model[i] << "\n";
    }
    for (const auto* x : skipped)
      std::cout << x->id << ": not run: " << bench::status_text(*x) << "\n";
    return 0;
  }
  const tools::RunResult r = tools::run_experiments(f, selected);
  if (r.interrupted) {
    if (!r.outcomes.empty()) print_summary(r.outcomes, {}, f.out);
    print_error("interrupted: the data measured so far is in " + f.out);
    return 128 + r.interrupted;
  }
  print_summary(r.outcomes, skipped, f.out);
  const bool failed =
      std::any_of(r.outcomes.begin(), r.outcomes.end(), [](const Outcome& o) { return o.failed; });
  if (failed) return 1;
  return r.figures_missing ? tools::kNoFigures : 0;
}

// `experiment judge DIR [IDS]`.
int run_judge(const std::string& dir, const std::string& ids) {
  const tools::JudgeResult r = tools::judge_experiments(
      dir, ids.empty() || ids == "all" ? std::vector<std::string>{} : split(ids, ','));
  std::cout << "judged " << r.judged << " of " << r.total << " experiments in " << dir << "\n"
            << std::flush;
  if (r.failed) return 1;
  return r.figures_missing ? tools::kNoFigures : 0;
}

}  // namespace

void add_experiment(CLI::App& app, const CLI::App& bench_app, Runner& run) {
  auto* exp =
      app.add_subcommand("experiment", "the papers' figures as data: list, run and check them");
  exp->require_subcommand(1);

  auto* list = exp->add_subcommand("list", "every catalogue entry with its status");
  auto lf = std::make_shared<ListFlags>();
  list->add_option("--catalogue", lf->catalogue, "catalogue folder (default: experiments/)");
  list->add_flag("--json", lf->json, "one JSON object per entry");
  list->callback([&run, lf] { run = [lf] { return run_list(*lf); }; });

  auto* r =
      exp->add_subcommand("run", "run experiments, write DIR/<id>.jsonl, draw and check them");
  auto rf = std::make_shared<RunFlags>();
  r->add_option("ids", rf->ids, "experiment id, comma list of ids, or all")->required();
  r->add_flag("--quick", rf->quick, "the entries' reduced sweeps: minutes, not hours");
  add_number<unsigned>(*r, "--repeat", rf->repeat, 1, 100,
                       "runs of every point (default 3; 1 with --quick)");
  add_number<unsigned>(*r, "--cores", rf->cores, 1, 4096,
                       "size the sweeps written relative to the machine for N CPUs (default: "
                       "the CPUs this run may use; with --dry-run, plans for another machine)");
  r->add_option("-p,--provider", rf->provider,
                "the one provider every bench runs on (default shm)");
  r->add_option("-o,--out", rf->out, "output folder, created if missing (default fabflow-results)");
  r->add_option("--catalogue", rf->catalogue, "catalogue folder (default: experiments/)");
  add_number<unsigned>(*r, "--point-timeout", rf->point_timeout_s, 1, 86400,
                       "seconds one bench run may take (default 600)");
  r->add_flag("--dry-run", rf->dry_run, "check the entries and print the bench command lines only");
  r->callback([&run, &bench_app, rf] {
    run = [&bench_app, rf] { return run_experiments(*rf, bench_app); };
  });

  auto* j = exp->add_subcommand(
      "judge", "re-draw and re-judge the rows a run saved in DIR (no bench is run)");
  auto dir = std::make_shared<std::string>();
  auto ids = std::make_shared<std::string>();
  j->add_option("dir", *dir, "folder written by fabflow experiment run -o")->required();
  j->add_option("ids", *ids, "experiment id, comma list of ids, or all (default: all)");
  j->callback([&run, dir, ids] { run = [dir, ids] { return run_judge(*dir, *ids); }; });
}

void add_plot(CLI::App& app, Runner& run) {
  auto* plot = app.add_subcommand(
      "plot", "CDF, tail and histogram of every latency row of a bench's --json output");
  auto file = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto field = std::make_shared<std::string>("latency_ns");
  plot->add_option("file", *file, "JSON lines of a bench (fabflow bench lat --json > FILE)")
      ->required();
  plot->add_option("-o,--out", *out,
                   "output base: BASE-cdf.png/.svg, BASE-hist.png/.svg "
                   "(default: FILE without .jsonl)");
  plot->add_option("--field", *field, "the latency object to draw (default latency_ns)");
  plot->callback([&run, file, out, field] {
    run = [file, out, field] { return tools::plot_distribution(*file, *out, *field); };
  });
}

void add_report(CLI::App& app, Runner& run) {
  auto* report = app.add_subcommand("report", "one HTML page of every experiment in DIR");
  auto dir = std::make_shared<std::string>();
  report->add_option("dir", *dir, "folder written by fabflow experiment run -o")->required();
  report->callback([&run, dir] { run = [dir] { return tools::report(*dir); }; });
}

}  // namespace fabflow::cli
