// `fabflow bench seq`: checks designs and counts in the launching process (one clear line per
// mistake), then starts --clients client ranks and one server rank per provider; rank 0 (a
// client) reports.
#include <fabflow/bench/seq.h>
#include <fabflow/launcher.h>
#include <fabflow/seq.h>

#include <iostream>

#include "bench/report.h"
#include "cli/bench_shell.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace fabflow::cli {
namespace {

struct SeqFlags : CommonFlags {
  std::string designs = "all";
  unsigned workers = 1;
  int clients = 1;
  unsigned outstanding = 1;
  unsigned batch = 16;
  unsigned queues = 1;
  std::string respond = "batched";
  MeasuredCounts requests;  // -I and -w
  bool reference = false;
};

enum class Respond : std::uint8_t { batched, single };
inline constexpr NameTable<Respond, 2> kRespondNames{
    {{{"batched", Respond::batched}, {"single", Respond::single}}}};
constexpr const auto& name_table(Respond) noexcept { return kRespondNames; }

struct SeqValidated : Checked<SeqParams> {
  int clients = 1;
};

SeqValidated validate(const SeqFlags& f) {
  SeqValidated v;
  SeqParams& p = v.params;
  if (!f.sizes.empty()) throw UsageError("bench seq hands out 8-byte values: -S does not apply");
  p.designs = parse_choice_list<seq::Design>(f.designs);
  p.workers = f.workers;
  p.queues = f.queues;
  p.outstanding = f.outstanding;
  p.batch = f.batch;
  p.batch_responses = parse_name<Respond>(f.respond) == Respond::batched;
  p.requests = f.requests.measured;
  p.warmup = f.requests.warmup;
  p.reference = f.reference;
  p.target = flags_target(f);
  v.clients = f.clients;
  seq::Options o;
  o.workers = p.workers;
  o.queues = p.queues;
  o.outstanding = p.outstanding;
  o.batch = p.batch;
  seq::validate(o, v.clients);
  v.providers = providers_to_run(f);
  return v;
}

int run_seq_rank(const SeqFlags& flags, const SeqValidated& v) {
  return run_family_rank(flags, v.params, [&](Rank& rank, const SeqParams& params) {
    RowPrinter<SeqResult, SeqRow> print(flags.json, print_seq_header, print_seq_json,
                                        print_seq_row);
    SeqResult last = run_seq(params, rank.boot, [&](const SeqResult& partial, const SeqRow& row) {
      if (flags.json && print.first_row()) {  // the reference's JSON line, before the rows'
        SeqResult r = partial;
        finish_environment(r.env);
        print_seq_reference_json(std::cout, r);
      }
      print(partial, row);
    });
    if (rank.boot.rank() != 0) return;
    finish_environment(last.env);
    if (!flags.json) print_seq_reference(std::cout, last);
    if (flags.json) report::warn_stderr(last.env);
  });
}

}  // namespace

Runner add_bench_seq(CLI::App* app, const Invocation& self) {
  auto f = add_bench_flags<SeqFlags>(*app, "not used: the sequencer hands out 8-byte values",
                                     "not used: the sequencer's ends drive their own progress");
  add_choice_list<seq::Design>(*app, "--design", f->designs, "design(s), comma-separated, or all");
  add_number<unsigned>(*app, "--workers", f->workers, 1, seq::kMaxWorkers,
                       "server worker threads (cores)");
  add_number<int>(*app, "--clients", f->clients, 1, 63, "client processes");
  add_number<unsigned>(*app, "--outstanding", f->outstanding, 1, seq::kMaxOutstanding,
                       "requests each client keeps in flight");
  add_number<unsigned>(*app, "--batch", f->batch, 1, seq::kMaxBatch,
                       "most requests a worker round takes (rpc-batch, spec)");
  add_number<unsigned>(*app, "--queues", f->queues, 1, seq::kMaxQueues,
                       "endpoints per worker (multi-queue)");
  add_choice<Respond>(*app, "--respond", f->respond,
                      "spec's responses: batched (FI_MORE) or single (one by one)");
  add_measured_counts(*app, "-I,--requests", f->requests, "requests per client");
  app->add_flag("--reference", f->reference,
                "also measure a bare shared-memory fetch-add loop by as many threads as clients");

  return rank_or_launch(
      f, self, run_seq_rank,
      [](LaunchConfig& lc, const SeqFlags&, const SeqValidated& v) { lc.nprocs = v.clients + 1; });
}

}  // namespace fabflow::cli
