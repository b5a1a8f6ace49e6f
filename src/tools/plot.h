// Where the CLI finds what it ships beside itself (the experiment catalogue, the plot module)
// and how it runs python/fabflow_plot: shared by `experiment run`, `report` and `model pcie`.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace fabflow::tools {

// Exit status when the numbers were produced but figures could not be drawn here (python3,
// matplotlib or the plot module missing); the plot module itself exits 3 for matplotlib.
inline constexpr int kNoFigures = 3;

// This executable's path ("fabflow" when /proc does not say).
std::filesystem::path exe_path();

// The first existing folder among the candidates (holding `must_contain` when given), or an
// empty path.
std::filesystem::path first_dir(const std::vector<std::filesystem::path>& candidates,
                                const std::filesystem::path& must_contain = {});

// Where `what` (experiments, python) may be: <prefix>/share/fabflow next to an installed
// <prefix>/bin, then beside the build tree, then the source tree this CLI was built from.
std::vector<std::filesystem::path> install_candidates(const char* what);

// Runs `python3 -m fabflow_plot <args>` with the module on PYTHONPATH ($FABFLOW_PYTHONPATH, else
// the install candidates) and the interpreter $FABFLOW_PYTHON, else python3 on PATH, else
// Debian's (whose python3-matplotlib scripts/setup.sh installs).
class Plotter {
 public:
  // `data_note` ends the one line printed when figures cannot be drawn here, saying where the
  // numbers are ("the data stays in the .jsonl files").
  explicit Plotter(std::string data_note) : data_note_(std::move(data_note)) {}

  // false (after printing one line) when the module cannot run here; else true with *status
  // its exit status (-1: timed out), its stdout lines given to `on_line` and its stderr in *err.
  bool run(const std::vector<std::string>& args,
           const std::function<void(const std::string&)>& on_line, int* status, std::string* err);
  bool missing() const { return missing_; }

  // The last non-empty line of `text`, without a leading "fabflow: error: ".
  static std::string last_error_line(const std::string& text);

 private:
  bool give_up(const std::string& why);
  std::string data_note_;
  bool missing_ = false;
  std::string python_;  // the interpreter that drew, once one did
};

}  // namespace fabflow::tools
