// The CLI's subcommands. Each registers its options on a CLI11 app and returns a callback
// that runs it and yields the process exit status.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace fabflow::cli {

using Runner = std::function<int()>;

// argv of this process, for re-launching itself as the ranks of an experiment.
struct Invocation {
  std::vector<std::string> argv;
};

Runner add_info(CLI::App& app);
Runner add_bench_raw(CLI::App& bench, const Invocation& self);
Runner add_bench_queue(CLI::App& bench, const Invocation& self);

// Prints "fabflow: error: <msg>" (the launcher shows only the first such line of a run).
void print_error(const std::string& msg);

}  // namespace fabflow::cli
