// `fabflow bench bulk`: checks protocols, sizes and shapes in the launching process (one clear
// line per mistake), then starts two ranks per provider; rank 0 reports.
#include <fabflow/bench/bulk.h>
#include <fabflow/bulk.h>
#include <fabflow/launcher.h>
#include <fabflow/regcache.h>

#include <sys/resource.h>

#include <algorithm>
#include <iostream>

#include "bench/report.h"
#include "cli/bench_shell.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace fabflow::cli {
namespace {

struct BulkFlags : CommonFlags {
  std::string protocols = "all";
  std::uint64_t reuse = 0;
  bool mr_pin = false;
  std::string eager_limit, frag_size, split_copy_min;
  unsigned depth = 0;
  double growth = 1.0;
  unsigned window = 8;
  std::string bytes = "256M";
  bool reference = false;
  bool no_verify = false;
  bool keep_memlock = false;
  std::string memory = "user";
};

std::string bytes_text(rlim_t v) {
  return v == RLIM_INFINITY ? std::string("unlimited") : std::to_string(v) + " bytes";
}

// --mr-pin locks every registered page, as verbs does; RDMA hosts raise RLIMIT_MEMLOCK for it
// (limits.conf "memlock unlimited"). The soft limit goes up to what the run needs (both ranks'
// window of the largest message, twice, plus 64 MiB), within the hard limit, or beyond it where
// the process may (CAP_SYS_RESOURCE); what happened is said in the header.
std::string raise_memlock(const BulkParams& p) {
  std::size_t largest = 0;
  for (std::size_t s : p.sizes) largest = std::max(largest, s);
  const rlim_t need = static_cast<rlim_t>(2 * (std::size_t{p.window} + 1) * largest) + (64u << 20);
  rlimit now{};
  if (::getrlimit(RLIMIT_MEMLOCK, &now) != 0) return "RLIMIT_MEMLOCK unknown";
  if (bulk::memlock_limit() == SIZE_MAX && now.rlim_cur != RLIM_INFINITY)
    return "RLIMIT_MEMLOCK " + bytes_text(now.rlim_cur) +
           " does not apply: the process has CAP_IPC_LOCK (as for verbs)";
  if (now.rlim_cur == RLIM_INFINITY || now.rlim_cur >= need)
    return "RLIMIT_MEMLOCK " + bytes_text(now.rlim_cur);
  rlimit want = now;
  want.rlim_cur = need;
  if (want.rlim_max != RLIM_INFINITY && want.rlim_max < need) want.rlim_max = need;
  if (::setrlimit(RLIMIT_MEMLOCK, &want) == 0)
    return "RLIMIT_MEMLOCK raised from " + bytes_text(now.rlim_cur) + " to " + bytes_text(need);
  if (now.rlim_max != now.rlim_cur) {
    want = now;
    want.rlim_cur = now.rlim_max;
    if (::setrlimit(RLIMIT_MEMLOCK, &want) == 0)
      return "RLIMIT_MEMLOCK raised from " + bytes_text(now.rlim_cur) + " to its hard limit " +
             bytes_text(now.rlim_max) + " (the run may need " + bytes_text(need) + ")";
  }
  return "RLIMIT_MEMLOCK " + bytes_text(now.rlim_cur) + " (could not raise it to " +
         bytes_text(need) + ")";
}

using BulkValidated = Checked<BulkParams>;

BulkValidated validate(const BulkFlags& f) {
  BulkValidated v;
  BulkParams& p = v.params;
  p.protocols = parse_choice_set(f.protocols, bulk::kAllProtocols);
  p.sizes = parse_sizes(f.sizes.empty() ? "64K:64M" : f.sizes);
  check_buffer_sizes(p.sizes);
  p.reuse = f.reuse;
  p.pin = f.mr_pin;
  if (!f.eager_limit.empty()) p.eager_limit = parse_one_size("--eager-limit", f.eager_limit);
  if (!f.frag_size.empty()) p.frag_size = parse_one_size("--frag-size", f.frag_size);
  if (f.split_copy_min == "0")
    p.split_copy_min = 0;
  else if (!f.split_copy_min.empty())
    p.split_copy_min = parse_one_size("--split-copy-min", f.split_copy_min);
  p.depth = f.depth;
  p.frag_growth = f.growth;
  p.window = f.window;
  p.bytes_per_point = bytes_per_point(f.bytes);
  p.reference = f.reference;
  p.verify = !f.no_verify;
  p.memory = parse_name<BufferMemory>(f.memory).value();  // checked by the parser
  if (p.memory == BufferMemory::fabflow && p.reuse > 0)
    throw UsageError("--reuse replaces user buffers; --memory fabflow keeps the channel's memory");
  p.target = flags_target(f);
  // The channel's own checks of the shapes, before anything starts (the largest message any
  // provider here takes: the local transport's 1 MiB bounds the bounce size alone).
  bulk::ChannelOptions co;
  co.eager_limit = p.eager_limit;
  co.frag_size = p.frag_size;
  co.depth = p.depth;
  co.frag_growth = p.frag_growth;
  Capabilities any;
  any.provider = "any";
  any.max_msg_size = std::size_t{1} << 20;
  bulk::resolve(co, any);
  v.providers = providers_to_run(f);
  return v;
}

int run_bulk_rank(const BulkFlags& flags, const BulkValidated& v) {
  return run_family_rank(flags, v.params, [&](Rank& rank, BulkParams& params) {
    if (params.pin) {
      rlimit now{};
      ::getrlimit(RLIMIT_MEMLOCK, &now);
      params.memlock = flags.keep_memlock ? "RLIMIT_MEMLOCK " + bytes_text(now.rlim_cur) +
                                                " (kept: --keep-memlock)"
                                          : raise_memlock(params);
    }
    BulkResult last = run_bulk(params, rank.boot,
                               RowPrinter<BulkResult, BulkRow>(flags.json, print_bulk_header,
                                                               print_bulk_json, print_bulk_row));
    if (rank.boot.rank() == 0 && flags.json) {
      finish_environment(last.env);  // the load at the end, for the busy-machine warning
      report::warn_stderr(last.env);
    }
  });
}

}  // namespace

Runner add_bench_bulk(CLI::App* app, const Invocation& self) {
  auto f = add_bench_flags<BulkFlags>(*app, "message sizes, e.g. 64K:64M (default), up to 1G",
                                      "not used: the channel drives its own progress");
  add_choice_list<bulk::Protocol>(*app, "--protocol", f->protocols,
                                  "protocol(s), comma-separated, or all (auto not included)");
  add_buffer_flags(*app, f->reuse, f->mr_pin, "messages");
  app->add_option("--eager-limit", f->eager_limit, "largest eager message (default 16K)");
  app->add_option("--frag-size", f->frag_size, "first pipeline fragment (default 1M)");
  app->add_option("--split-copy-min", f->split_copy_min,
                  "on local, rendezvous between fabflow memories of at least this size are copied "
                  "by both ranks, half each (default 1M; 0: never)");
  add_number<unsigned>(*app, "--depth", f->depth, 1, 64,
                       "pipeline fragments in flight per message (default 4)");
  add_real(*app, "--frag-growth", f->growth, 1.0, 16.0,
           "each pipeline fragment this many times the one before (default 1)");
  add_number<unsigned>(*app, "--window", f->window, 1, 64, "streaming: messages in flight");
  app->add_option("--bytes", f->bytes,
                  "bytes per size and phase, which sets the message count (default 256M; "
                  "4-1000 messages)");
  app->add_flag("--keep-memlock", f->keep_memlock,
                "with --mr-pin, leave RLIMIT_MEMLOCK as it is (by default it is raised to what "
                "the run needs where allowed)");
  app->add_flag("--reference", f->reference,
                "also measure memcpy, the copy ping-pong (one memcpy per message between two "
                "threads on the ranks' CPUs) and the raw streaming RMA write of each size");
  app->add_flag("--no-verify", f->no_verify,
                "skip checking what arrived (by default the sender writes a pattern that changes "
                "per message and the receiver checks it, outside the timed sections)");
  add_choice<BufferMemory>(*app, "--memory", f->memory,
                           "buffers in user memory (default) or in fabflow's, registered once "
                           "(on local: one copy through the peer's mapping)");

  return rank_or_launch(f, self, run_bulk_rank);
}

}  // namespace fabflow::cli
