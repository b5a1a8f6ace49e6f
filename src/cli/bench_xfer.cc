// `fabflow bench xfer`: checks sizes, batches and directions in the launching process (one clear
// line per mistake), then starts 2 ranks per provider; rank 0 reports.
#include <fabflow/bench/xfer.h>
#include <fabflow/launcher.h>

#include <iostream>

#include "bench/report.h"
#include "cli/bench_shell.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace fabflow::cli {
namespace {

struct XferFlags : CommonFlags {
  std::string batches = "1";
  std::string directions = "write";
  std::string layouts = "contiguous";
  std::string bytes = "256M";
  std::uint64_t max_batches = 100000;
  std::size_t max_outstanding = 64;
  std::size_t endpoints = 1;
  std::string operation_sizes = "0";
  bool reference = false;
  bool no_verify = false;
};

using XferValidated = Checked<XferParams>;

XferValidated validate(const XferFlags& f) {
  XferValidated v;
  XferParams& p = v.params;
  p.sizes = f.sizes.empty() ? std::vector<std::size_t>{65536} : parse_sizes(f.sizes);
  try {
    p.batches = parse_sizes(f.batches);  // counts, in the sizes' notation: 16, 1,16,256, 1:256
  } catch (const UsageError& e) {
    throw UsageError("--batch takes transfer counts (16, 1,16,256 or 1:256): " +
                     std::string(e.what()));
  }
  p.directions = parse_choice_list<bulk::Direction>(f.directions);
  p.layouts = parse_choice_list<XferLayout>(f.layouts);
  for (std::size_t s : p.sizes)
    for (std::size_t b : p.batches)
      if (s == 0 || b == 0 || b > 65536 || s > (std::size_t{1} << 30) / b)
        throw UsageError("a batch of " + std::to_string(b) + " transfers of " + std::to_string(s) +
                         " bytes is outside 1 B .. 1 GiB (batches of 1-65536)");
  p.bytes_per_point = bytes_per_point(f.bytes);
  p.max_batches = f.max_batches;
  p.min_batches = std::min<std::uint64_t>(p.min_batches, p.max_batches);
  p.max_outstanding = f.max_outstanding;
  p.endpoints = f.endpoints;
  try {
    p.operation_sizes = parse_sizes_or_zero(f.operation_sizes, "--operation-size");
  } catch (const UsageError& e) {
    throw UsageError("--operation-size takes sizes (0, 1M or 0,1M,8M): " + std::string(e.what()));
  }
  for (std::size_t op : p.operation_sizes)
    if (op != 0 && (op < 4096 || op > (std::size_t{1} << 30)))
      throw UsageError("--operation-size takes 0 (the engine's default) or 4K .. 1G, not " +
                       std::to_string(op) + " bytes");
  p.reference = f.reference;
  p.verify = !f.no_verify;
  p.target = flags_target(f);
  v.providers = providers_to_run(f);
  return v;
}

int run_xfer_rank(const XferFlags& flags, const XferValidated& v) {
  return run_family_rank(flags, v.params, [&](Rank& rank, const XferParams& params) {
    bool header = false;
    XferResult last =
        run_xfer(params, rank.boot, [&](const XferResult& partial, const XferRow& row) {
          XferResult r = partial;
          finish_environment(r.env);
          if (flags.json) {
            print_xfer_json(std::cout, r, row);
            return;
          }
          if (!header) print_xfer_header(std::cout, r);
          header = true;
          print_xfer_row(std::cout, r, row);
        });
    if (rank.boot.rank() != 0) return;
    finish_environment(last.env);
    if (flags.json) report::warn_stderr(last.env);
  });
}

}  // namespace

Runner add_bench_xfer(CLI::App* app, const Invocation& self) {
  auto f = add_bench_flags<XferFlags>(*app, "bytes per transfer, e.g. 64K or 4K:8M (default 64K)",
                                      "not used: the engine drives its own progress");
  app->add_option("--batch", f->batches, "transfers per batch: 16 | 1,16,256 | 1:256 (default 1)");
  add_choice_list<bulk::Direction>(*app, "--direction", f->directions,
                                   "write (default), read, or both comma-separated");
  add_choice_list<XferLayout>(*app, "--layout", f->layouts,
                              "contiguous (default: each transfer right after the one before, on "
                              "both ranks), scattered (a transfer-sized gap after each), or both "
                              "comma-separated");
  app->add_option("--bytes", f->bytes,
                  "bytes moved per point, which sets the batch count (default 256M; at least 8 "
                  "batches)");
  add_number<std::uint64_t>(*app, "--max-batches", f->max_batches, 1, kMaxCount,
                            "most batches per point (default 100000)");
  add_number<std::size_t>(*app, "--outstanding", f->max_outstanding, 1, 4096,
                          "operations the engine keeps in flight at most per endpoint (default "
                          "64)");
  add_number<std::size_t>(*app, "--endpoints", f->endpoints, 1, 16,
                          "endpoints (transports) per rank the engine stripes transfers over "
                          "(default 1)");
  app->add_option("--operation-size", f->operation_sizes,
                  "the largest operation the engine posts, transfers split into pieces of it: "
                  "0 (default: the transport's preferred size, tcp 1M), 4K .. 1G, or a list "
                  "(0,1M,8M), one point each");
  app->add_flag("--reference", f->reference,
                "add, in the same run, a memcpy of the batch's bytes (the ceiling on local), "
                "the two-sided best of each size (bench bulk's fastest protocol) and the "
                "provider's raw RMA write of that size (bench bulk's raw write)");
  app->add_flag("--no-verify", f->no_verify,
                "skip checking what arrived (by default rank 0 writes a pattern that changes per "
                "batch and the side the bytes land on checks it, outside the timed sections)");
  return rank_or_launch(f, self, run_xfer_rank);
}

}  // namespace fabflow::cli
