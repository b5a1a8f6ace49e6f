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

// `fabflow bench <family>`: each family of bench::kFamilies, its one-line description and the
// function that adds its flags to the subcommand made here.
struct BenchCommand {
  std::string_view name;
  std::string_view description;
  cli::Runner (*add)(CLI::App* app, const cli::Invocation& self);
};
constexpr BenchCommand kBenchCommands[] = {
    {"raw",
     "raw fabric microbenchmarks: ping-pong latency and streaming bandwidth of one operation",
     cli::add_bench_raw},
    {"queue",
     "flow queues: throughput, operations per item and transfer time of the design points and the "
     "socket baseline",
     cli::add_bench_queue},
    {"rr",
     "request-response patterns (WriteWrite, SendSend, WriteSend, SendWrite) over private "
     "connections or a dispatcher",
     cli::add_bench_rr},
    {"seq", "the networked sequencer (seed 001): rpc, rpc-batch, spec and atomic designs",
     cli::add_bench_seq},
    {"inbound",
     "one-sided operations from many clients to one server: inbound read/write rate by size, "
     "atomics by number of counters",
     cli::add_bench_inbound},
    {"kv", "the key-value store (seed 001): herd, read and atomic designs under a workload",
     cli::add_bench_kv},
    {"lat", "latency toolkit: every transfer mode, inline on and off, against UDP and TCP sockets",
     cli::add_bench_lat},
    {"bulk", "large-message transfer (seed 004): copy, eager, rendezvous, pipeline, caching",
     cli::add_bench_bulk},
    {"beff", "effective bandwidth (b_eff) of the bulk protocols over ring and random patterns",
     cli::add_bench_beff},
    {"xfer",
     "the transfer engine: batches of one-sided WRITEs or READs between registered memories, each "
     "batch with a notification to the peer",
     cli::add_bench_xfer},
    {"connect",
     "run-time connections (Node): connect time to the first call, and what each idle peer "
     "costs the server and the client",
     cli::add_bench_connect},
};

consteval bool registers_every_family() {
  if (std::size(kBenchCommands) != std::size(bench::kFamilies)) return false;
  for (std::size_t i = 0; i < std::size(kBenchCommands); ++i)
    if (kBenchCommands[i].name != bench::kFamilies[i]) return false;
  return true;
}
static_assert(registers_every_family(),
              "kBenchCommands must list bench::kFamilies, in order (fabflow/bench/common.h)");

// CLI11's own parse errors in fabflow's words: which command, what was wrong, where its help is.
std::string parse_error_text(const CLI::App& app, const CLI::ParseError& e) {
  const CLI::App* at = &app;  // the deepest command named on the line
  std::string command = "fabflow";
  while (!at->get_subcommands().empty()) {
    at = at->get_subcommands().front();
    command += " " + at->get_name();
  }
  const std::vector<std::string> extra = app.remaining(true);
  const bool wants_command = !at->get_subcommands({}).empty() && at->get_subcommands().empty();
  if (wants_command && (!extra.empty() || dynamic_cast<const CLI::RequiredError*>(&e))) {
    std::string names;
    for (const CLI::App* sub : at->get_subcommands({}))
      if (!sub->get_group().empty()) names += (names.empty() ? "" : ", ") + sub->get_name();
    if (!extra.empty() && !extra.front().starts_with("-"))
      return "'" + extra.front() + "' is not a command of " + command + " (" + names + "; " +
             command + " --help)";
    return command + " needs a command: " + names + " (" + command + " --help)";
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    std::string list;
    for (const std::string& a : extra) list += (list.empty() ? "" : " ") + a;
    return command + " does not take " + (list.empty() ? std::string(e.what()) : list) + " (" +
           command + " --help lists its flags)";
  }
  std::string what = e.what();
  if (const std::size_t at_missing = what.find(": 1 required ");
      at_missing != std::string::npos && what.ends_with(" missing"))
    return what.substr(0, at_missing) + " needs a value";
  return what;
}

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
    auto* sub = bench->add_subcommand(std::string(c.name), std::string(c.description));
    bench_runs.push_back(c.add(sub, self));
    sub->callback([&run, &r = bench_runs.back()] { run = r; });
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
    cli::print_error(parse_error_text(app, e));
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
