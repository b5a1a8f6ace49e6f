// The experiment runner behind `fabflow experiment run|judge`, `report` and `plot`: catalogue
// entries run as `fabflow bench` children of this executable, their rows written as
// DIR/<id>.jsonl, and python/fabflow_plot called to draw each figure and check its claim
// (docs/experiments.md). The CLI parses the flags, checks the entries' flags against its own
// parser and prints the list and the summary.
#pragma once

#include <fabflow/bench/experiment.h>

#include <string>
#include <vector>

namespace fabflow::tools {

// The catalogues in `dir` (--catalogue), else in $FABFLOW_CATALOGUE, else in experiments/ beside
// this executable (install_candidates). Throws UsageError naming where it looked.
std::vector<bench::Catalogue> find_catalogues(const std::string& dir);

// The entries `ids` names, each once, in order; with `all`, every runnable entry instead (the
// others in `skipped`). Throws UsageError for an unknown id, one that cannot run, or none.
std::vector<const bench::ExperimentEntry*> select_experiments(
    const std::vector<bench::Catalogue>& catalogues, bool all, const std::vector<std::string>& ids,
    std::vector<const bench::ExperimentEntry*>& skipped);

// `<exe> bench <bench> <point's args> -p PROVIDER --json`.
std::vector<std::string> bench_argv(const bench::ExperimentEntry& x, const bench::SweepPoint& p,
                                    const std::string& provider, const std::string& exe);
// The model command of each curve of the entry's reference, as a shell line
// (`fabflow model pcie ... -S 8,60,512`): what gives the reference rows the runner writes.
std::vector<std::string> reference_command_lines(const bench::ExperimentEntry& x, bool quick,
                                                 unsigned cores);
// argv as one shell command line, each word quoted where the shell would read it otherwise.
std::string command_line(const std::vector<std::string>& argv);

// Repeats let a verdict tell a difference from run-to-run noise (see "Claim checks" in
// docs/experiments.md); --quick keeps one run per point.
inline constexpr unsigned kDefaultRepeats = 3;

struct RunOptions {
  bool quick = false;
  unsigned repeat = kDefaultRepeats;
  unsigned cores = 1;  // the sweeps are sized for this many CPUs
  std::string provider;
  std::string out;  // the output folder
  unsigned point_timeout_s = 600;
};

// What one experiment left behind, for the summary.
struct Outcome {
  std::string id;
  std::size_t points_done = 0, points = 0;
  double seconds = 0;
  std::string verdict;
  std::vector<std::string> files;
  bool failed = false;  // a bench run or the figure failed
};

struct RunResult {
  std::vector<Outcome> outcomes;  // of the experiments run, in order
  int interrupted = 0;            // SIGINT or SIGTERM when one stopped the run, else 0
  bool figures_missing = false;   // the plot module could not run here
};

// Runs every selected entry in turn: checks that every sweep resolves and that the provider
// exists, creates the output folder, then runs each point `repeat` times as a bench child
// (progress on stderr, each experiment's verdict on stdout) and draws and judges its figure.
// Stops at the first interrupting signal, with the outcomes so far.
RunResult run_experiments(const RunOptions& options,
                          const std::vector<const bench::ExperimentEntry*>& selected);

// Re-draws and re-judges the rows an earlier run saved in `dir` (every <id>.jsonl whose first
// line is its entry), with the entry as it was run: the same verdicts, and no bench started.
// `ids`: the experiments to judge; empty: all of them.
struct JudgeResult {
  std::size_t judged = 0, total = 0;
  bool failed = false;
  bool figures_missing = false;
};
JudgeResult judge_experiments(const std::string& dir, const std::vector<std::string>& ids);

// `fabflow report DIR`: one HTML page of every experiment in DIR; the exit status.
int report(const std::string& dir);
// `fabflow plot FILE`: the CDF (and its tail) and the histogram of every latency row of a
// bench's --json output, from the rows' log-bucketed histograms; the exit status.
int plot_distribution(const std::string& file, const std::string& out, const std::string& field);

}  // namespace fabflow::tools
