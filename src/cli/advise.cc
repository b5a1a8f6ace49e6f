// `fabflow advise FAMILY`: its flags (the search, the answer and the map are in
// src/tools/advise*.cc), and a bench's `--design auto` (`--pattern auto`, `--protocol auto`):
// the design an advise profile names for the run's provider, or the documented rule's.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>

#include "cli/bench_shell.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "tools/advise.h"

namespace fabflow::cli {

void add_advise(CLI::App& app, Runner& run) {
  auto* a = app.add_subcommand(
      "advise", "which design wins your workload here: measures the candidates within a budget");
  auto f = std::make_shared<tools::AdviseRequest>();
  a->add_option("family", f->family, "queue, rr, kv or bulk");
  a->add_option("-p,--provider", f->providers,
                "provider(s) to compare, comma-separated (default shm)");
  a->add_option("--objective", f->objective,
                "throughput (default), p50, p99, or cpu (rr, kv, bulk: both sides' CPU per "
                "operation; bulk has no p99)");
  a->add_option("--budget", f->budget, "time for the search: 90s, 2m (default 2m)");
  a->add_option("-S,--size", f->size, "item, response or message size of the workload");
  a->add_option("--candidates", f->candidates, "only these designs, comma-separated");
  a->add_option("--passive", f->passive,
                "queue: consumer, producer or both do no work outside dequeue / enqueue (the "
                "designs that need an active end are not candidates)");
  a->add_option("--save", f->profile,
                "where the answer is kept (default: ~/.cache/fabflow/advise-FAMILY.json)");
  a->add_flag("--no-save", f->no_profile, "keep no answer");
  a->add_flag("--json", f->json, "the answer as one JSON object");
  a->add_option("--show", f->show, "print a saved profile's answer; measures nothing");
  a->add_option("--workload", f->workload_file,
                "FILE: the workload (family, providers, size, objective, candidates, budget, "
                "args) from a JSON file or a kept answer; flags given here win");
  a->add_option("--map", f->map,
                "BASE: the winner for each size of -S and each --objective, in BASE.json and "
                "drawn in BASE.png");
  a->add_option("--vary", f->vary,
                "NAME=V1,V2: with --map, the columns are these values of the bench flag NAME "
                "(e.g. capacity=16,1024) for one --objective");
  a->add_option("workload", f->workload, "after --: more bench flags of the workload")
      ->expected(-1);
  a->callback([&run, f] { run = [f] { return tools::run_advise(*f); }; });
}

std::string replace_auto(const CommonFlags& f, const AutoInList& a) {
  auto names = split(a.list, ',');
  if (std::find(names.begin(), names.end(), "auto") == names.end()) return a.list;
  if (a.size.find_first_of(",:") != std::string::npos)
    throw UsageError(a.flag + " auto chooses for one " + a.size_what + " size: give one -S");
  const bool launched = !f.launched_provider.empty();
  std::string chosen;
  for (const auto& provider : providers_to_run(f)) {
    const tools::AutoChoice c = tools::choose_design(a.family, provider, a.size, a.objective,
                                                     a.fallback, a.fallback_rule, a.allowed);
    const std::string name = a.to_name ? a.to_name(c.design) : c.design;
    if (!launched)
      std::cerr << "fabflow: auto on " << provider << ": " << name << " (" << c.why << ")\n";
    if (chosen.empty()) chosen = name;
  }
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + (n == "auto" ? chosen : n);
  return out;
}

}  // namespace fabflow::cli
