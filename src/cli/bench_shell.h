// What the bench subcommands' shells share: their flags object, the target and providers the
// flags name, the flags and checks of the bulk-channel families, the printing of a whole
// result, the checked request each builds from its flags, the rank's copy of a family's params
// aimed at its target, and the callback that runs a launched rank or launches the ranks once per
// provider.
#pragma once

#include <fabflow/bench/common.h>
#include <fabflow/launcher.h>
#include <fabflow/transport.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench/report.h"
#include "cli/commands.h"

namespace fabflow::cli {

// The flags of a bench subcommand: a fresh Flags with the CommonFlags options registered on
// `app` (add_common_flags).
template <class Flags>
std::shared_ptr<Flags> add_bench_flags(CLI::App& app, const std::string& size_help,
                                       const std::string& progress_help) {
  auto f = std::make_shared<Flags>();
  add_common_flags(app, *f, size_help, progress_help);
  return f;
}

// The providers to run: the one a launched rank runs, else -p's list. Throws UsageError when
// none is given.
std::vector<std::string> providers_to_run(const CommonFlags& f);

// The target the flags name before a rank is placed: the first provider, the endpoint type,
// the timeout and the provider profile.
bench::Target flags_target(const CommonFlags& f);

// Options to probe `provider` with: the endpoint type and the operations, the rest defaults.
TransportOptions provider_options(const std::string& provider, EndpointType endpoint,
                                  std::vector<Op> ops);

// The buffer flags of the bulk-channel families (bulk, beff): --reuse, counted in `unit`
// ("messages", "iterations"), and --mr-pin.
void add_buffer_flags(CLI::App& app, std::uint64_t& reuse, bool& mr_pin, const std::string& unit);

// Throws UsageError for a size of -S above 1 GiB (the bulk-channel families' buffers).
void check_buffer_sizes(const std::vector<std::size_t>& sizes);

// --bytes of the bulk-channel families: one size above 0; throws UsageError.
std::size_t bytes_per_point(const std::string& text);

// A result printed whole once its run ended (raw, inbound): as JSON lines, with the
// environment's warnings on stderr, or as the header and the table.
template <class Result>
void print_result(bool json, const Result& r, void (*as_json)(std::ostream&, const Result&),
                  void (*header)(std::ostream&, const Result&),
                  void (*table)(std::ostream&, const Result&)) {
  if (json) {
    as_json(std::cout, r);
    report::warn_stderr(r.env);
  } else {
    header(std::cout, r);
    table(std::cout, r);
  }
}

// A family's params as checked from the flags, and the providers they run on.
template <class Params>
struct Checked {
  Params params;
  std::vector<std::string> providers;
};

// Runs `body(rank, params)` as this rank (run_rank), `params` a copy of `given` aimed at the
// rank's target.
template <class Params, class Body>
int run_family_rank(const CommonFlags& flags, const Params& given, Body&& body,
                    std::chrono::milliseconds min_timeout = {}) {
  return run_rank(
      flags,
      [&](Rank& rank) {
        Params params = given;
        params.target = rank.target;
        body(rank, params);
      },
      min_timeout);
}

// The callback of a bench subcommand launched by launch_each_provider: checks the flags with
// the subcommand's own validate(const Flags&) (found beside Flags), in the launching process and
// again in each rank; a launched rank runs `as_rank(flags, checked)`, the launching process
// starts the ranks once per provider of the checked request, `prepare(launch, flags, checked)`
// adjusting each launch when given.
template <class Flags, class AsRank, class Prepare = std::nullptr_t>
Runner rank_or_launch(std::shared_ptr<Flags> f, const Invocation& self, AsRank as_rank,
                      Prepare prepare = nullptr) {
  return [f, self, as_rank, prepare]() -> int {
    const auto checked = validate(*f);
    if (started_by_launcher()) return as_rank(*f, checked);
    std::function<void(LaunchConfig&)> each;
    if constexpr (!std::is_null_pointer_v<Prepare>)
      each = [&](LaunchConfig& lc) { prepare(lc, *f, checked); };
    return launch_each_provider(self, *f, checked.providers, checked.params.target.endpoint, each);
  };
}

}  // namespace fabflow::cli
