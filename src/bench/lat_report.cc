// bench lat's output: the table, the JSON lines (docs/bench-output.md, "bench lat") and the
// samples file.
#include <fabflow/bench/lat.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <ostream>

#include "bench/report.h"

namespace fabflow {

std::string lat_rate_text(double r) {
  if (r >= 1e6) return report::fmt("%gM", r / 1e6);
  if (r >= 1e3) return report::fmt("%gk", r / 1e3);
  return report::fmt("%g", r);
}

void append_lat_samples(const std::string& path, const std::vector<LatRow>& rows) {
  std::ofstream out(path, std::ios::app);
  for (const auto& r : rows) {
    out << "# " << r.path << " " << r.provider << " " << r.mode
        << " inject=" << (r.inlined ? "on" : "off") << " size=" << r.size;
    if (!r.recv_post.empty()) out << " recv=" << r.recv_post;
    if (r.rate > 0) out << " rate=" << report::fmt("%.0f", r.rate);
    out << "\n";
    for (double v : r.samples) out << report::fmt("%.1f", v) << "\n";
  }
  out.flush();
  if (!out) throw Error("--samples: writing " + path + " failed");
}

void print_lat_table(std::ostream& out, const std::vector<LatRow>& rows) {
  out << "\n  path    provider  mode       recv  loop     inline  bytes    iters  mean(us)   "
         "p50(us)"
         "   p99(us) p99.9(us) p99.99(us)   max(us) stdev(us)\n";
  char line[320];
  for (const auto& r : rows) {
    const auto& l = r.latency;
    const std::string loop = r.rate > 0 ? lat_rate_text(r.rate) + "/s" : "closed";
    std::snprintf(line, sizeof line,
                  "  %-7s %-9s %-10s %-5s %-8s %-6s %6s %8llu %9.3f %9.3f %9.3f %9.3f %10.3f %9.3f "
                  "%9.3f%s\n",
                  r.path.c_str(), r.provider.c_str(), r.mode.c_str(),
                  r.recv_post.empty() ? "-" : r.recv_post.c_str(), loop.c_str(),
                  r.inlined ? "on" : "off", report::size_text(r.size).c_str(),
                  static_cast<unsigned long long>(r.iterations), l.mean / 1e3, l.p50 / 1e3,
                  l.p99 / 1e3, l.p999 / 1e3, l.p9999 / 1e3, l.max / 1e3, l.stdev / 1e3,
                  r.lost ? (" lost " + std::to_string(r.lost)).c_str() : "");
    out << line;
  }
}

void print_lat_json(std::ostream& out, const RunEnvironment& env, const std::vector<LatRow>& rows,
                    double loss, const std::string& loss_method, const std::string& more_hint,
                    unsigned rto_min_ms) {
  for (const auto& r : rows) {
    nlohmann::json j = report::base_row(env, "lat");
    j["loss_percent"] = loss * 100;
    if (loss > 0) j["loss_method"] = loss_method;
    j["rto_min_ms"] = rto_min_ms > 0 ? nlohmann::json(rto_min_ms) : nlohmann::json(nullptr);
    j["type"] = "latency";
    j["path"] = r.path;
    j["provider"] = r.provider;
    j["mode"] = r.mode;
    if (!r.recv_post.empty()) {
      j["recv_post"] = r.recv_post;
      if (r.recv_post == "list") j["recv_more_hint"] = more_hint;
    }
    j["loop"] = r.rate > 0 ? "open" : "closed";
    if (r.rate > 0) j["rate_per_s"] = r.rate;
    j["inject"] = r.inlined;
    j["size_bytes"] = r.size;
    j["iterations"] = r.iterations;
    j["latency_kind"] = "one_way";
    j["latency_ns"] = report::latency_json(r.latency);
    // Pings that got no answer within the loss timeout: UDP sockets and unreliable (dgram)
    // fabric endpoints; 0 on reliable ones, which wait for every answer.
    j["lost"] = r.lost;
    if (r.path == "socket") j["path_mtu"] = r.mtu;
    out << j.dump() << "\n";
  }
  out.flush();
}

}  // namespace fabflow
