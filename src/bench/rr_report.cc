// Reporters of bench rr: the header, one fixed-column line per row, and JSON lines (fields:
// docs/bench-output.md).
#include <fabflow/bench/rr.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <optional>
#include <ostream>
#include <string>

#include "bench/report.h"

namespace fabflow {
namespace {

nlohmann::json cpu_json(const RrCpu& c) {
  return {{"cpu_ns_per_msg", c.ns_per_msg},
          {"instructions_per_msg", report::optional_json(c.instructions_per_msg)},
          {"cycles_per_msg", report::optional_json(c.cycles_per_msg)},
          {"callgrind_ir_per_msg", report::optional_json(c.callgrind_ir_per_msg)}};
}

std::string na(const std::optional<double>& v) { return report::fmt_or_na(v, "%.0f"); }

}  // namespace

void print_rr_header(std::ostream& out, const RrResult& r) {
  const auto& p = r.params;
  report::print_table_header(
      out, r.env, "rr",
      {"SEND receive queue " + std::string(rr::receive_queue_kind(r.env.caps)),
       "topology " + std::string(rr::to_string(p.topology)) + "  requesters " +
           std::to_string(p.requesters) + " x " + std::to_string(p.threads) +
           " threads  responders " + std::to_string(p.responders) + "  depth " +
           std::to_string(p.depth) + "  mailbox " + std::string(rr::to_string(p.mailbox)) +
           "  empty mailboxes " + std::to_string(p.empty_mailboxes_pct) + "%" +
           (p.idle_requesters_pct ? "  idle requesters " + std::to_string(p.idle_requesters_pct) +
                                        "% (" + std::to_string(p.idle_wait_ns / 1000) + " us waits)"
                                  : ""),
       "request " + std::to_string(p.request_bytes) + " B  requests " + std::to_string(p.requests) +
           " per thread, warm-up " + std::to_string(p.warmup),
       "latency: full round trip per request; MB/s: response bytes, sum of requester threads' "
       "rates; CPU per message per side (all its threads; busy polling included)"},
      "  pattern     model       bytes   requests     req/s      MB/s  p50(us)  p99(us)"
      "  max(us)  req cpu ns/msg  rsp cpu ns/msg  req instr  rsp instr  req cycles  rsp "
      "cycles");
}

void print_rr_row(std::ostream& out, const RrResult&, const RrRow& row) {
  char line[512];
  if (!row.unsupported.empty()) {
    std::snprintf(line, sizeof line, "  %-11s %-10s %6zu  unsupported: %s\n",
                  std::string(rr::to_string(row.pattern)).c_str(),
                  std::string(rr::to_string(row.model)).c_str(), row.response_bytes,
                  row.unsupported.c_str());
    out << line << std::flush;
    return;
  }
  std::snprintf(
      line, sizeof line,
      "  %-11s %-10s %6zu %10llu %9.0f %9.2f %8.2f %8.2f %8.2f %15.0f %15.0f %10s %10s %11s %11s\n",
      std::string(rr::to_string(row.pattern)).c_str(),
      std::string(rr::to_string(row.model)).c_str(), row.response_bytes,
      static_cast<unsigned long long>(row.requests), row.requests_per_s, row.mbps,
      row.latency.p50 / 1e3, row.latency.p99 / 1e3, row.latency.max / 1e3, row.requester.ns_per_msg,
      row.responder.ns_per_msg, na(row.requester.instructions_per_msg).c_str(),
      na(row.responder.instructions_per_msg).c_str(), na(row.requester.cycles_per_msg).c_str(),
      na(row.responder.cycles_per_msg).c_str());
  out << line;
  if (row.requester.callgrind_ir_per_msg)
    out << "    callgrind Ir/msg: requester " << na(row.requester.callgrind_ir_per_msg)
        << ", responder " << na(row.responder.callgrind_ir_per_msg) << "\n";
  if (const auto& prof = row.responder_profile) {
    std::snprintf(line, sizeof line,
                  "    responder Ir: transport %.0f%%, libc %.0f%%, rest of fabflow %.0f%%, other "
                  "%.0f%%; the most:",
                  prof->transport * 100, prof->libc * 100, prof->fabflow * 100, prof->other * 100);
    out << line;
    for (std::size_t i = 0; i < std::min<std::size_t>(3, prof->top.size()); ++i) {
      std::snprintf(line, sizeof line, "%s %s (%s) %.0f%%", i ? "," : "",
                    prof->top[i].name.substr(0, 48).c_str(), prof->top[i].object.c_str(),
                    prof->top[i].share * 100);
      out << line;
    }
    out << "\n";
  }
  if (row.raw_measured) {
    std::snprintf(line, sizeof line,
                  "    raw 64 B write ping-pong round trip p50 %.2f us (rr/raw %.2f, the median of "
                  "%u interleaved rounds)\n",
                  row.raw_write_rtt.p50 / 1e3, row.vs_raw_write, row.rounds);
    out << line;
  }
  out.flush();
}

void print_rr_json(std::ostream& out, const RrResult& r, const RrRow& row) {
  const auto& e = r.env;
  const auto& p = r.params;
  nlohmann::json j = report::base_row(e, "rr");
  j["pattern"] = std::string(rr::to_string(row.pattern));
  j["model"] = std::string(rr::to_string(row.model));
  j["topology"] = std::string(rr::to_string(p.topology));
  j["requesters"] = p.requesters;
  j["responders"] = p.responders;
  j["threads"] = p.threads;
  j["depth"] = p.depth;
  j["mailbox"] = std::string(rr::to_string(p.mailbox));
  j["empty_mailboxes_pct"] = p.empty_mailboxes_pct;
  j["empty_mailboxes"] = row.empty_mailboxes;
  j["idle_requesters_pct"] = p.idle_requesters_pct;
  j["idle_wait_ns"] = p.idle_wait_ns;
  j["idle_turns"] = row.idle_turns;
  j["requester_threads_per_responder"] =
      static_cast<double>(p.requesters) * p.threads / std::max(p.responders, 1);
  j["request_bytes"] = p.request_bytes;
  j["response_bytes"] = row.response_bytes;
  if (report::print_if_unsupported(out, j, row.unsupported)) return;
  j["receive_queue"] = row.receive_queue;
  j["signal_every"] = p.signal_every;
  j["requests"] = row.requests;
  j["warmup"] = p.warmup;
  j["seconds"] = row.seconds;
  j["requests_per_s"] = row.requests_per_s;
  j["MBps"] = row.mbps;
  j["latency_ns"] = report::latency_json(row.latency);
  const auto share = [](std::uint64_t part, std::uint64_t whole) {
    return whole ? nlohmann::json(static_cast<double>(part) / static_cast<double>(whole))
                 : nlohmann::json(nullptr);
  };
  j["responder_scans"] = row.responder_scans;
  j["empty_scan_share"] = share(row.empty_scans, row.responder_scans);
  j["empty_mailbox_share"] =
      share(row.mailboxes_read - row.mailboxes_with_request, row.mailboxes_read);
  j["cpu"] = {{"requester", cpu_json(row.requester)}, {"responder", cpu_json(row.responder)}};
  j["responder_profile"] = nullptr;
  if (const auto& prof = row.responder_profile) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& f : prof->top)
      top.push_back({{"function", f.name}, {"object", f.object}, {"share", f.share}});
    j["responder_profile"] = {{"total_ir", prof->total_ir},
                              {"share",
                               {{"transport", prof->transport},
                                {"libc", prof->libc},
                                {"transport_and_libc", prof->transport + prof->libc},
                                {"fabflow", prof->fabflow},
                                {"other", prof->other}}},
                              {"top", std::move(top)}};
  }
  j["raw_write_rtt_ns"] =
      row.raw_measured ? report::latency_json(row.raw_write_rtt) : nlohmann::json(nullptr);
  if (p.reference) {
    j["reference_rounds"] = row.rounds;
    j["p50_vs_raw_write_p50"] =
        row.raw_measured ? nlohmann::json(row.vs_raw_write) : nlohmann::json(nullptr);
    j["round_p50_vs_raw_write_p50"] = row.round_ratios;
  }
  j["verified"] = p.verify;
  report::print_json_line(out, j);
}

}  // namespace fabflow
