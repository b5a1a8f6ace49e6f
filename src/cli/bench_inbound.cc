// `fabflow bench inbound`: validates everything it can in the launching process (one clear
// line per mistake), prints one line per operation the provider lacks, then starts clients + 1
// ranks per provider; the server (the last rank) reports.
#include <fabflow/bench/inbound.h>
#include <fabflow/bootstrap.h>
#include <fabflow/launcher.h>
#include <fabflow/transport.h>

#include <algorithm>
#include <iostream>
#include <limits>

#include "bench/report.h"
#include "cli/bench_shell.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace fabflow::cli {
namespace {

struct InboundFlags : CommonFlags {
  std::string ops = "read,write";
  int clients = 2;
  std::uint64_t iterations = 10000;
  std::uint64_t warmup = 1000;
  unsigned window = 16;
  std::string counters = "1";
  std::uint64_t stride = 8;
  bool probe_aliasing = false;
  std::uint64_t seed = 1;
  std::string launched_ops;  // internal: the operations the provider supports
};

using InboundValidated = Checked<InboundParams>;

InboundValidated validate(const InboundFlags& f) {
  InboundValidated v;
  InboundParams& p = v.params;
  std::string ops_text;  // "all": the five operations this family takes
  for (const auto& name : split(f.launched_ops.empty() ? f.ops : f.launched_ops, ','))
    ops_text +=
        (ops_text.empty() ? "" : ",") + (name == "all" ? "read,write,send,fadd,cswap" : name);
  p.ops = parse_choice_list<Op>(ops_text);
  for (Op op : p.ops)
    if (op != Op::read && op != Op::write && op != Op::send && !is_atomic(op))
      throw UsageError("--op: inbound takes read, write, send, fadd and cswap, not " +
                       std::string(to_string(op)));
  const bool sends = std::find(p.ops.begin(), p.ops.end(), Op::send) != p.ops.end();
  p.sizes = f.sizes.empty() ? std::vector<std::size_t>{64}
            : sends         ? parse_sizes_or_zero(f.sizes)
                            : parse_sizes(f.sizes);
  for (std::size_t s : p.sizes) {
    if (s > kInboundMaxSize)
      throw UsageError("size " + std::to_string(s) + " is above the inbound limit of 4M");
    if (sends && s > kInboundMaxSendSize)
      throw UsageError("size " + std::to_string(s) + " is above the inbound send limit of 64K");
  }
  const bool atomics = std::any_of(p.ops.begin(), p.ops.end(), is_atomic);
  const bool only_atomics = std::all_of(p.ops.begin(), p.ops.end(), is_atomic);
  if (only_atomics && !f.sizes.empty() && p.sizes != std::vector<std::size_t>{8})
    throw UsageError("atomics operate on 8-byte words: -S applies to read, write and send only");
  p.counters.clear();
  std::vector<std::size_t> ks;
  try {
    ks = parse_sizes(f.counters);  // "1,16,1K" and sweeps "1:1M"
  } catch (const UsageError& e) {
    throw UsageError("--counters must be in 1..1048576 (1M): " + std::string(e.what()));
  }
  for (std::size_t k : ks) {
    if (k < 1 || k > (std::size_t{1} << 20))
      throw UsageError("--counters must be in 1..1048576 (1M), got " + std::to_string(k));
    p.counters.push_back(k);
  }
  if (f.stride % 8 != 0)
    throw UsageError("--stride must be a multiple of 8 (counters are aligned 8-byte words), got " +
                     std::to_string(f.stride));
  p.stride = f.stride;
  p.probe_aliasing = f.probe_aliasing;
  if (atomics && counter_region_bytes(p) > kInboundMaxCounterRegion)
    throw UsageError("--counters " +
                     std::to_string(*std::max_element(p.counters.begin(), p.counters.end())) +
                     " x --stride " + std::to_string(p.stride) + " needs " +
                     std::to_string(counter_region_bytes(p)) +
                     " bytes, above the server's counter region limit of 268435456 (256M)");
  p.iterations = f.iterations;
  p.warmup = f.warmup;
  p.window = f.window;
  p.seed = f.seed;
  p.progress = parse_name<ProgressMode>(f.progress).value();  // checked by the parser
  p.target = flags_target(f);
  v.providers = providers_to_run(f);
  return v;
}

int run_inbound_rank(const InboundFlags& flags, const InboundValidated& v) {
  return run_family_rank(flags, v.params, [&](Rank& rank, InboundParams& params) {
    params.yield = rank.boot.size() > static_cast<int>(rank.target.cpus.size());
    InboundResult result = run_inbound(params, rank.boot);
    if (rank.boot.rank() != rank.boot.size() - 1) return;
    finish_environment(result.env);
    print_result(flags.json, result, print_inbound_json, print_inbound_header, print_inbound_table);
  });
}

}  // namespace

Runner add_bench_inbound(CLI::App* app, const Invocation& self) {
  auto f = add_bench_flags<InboundFlags>(
      *app, "read/write payload size(s): 64 | 32,256 | 8:4K; default 64",
      "server progress: auto (a thread where the provider needs one), on, off (the "
      "server's one thread drives progress inline)");
  add_choice_list<Op>(*app, "-o,--op", f->ops,
                      "read, write, send, fadd, cswap, comma-separated, or all");
  add_number<int>(*app, "--clients", f->clients, 1, 63,
                  "client processes (the server is one more)");
  add_number<std::uint64_t>(*app, "-I,--iterations", f->iterations, 1, kMaxCount,
                            "measured operations per client and row");
  add_number<std::uint64_t>(*app, "-w,--warmup", f->warmup, 0, kMaxCount,
                            "operations per client before measuring");
  add_number<unsigned>(*app, "--window", f->window, 1, 4096, "outstanding operations per client");
  app->add_option("--counters", f->counters,
                  "atomics: counters K chosen among at random, 1..1M: 1 | 1,64,4K | 1:1M");
  add_number<std::uint64_t>(*app, "--stride", f->stride, 8, 4096,
                            "atomics: bytes between counters (a multiple of 8)");
  app->add_flag("--probe-aliasing", f->probe_aliasing,
                "atomics: also two counters whose addresses share their 12 low bits, and two "
                "that do not");
  add_seed(*app, f->seed, "seed of the clients' counter choice");
  app->add_option("--launched-ops", f->launched_ops)->group("");

  return [f, self]() -> int {
    InboundValidated v = validate(*f);
    if (started_by_launcher()) return run_inbound_rank(*f, v);
    std::string why;
    if (f->netns && !netns_available(&why)) throw UsageError("--netns: " + why);
    // Every provider is known before anything runs (an unknown one is a usage error).
    for (const auto& p : v.providers)
      probe_transport(provider_options(p, v.params.target.endpoint, {Op::read}));
    int status = 0;
    for (std::size_t i = 0; i < v.providers.size() && status == 0; ++i) {
      const std::string& provider = v.providers[i];
      std::vector<Op> supported;
      for (Op op : v.params.ops) {
        try {
          probe_transport(provider_options(provider, v.params.target.endpoint, {op}));
          supported.push_back(op);
        } catch (const UsageError& e) {  // the provider lacks it: Capabilities::why_not
          RunEnvironment env = machine_environment();
          env.caps =
              probe_transport(provider_options(provider, v.params.target.endpoint, {Op::read}));
          print_inbound_unsupported(std::cout, env, op, e.what(), f->json);
        }
      }
      if (supported.empty()) continue;
      std::string ops;
      for (Op op : supported) ops += (ops.empty() ? "" : ",") + std::string(to_string(op));
      LaunchConfig lc =
          self_launch(self, *f, {"--launched-provider", provider, "--launched-ops", ops});
      lc.nprocs = f->clients + 1;
      status = launch_local(lc);
    }
    return status;
  };
}

}  // namespace fabflow::cli
