// Reporters of bench beff: the header (ranks, patterns, channel shapes), one fixed-column line
// per protocol, pattern and size, the summary table in seed 004's layout, and JSON lines
// (fields: docs/bench-output.md).
#include <fabflow/bench/beff.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <ostream>
#include <string>

#include "bench/report.h"

namespace fabflow {
namespace {

std::string kind_text(BeffPatternKind k) { return std::string(kBeffPatternKindNames.name(k)); }

std::string pattern_text(const BeffPattern& p) {
  std::string s = p.name;
  s += ':';
  for (std::size_t r = 0; r < p.right.size(); ++r) {
    s += ' ';
    s += std::to_string(r);
    s += '>';
    s += std::to_string(p.right[r]);
  }
  return s;
}

nlohmann::json common_fields(const BeffResult& r, std::string_view type) {
  nlohmann::json j = report::base_row(r.env, "beff");
  j["type"] = type;
  j["ranks"] = r.ranks;
  j["lmax"] = r.params.lmax;
  j["reuse"] = r.params.reuse;
  j["mr_pin"] = r.params.pin;
  j["rendezvous_path"] = r.rendezvous_path;
  j["cache_state"] = r.cache_state;
  return j;
}

}  // namespace

void print_beff_header(std::ostream& out, const BeffResult& r) {
  const auto& p = r.params;
  const auto& o = r.options;
  std::vector<std::string> lines{
      std::to_string(r.ranks) + " ranks, sizes " + report::size_text(p.sizes.front()) +
          " to Lmax " + report::size_text(p.lmax) + " (" + std::to_string(p.sizes.size()) + "), " +
          report::size_text(p.bytes_per_point) + " per rank and point (" +
          std::to_string(p.min_iterations) + "-" + std::to_string(p.max_iterations) +
          " iterations)",
      "eager limit " + report::size_text(o.eager_limit) + "  bounce " +
          report::size_text(o.bounce_size) + "  fragment " + report::size_text(o.frag_size) +
          "  depth " + std::to_string(o.depth),
      std::string("registration pinning (--mr-pin): ") +
          (p.pin ? "on (mlock at registration, munlock at deregistration)" : "off"),
      "buffer reuse: " + (p.reuse == 0 ? std::string("never replaced")
                                       : "freshly mapped buffers every " + std::to_string(p.reuse) +
                                             " iterations"),
      "rendezvous: " + r.rendezvous_path,
      "registration cache: " + r.cache_state,
      "patterns (rank>right neighbour; each rank also sends to its left), random seed " +
          std::to_string(p.seed) + ":"};
  for (const BeffPattern& pat : r.patterns) lines.push_back("  " + pattern_text(pat));
  lines.push_back(
      "MB/s = 10^6 bytes/s; accumulated: bytes all ranks sent over the slowest rank's time; per "
      "process: accumulated / ranks");
  report::print_table_header(
      out, r.env, "beff", lines,
      "  protocol          pattern       size  iters   time(ms)  accum MB/s  per-proc MB/s  "
      "regs/msg  hits/miss/inval");
}

void print_beff_row(std::ostream& out, const BeffResult&, const BeffRow& row) {
  char line[512];
  const std::string proto(bulk::to_string(row.protocol));
  if (!row.unsupported.empty()) {
    std::snprintf(line, sizeof line, "  %-16s  %-9s %9s  not run: %s\n", proto.c_str(),
                  row.pattern.c_str(), report::size_text(row.size).c_str(),
                  row.unsupported.c_str());
    out << line << std::flush;
    return;
  }
  const std::string cache =
      report::cache_counts(row.cache_hits, row.cache_misses, row.cache_invalidations);
  std::snprintf(line, sizeof line, "  %-16s  %-9s %9s %6llu %10.3f %11.1f %14.1f %9.2f %16s\n",
                proto.c_str(), row.pattern.c_str(), report::size_text(row.size).c_str(),
                static_cast<unsigned long long>(row.iterations), row.seconds * 1e3,
                row.accumulated_mb_s, row.per_process_mb_s, row.registrations_per_message,
                cache.c_str());
  out << line << std::flush;
}

void print_beff_summary(std::ostream& out, const BeffResult& r) {
  const double n = r.ranks;
  const std::string lmax = report::size_text(r.params.lmax);
  char line[512];
  out << "\n# b_eff = logavg(logavg over ring patterns of the average over sizes, the same over "
         "random patterns); at Lmax: of the bandwidths at Lmax\n";
  std::snprintf(line, sizeof line, "  %-18s %12s %8s %18s %18s %16s\n", "", "b_eff MB/s", "Lmax",
                "at Lmax MB/s", "at Lmax MB/s", "ping-pong MB/s");
  out << line;
  std::snprintf(line, sizeof line, "  %-18s %12s %8s %18s %18s %16s\n", "", "", "",
                "rings & random", "rings only", "ranks 0-1, Lmax");
  out << line;
  for (int per = 0; per < 2; ++per) {
    out << (per ? "  per process\n" : "  accumulated\n");
    const double d = per ? n : 1.0;
    for (const BeffSummary& s : r.summaries) {
      const std::string proto(bulk::to_string(s.protocol));
      if (!s.unsupported.empty()) {
        std::snprintf(line, sizeof line, "  - %-16s no b_eff: %s\n", proto.c_str(),
                      s.unsupported.c_str());
        out << line;
        continue;
      }
      const std::string pp =
          per || !s.pingpong_lmax ? std::string() : report::fmt("%.0f", *s.pingpong_lmax);
      std::snprintf(line, sizeof line, "  - %-16s %12.0f %8s %18.0f %18.0f %16s\n", proto.c_str(),
                    s.beff / d, lmax.c_str(), s.beff_lmax / d, s.beff_lmax_rings / d, pp.c_str());
      out << line;
    }
  }
  out.flush();
}

void print_beff_json(std::ostream& out, const BeffResult& r, const BeffRow& row) {
  nlohmann::json j = common_fields(r, "beff");
  j["protocol"] = std::string(bulk::to_string(row.protocol));
  j["pattern"] = row.pattern;
  j["size"] = row.size;
  if (report::print_if_unsupported(out, j, row.unsupported)) return;
  j["pattern_kind"] = kind_text(row.kind);
  j["ring_size"] =
      row.kind == BeffPatternKind::ring ? nlohmann::json(row.ring_size) : nlohmann::json(nullptr);
  j["iterations"] = row.iterations;
  j["seconds"] = row.seconds;
  j["accumulated_mb_s"] = row.accumulated_mb_s;
  j["per_process_mb_s"] = row.per_process_mb_s;
  j["registrations_per_message"] = row.registrations_per_message;
  j["cache"] = {{"hits", row.cache_hits},
                {"misses", row.cache_misses},
                {"invalidations", row.cache_invalidations}};
  report::print_json_line(out, j);
}

void print_beff_summary_json(std::ostream& out, const BeffResult& r, const BeffSummary& s) {
  auto line = [&](const char* measure, std::optional<double> v, bool per_process) {
    nlohmann::json j = common_fields(r, "beff_summary");
    j["protocol"] = std::string(bulk::to_string(s.protocol));
    j["measure"] = measure;
    if (!s.unsupported.empty()) {
      j["unsupported"] = s.unsupported;
    } else if (!v) {
      j["unsupported"] = "not measured";
    } else {
      j["mb_s"] = *v;
      j["per_process_mb_s"] = per_process ? nlohmann::json(*v / r.ranks) : nlohmann::json(nullptr);
      if (std::string_view(measure) == "b_eff") {
        j["ring_avg_mb_s"] = s.ring_avg;
        j["random_avg_mb_s"] =
            r.params.random_patterns ? nlohmann::json(s.random_avg) : nlohmann::json(nullptr);
      }
    }
    out << j.dump() << "\n";
  };
  line("b_eff", s.beff, true);
  line("b_eff_lmax", s.beff_lmax, true);
  line("b_eff_lmax_rings", s.beff_lmax_rings, true);
  line("pingpong_lmax", s.pingpong_lmax, false);
  out.flush();
}

}  // namespace fabflow
