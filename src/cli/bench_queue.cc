// `fabflow bench queue`: validates designs, sizes and counts in the launching process (one
// clear line per mistake), then starts two ranks per provider; rank 0 reports.
#include <fabflow/bench/queue.h>
#include <fabflow/bootstrap.h>
#include <fabflow/flow.h>
#include <fabflow/launcher.h>
#include <fabflow/progress.h>
#include <fabflow/transport.h>

#include <unistd.h>

#include <charconv>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "bench/report.h"
#include "cli/flags.h"

namespace fabflow::cli {
namespace {

// The raw bench's uniform flags where they apply, plus the queue's own.
struct QueueFlags : CommonFlags {
  std::string designs = "socket";
  std::string preset = "basic";
  std::uint64_t items = std::uint64_t{1} << 20;
  std::string capacity = "auto";
  bool pingpong = false;
  std::uint64_t round_trips = std::uint64_t{1} << 17;
  std::uint64_t warmup = 1000;
  bool latency = false;
  bool reference = false;
  unsigned reference_rounds = 5;
  std::string api = "zero-copy";
  std::uint64_t burst = 1;
  bool active_consumer = false;
  std::string notify_endpoint = "shared";
  std::string slot_format = "auto";
  double lazy_refresh = flow::QueueOptions{}.lazy_refresh;
  std::uint64_t recv_pool = 0;
  bool one_notification_in_flight = false;
};

bool is_preset(const std::string& s) { return parse_name<QueuePreset>(s).has_value(); }

// "all": the 33 design points with --preset, then the socket baseline. A preset name alone
// means the thesis' Design #1 (push1-watermark-pull) with that preset.
std::vector<QueueDesign> parse_designs(const std::string& text, const std::string& preset) {
  std::vector<QueueDesign> out;
  for (const auto& name : split(text, ',')) {
    if (name == "all") {
      for (const auto& d : flow::Design::all()) out.push_back({d.name(), preset});
      out.push_back({"socket", ""});
    } else if (name == "socket") {
      out.push_back({"socket", ""});
    } else if (is_preset(name)) {
      out.push_back({"push1-watermark-pull", name});
    } else if (flow::Design::parse(name)) {
      out.push_back({name, preset});
    } else {
      throw UsageError("unknown design '" + name +
                       "' (use <data>-<transfer>-<space> such as push1-watermark-pull, socket, "
                       "all, or a preset: basic, batching, datamover)");
    }
  }
  if (out.empty()) throw UsageError("no design given");
  for (std::size_t i = 0; i < out.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (out[i].design == out[j].design && out[i].preset == out[j].preset)
        throw UsageError(
            "--design names " + out[i].design +
            (out[i].preset.empty() || out[i].preset == "basic" ? "" : " (" + out[i].preset + ")") +
            " twice");
  return out;
}

// --design auto: the advise profile's best design for this provider and size (or the default
// rule), named in place of "auto" (replace_auto).
std::string resolve_auto(const QueueFlags& f) {
  return replace_auto(f, {"--design", "item", "queue", f.designs, f.sizes.empty() ? "64" : f.sizes,
                          f.pingpong ? "p50,p99" : "throughput", "push1-watermark-pull",
                          "push1-watermark-pull, the thesis' Design #1 (docs/advise.md)"});
}

struct QueueValidated {
  QueueParams params;
  std::vector<std::string> providers;
};

QueueValidated validate(const QueueFlags& f) {
  QueueValidated v;
  QueueParams& p = v.params;
  if (!is_preset(f.preset))
    throw UsageError("unknown preset '" + f.preset + "' (use " + name_list<QueuePreset>() + ")");
  p.designs = parse_designs(resolve_auto(f), f.preset);
  p.target.endpoint = parse_name<EndpointType>(f.endpoint).value();  // checked by the parser
  p.progress = parse_name<ProgressMode>(f.progress).value();
  p.sizes = f.sizes.empty() ? std::vector<std::size_t>{64} : parse_sizes(f.sizes);
  for (std::size_t s : p.sizes)
    if (s == 0 || s > (std::size_t{1} << 24))
      throw UsageError("item size " + std::to_string(s) + " is outside 1..16M");
  p.capacity = 0;
  if (f.capacity != "auto") {
    std::uint64_t n = 0;
    const char* end = f.capacity.data() + f.capacity.size();
    auto [ptr, ec] = std::from_chars(f.capacity.data(), end, n);
    if (ec != std::errc{} || ptr != end || n == 0 || n > (std::uint64_t{1} << 24))
      throw UsageError("--capacity must be auto or in 1..16777216, got '" + f.capacity + "'");
    p.capacity = static_cast<std::size_t>(n);
  }
  for (std::size_t s : p.sizes)
    if (queue_capacity(p, s) * s > (std::size_t{1} << 32))
      throw UsageError("--capacity x item size above 4 GiB");
  if (f.latency && f.pingpong) throw UsageError("--latency and --pingpong are separate modes");
  p.items = f.items;
  p.pingpong = f.pingpong;
  p.round_trips = f.round_trips;
  p.warmup = f.warmup;
  p.latency = f.latency;
  p.api = *parse_name<QueueApi>(f.api);
  p.burst = static_cast<std::size_t>(f.burst);
  if (p.burst > 1) {
    if (p.api == QueueApi::copy)
      throw UsageError(
          "--burst needs --api zero-copy or seq-only (the batched calls are zero-copy)");
    if (p.pingpong)
      throw UsageError("--burst is for throughput: a ping-pong moves one item per trip");
    if (p.latency) throw UsageError("--latency times single calls: not with --burst");
  }
  p.active_consumer = f.active_consumer;
  p.separate_notify = parse_name<NotifyEndpoint>(f.notify_endpoint) == NotifyEndpoint::separate;
  p.slot_format = *parse_name<flow::SlotFormat>(f.slot_format);
  p.lazy_refresh = f.lazy_refresh;
  p.recv_pool = static_cast<std::size_t>(f.recv_pool);
  p.one_notification_in_flight = f.one_notification_in_flight;
  p.reference = f.reference;
  p.reference_rounds = f.reference_rounds;
  v.providers = split(f.launched_provider.empty() ? f.providers : f.launched_provider, ',');
  if (v.providers.empty()) throw UsageError("no provider given");
  return v;
}

int run_queue_rank(const QueueFlags& flags, const QueueValidated& v) {
  return run_rank(flags, [&](Rank& rank) {
    QueueParams params = v.params;
    params.target = rank.target;
    QueueResult last =
        run_queue(params, rank.boot,
                  RowPrinter<QueueResult, QueueRow>(flags.json, print_queue_header,
                                                    print_queue_json, print_queue_row));
    if (rank.boot.rank() != 0) return;
    finish_environment(last.env);
    if (flags.json) report::warn_stderr(last.env);
  });
}

}  // namespace

Runner add_bench_queue(CLI::App* app, const Invocation& self) {
  auto f = std::make_shared<QueueFlags>();
  add_common_flags(*app, *f, "item size(s): 64 | 64,4K | 4:64K; default 64",
                   "progress thread of the raw write reference: auto, on, off");
  app->add_option(
      "--design", f->designs,
      "design point(s), comma-separated: push1-watermark-pull, ..., socket, all, auto (the "
      "advise profile's best here, docs/advise.md), "
      "or basic|batching|datamover (push1-watermark-pull with that preset)");
  add_choice<QueuePreset>(*app, "--preset", f->preset, "preset for named design points");
  add_number<std::uint64_t>(*app, "--items", f->items, 2, kMaxCount,
                            "items per design and size (throughput)");
  app->add_option("--capacity", f->capacity,
                  "queue capacity S in items, or auto (default): 1024 items, at most a 4 MiB ring");
  app->add_flag("--pingpong", f->pingpong, "transfer time: half the round trip over two queues");
  add_number<std::uint64_t>(*app, "--round-trips", f->round_trips, 1, kMaxCount,
                            "measured round trips in --pingpong");
  add_number<std::uint64_t>(*app, "-w,--warmup", f->warmup, 0, kMaxCount,
                            "ping-pong round trips not measured");
  app->add_flag("--latency", f->latency, "percentiles of enqueue and dequeue calls");
  app->add_flag("--active-consumer", f->active_consumer,
                "a helper thread on the consumer side validates (pull designs: reads) items ahead "
                "of the dequeuing thread (not for socket)");
  add_choice<QueueApi>(
      *app, "--api", f->api,
      "copy: try_enqueue / try_dequeue copy every item; zero-copy (default): reserve / commit "
      "and peek / release, the producer writing each item whole into its slot and the consumer "
      "reading all of it in place (a checksum); seq-only: the same calls writing and reading "
      "only the 8-byte sequence number (the queue's own cost per item; no MB/s reported)");
  add_number<std::uint64_t>(
      *app, "--burst", f->burst, 1, 4096,
      "throughput, zero-copy APIs: items per call, 1 (default: reserve / commit, peek / release) "
      "or up to N (reserve_many / commit_many, peek_many / release_many)");
  add_choice<NotifyEndpoint>(
      *app, "--notify-endpoint", f->notify_endpoint,
      "shared (default): notifications share the data endpoint; separate: each queue "
      "opens a second endpoint for its counter writes, reads and sends");
  add_choice<flow::SlotFormat>(
      *app, "--slot-format", f->slot_format,
      "auto (default): compact slots where the transport places writes in order and the "
      "producer writes the data (push1), else framed; framed: header and trailer; compact: "
      "one word after the payload (refused where not allowed)");
  add_real(*app, "--lazy-refresh", f->lazy_refresh, 0, 1,
           "QueueOptions::lazy_refresh: the consumer pushes its head (space push, push2) every "
           "max(1, F x capacity) items, a space-pull producer reads it when its free space falls "
           "below F x capacity (default 0.5; 0: after every item)");
  add_number<std::uint64_t>(*app, "--recv-pool", f->recv_pool, 0, std::uint64_t{1} << 24,
                            "QueueOptions::recv_pool: push2 data, receives the consumer keeps "
                            "posted, which bounds its ring (0, the default: capacity)");
  app->add_flag("--one-notification-in-flight", f->one_notification_in_flight,
                "at most one notification push in flight per end (the thesis' cadence): tail "
                "writes (transfer push) and head writes or sends (space push, push2) are tracked "
                "to their completion, and the latest counter goes out when the previous one "
                "completed");
  app->add_flag("--reference", f->reference,
                "also measure, on the same CPUs: throughput (once per size): the provider's raw "
                "streaming write bandwidth and a minimal SPSC shared-memory ring; ping-pong "
                "(beside each row, --reference-rounds): the raw write and a bare cache-line "
                "ping-pong between the two cores; ratios printed");
  add_number<unsigned>(*app, "--reference-rounds", f->reference_rounds, 1, 1000,
                       "ping-pong with --reference: rounds of [design, raw write, cache line] "
                       "sharing the round trips; ratios are the median of the rounds' (default 5)");

  return [f, self]() -> int {
    QueueValidated v = validate(*f);
    if (started_by_launcher()) return run_queue_rank(*f, v);
    return launch_each_provider(self, *f, v.providers, v.params.target.endpoint);
  };
}

}  // namespace fabflow::cli
