// Reporters of bench connect: the header, one line per row, and JSON lines (fields:
// docs/bench-output.md).
#include <fabflow/bench/connect.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <ostream>
#include <string>

#include "bench/report.h"

namespace fabflow {
namespace {

double per_peer(std::int64_t with, std::int64_t before, std::size_t peers) {
  return peers ? static_cast<double>(with - before) / static_cast<double>(peers) : 0.0;
}

nlohmann::json holdings_json(const ProcessHoldings& before, const ProcessHoldings& with,
                             std::size_t peers) {
  return {{"rss_bytes_before", before.rss_bytes},
          {"rss_bytes_with", with.rss_bytes},
          {"rss_bytes_per_peer", per_peer(with.rss_bytes, before.rss_bytes, peers)},
          {"fds_per_peer", per_peer(with.fds, before.fds, peers)},
          {"threads_per_peer", per_peer(with.threads, before.threads, peers)}};
}

std::string holdings_text(const ProcessHoldings& before, const ProcessHoldings& with,
                          std::size_t peers) {
  char s[96];
  std::snprintf(s, sizeof s, "%8.1f KiB %6.1f fds %5.1f thr",
                per_peer(with.rss_bytes, before.rss_bytes, peers) / 1024,
                per_peer(with.fds, before.fds, peers),
                per_peer(with.threads, before.threads, peers));
  return s;
}

}  // namespace

void print_connect_header(std::ostream& out, const ConnectResult& r) {
  report::print_table_header(
      out, r.env, "connect",
      {"connect: Node::connect called to the first 64-byte call over the new connection "
       "answered (a request-response channel opened over it), " +
           std::to_string(r.params.connections) + " connections after " +
           std::to_string(r.params.warmup) + " not measured, each closed before the next",
       "idle: that many connections open at once, each with its channel and one call done; per "
       "peer = (with them - before the first) / peers, resident memory, fds and threads of each "
       "process; registered bytes: n/a (not counted)"},
      "  row      peers  p50(us)  p99(us)  server per peer                    client per peer");
}

void print_connect_row(std::ostream& out, const ConnectResult&, const ConnectRow& row) {
  char line[512];
  if (row.kind == ConnectRow::Kind::connect_time) {
    std::snprintf(line, sizeof line, "  connect  %5llu %8.1f %8.1f  over %s\n",
                  static_cast<unsigned long long>(row.connections), row.connect.p50 / 1e3,
                  row.connect.p99 / 1e3, row.transport.c_str());
  } else {
    std::snprintf(line, sizeof line, "  idle     %5zu %8s %8s  %s  %s%s%s\n", row.peers, "-", "-",
                  holdings_text(row.server_before, row.server_with, row.peers).c_str(),
                  holdings_text(row.client_before, row.client_with, row.peers).c_str(),
                  row.failed.empty() ? "" : "  FAILED: ", row.failed.c_str());
  }
  out << line << std::flush;
}

void print_connect_json(std::ostream& out, const ConnectResult& r, const ConnectRow& row) {
  nlohmann::json j = report::base_row(r.env, "connect");
  j["transport"] = row.transport;
  if (row.kind == ConnectRow::Kind::connect_time) {
    j["type"] = "connect_time";
    j["connections"] = row.connections;
    j["warmup"] = r.params.warmup;
    j["latency_ns"] = report::latency_json(row.connect);
  } else {
    j["type"] = "idle_peers";
    j["peers"] = row.peers;
    j["server"] = holdings_json(row.server_before, row.server_with, row.peers);
    j["client"] = holdings_json(row.client_before, row.client_with, row.peers);
    j["failed"] = row.failed.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.failed);
  }
  report::print_json_line(out, j);
}

}  // namespace fabflow
