// fabflow: a thin shell over the library. Subcommands: info, bench raw, bench queue, bench rr,
// bench seq, bench inbound, bench kv, bench lat, bench bulk, bench beff, experiment list,
// experiment run, report, model pcie.
#include <fabflow/status.h>
#include <fabflow/version.h>

#include <csignal>
#include <iostream>

#include "cli/commands.h"

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
  auto raw_run = cli::add_bench_raw(*bench, self);
  auto queue_run = cli::add_bench_queue(*bench, self);
  auto rr_run = cli::add_bench_rr(*bench, self);
  auto seq_run = cli::add_bench_seq(*bench, self);
  auto inbound_run = cli::add_bench_inbound(*bench, self);
  auto kv_run = cli::add_bench_kv(*bench, self);
  auto lat_run = cli::add_bench_lat(*bench, self);
  auto bulk_run = cli::add_bench_bulk(*bench, self);
  auto beff_run = cli::add_bench_beff(*bench, self);
  info->callback([&] { run = info_run; });
  bench->get_subcommand("raw")->callback([&] { run = raw_run; });
  bench->get_subcommand("queue")->callback([&] { run = queue_run; });
  bench->get_subcommand("rr")->callback([&] { run = rr_run; });
  bench->get_subcommand("seq")->callback([&] { run = seq_run; });
  bench->get_subcommand("inbound")->callback([&] { run = inbound_run; });
  bench->get_subcommand("kv")->callback([&] { run = kv_run; });
  bench->get_subcommand("lat")->callback([&] { run = lat_run; });
  bench->get_subcommand("bulk")->callback([&] { run = bulk_run; });
  bench->get_subcommand("beff")->callback([&] { run = beff_run; });
  cli::add_experiment(app, *bench, run);
  cli::add_report(app, run);
  cli::add_plot(app, run);
  cli::add_model(app, run);
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
