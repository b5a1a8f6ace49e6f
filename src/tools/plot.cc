#include "tools/plot.h"

#include <cstdlib>
#include <sstream>

#include "tools/subprocess.h"

namespace fabflow::tools {

namespace fs = std::filesystem;

fs::path exe_path() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path("fabflow") : p;
}

fs::path first_dir(const std::vector<fs::path>& candidates, const fs::path& must_contain) {
  for (const auto& c : candidates) {
    std::error_code ec;
    if (!c.empty() && fs::is_directory(c / must_contain, ec)) return c.lexically_normal();
  }
  return {};
}

std::vector<fs::path> install_candidates(const char* what) {
  const fs::path exe_dir = exe_path().parent_path();
  // An install is <prefix>/bin next to <prefix>/share/fabflow; the build tree is <repo>/build.
  return {exe_dir / ".." / "share" / "fabflow" / what, exe_dir / ".." / what,
          fs::path(FABFLOW_SOURCE_DIR) / what};
}

namespace {

// The folder holding fabflow_plot: $FABFLOW_PYTHONPATH, then next to the build or install.
// Empty when there is none; `why` says where it looked.
fs::path plot_module_dir(std::string* why) {
  if (const char* env = std::getenv("FABFLOW_PYTHONPATH"); env && *env) {
    *why = std::string("FABFLOW_PYTHONPATH=") + env + " has no fabflow_plot";
    return first_dir({env}, "fabflow_plot");
  }
  *why = "the plot module python/fabflow_plot was not found next to " + exe_path().string() +
         " (set FABFLOW_PYTHONPATH)";
  return first_dir(install_candidates("python"), "fabflow_plot");
}

}  // namespace

bool Plotter::run(const std::vector<std::string>& args,
                  const std::function<void(const std::string&)>& on_line, int* status,
                  std::string* err) {
  if (missing_) return false;
  std::string why;
  const fs::path dir = plot_module_dir(&why);
  if (dir.empty()) return give_up(why);
  std::string path = dir.string();
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) path += ":" + std::string(old);
  // A python3 earlier on PATH, such as a pyenv or virtualenv one, may lack matplotlib.
  std::vector<std::string> pythons;
  if (const char* p = std::getenv("FABFLOW_PYTHON"); p && *p)
    pythons = {p};
  else
    pythons = {"python3", "/usr/bin/python3"};
  if (!python_.empty()) pythons = {python_};
  ChildResult r;
  for (const auto& python : pythons) {
    ChildOptions o;
    o.argv = {python, "-m", "fabflow_plot"};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.env = {{"PYTHONPATH", path}};
    o.timeout = std::chrono::seconds(600);
    o.capture_stderr = true;
    r = run_child(o, on_line);
    if (r.status != 127 && r.status != kNoFigures) {
      python_ = python;
      break;
    }
  }
  if (r.status == 127) return give_up("python3 was not found (scripts/setup.sh installs it)");
  if (r.status == kNoFigures) {
    const std::string line = last_error_line(r.err);
    return give_up(line.empty() ? "matplotlib is missing (install python3-matplotlib)" : line);
  }
  *status = r.timed_out ? -1 : r.status;
  *err = r.err;
  return true;
}

std::string Plotter::last_error_line(const std::string& text) {
  std::string last, line;
  std::istringstream in(text);
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  const std::string prefix = "fabflow: error: ";
  if (last.rfind(prefix, 0) == 0) last.erase(0, prefix.size());
  return last;
}

bool Plotter::give_up(const std::string& why) {
  print_error(why + ": no figures drawn; " + data_note_);
  missing_ = true;
  return false;
}

}  // namespace fabflow::tools
