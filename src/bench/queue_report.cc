// Reporters of bench queue: the header, one fixed-column line per row, and JSON lines
// (fields: docs/bench-output.md).
#include <fabflow/bench/queue.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <ostream>
#include <string>

#include "bench/report.h"

namespace fabflow {
namespace {

std::string label(const QueueDesign& d) {
  return d.preset.empty() || d.preset == "basic" ? d.design : d.design + "/" + d.preset;
}

std::string api_text(const QueueParams& p) {
  const std::string touched = p.api == QueueApi::seq_only
                                  ? ", only the 8-byte sequence number written and read: no MB/s"
                                  : ", every item written whole and read whole (checksum)";
  if (p.burst > 1)
    return std::string(name_of(p.api)) + ", bursts of up to " + std::to_string(p.burst) +
           " (reserve_many/commit_many, peek_many/release_many)" + touched;
  if (p.api == QueueApi::copy) return "copy (try_enqueue/try_dequeue)" + touched;
  return std::string(name_of(p.api)) + " (reserve/commit, peek/release)" + touched;
}

}  // namespace

void print_queue_header(std::ostream& out, const QueueResult& r) {
  const auto& p = r.params;
  report::print_header(
      out, r.env, "queue",
      {"capacity " +
           (p.capacity ? std::to_string(p.capacity) + " items"
                       : std::string("auto (1024 items, ring <= 4 MiB)")) +
           (p.active_consumer ? "  active consumer" : "") + "  api " + api_text(p),
       "slots " + std::string(name_of(p.slot_format)) +
           (p.slot_format == flow::SlotFormat::automatic
                ? " (compact where the transport places writes in order and the producer writes "
                  "the data, else framed)"
                : ""),
       std::string("notifications ") +
           (p.separate_notify ? "separate (a second endpoint per queue)"
                              : "shared (the data endpoint)") +
           report::fmt("; lazy refresh %g, ", p.lazy_refresh) +
           (p.recv_pool ? "push2 receive pool " + std::to_string(p.recv_pool)
                        : std::string("push2 receive pool = capacity")) +
           (p.one_notification_in_flight ? "; at most one notification push in flight per end"
                                         : "; notification pushes untracked (injected when due)"),
       p.pingpong ? "ping-pong " + std::to_string(p.round_trips) + " round trips, warm-up " +
                        std::to_string(p.warmup) +
                        (p.reference ? " per round; " + std::to_string(p.reference_rounds) +
                                           " rounds, each followed by the raw write, a "
                                           "cache-line block after every 2048 round trips"
                                     : std::string())
                  : "throughput " + std::to_string(p.items) + " items",
       p.pingpong ? "transfer time: half the round trip through two queues; raw: one-way raw "
                    "write ping-pong, same provider and size"
                  : "items/s and MB/s on the consumer, first to last item; ops per item: both "
                    "ends summed; hw counters n/a"});
  if (p.pingpong)
    out << "\n  design                            bytes    trips  mean(us)   p50(us)   p99(us)"
           " p99.9(us)   max(us)  raw p50(us)  data/it  xfer/it space/it\n";
  else
    out << "\n  design                            bytes    items    Mitem/s       MB/s  data/it"
           "  xfer/it space/it      full     empty\n";
  out.flush();
}

void print_queue_row(std::ostream& out, const QueueResult& r, const QueueRow& row) {
  char line[512];
  if (!row.unsupported.empty()) {
    std::snprintf(line, sizeof line, "  %-32s %6zu  unsupported: %s\n", label(row.design).c_str(),
                  row.item_bytes, row.unsupported.c_str());
  } else if (r.params.pingpong) {
    const auto& l = row.transfer;
    char raw[32] = "n/a";
    if (row.raw_write_measured) std::snprintf(raw, sizeof raw, "%.3f", row.raw_write.p50 / 1e3);
    std::snprintf(line, sizeof line,
                  "  %-32s %6zu %8llu %9.3f %9.3f %9.3f %9.3f %9.3f %12s %8.3f %8.3f %8.3f\n",
                  label(row.design).c_str(), row.item_bytes,
                  static_cast<unsigned long long>(row.items), l.mean / 1e3, l.p50 / 1e3,
                  l.p99 / 1e3, l.p999 / 1e3, l.max / 1e3, raw, row.data_per_item,
                  row.transfer_per_item, row.space_per_item);
  } else {
    char mbps[32] = "n/a";  // seq-only: no payload moved
    if (r.params.api != QueueApi::seq_only) std::snprintf(mbps, sizeof mbps, "%.2f", row.mbps);
    std::snprintf(
        line, sizeof line, "  %-32s %6zu %8llu %10.4f %10s %8.3f %8.3f %8.3f %9llu %9llu\n",
        label(row.design).c_str(), row.item_bytes, static_cast<unsigned long long>(row.items),
        row.items_per_s / 1e6, mbps, row.data_per_item, row.transfer_per_item, row.space_per_item,
        static_cast<unsigned long long>(row.full), static_cast<unsigned long long>(row.empty));
  }
  out << line;
  if (row.unsupported.empty() && r.params.reference) {
    std::string refs;
    char part[160];
    if (r.params.pingpong) {
      // The ratios are the medians of the interleaved rounds' own ratios (row.rounds).
      if (row.cacheline_measured) {
        std::snprintf(part, sizeof part,
                      "cache-line ping-pong p50 %.3f us, whole run %.3f us (transfer p50 %.2fx, "
                      "%.2fx)",
                      row.cacheline.p50 / 1e3, row.cacheline_whole_run_ns / 1e3, row.vs_cacheline,
                      row.vs_cacheline_whole_run);
        refs += part;
      }
      if (row.raw_write_measured) {
        std::snprintf(part, sizeof part, "%sraw write p50 %.3f us (transfer %.2fx)",
                      refs.empty() ? "" : "; ", row.raw_write.p50 / 1e3, row.vs_raw_write);
        refs += part;
      }
      if (!refs.empty()) {
        std::snprintf(part, sizeof part,
                      "; ratios: medians of %zu cache-line blocks and %u rounds (interleaved)",
                      row.block_vs_cacheline.size(), row.rounds);
        refs += part;
      }
    } else {
      if (row.raw_stream_mbps > 0) {
        if (r.params.api == QueueApi::seq_only)
          std::snprintf(part, sizeof part, "raw write stream %.2f MB/s", row.raw_stream_mbps);
        else
          std::snprintf(part, sizeof part, "raw write stream %.2f MB/s (queue %.2fx)",
                        row.raw_stream_mbps, row.mbps / row.raw_stream_mbps);
        refs += part;
      }
      if (row.memcpy_mbps > 0) {
        std::snprintf(part, sizeof part, "%smemcpy %.2f MB/s (queue %.3fx)",
                      refs.empty() ? "" : "; ", row.memcpy_mbps, row.mbps / row.memcpy_mbps);
        refs += part;
      }
      if (row.spsc_items_per_s > 0) {
        std::snprintf(part, sizeof part, "%sSPSC ring %.4f Mitem/s (queue %.3fx)",
                      refs.empty() ? "" : "; ", row.spsc_items_per_s / 1e6,
                      row.items_per_s / row.spsc_items_per_s);
        refs += part;
      }
    }
    if (!refs.empty()) out << "  " << std::string(32, ' ') << "   vs " << refs << "\n";
  }
  if (row.unsupported.empty() && r.params.latency && !r.params.pingpong) {
    std::snprintf(line, sizeof line,
                  "  %-32s   enqueue p50 %.0f p99 %.0f max %.0f ns, dequeue p50 %.0f p99 %.0f "
                  "max %.0f ns\n",
                  "", row.enqueue.p50, row.enqueue.p99, row.enqueue.max, row.dequeue.p50,
                  row.dequeue.p99, row.dequeue.max);
    out << line;
  }
  out.flush();
}

void print_queue_json(std::ostream& out, const QueueResult& r, const QueueRow& row) {
  const auto& e = r.env;
  nlohmann::json j = report::base_row(e, "queue");
  j.update({
      {"type", r.params.pingpong ? "pingpong" : "throughput"},
      {"design", row.design.design},
      {"preset",
       row.design.preset.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.design.preset)},
      {"provider", row.provider},
      {"item_bytes", row.item_bytes},
      {"capacity", row.capacity},
      {"api", name_of(r.params.api)},
      {"burst", r.params.burst},
      {"active_consumer", r.params.active_consumer && row.design.design != "socket"},
      {"notify_endpoint", r.params.separate_notify ? "separate" : "shared"},
      {"slot_format",
       row.slot_format.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.slot_format)},
  });
  // The notification cadence in force (the socket baseline has none).
  const bool socket = row.design.design == "socket";
  j["lazy_refresh"] = socket ? nlohmann::json(nullptr) : nlohmann::json(r.params.lazy_refresh);
  j["recv_pool"] = socket ? nlohmann::json(nullptr) : nlohmann::json(r.params.recv_pool);
  j["one_notification_in_flight"] = !socket && r.params.one_notification_in_flight;
  if (report::print_if_unsupported(out, j, row.unsupported)) return;
  j["items"] = row.items;
  j["items_per_s"] = r.params.pingpong ? nlohmann::json(nullptr) : nlohmann::json(row.items_per_s);
  j["MBps"] = r.params.pingpong || r.params.api == QueueApi::seq_only ? nlohmann::json(nullptr)
                                                                      : nlohmann::json(row.mbps);
  j["seconds"] = row.seconds;
  const bool producer_timed = !r.params.pingpong && row.producer_items_per_s > 0;
  j["producer_items_per_s"] =
      producer_timed ? nlohmann::json(row.producer_items_per_s) : nlohmann::json(nullptr);
  j["producer_MBps"] =
      producer_timed && r.params.api != QueueApi::seq_only
          ? nlohmann::json(row.producer_items_per_s * static_cast<double>(row.item_bytes) / 1e6)
          : nlohmann::json(nullptr);
  j["ops_per_item"] = {{"data", row.data_per_item},
                       {"transfer_notify", row.transfer_per_item},
                       {"space_notify", row.space_per_item}};
  j["full"] = row.full;
  j["empty"] = row.empty;
  if (r.params.pingpong) {
    j["round_trips"] = r.params.round_trips;
    j["warmup"] = r.params.warmup;
    j["transfer_ns"] = report::latency_json(row.transfer);
    j["raw_write_pingpong_ns"] =
        row.raw_write_measured ? report::latency_json(row.raw_write) : nlohmann::json(nullptr);
  }
  if (r.params.latency && !r.params.pingpong) {
    j["enqueue_ns"] = report::latency_json(row.enqueue);
    j["dequeue_ns"] = report::latency_json(row.dequeue);
  }
  if (r.params.reference) {
    auto num = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
    if (r.params.pingpong) {
      j["reference"] = {
          {"cacheline_pingpong_ns",
           row.cacheline_measured ? report::latency_json(row.cacheline) : nlohmann::json(nullptr)},
          {"cacheline_whole_run_ns",
           row.cacheline_measured ? num(row.cacheline_whole_run_ns) : nlohmann::json(nullptr)},
          {"rounds", row.rounds},
          {"transfer_p50_vs_cacheline_p50", num(row.vs_cacheline)},
          {"transfer_p50_vs_cacheline_whole_run", num(row.vs_cacheline_whole_run)},
          {"transfer_p50_vs_raw_write_p50", num(row.vs_raw_write)},
          {"block_transfer_p50_vs_cacheline_p50", row.block_vs_cacheline},
          {"round_transfer_p50_vs_raw_write_p50", row.round_vs_raw_write}};
    } else {
      j["reference"] = {{"raw_write_stream_MBps", num(row.raw_stream_mbps)},
                        {"raw_write_stream_msgs_per_s", num(row.raw_stream_msgs_per_s)},
                        {"spsc_ring_items_per_s", num(row.spsc_items_per_s)},
                        {"memcpy_MBps", num(row.memcpy_mbps)}};
    }
  }
  j["cpus"] = {{"producer", e.cpu_initiator}, {"consumer", e.cpu_target}};
  j["instructions_per_item"] = nullptr;
  j["cycles_per_item"] = nullptr;
  report::print_json_line(out, j);
}

}  // namespace fabflow
