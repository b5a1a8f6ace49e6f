// `fabflow bench raw`: validates everything it can in the launching process (one clear line
// per mistake), then starts two ranks per provider and lets rank 0 report.
#include <fabflow/bench/raw.h>
#include <fabflow/bootstrap.h>
#include <fabflow/launcher.h>
#include <fabflow/progress.h>
#include <fabflow/transport.h>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "bench/report.h"
#include "cli/bench_shell.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "references/fi_pingpong.h"

namespace fabflow::cli {
namespace {

// Flags shared by every `bench` subcommand (fabtests style: -p provider -S size -I iters).
struct RawFlags : CommonFlags {
  std::string op = "send";
  std::uint64_t iterations = 10000;
  double duration = 0;
  std::uint64_t warmup = 1000;
  unsigned window = 64;
  std::string inject = "on";
  unsigned signal_every = 1;
  unsigned batch = 1;
  unsigned queues = 1;
  unsigned threads = 1;
  std::string test = "both";
  std::string launched_op;  // internal: the one operation a launched rank runs
  std::string result_path;  // internal: rank 0 also writes its JSON lines here
  bool reference = false;   // also run fi_pingpong for send latency
};

// Everything that can be checked without a peer; throws UsageError.
struct RawValidated : Checked<RawParams> {
  std::vector<Op> ops;
};

RawValidated validate(const RawFlags& f) {
  RawValidated v;
  for (const auto& name : split(f.launched_op.empty() ? f.op : f.launched_op, ',')) {
    auto parsed = parse_op(name);
    if (!parsed) throw UsageError("unknown operation '" + name + "' (use " + name_list<Op>() + ")");
    v.ops.push_back(*parsed);
  }
  if (v.ops.empty()) throw UsageError("no operation given");
  const std::optional<Op> op = v.ops.front();
  RawParams& p = v.params;
  p.op = *op;
  p.sizes = f.sizes.empty() ? std::vector<std::size_t>{64} : parse_sizes_or_zero(f.sizes);
  constexpr std::size_t kMaxSize = std::size_t{1} << 30;  // each rank holds two buffers
  for (std::size_t s : p.sizes)
    if (s > kMaxSize)
      throw UsageError("size " + std::to_string(s) + " is above the raw benchmark's limit of 1G");
  p.iterations = f.iterations;
  p.duration_s = f.duration;
  p.warmup = f.warmup;
  if (f.duration > 0 && f.warmup < 100)
    throw UsageError("--duration needs at least 100 warm-up iterations to calibrate");
  if (f.signal_every > f.window)
    throw UsageError("--signal must be in 1..window (" + std::to_string(f.window) + ")");
  if (f.batch > f.window)
    throw UsageError("--batch must be in 1..window (" + std::to_string(f.window) + ")");
  p.window = f.window;
  p.inject = f.inject == "on";
  p.signal_every = f.signal_every;
  p.batch = f.batch;
  p.queues = f.queues;
  p.progress = parse_name<ProgressMode>(f.progress).value();  // checked by the parser
  p.target = flags_target(f);
  p.test = parse_name<RawTest>(f.test).value();
  p.threads = f.threads;
  if (f.threads > 1 && p.test != RawTest::bandwidth)
    throw UsageError("--threads " + std::to_string(f.threads) +
                     " is for the bandwidth test only: add -t bw");
  if (f.threads > 1 && f.duration > 0)
    throw UsageError("--threads streams -I iterations in each thread: drop --duration");
  v.providers = providers_to_run(f);
  return v;
}

// Atomics always move one 8-byte word; an explicit other size is a mistake.
std::vector<std::size_t> sizes_for(const RawFlags& f, const RawParams& p, Op op) {
  if (!is_atomic(op)) {
    for (std::size_t s : p.sizes)
      if (s == 0 && op != Op::send && op != Op::writedata)
        throw UsageError("size 0 (header-only) is for -o send and -o writedata only, not -o " +
                         std::string(to_string(op)));
    return p.sizes;
  }
  if (!f.sizes.empty() && p.sizes != std::vector<std::size_t>{8})
    throw UsageError("atomics operate on 8-byte words: use -S 8 with -o " +
                     std::string(to_string(op)));
  return {8};
}

// Checks provider, operation and sizes against the provider's limits.
void check_provider(const RawFlags& f, const RawValidated& v, const std::string& provider, Op op) {
  Capabilities caps = probe_transport(provider_options(provider, v.params.target.endpoint, {op}));
  const auto sizes = sizes_for(f, v.params, op);
  if (!caps.reliable && (op != Op::send || v.params.test != RawTest::latency))
    throw UsageError(caps.provider +
                     "'s dgram endpoint is unreliable: bench raw runs only the send ping-pong "
                     "there (-o send -t lat), which counts lost pings");
  for (std::size_t s : sizes)
    if (s > caps.max_msg_size)
      throw UsageError("size " + std::to_string(s) + " is above " + caps.provider +
                       "'s max_msg_size " + std::to_string(caps.max_msg_size));
}

// One rank of a launched run; rank 0 reports (and leaves a JSON copy for --reference).
int run_raw_rank(const RawFlags& flags, const RawValidated& v, const std::string& result_path) {
  return run_family_rank(flags, v.params, [&](Rank& rank, RawParams& params) {
    params.op = v.ops.front();
    params.sizes = sizes_for(flags, v.params, params.op);
    RawResult result = run_raw(params, rank.boot);
    if (rank.boot.rank() != 0) return;
    finish_environment(result.env);
    if (!result_path.empty()) {
      std::ofstream copy(result_path, std::ios::trunc);
      print_raw_json(copy, result);
    }
    print_result(flags.json, result, print_raw_json, print_raw_header, print_raw_table);
  });
}

// Runs fi_pingpong for every latency row rank 0 left in `result_path` and reports it next to
// fabflow's mean.
void report_reference(const std::string& result_path, bool json) {
  std::ifstream in(result_path);
  std::string line;
  bool header = false;
  while (std::getline(in, line)) {
    auto row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_discarded() || row.value("type", "") != "latency" || row.value("op", "") != "send")
      continue;
    std::size_t size = row["size_bytes"];
    std::uint64_t iters = row["iterations"];
    double mean_ns = row["latency_ns"]["mean"];
    std::string why;
    auto ref = references::run_fi_pingpong(row["provider"], row["endpoint"], size, iters,
                                           row["cpus"]["target"], row["cpus"]["initiator"], &why);
    if (!ref) {
      std::cerr << "fabflow: warning: reference not measured: " << why << "\n";
      continue;
    }
    double ratio = mean_ns / 1000.0 / ref->usec_per_xfer;
    if (json) {
      nlohmann::json j = {{"type", "reference"},
                          {"bench", "raw"},
                          {"tool", "fi_pingpong"},
                          {"command", ref->command},
                          {"provider", row["provider"]},
                          {"endpoint", row["endpoint"]},
                          {"op", "send"},
                          {"size_bytes", size},
                          {"iterations", iters},
                          {"usec_per_xfer", ref->usec_per_xfer},
                          {"fabflow_mean_ns", mean_ns},
                          {"ratio", ratio}};
      std::cout << j.dump() << "\n";
    } else {
      if (!header) {
        std::cout << "\n  reference: fi_pingpong (libfabric-bin), same provider, size, "
                     "iterations and CPUs, run right after\n";
        header = true;
      }
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "  %-10s %6zu  fi_pingpong %.3f us/xfer   fabflow mean %.3f us   "
                    "fabflow/reference %.2fx\n",
                    "send", size, ref->usec_per_xfer, mean_ns / 1000.0, ratio);
      std::cout << buf << "    (" << ref->command << ")\n";
    }
  }
  std::cout.flush();
}

}  // namespace

Runner add_bench_raw(CLI::App* app, const Invocation& self) {
  auto f = add_bench_flags<RawFlags>(
      *app, "message size(s): 64 | 64,4K | 4:64K (powers of two); default 64 (8 atomics)",
      "progress thread: auto (where a passive peer needs one), on, off");
  add_choice<Op>(*app, "-o,--op", f->op, "operation(s), comma-separated", /*list=*/true);
  add_number<std::uint64_t>(*app, "-I,--iterations", f->iterations, 1, kMaxCount,
                            "measured iterations per size");
  add_real(*app, "-D,--duration", f->duration, 0.001, 3600,
           "seconds per size instead of -I (iterations calibrated during warm-up)");
  add_number<std::uint64_t>(*app, "-w,--warmup", f->warmup, 0, kMaxCount,
                            "warm-up iterations, not measured");
  add_number<unsigned>(*app, "--window", f->window, 1, 4096,
                       "outstanding operations in bandwidth tests");
  add_choice<Switch>(*app, "--inject", f->inject,
                     "on: inline sizes up to the provider's inject size");
  add_number<unsigned>(*app, "--signal", f->signal_every, 1, 4096,
                       "request a completion every n-th operation (at most --window)");
  add_number<unsigned>(*app, "--batch", f->batch, 1, 4096,
                       "post n operations back to back with FI_MORE (at most --window)");
  add_number<unsigned>(*app, "--queues", f->queues, 1, 64,
                       "bandwidth tests: endpoints per rank the batches rotate over");
  add_number<unsigned>(*app, "--threads", f->threads, 1, 64,
                       "bandwidth tests (-t bw): initiator threads streaming at once, each with "
                       "its own endpoints (and the target's sink thread for send/writedata), "
                       "pinned where there are cores enough");
  add_choice<RawTest>(*app, "-t,--test", f->test, "latency, bandwidth or both");
  app->add_flag("--reference", f->reference,
                "send latency: also run libfabric's fi_pingpong on the same provider, size, "
                "iterations and CPUs, and report the ratio");
  app->add_option("--launched-op", f->launched_op)->group("");
  app->add_option("--result-path", f->result_path)->group("");

  return [f, self]() -> int {
    RawValidated v = validate(*f);
    if (started_by_launcher()) return run_raw_rank(*f, v, f->result_path);

    for (const auto& p : v.providers)
      for (Op op : v.ops) check_provider(*f, v, p, op);
    std::string why;
    if (f->netns && !netns_available(&why)) throw UsageError("--netns: " + why);
    int status = 0;
    bool first = true;
    for (std::size_t i = 0; i < v.providers.size() && status == 0; ++i)
      for (std::size_t k = 0; k < v.ops.size() && status == 0; ++k) {
        const bool reference = f->reference && v.ops[k] == Op::send &&
                               v.params.test != RawTest::bandwidth && !f->netns;
        char result_path[] = "/tmp/fabflow-result-XXXXXX";
        int result_fd = reference ? mkstemp(result_path) : -1;
        std::vector<std::string> extra = {"--launched-provider", v.providers[i], "--launched-op",
                                          std::string(to_string(v.ops[k]))};
        if (result_fd >= 0) extra.insert(extra.end(), {"--result-path", result_path});
        LaunchConfig lc = self_launch(self, *f, extra);
        if (!first && !f->json) std::cout << "\n" << std::flush;
        first = false;
        status = launch_local(lc);
        if (result_fd >= 0) {
          if (status == 0) report_reference(result_path, f->json);
          close(result_fd);
          unlink(result_path);
        }
      }
    return status;
  };
}

}  // namespace fabflow::cli
