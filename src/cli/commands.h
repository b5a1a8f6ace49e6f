// The CLI's subcommands. Each registers its options on a CLI11 app and returns a callback
// that runs it and yields the process exit status.
#pragma once

#include <fabflow/bench/common.h>
#include <fabflow/bootstrap.h>
#include <fabflow/launcher.h>
#include <fabflow/transport.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "tools/ranks.h"
#include "tools/subprocess.h"

namespace fabflow::cli {

using Runner = std::function<int()>;

// argv of this process, for re-launching itself as the ranks of an experiment.
struct Invocation {
  std::vector<std::string> argv;
};

// Flags every `bench` subcommand has (fabtests style: -p provider -e endpoint -S size).
struct CommonFlags {
  std::string providers = "auto";
  std::string endpoint = "auto";
  std::string sizes;
  std::string progress = "auto";
  bool json = false;
  bool no_pin = false;
  bool netns = false;
  std::uint64_t timeout_ms = 10000;
  std::string launched_provider;  // internal: the one provider a launched rank runs
  std::string secret_file;        // --secret-file: the bootstrap secret, mode 0600 or stricter
  std::string profile;            // --profile: a provider profile to hold the transports to
};

// One rank of a launched run, as the rank runner hands it to a subcommand's body: its bootstrap
// and its target (tools/ranks.h).
using tools::Rank;

// The one rank runner of every bench subcommand: tools::run_rank with the flags' target,
// pinning unless --no-pin, the secret file and the silence bound (--timeout), waiting at least
// `min_timeout` for the peers.
int run_rank(const CommonFlags& flags, const std::function<void(Rank&)>& body,
             std::chrono::milliseconds min_timeout = {});

// The on_row callback of a family's streamed run (run_queue, run_bulk, run_kv, run_seq): prints
// each row as it arrives, as a JSON line, or as a table row under the header printed at the
// first row; the row's environment is finished (the load by then) before it is printed.
// first_row() says whether no row was printed yet (for what a family prints once more).
template <class Result, class Row>
class RowPrinter {
 public:
  using Header = void (*)(std::ostream&, const Result&);
  using Line = void (*)(std::ostream&, const Result&, const Row&);
  RowPrinter(bool json, Header header, Line as_json, Line as_row)
      : json_(json), header_(header), as_json_(as_json), as_row_(as_row) {}
  bool first_row() const noexcept { return first_; }
  void operator()(const Result& partial, const Row& row) {
    Result r = partial;
    finish_environment(r.env);
    if (!json_ && first_) header_(std::cout, r);
    first_ = false;
    (json_ ? as_json_ : as_row_)(std::cout, r, row);
  }

 private:
  bool json_;
  Header header_;
  Line as_json_, as_row_;
  bool first_ = true;
};

// Registers the CommonFlags options on `app`.
void add_common_flags(CLI::App& app, CommonFlags& f, const std::string& size_help,
                      const std::string& progress_help);

// Splits "a,b,,c" into {"a", "b", "c"}.
std::vector<std::string> split(const std::string& s, char sep);

// tools::self_launch of this invocation's arguments plus `extra` (the launched rank's own
// choices), with --netns and the silence bound.
LaunchConfig self_launch(const Invocation& self, const CommonFlags& f,
                         std::vector<std::string> extra);
// How long a rank may show no sign of life before the run fails naming it: --timeout, at least
// a second (BootstrapConfig::silence).
std::chrono::milliseconds silence_bound(const CommonFlags& f);

// The launcher side of a bench subcommand: tools::launch_each_provider over `providers`, each
// launch a self_launch naming its provider that `prepare` may adjust (more ranks, a wrapper),
// a blank line between two launches' tables (not with --json).
int launch_each_provider(const Invocation& self, const CommonFlags& f,
                         const std::vector<std::string>& providers, EndpointType endpoint,
                         const std::function<void(LaunchConfig&)>& prepare = {});

Runner add_info(CLI::App& app);
Runner add_bench_raw(CLI::App* app, const Invocation& self);
Runner add_bench_queue(CLI::App* app, const Invocation& self);
Runner add_bench_rr(CLI::App* app, const Invocation& self);
Runner add_bench_seq(CLI::App* app, const Invocation& self);
Runner add_bench_inbound(CLI::App* app, const Invocation& self);
Runner add_bench_kv(CLI::App* app, const Invocation& self);
Runner add_bench_lat(CLI::App* app, const Invocation& self);
Runner add_bench_bulk(CLI::App* app, const Invocation& self);
Runner add_bench_beff(CLI::App* app, const Invocation& self);
Runner add_bench_xfer(CLI::App* app, const Invocation& self);
Runner add_bench_connect(CLI::App* app, const Invocation& self);
// `experiment list|run` (checks catalogue flags against `bench_app`'s subcommands) and `report`;
// their callbacks set `run`.
void add_experiment(CLI::App& app, const CLI::App& bench_app, Runner& run);
// `fabflow advise FAMILY`: the design that wins a workload here, measured within a budget.
void add_advise(CLI::App& app, Runner& run);

// A bench's `auto` among its designs: `list` (comma-separated) with "auto" replaced by the
// design choose_design takes on the run's provider (the launching process names its choice for
// each provider on stderr; a launched rank, which runs one provider, chooses silently and the
// same). `to_name` turns a profile design into the bench's name for it.
struct AutoInList {
  std::string flag;       // "--design": named in the errors
  std::string size_what;  // "item": what -S sizes, named in the errors
  std::string family, list, size, objective, fallback, fallback_rule;
  std::function<std::string(const std::string&)> allowed;
  std::function<std::string(const std::string&)> to_name;
};
std::string replace_auto(const CommonFlags& f, const AutoInList& a);
void add_report(CLI::App& app, Runner& run);
void add_plot(CLI::App& app, Runner& run);
// `model pcie` (the PCIe cost model); its callback sets `run`.
void add_model(CLI::App& app, Runner& run);
// `fabflow doctor`: this host's checks, ok / warn / fail with a fix each (doctor.cc).
void add_doctor(CLI::App& app, Runner& run);
void add_clean(CLI::App& app, Runner& run);                           // in doctor.cc
void add_launch(CLI::App& app, const Invocation& self, Runner& run);  // launch.cc
// `bulk plan` (auto's plan of the bulk channel); its callback sets `run`.
void add_bulk(CLI::App& app, const Invocation& self, Runner& run);

// Prints "fabflow: error: <msg>" (the launcher shows only the first such line of a run).
using tools::print_error;

}  // namespace fabflow::cli
