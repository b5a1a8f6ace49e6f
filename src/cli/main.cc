// fabflow: a thin shell over the library. main() registers every subcommand (the add_*
// functions of cli/commands.h; under `bench`, one per row of kBenchCommands below), parses the
// command line and runs the one named; `fabflow --help` lists them.
#include <fabflow/bench/common.h>
#include <fabflow/status.h>
#include <fabflow/version.h>

#include <csignal>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>
#include <iostream>

#include "cli/commands.h"

namespace fabflow {
namespace {

// `fabflow bench <family>`: the subcommand that registers each family of bench::kFamilies.
struct BenchCommand {
  std::string_view name;
  cli::Runner (*add)(CLI::App& bench, const cli::Invocation& self);
};
constexpr BenchCommand kBenchCommands[] = {
    {"raw", cli::add_bench_raw},         {"queue", cli::add_bench_queue},
    {"rr", cli::add_bench_rr},           {"seq", cli::add_bench_seq},
    {"inbound", cli::add_bench_inbound}, {"kv", cli::add_bench_kv},
    {"lat", cli::add_bench_lat},         {"bulk", cli::add_bench_bulk},
    {"beff", cli::add_bench_beff},       {"xfer", cli::add_bench_xfer}};

consteval bool registers_every_family() {
  if (std::size(kBenchCommands) != std::size(bench::kFamilies)) return false;
  for (std::size_t i = 0; i < std::size(kBenchCommands); ++i)
    if (kBenchCommands[i].name != bench::kFamilies[i]) return false;
  return true;
}
static_assert(registers_every_family(),
              "kBenchCommands must list bench::kFamilies, in order (fabflow/bench/common.h)");

}  // namespace
}  // namespace fabflow

int main(int argc, char** argv) {
  using namespace fabflow;
  // A vanished peer on a socket must not kill us silently: errors are reported instead.
  std::signal(SIGPIPE, SIG_IGN);

  cli::Invocation self;
  for (int i = 0; i < argc; ++i) self.argv.emplace_back(argv[i]);

  CLI::App app{"fabflow: fast communication over RDMA fabrics, and the benchmarks to choose it"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(FABFLOW_VERSION));
  cli::Runner run;
  auto* info = app.add_subcommand("info", "providers found and their capabilities");
  auto info_run = cli::add_info(*info);
  auto* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  std::vector<cli::Runner> bench_runs;  // one per family; a subcommand's callback picks its own
  bench_runs.reserve(std::size(kBenchCommands));
  for (const auto& c : kBenchCommands) {
    bench_runs.push_back(c.add(*bench, self));
    bench->get_subcommand(std::string(c.name))->callback([&run, &r = bench_runs.back()] {
      run = r;
    });
  }
  info->callback([&] { run = info_run; });
  cli::add_experiment(app, *bench, run);
  cli::add_advise(app, run);
  cli::add_report(app, run);
  cli::add_plot(app, run);
  cli::add_model(app, run);
  cli::add_doctor(app, run);
  cli::add_clean(app, run);
  cli::add_launch(app, self, run);
  cli::add_bulk(app, self, run);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    cli::print_error(e.what());
    return 2;
  }
  try {
    return run ? run() : 2;
  } catch (const UsageError& e) {
    cli::print_error(e.what());
    return 2;
  } catch (const std::exception& e) {
    cli::print_error(e.what());
    return 1;
  }
}
