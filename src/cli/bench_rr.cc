// `fabflow bench rr`: validates patterns, models, topology, counts and sizes in the launching
// process (one clear line per mistake), then starts requesters + responders ranks per
// provider; rank 0 reports. --callgrind runs every rank under valgrind's callgrind.
#include <fabflow/bench/rr.h>
#include <fabflow/bootstrap.h>
#include <fabflow/launcher.h>
#include <fabflow/rr.h>
#include <fabflow/transport.h>

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "bench/report.h"
#include "cli/bench_shell.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace fabflow::cli {
namespace {

struct RrFlags : CommonFlags {
  std::string patterns = "WriteWrite";
  std::string models = "private";
  std::string topology = "1:1";
  int requesters = -1;  // -1: the topology's default
  int responders = -1;
  unsigned threads = 1;
  std::size_t request_bytes = 64;
  MeasuredCounts requests;  // -I and -w
  std::string empty_mailboxes = "0";
  std::string idle_requesters = "0";
  unsigned depth = 1;
  std::string mailbox = "sparse";
  unsigned signal_every = 16;
  std::string inject = "on";
  bool no_inject = false;  // the old spelling of --inject off, kept as a hidden alias
  bool reference = false;
  unsigned reference_rounds = 5;
  bool verify = false;
  bool callgrind = false;
  std::uint64_t seed = 1;
  std::string callgrind_dir;  // internal: set for launched ranks
};

// A comma-separated list of percentages in 0..99 for `flag`.
std::vector<unsigned> parse_pcts(const std::string& flag, const std::string& text) {
  std::vector<unsigned> out;
  for (const auto& s : split(text, ',')) {
    char* end = nullptr;
    unsigned long v = std::strtoul(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v > 99 || s[0] == '-' || s[0] == '+')
      throw UsageError(flag + " takes percentages in 0..99, got '" + s + "'");
    out.push_back(static_cast<unsigned>(v));
  }
  if (out.empty()) throw UsageError(flag + ": no percentage given");
  return out;
}

// --pattern auto: the rr advise profile's best pattern of the run's model for this provider and
// response size (or WriteWrite), named in place of "auto" (replace_auto).
std::string resolve_auto(const RrFlags& f, const std::vector<rr::Model>& models) {
  if (f.patterns.find("auto") == std::string::npos) return f.patterns;
  if (models.size() != 1) throw UsageError("--pattern auto chooses for one --model");
  const std::string model(to_string(models[0]));
  return replace_auto(
      f, {"--pattern", "response", "rr", f.patterns, f.sizes.empty() ? "64:16K" : f.sizes,
          "throughput,p50,p99", "WriteWrite/" + model,
          "WriteWrite, as seed 000 finds WRITE responses ahead of SEND ones (docs/advise.md)",
          [model](const std::string& design) {
            return design.ends_with("/" + model) ? "" : "measured with another model";
          },
          [](const std::string& design) { return design.substr(0, design.find('/')); }});
}

struct RrValidated : Checked<RrParams> {
  std::vector<unsigned> empty_pcts;
  std::vector<unsigned> idle_pcts;
};

RrValidated validate(const RrFlags& f) {
  RrValidated v;
  RrParams& p = v.params;
  p.models = parse_choice_list<rr::Model>(f.models);
  p.patterns = parse_choice_list<rr::Pattern>(resolve_auto(f, p.models));
  p.topology = parse_name<rr::Topology>(f.topology).value();  // checked by the parser
  p.mailbox = parse_name<rr::Mailbox>(f.mailbox).value();
  const bool n_to_m = p.topology == rr::Topology::n_to_m;
  const bool one = p.topology == rr::Topology::one_to_one;
  p.requesters = f.requesters >= 0 ? f.requesters : (one ? 1 : 2);
  p.responders = f.responders >= 0 ? f.responders : (n_to_m ? 2 : 1);
  if (p.requesters < 1 || p.responders < 1 || p.requesters + p.responders > 64)
    throw UsageError(
        "--requesters and --responders must be at least 1 and at most 64 processes together");
  if (one && (p.requesters != 1 || p.responders != 1))
    throw UsageError("topology 1:1 has 1 requester and 1 responder (got " +
                     std::to_string(p.requesters) + " and " + std::to_string(p.responders) + ")");
  if (p.topology == rr::Topology::n_to_one && p.responders != 1)
    throw UsageError("topology N:1 has 1 responder (got " + std::to_string(p.responders) + ")");
  if (n_to_m && p.responders < 2)
    throw UsageError("topology N:M needs at least 2 responders (1 is N:1)");
  p.threads = f.threads;
  p.depth = f.depth;
  p.response_sizes = f.sizes.empty() ? parse_sizes("64:16K") : parse_sizes(f.sizes);
  for (std::size_t s : p.response_sizes)
    if (s == 0 || s > rr::kMaxPayload)
      throw UsageError("response size " + std::to_string(s) + " is outside 1..4M");
  p.request_bytes = f.request_bytes;
  p.requests = f.requests.measured;
  p.warmup = f.requests.warmup;
  p.signal_every = f.signal_every;
  p.inject = !f.no_inject && parse_name<Switch>(f.inject) == Switch::on;
  p.reference = f.reference;
  p.reference_rounds = f.reference_rounds;
  if (p.reference && !one)
    throw UsageError("--reference compares with the raw ping-pong: topology 1:1 only");
  p.verify = f.verify;
  if (p.verify && (p.request_bytes < 8 || p.response_sizes.front() < 8))
    throw UsageError("--verify needs requests and responses of at least 8 bytes");
  p.callgrind = f.callgrind;
  p.callgrind_dir = f.callgrind_dir;
  p.seed = f.seed;
  p.target = flags_target(f);
  p.progress = parse_name<ProgressMode>(f.progress).value();
  v.empty_pcts = parse_pcts("--empty-mailboxes", f.empty_mailboxes);
  v.idle_pcts = parse_pcts("--idle-requesters", f.idle_requesters);
  if (v.idle_pcts != std::vector<unsigned>{0} && p.topology == rr::Topology::one_to_one)
    throw UsageError("--idle-requesters is for N:1 and N:M (requesters sharing responders)");
  v.providers = providers_to_run(f);
  return v;
}

int run_rr_rank(const RrFlags& flags, const RrValidated& v) {
  // Ranks under callgrind start slowly: give the bootstrap time to meet them all.
  const auto min_timeout =
      v.params.callgrind ? std::chrono::milliseconds(120000) : std::chrono::milliseconds(0);
  return run_family_rank(
      flags, v.params,
      [&](Rank& rank, RrParams& params) {
        bool header = false;
        RunEnvironment last;
        for (unsigned pct : v.empty_pcts)
          for (unsigned idle : v.idle_pcts) {
            params.empty_mailboxes_pct = pct;
            params.idle_requesters_pct = idle;
            bool step_shown = false;
            run_rr(params, rank.boot, [&](const RrResult& partial, const RrRow& row) {
              RrResult r = partial;
              finish_environment(r.env);
              last = r.env;
              if (!flags.json && !header) print_rr_header(std::cout, r);
              header = true;
              if (!flags.json && v.empty_pcts.size() > 1 && !step_shown)
                std::cout << "  -- empty mailboxes " << pct << "%\n";
              if (!flags.json && v.idle_pcts.size() > 1 && !step_shown)
                std::cout << "  -- idle requesters " << idle << "%\n";
              step_shown = true;
              if (flags.json)
                print_rr_json(std::cout, r, row);
              else
                print_rr_row(std::cout, r, row);
            });
          }
        if (flags.json && header) report::warn_stderr(last);
      },
      min_timeout);
}

// Under --callgrind every rank runs inside valgrind and dumps its counts into a fresh folder.
// A private folder in /tmp for the ranks' callgrind output, removed on every way out.
struct CallgrindDir {
  explicit CallgrindDir(bool wanted) {
    if (!wanted) return;
    char tmpl[] = "/tmp/fabflow-callgrind-XXXXXX";
    if (!mkdtemp(tmpl)) throw Error("--callgrind: cannot create a folder in /tmp");
    path = tmpl;
  }
  ~CallgrindDir() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove_all(path, ignored);
  }
  CallgrindDir(const CallgrindDir&) = delete;
  CallgrindDir& operator=(const CallgrindDir&) = delete;
  std::string path;
};

// Runs every rank under callgrind, writing its counts into `dir`.
void wrap_in_callgrind(LaunchConfig& lc, const std::string& dir) {
  const char* valgrind = "/usr/bin/valgrind";
  if (access(valgrind, X_OK) != 0)
    throw UsageError("--callgrind needs valgrind (scripts/setup.sh installs it)");
  std::vector<std::string> pre = {valgrind, "--tool=callgrind", "--quiet",
                                  "--callgrind-out-file=" + dir + "/cg.%p"};
  lc.argv.insert(lc.argv.begin(), pre.begin(), pre.end());
  lc.argv.insert(lc.argv.end(), {"--callgrind-dir", dir});
}

}  // namespace

Runner add_bench_rr(CLI::App* app, const Invocation& self) {
  auto f =
      add_bench_flags<RrFlags>(*app, "response size(s): 64 | 64,4K | 64:16K (default) | up to 4M",
                               "progress thread of the raw write reference: auto, on, off");
  f->timeout_ms = 2000;  // a vanished peer is reported within this bound
  add_choice<rr::Pattern>(*app, "--pattern", f->patterns,
                          "pattern(s), comma-separated, all, or auto (the advise profile's)",
                          /*list=*/true, {"all", "auto"});
  add_choice_list<rr::Model>(*app, "--model", f->models, "model(s), comma-separated, or all");
  add_choice<rr::Topology>(*app, "--topology", f->topology,
                           "1:1, N:1 or N:M (random responder per request)");
  add_number<int>(*app, "--requesters", f->requesters, 1, 63, "requester processes (N)");
  add_number<int>(*app, "--responders", f->responders, 1, 63, "responder processes (M)");
  add_number<unsigned>(*app, "--threads", f->threads, 1, 64,
                       "requester threads per requester process");
  add_number<std::size_t>(*app, "--request-bytes", f->request_bytes, 1, rr::kMaxPayload,
                          "request payload bytes (default 64)");
  add_measured_counts(*app, "-I,--requests", f->requests, "requests per requester thread");
  app->add_option("--empty-mailboxes", f->empty_mailboxes,
                  "percent of the responder's mailboxes left empty, e.g. 0,10,...,90");
  app->add_option("--idle-requesters", f->idle_requesters,
                  "percent of request turns a requester thread waits 8 us instead (contacting "
                  "another responder), e.g. 0,10,...,90 (Fig 9b; N:1, N:M)");
  add_number<unsigned>(*app, "--depth", f->depth, 1, 64,
                       "outstanding requests per requester thread");
  add_choice<rr::Mailbox>(*app, "--mailbox", f->mailbox,
                          "request mailboxes: sparse, or dense (a flag array)");
  add_number<unsigned>(*app, "--signal", f->signal_every, 1, 64,
                       "request a completion every n-th non-inject post");
  add_choice<Switch>(*app, "--inject", f->inject, "on: inject messages up to the inject size");
  // The names before the flags were made uniform, kept working but out of the help.
  add_number<unsigned>(*app, "--signal-every", f->signal_every, 1, 64, "")->group("");
  app->add_flag("--no-inject", f->no_inject, "")->group("");
  app->add_flag("--reference", f->reference, "1:1: also measure the raw 64 B write ping-pong");
  add_number<unsigned>(*app, "--reference-rounds", f->reference_rounds, 1, 1000,
                       "with --reference: rounds of [row, raw ping-pong] sharing the requests; "
                       "the ratio is the median of the rounds' (default 5)");
  app->add_flag("--verify", f->verify, "checksum every response against its own request");
  app->add_flag("--callgrind", f->callgrind, "run the ranks under callgrind: Ir per message");
  add_seed(*app, f->seed, "seed of the random responder choice (N:M)");
  app->add_option("--callgrind-dir", f->callgrind_dir)->group("");

  return [f, self]() -> int {
    RrValidated v = validate(*f);
    if (started_by_launcher()) return run_rr_rank(*f, v);
    CallgrindDir dir(f->callgrind);
    return launch_each_provider(self, *f, v.providers, v.params.target.endpoint,
                                [&](LaunchConfig& lc) {
                                  lc.nprocs = v.params.requesters + v.params.responders;
                                  if (f->callgrind) wrap_in_callgrind(lc, dir.path);
                                });
  };
}

}  // namespace fabflow::cli
