#include "tools/experiment.h"

#include <fabflow/status.h>
#include <fabflow/transport.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/affinity.h"
#include "tools/pcie_figure.h"
#include "tools/plot.h"
#include "tools/subprocess.h"

namespace fabflow::tools {
namespace {

namespace fs = std::filesystem;
using bench::ExperimentEntry;
using ojson = nlohmann::ordered_json;
using SteadyClock = std::chrono::steady_clock;

constexpr const char* kFigureExtensions[] = {".png", ".svg", ".html"};  // fabflow_plot's

std::string shell_quote(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("_./:=,@%+-").find(c) != std::string_view::npos;
  });
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string seconds_text(double s) {
  std::ostringstream o;
  o.precision(s < 10 ? 1 : 0);
  o << std::fixed << s << " s";
  return o.str();
}

void prepare_output(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UsageError("-o " + dir.string() + ": cannot create: " + ec.message());
  const fs::path probe = dir / ".fabflow-write-test";
  if (!std::ofstream(probe)) throw UsageError("-o " + dir.string() + ": cannot write there");
  fs::remove(probe, ec);
}

// Latency entries also get the distribution of every row: <id>-cdf.png and <id>-hist.png.
void distribution(const ExperimentEntry& x, const fs::path& jsonl, Plotter& plot, Outcome& o) {
  int status = 1;
  std::string err;
  const std::string base = fs::path(jsonl).replace_extension().string();
  if (!plot.run(
          {"distribution", jsonl.string(), "--out", base, "--title", x.id + ": " + x.title},
          [&](const std::string& line) { o.files.push_back(fs::path(line).filename().string()); },
          &status, &err))
    return;
  std::cerr << err;
  if (status != 0) {
    o.failed = true;
    o.verdict += ", distribution failed";
  }
}

// Draws `jsonl`'s figure and judges its claim (python/fabflow_plot), into `o`; latency
// entries also get their distributions.
void figure(const ExperimentEntry& x, const fs::path& jsonl, Plotter& plot, Outcome& o) {
  int status = 1;
  std::string err;
  nlohmann::json verdict;
  const bool ran = plot.run(
      {"figure", jsonl.string()},
      [&](const std::string& line) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("verdict")) verdict = j;
      },
      &status, &err);
  if (!ran) {
    o.verdict = "no figure (plotting unavailable)";
    return;
  }
  std::cerr << err;  // the module's warnings, or why it failed
  if (status != 0 || !verdict.is_object()) {
    if (status == 0) print_error(x.id + ": the plot module printed no verdict");
    o.failed = true;
    o.verdict = "plot failed";
  } else {
    o.verdict = verdict.value("verdict", "?");
    std::string detail = verdict.contains("detail") && verdict["detail"].is_string()
                             ? verdict["detail"].get<std::string>()
                             : "";
    std::cout << x.id << ": " << o.verdict << (detail.empty() ? "" : " (" + detail + ")") << "\n"
              << std::flush;
  }
  for (const char* ext : kFigureExtensions) {
    const fs::path p = fs::path(jsonl).replace_extension(ext);
    if (std::error_code ec; fs::exists(p, ec)) o.files.push_back(p.filename().string());
  }
  if (x.bench == "lat" && !o.failed) distribution(x, jsonl, plot, o);
}

// The rows of the entry's reference (docs/experiments.md, "Reference series"): the model's JSON
// row for every curve and x, marked reference_model and reference_label, with the curve's series
// values and the model's output (reference.value) as the plot's y (and its x where the row lacks
// that field).
std::vector<ojson> reference_json_rows(const ExperimentEntry& x, bool quick, unsigned cores) {
  std::vector<ojson> out;
  if (!x.reference) return out;
  const std::string x_field = x.plot.value("x", "");
  const std::string y_field = x.plot.value("y", "");
  for (std::size_t i = 0; i < x.reference->curves.size(); ++i) {
    const bench::ReferenceCurve& curve = x.reference->curves[i];
    for (const auto& r : bench::reference_rows(x, i, quick, cores)) {
      ojson row = pcie_row_json(r);
      row["reference_model"] = x.reference->model;
      row["reference_label"] = x.reference->label;
      row["reference_curve"] = i;
      row["experiment"] = x.id;
      for (const auto& [field, value] : curve.series.items()) row[field] = value;
      if (!x_field.empty() && !row.contains(x_field))
        row[x_field] =
            x.reference->x_flag == "--batch" ? ojson(r.work.batch) : ojson(r.work.payload_bytes);
      if (!y_field.empty()) row[y_field] = row[x.reference->value];
      out.push_back(std::move(row));
    }
  }
  return out;
}

class ExperimentRunner {
 public:
  ExperimentRunner(const RunOptions& f, fs::path exe) : f_(f), exe_(std::move(exe)) {}

  Outcome run(const ExperimentEntry& x, Plotter& plot) {
    Outcome o;
    o.id = x.id;
    const auto points = bench::expand(x, f_.quick, f_.cores);
    o.points = points.size();
    const fs::path jsonl = fs::path(f_.out) / (x.id + ".jsonl");
    // Figures of an earlier run in DIR would be taken for this run's.
    for (const char* ext : kFigureExtensions)
      fs::remove(fs::path(jsonl).replace_extension(ext), ec_);
    std::ofstream out(jsonl, std::ios::trunc);
    if (!out) throw Error("cannot write " + jsonl.string());
    std::vector<std::vector<std::string>> argvs;
    ojson command_lines = ojson::array();
    for (const auto& p : points) {
      command_lines.push_back(command_line(bench_argv(x, p, f_.provider, "fabflow")));
      argvs.push_back(bench_argv(x, p, f_.provider, exe_.string()));
    }
    ojson header = {{"type", "experiment"},
                    {"id", x.id},
                    {"entry", bench::entry_json(x, f_.quick, f_.cores)},
                    {"provider", f_.provider},
                    {"quick", f_.quick},
                    {"repeat", f_.repeat},
                    {"cores", f_.cores},
                    {"command_lines", command_lines},
                    {"environment", bench::experiment_environment()}};
    if (x.reference)
      header["reference_command_lines"] = reference_command_lines(x, f_.quick, f_.cores);
    out << header.dump() << "\n" << std::flush;

    const auto start = SteadyClock::now();
    const std::size_t runs = points.size() * f_.repeat;
    std::size_t done = 0, not_json = 0;
    for (std::size_t i = 0; i < points.size() && !o.failed; ++i) {
      for (unsigned r = 0; r < f_.repeat && !o.failed; ++r) {
        progress(x.id, i, points.size(), r, points[i].values, start, done, runs);
        ChildOptions c;
        c.argv = argvs[i];
        c.timeout = std::chrono::seconds(f_.point_timeout_s);
        c.capture_stderr = true;
        std::size_t rows = 0;
        ChildResult res = run_child(c, [&](const std::string& line) {
          ojson row = ojson::parse(line, nullptr, false);
          if (row.is_discarded() || !row.is_object()) {
            ++not_json;
            return;
          }
          bench::tag_row(row, x.id, i, points[i].values, r);
          out << row.dump() << "\n" << std::flush;
          ++rows;
        });
        std::cerr << res.err << std::flush;
        if (interrupted()) throw Interrupted{};
        if (res.status == 2 && !res.timed_out && rows == 0 &&
            child_error(res.err).find("' offers no ") != std::string::npos) {
          // The provider offers no endpoint of the point's kind ("provider 'shm' offers no msg
          // endpoints on this machine", src/transport/libfabric/select.cc): a refused row, and
          // the rest runs. Any other exit 2 is a fault of the entry, as before.
          ojson row = {{"unsupported", child_error(res.err)}, {"refused_point", true}};
          bench::tag_row(row, x.id, i, points[i].values, r);
          out << row.dump() << "\n" << std::flush;
          std::cerr << "fabflow: warning: [" << x.id << "] point " << i + 1
                    << " refused on this provider: " << row["unsupported"].get<std::string>()
                    << "\n";
        } else if (res.status != 0 || res.timed_out) {
          std::string why = res.timed_out
                                ? "took longer than " + std::to_string(f_.point_timeout_s) +
                                      " s and was stopped (--point-timeout)"
                                : "failed (exit " + std::to_string(res.status) + ")";
          print_error(x.id + " point " + std::to_string(i + 1) + ": " +
                      command_lines[i].get<std::string>() + " " + why);
          o.failed = true;
        }
        ++done;
      }
      if (!o.failed) o.points_done = i + 1;
    }
    if (!o.failed)
      for (const auto& row : reference_json_rows(x, f_.quick, f_.cores)) out << row.dump() << "\n";
    if (!out.flush()) throw Error("writing " + jsonl.string() + " failed");
    out.close();
    if (not_json > 0)
      std::cerr << "fabflow: warning: [" << x.id << "] " << not_json
                << " line(s) of bench output were not JSON and were left out\n";
    o.files.push_back(jsonl.filename().string());
    if (o.failed) {
      o.verdict = "bench failed: partial data, no figure";
    } else {
      figure(x, jsonl, plot, o);
    }
    o.seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
    return o;
  }

  struct Interrupted {};

 private:
  void progress(const std::string& id, std::size_t i, std::size_t n, unsigned r,
                const bench::FlagValues& values, SteadyClock::time_point start, std::size_t done,
                std::size_t runs) const {
    std::string swept;
    for (const auto& [flag, value] : values)
      swept += (swept.empty() ? "" : ", ") + flag + (value.empty() ? "" : " " + value);
    if (swept.empty()) swept = "no sweep";
    const double elapsed = std::chrono::duration<double>(SteadyClock::now() - start).count();
    std::cerr << "[" << id << "] point " << i + 1 << "/" << n << " (repeat " << r + 1 << "/"
              << f_.repeat << "): " << swept << "  elapsed " << seconds_text(elapsed);
    if (done > 0)
      std::cerr << ", about " << seconds_text(elapsed / done * (runs - done)) << " left";
    std::cerr << "\n";
  }

  const RunOptions& f_;
  fs::path exe_;
  std::error_code ec_;  // for file checks whose failure only means "not there"
};

}  // namespace

std::vector<bench::Catalogue> find_catalogues(const std::string& dir_flag) {
  if (!dir_flag.empty()) return bench::load_catalogues(dir_flag);
  if (const char* env = std::getenv("FABFLOW_CATALOGUE"); env && *env)
    return bench::load_catalogues(env);
  auto candidates = install_candidates("experiments");
  fs::path dir = first_dir(candidates);
  if (dir.empty()) {
    std::string looked;
    for (const auto& c : candidates) {
      const std::string dir_text = c.lexically_normal().string();
      if (looked.find(dir_text) != std::string::npos) continue;
      looked += (looked.empty() ? "" : ", ") + dir_text;
    }
    throw UsageError("no experiment catalogue found (looked in " + looked +
                     "); give --catalogue DIR or set FABFLOW_CATALOGUE");
  }
  return bench::load_catalogues(dir);
}

std::string command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + shell_quote(a);
  return out;
}

std::vector<const ExperimentEntry*> select_experiments(
    const std::vector<bench::Catalogue>& catalogues, bool all, const std::vector<std::string>& ids,
    std::vector<const ExperimentEntry*>& skipped) {
  std::vector<const ExperimentEntry*> out;
  if (all) {
    for (const auto& c : catalogues)
      for (const auto& x : c.entries) (bench::runnable(x) ? out : skipped).push_back(&x);
    return out;
  }
  for (const auto& id : ids) {
    const ExperimentEntry* x = bench::find_experiment(catalogues, id);
    if (!x)
      throw UsageError("unknown experiment '" + id + "' (fabflow experiment list shows them)");
    if (!bench::runnable(*x)) throw UsageError(id + " cannot run: " + bench::status_text(*x));
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  }
  if (out.empty()) throw UsageError("no experiment given (an id, a comma list, or all)");
  return out;
}

std::vector<std::string> bench_argv(const ExperimentEntry& x, const bench::SweepPoint& p,
                                    const std::string& provider, const std::string& exe) {
  std::vector<std::string> argv = {exe, "bench", x.bench};
  argv.insert(argv.end(), p.args.begin(), p.args.end());
  argv.insert(argv.end(), {"-p", provider, "--json"});
  return argv;
}

std::vector<std::string> reference_command_lines(const ExperimentEntry& x, bool quick,
                                                 unsigned cores) {
  std::vector<std::string> out;
  if (!x.reference) return out;
  for (std::size_t i = 0; i < x.reference->curves.size(); ++i) {
    std::vector<std::string> argv = {"fabflow"};
    const auto model = bench::reference_argv(x, i, quick, cores);
    argv.insert(argv.end(), model.begin(), model.end());
    out.push_back(command_line(argv));
  }
  return out;
}

// `fabflow report DIR`.
int report(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError("report: " + dir + " is not a folder");
  bool any = false;
  for (const auto& f : fs::directory_iterator(dir, ec))
    any = any || f.path().extension() == ".jsonl";
  if (!any)
    throw UsageError("report: " + dir + " has no .jsonl (fabflow experiment run -o " + dir +
                     " writes them)");
  Plotter plot("the data stays in the .jsonl files");
  int status = 1;
  std::string err;
  auto print = [](const std::string& line) { std::cout << line << "\n"; };
  if (!plot.run({"report", dir}, print, &status, &err)) return kNoFigures;
  std::cerr << err;
  return status == 0 ? 0 : 1;
}

// `fabflow plot FILE`: the CDF (and its tail) and the histogram of every latency row of a
// bench's --json output, from the rows' log-bucketed histograms.
int plot_distribution(const std::string& file, const std::string& out, const std::string& field) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw UsageError("plot: " + file + " is not a file (a bench's --json output)");
  Plotter plot("the data stays in " + file);
  int status = 1;
  std::string err;
  std::vector<std::string> args = {"distribution", file, "--field", field};
  if (!out.empty()) args.insert(args.end(), {"--out", out});
  auto print = [](const std::string& line) { std::cout << line << "\n"; };
  if (!plot.run(args, print, &status, &err)) return kNoFigures;
  std::cerr << err;
  return status == 0 ? 0 : 1;
}

RunResult run_experiments(const RunOptions& f,
                          const std::vector<const ExperimentEntry*>& selected) {
  for (const auto* x : selected) bench::expand(*x, f.quick, f.cores);  // every sweep resolves
  const auto available = static_cast<unsigned>(allowed_cpus().size());
  if (f.cores > available)
    std::cerr << "fabflow: warning: sweeps sized for --cores " << f.cores << " on " << available
              << " CPU(s): the ranks and threads oversubscribe them\n";
  TransportOptions probe;
  probe.provider = f.provider;
  probe_transport(probe);  // an unknown provider is a usage error before anything starts
  prepare_output(f.out);

  ExperimentRunner runner(f, exe_path());
  Plotter plot("the data stays in the .jsonl files");
  RunResult result;
  try {
    for (const auto* x : selected) result.outcomes.push_back(runner.run(*x, plot));
  } catch (const ExperimentRunner::Interrupted&) {
    result.interrupted = interrupted();
  }
  result.figures_missing = plot.missing();
  return result;
}

// ---- experiment judge ----

JudgeResult judge_experiments(const std::string& dir, const std::vector<std::string>& wanted) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError("experiment judge: no folder '" + dir + "'");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".jsonl") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::pair<ExperimentEntry, fs::path>> todo;
  JudgeResult result;
  bool& failed = result.failed;
  for (const auto& path : files) {
    std::ifstream in(path);
    std::string first;
    std::getline(in, first);
    const auto head = nlohmann::json::parse(first, nullptr, false);
    if (!head.is_object() || head.value("type", "") != "experiment" || !head.contains("entry") ||
        !head["entry"].is_object() || !head["entry"].contains("id") ||
        !head["entry"]["id"].is_string() || !head["entry"].contains("bench") ||
        !head["entry"]["bench"].is_string())
      continue;  // another file: not an experiment's rows
    ExperimentEntry x;
    x.id = head["entry"]["id"].get<std::string>();
    x.bench = head["entry"]["bench"].get<std::string>();
    if (head["entry"].contains("title") && head["entry"]["title"].is_string())
      x.title = head["entry"]["title"].get<std::string>();
    if (x.id + ".jsonl" != path.filename().string()) {
      print_error(path.string() + ": holds the rows of '" + x.id + "', not of its file name");
      failed = true;
      continue;
    }
    if (wanted.empty() || std::find(wanted.begin(), wanted.end(), x.id) != wanted.end())
      todo.emplace_back(x, path);
  }
  for (const auto& id : wanted)
    if (std::none_of(todo.begin(), todo.end(), [&](const auto& t) { return t.first.id == id; }))
      throw UsageError("experiment judge: " + dir + " holds no rows of '" + id + "'");
  if (todo.empty() && !failed)
    throw UsageError("experiment judge: " + dir + " holds no experiment rows (<id>.jsonl)");
  Plotter plot("the data stays in the .jsonl files");
  result.total = todo.size();
  for (const auto& [x, path] : todo) {
    Outcome o;
    o.id = x.id;
    figure(x, path, plot, o);
    failed = failed || o.failed;
    result.judged += !o.failed;
  }
  result.figures_missing = plot.missing();
  return result;
}

}  // namespace fabflow::tools
