// `fabflow bench beff`: checks ranks, protocols and sizes in the launching process (one clear
// line per mistake), then starts -n ranks per provider; rank 0 reports.
#include <fabflow/bench/beff.h>
#include <fabflow/bulk.h>
#include <fabflow/launcher.h>

#include <iostream>

#include "bench/report.h"
#include "cli/bench_shell.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace fabflow::cli {
namespace {

struct BeffFlags : CommonFlags {
  int ranks = 4;
  std::string protocols = "all";
  std::string lmax;
  std::uint64_t reuse = 0;
  bool mr_pin = false;
  std::string bytes = "16M";
  std::uint64_t max_iterations = 100;
  unsigned random = 3;
  std::uint64_t seed = 1;
  bool no_pingpong = false;
};

using BeffValidated = Checked<BeffParams>;

BeffValidated validate(const BeffFlags& f) {
  BeffValidated v;
  BeffParams& p = v.params;
  p.protocols = parse_choice_set(f.protocols, bulk::kAllProtocols);
  if (!f.sizes.empty() && !f.lmax.empty())
    throw UsageError("give -S or --lmax, not both (-S's largest size is Lmax)");
  if (!f.lmax.empty()) p.lmax = parse_one_size("--lmax", f.lmax);
  if (!f.sizes.empty()) p.sizes = parse_sizes(f.sizes);
  check_buffer_sizes(p.sizes);
  if (p.lmax > (std::size_t{1} << 30))
    throw UsageError("--lmax " + std::to_string(p.lmax) + " is above 1 GiB");
  p.reuse = f.reuse;
  p.pin = f.mr_pin;
  p.bytes_per_point = bytes_per_point(f.bytes);
  p.max_iterations = f.max_iterations;
  p.random_patterns = f.random;
  p.seed = f.seed;
  p.pingpong = !f.no_pingpong;
  p.target = flags_target(f);
  v.providers = providers_to_run(f);
  return v;
}

int run_beff_rank(const BeffFlags& flags, const BeffValidated& v) {
  return run_family_rank(flags, v.params, [&](Rank& rank, const BeffParams& params) {
    bool header = false;
    auto head = [&](const BeffResult& partial) {
      if (header) return;
      header = true;
      if (flags.json) return;
      BeffResult r = partial;
      finish_environment(r.env);
      print_beff_header(std::cout, r);
    };
    BeffResult last = run_beff(
        params, rank.boot,
        [&](const BeffResult& partial, const BeffRow& row) {
          head(partial);
          if (flags.json)
            print_beff_json(std::cout, partial, row);
          else
            print_beff_row(std::cout, partial, row);
        },
        [&](const BeffResult& partial, const BeffSummary& s) {
          if (flags.json) {
            BeffResult r = partial;
            finish_environment(r.env);
            print_beff_summary_json(std::cout, r, s);
          }
        });
    if (rank.boot.rank() != 0) return;
    finish_environment(last.env);
    if (flags.json)
      report::warn_stderr(last.env);
    else
      print_beff_summary(std::cout, last);
  });
}

}  // namespace

Runner add_bench_beff(CLI::App* app, const Invocation& self) {
  auto f = add_bench_flags<BeffFlags>(
      *app, "message sizes, e.g. 1K,64K or 1:4M (default 1 doubling to --lmax)",
      "not used: the channel drives its own progress");
  add_number<int>(*app, "-n,--ranks", f->ranks, 2, kBeffMaxRanks, "processes (default 4)");
  add_choice_list<bulk::Protocol>(*app, "--protocol", f->protocols,
                                  "protocol(s), comma-separated, or all (auto not included)");
  app->add_option("--lmax", f->lmax,
                  "largest message, sizes 1 doubling to it (default 4M; b_eff's own rule is "
                  "memory per process / 128)");
  add_buffer_flags(*app, f->reuse, f->mr_pin, "iterations");
  app->add_option("--bytes", f->bytes,
                  "bytes each rank sends per protocol, pattern and size, which sets the "
                  "iterations (default 16M; at least 2 iterations)");
  add_number<std::uint64_t>(*app, "--max-iters", f->max_iterations, 2, kMaxCount,
                            "most iterations per point (default 100)");
  add_number<unsigned>(*app, "--random", f->random, 0, 16, "random patterns (default 3)");
  add_number<std::uint64_t>(*app, "--seed", f->seed, 0, ~std::uint64_t{0},
                            "seed of the random patterns (default 1)");
  app->add_flag("--no-pingpong", f->no_pingpong,
                "skip the ping-pong bandwidth of ranks 0 and 1 at Lmax");

  return rank_or_launch(f, self, run_beff_rank,
                        [](LaunchConfig& lc, const BeffFlags& flags, const BeffValidated&) {
                          lc.nprocs = flags.ranks;
                        });
}

}  // namespace fabflow::cli
