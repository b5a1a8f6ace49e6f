// `fabflow bulk plan`: what the bulk channel's `auto` would choose on this machine: two ranks
// open a channel (plan_bulk, which measures the costs), rank 0 prints the costs and the size ->
// protocol table with every candidate's estimate (docs/bulk.md, "auto").
#include <fabflow/bench/bulk.h>
#include <fabflow/bulk.h>
#include <fabflow/launcher.h>

#include <iostream>

#include "cli/bench_shell.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace fabflow::cli {
namespace {

struct PlanFlags : CommonFlags {
  bool mr_pin = false;
  std::string eager_limit, frag_size;
  unsigned depth = 0;
};

bulk::ChannelOptions channel_options(const PlanFlags& f) {
  if (!f.sizes.empty()) throw UsageError("bulk plan covers 1 B to 1 GiB: -S does not apply");
  bulk::ChannelOptions o;
  if (!f.eager_limit.empty()) o.eager_limit = parse_one_size("--eager-limit", f.eager_limit);
  if (!f.frag_size.empty()) o.frag_size = parse_one_size("--frag-size", f.frag_size);
  o.depth = f.depth;
  o.pin = f.mr_pin;
  return o;
}

}  // namespace

void add_bulk(CLI::App& app, const Invocation& self, Runner& run) {
  auto* bulk = app.add_subcommand("bulk", "large-message transfer tools");
  bulk->require_subcommand(1);
  auto* plan = bulk->add_subcommand(
      "plan", "the protocol auto picks per size on this machine, with the costs measured");
  auto f = std::make_shared<PlanFlags>();
  add_common_flags(*plan, *f, "not used: the plan covers 1 B to 1 GiB",
                   "not used: the channel drives its own progress");
  plan->add_flag("--mr-pin", f->mr_pin, "registration pins pages (mlock), as verbs does");
  plan->add_option("--eager-limit", f->eager_limit, "largest eager message (default 16K)");
  plan->add_option("--frag-size", f->frag_size, "pipeline fragment (default 1M)");
  add_number<unsigned>(*plan, "--depth", f->depth, 1, 64, "pipeline fragments in flight");
  plan->callback([f, self, &run] {
    run = [f, self]() -> int {
      const bulk::ChannelOptions o = channel_options(*f);
      const auto providers = providers_to_run(*f);
      if (!started_by_launcher())
        return launch_each_provider(self, *f, providers, flags_target(*f).endpoint);
      return run_rank(*f, [&](Rank& rank) {
        const BulkResult plan = plan_bulk(rank.target, rank.boot, o);
        if (rank.boot.rank() != 0) return;
        std::cout << "# bulk plan on " << plan.env.caps.provider << " ("
                  << to_string(plan.env.caps.endpoint) << "), registration pinning "
                  << (o.pin ? "on" : "off") << "\n";
        print_bulk_plan(std::cout, plan.costs, plan.options, false);
      });
    };
  });
}

}  // namespace fabflow::cli
