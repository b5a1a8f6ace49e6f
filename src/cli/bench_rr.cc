// `fabflow bench rr`: validates patterns, models, topology, counts and sizes in the launching
// process (one clear line per mistake), then starts requesters + responders ranks per
// provider; rank 0 reports. --callgrind runs every rank under valgrind's callgrind.
#include <fabflow/bench.h>
#include <fabflow/bootstrap.h>
#include <fabflow/launcher.h>
#include <fabflow/rr.h>
#include <fabflow/transport.h>

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "common/affinity.h"

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
  std::uint64_t requests = 10000;
  std::uint64_t warmup = 1000;
  std::string empty_mailboxes = "0";
  unsigned depth = 1;
  std::string mailbox = "sparse";
  unsigned signal_every = 16;
  bool no_inject = false;
  bool reference = false;
  bool verify = false;
  bool callgrind = false;
  std::uint64_t seed = 1;
  std::string callgrind_dir;  // internal: set for launched ranks
};

template <class T, class Parse>
std::vector<T> parse_list(const std::string& text, const char* what, const std::string& all_names,
                          const std::vector<T>& all, Parse parse) {
  std::vector<T> out;
  for (const auto& name : split(text, ',')) {
    if (name == "all") {
      out.insert(out.end(), all.begin(), all.end());
      continue;
    }
    auto v = parse(name);
    if (!v) throw UsageError(std::string("unknown ") + what + " '" + name + "' (use " + all_names + " or all)");
    out.push_back(*v);
  }
  if (out.empty()) throw UsageError(std::string("no ") + what + " given");
  return out;
}

unsigned parse_pct(const std::string& s) {
  char* end = nullptr;
  unsigned long v = std::strtoul(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v > 99)
    throw UsageError("--empty-mailboxes takes percentages in 0..99, got '" + s + "'");
  return static_cast<unsigned>(v);
}

struct Validated {
  RrParams params;
  std::vector<unsigned> empty_pcts;
  std::vector<std::string> providers;
};

Validated validate(const RrFlags& f) {
  Validated v;
  RrParams& p = v.params;
  p.patterns = parse_list<rr::Pattern>(f.patterns, "pattern", "WriteWrite, SendSend, WriteSend, SendWrite",
                                       {std::begin(rr::kAllPatterns), std::end(rr::kAllPatterns)},
                                       rr::parse_pattern);
  p.models = parse_list<rr::Model>(f.models, "model", "private, dispatcher",
                                   {rr::Model::private_connections, rr::Model::dispatcher}, rr::parse_model);
  auto topo = rr::parse_topology(f.topology);
  if (!topo) throw UsageError("unknown topology '" + f.topology + "' (use 1:1, N:1 or N:M)");
  p.topology = *topo;
  auto mailbox = rr::parse_mailbox(f.mailbox);
  if (!mailbox) throw UsageError("unknown mailbox '" + f.mailbox + "' (use sparse or dense)");
  p.mailbox = *mailbox;
  const bool n_to_m = p.topology == rr::Topology::n_to_m;
  const bool one = p.topology == rr::Topology::one_to_one;
  p.requesters = f.requesters >= 0 ? f.requesters : (one ? 1 : 2);
  p.responders = f.responders >= 0 ? f.responders : (n_to_m ? 2 : 1);
  if (p.requesters < 1 || p.responders < 1 || p.requesters + p.responders > 64)
    throw UsageError("--requesters and --responders must be at least 1 and at most 64 processes together");
  if (one && (p.requesters != 1 || p.responders != 1))
    throw UsageError("topology 1:1 has 1 requester and 1 responder (got " + std::to_string(p.requesters) +
                     " and " + std::to_string(p.responders) + ")");
  if (p.topology == rr::Topology::n_to_one && p.responders != 1)
    throw UsageError("topology N:1 has 1 responder (got " + std::to_string(p.responders) + ")");
  if (n_to_m && p.responders < 2) throw UsageError("topology N:M needs at least 2 responders (1 is N:1)");
  if (f.threads < 1 || f.threads > 64) throw UsageError("--threads must be in 1..64");
  if (f.depth < 1 || f.depth > 64) throw UsageError("--depth must be in 1..64");
  if (f.requests < 1) throw UsageError("--requests must be at least 1");
  if (f.signal_every < 1 || f.signal_every > 64) throw UsageError("--signal-every must be in 1..64");
  p.threads = f.threads;
  p.depth = f.depth;
  p.response_sizes = f.sizes.empty() ? parse_sizes("64:16K") : parse_sizes(f.sizes);
  for (std::size_t s : p.response_sizes)
    if (s == 0 || s > rr::kMaxPayload)
      throw UsageError("response size " + std::to_string(s) + " is outside 1..4M");
  if (f.request_bytes == 0 || f.request_bytes > rr::kMaxPayload)
    throw UsageError("--request-bytes " + std::to_string(f.request_bytes) + " is outside 1..4M");
  p.request_bytes = f.request_bytes;
  p.requests = f.requests;
  p.warmup = f.warmup;
  p.signal_every = f.signal_every;
  p.inject = !f.no_inject;
  p.reference = f.reference;
  if (p.reference && !one) throw UsageError("--reference compares with the raw ping-pong: topology 1:1 only");
  p.verify = f.verify;
  if (p.verify && (p.request_bytes < 8 || p.response_sizes.front() < 8))
    throw UsageError("--verify needs requests and responses of at least 8 bytes");
  p.callgrind = f.callgrind;
  p.callgrind_dir = f.callgrind_dir;
  p.seed = f.seed;
  auto ep = parse_endpoint_type(f.endpoint);
  if (!ep) throw UsageError("unknown endpoint type '" + f.endpoint + "' (use msg, rdm or auto)");
  auto progress = parse_progress_mode(f.progress);
  if (!progress) throw UsageError("unknown progress mode '" + f.progress + "' (use auto, on or off)");
  p.endpoint = *ep;
  p.progress = *progress;
  if (f.timeout_ms < 100) throw UsageError("--timeout must be at least 100 ms");
  p.timeout_ms = f.timeout_ms;
  for (const auto& s : split(f.empty_mailboxes, ',')) v.empty_pcts.push_back(parse_pct(s));
  if (v.empty_pcts.empty()) throw UsageError("--empty-mailboxes: no percentage given");
  v.providers = split(f.launched_provider.empty() ? f.providers : f.launched_provider, ',');
  if (v.providers.empty()) throw UsageError("no provider given");
  return v;
}

int run_rank(const RrFlags& flags, const Validated& v) {
  BootstrapConfig cfg;
  cfg.fill_from_env();
  if (v.params.callgrind) cfg.timeout = std::max(cfg.timeout, std::chrono::milliseconds(120000));
  auto boot = make_tcp_bootstrap(cfg);
  try {
    RrParams params = v.params;
    params.provider = v.providers.front();
    params.pin = !flags.no_pin;
    params.cpus = allowed_cpus();  // before pinning narrows this thread's view to one CPU
    if (!flags.no_pin) {
      params.cpu = cpu_for_local_rank(boot->local_rank());
      if (!pin_current_thread(params.cpu)) params.cpu = -1;
    }
    bool header = false, unpinned = false;
    for (unsigned pct : v.empty_pcts) {
      params.empty_mailboxes_pct = pct;
      bool step_shown = false;
      run_rr(params, *boot, [&](const RrResult& partial, const RrRow& row) {
        RrResult r = partial;  // the environment fields only the CLI knows
        r.env.fabflow_version = FABFLOW_VERSION;
        r.env.libfabric_version = libfabric_version();
        r.env.build_type = FABFLOW_BUILD_TYPE;
        r.env.sanitizer = FABFLOW_SANITIZER;
        r.env.launcher = BootstrapConfig::detect_launcher();
        unpinned = !r.env.pinned;
        if (!flags.json && !header) print_rr_header(std::cout, r);
        header = true;
        if (!flags.json && v.empty_pcts.size() > 1 && !step_shown)
          std::cout << "  -- empty mailboxes " << pct << "%\n";
        step_shown = true;
        if (flags.json) print_rr_json(std::cout, r, row);
        else print_rr_row(std::cout, r, row);
      });
    }
    if (flags.json && unpinned)
      std::cerr << "fabflow: warning: threads are not pinned: numbers may be far off\n";
    boot->barrier();
    return 0;
  } catch (const std::exception& e) {
    boot->abort(e.what());
    throw;
  }
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
  if (access(valgrind, X_OK) != 0) throw UsageError("--callgrind needs valgrind (scripts/setup.sh installs it)");
  std::vector<std::string> pre = {valgrind, "--tool=callgrind", "--quiet",
                                  "--callgrind-out-file=" + dir + "/cg.%p"};
  lc.argv.insert(lc.argv.begin(), pre.begin(), pre.end());
  lc.argv.insert(lc.argv.end(), {"--callgrind-dir", dir});
}

}  // namespace

Runner add_bench_rr(CLI::App& bench, const Invocation& self) {
  auto* app = bench.add_subcommand("rr", "request-response patterns (WriteWrite, SendSend, WriteSend, "
                                         "SendWrite) over private connections or a dispatcher");
  auto f = std::make_shared<RrFlags>();
  f->timeout_ms = 2000;  // a vanished peer is reported within this bound
  add_common_flags(*app, *f, "response size(s): 64 | 64,4K | 64:16K (default) | up to 4M",
                   "progress thread of the raw write reference: auto, on, off");
  app->add_option("--pattern", f->patterns, "WriteWrite, SendSend, WriteSend, SendWrite (comma list) or all");
  app->add_option("--model", f->models, "private, dispatcher or all");
  app->add_option("--topology", f->topology, "1:1, N:1 or N:M (random responder per request)");
  app->add_option("--requesters", f->requesters, "requester processes (N)");
  app->add_option("--responders", f->responders, "responder processes (M)");
  app->add_option("--threads", f->threads, "requester threads per requester process");
  app->add_option("--request-bytes", f->request_bytes, "request payload bytes (default 64)");
  app->add_option("--requests", f->requests, "measured requests per requester thread");
  app->add_option("-w,--warmup", f->warmup, "requests per requester thread not measured");
  app->add_option("--empty-mailboxes", f->empty_mailboxes,
                  "percent of the responder's mailboxes left empty, e.g. 0,10,...,90 (Fig 9b)");
  app->add_option("--depth", f->depth, "outstanding requests per requester thread");
  app->add_option("--mailbox", f->mailbox, "request mailboxes: sparse or dense (flag array)");
  app->add_option("--signal-every", f->signal_every, "request a completion every n-th non-inject post");
  app->add_flag("--no-inject", f->no_inject, "never inject small messages");
  app->add_flag("--reference", f->reference, "1:1: also measure the raw 64 B write ping-pong");
  app->add_flag("--verify", f->verify, "checksum every response against its own request");
  app->add_flag("--callgrind", f->callgrind, "run the ranks under callgrind: Ir per message");
  app->add_option("--seed", f->seed, "seed of the random responder choice (N:M)");
  app->add_option("--callgrind-dir", f->callgrind_dir)->group("");

  return [f, self]() -> int {
    Validated v = validate(*f);
    if (started_by_launcher()) return run_rank(*f, v);
    CallgrindDir dir(f->callgrind);
    return launch_each_provider(self, *f, v.providers, v.params.endpoint, [&](LaunchConfig& lc) {
      lc.nprocs = v.params.requesters + v.params.responders;
      if (f->callgrind) wrap_in_callgrind(lc, dir.path);
    });
  };
}

}  // namespace fabflow::cli
