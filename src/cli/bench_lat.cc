// `fabflow bench lat`: its flags and the launches (one per provider, then the socket baselines);
// the engine and its output are in src/bench/lat.cc and lat_report.cc
// (include/fabflow/bench/lat.h), the packet loss installed in the ranks' namespaces in
// src/tools/loss.cc.
#include <fabflow/bench/lat.h>
#include <fabflow/bootstrap.h>
#include <fabflow/launcher.h>
#include <fabflow/transport.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <utility>

#include "bench/report.h"
#include "cli/bench_shell.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "tools/loss.h"

namespace fabflow::cli {
namespace {

struct LatFlags : CommonFlags {
  std::string modes = "send,writedata,write,write-like";
  unsigned reap_every = 64;  // write-like: receives posted at once, completions reaped per batch
  std::string inject_modes = "off,on";
  std::string sockets = "udp,tcp";
  std::string socket_waits = "block,spin";
  std::string recv_posts = "one";  // send mode: how receives are re-posted
  unsigned recv_batch = 16;        // receives per list, messages per multi-receive buffer
  double rate = 0;                 // > 0: open-loop send rows at this rate beside the closed loop
  std::uint64_t iterations = 10000;
  std::uint64_t warmup = 1000;
  std::string loss;               // --loss: "1%", "0.5" (percent)
  unsigned rto_min_ms = 0;        // --rto-min: TCP's minimum RTO on the ranks' routes (0: default)
  std::string samples;            // --samples FILE: every sample of every row
  bool launched_sockets = false;  // internal: this launch runs the socket baselines
};

// "--loss 1%" or "--loss 1": a packet drop probability in [0, 1].
double parse_loss(const std::string& text) {
  if (text.empty()) return 0;
  std::string number = text.back() == '%' ? text.substr(0, text.size() - 1) : text;
  std::size_t used = 0;
  double percent = -1;
  try {
    percent = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (number.empty() || used != number.size() || !(percent >= 0 && percent <= 100))
    throw UsageError("bad --loss '" + text + "' (a percentage in 0..100, e.g. 1%)");
  return percent / 100;
}

// The engine's parameters as checked from the flags, the providers to run (none: the socket
// baselines only) and the packet loss to install.
struct LatValidated : Checked<LatParams> {
  double loss = 0;  // packet drop probability (--loss), 0..1
};

LatValidated validate(const LatFlags& f) {
  LatValidated v;
  LatParams& p = v.params;
  p.sizes = parse_sizes(f.sizes.empty() ? "8:8K" : f.sizes);
  p.modes = parse_choice_list<LatMode>(f.modes);
  p.recv_posts = parse_choice_list<RecvPost>(f.recv_posts);
  const bool send = std::find(p.modes.begin(), p.modes.end(), LatMode::send) != p.modes.end();
  if (!send && (f.rate > 0 || p.recv_posts != std::vector<RecvPost>{RecvPost::one}))
    throw UsageError("--recv-post and --rate apply to the send mode: add -m send");
  for (Switch s : parse_choice_list<Switch>(f.inject_modes))
    p.inject_modes.push_back(s == Switch::on);
  if (f.sockets != "none") p.sockets = parse_choice_list<SocketProto>(f.sockets);
  p.waits = parse_choice_list<SocketWait>(f.socket_waits);
  p.recv_batch = f.recv_batch;
  p.rate = f.rate;
  p.reap_every = f.reap_every;
  p.iterations = f.iterations;
  p.warmup = f.warmup;
  p.keep_samples = !f.samples.empty();
  p.target.endpoint = parse_name<EndpointType>(f.endpoint).value();  // checked by the parser
  p.target.timeout_ms = f.timeout_ms;
  for (SocketProto proto : p.sockets)
    validate_socket_params(lat_socket_params(p, proto, SocketWait::spin));
  v.loss = parse_loss(f.loss);
  if (f.rto_min_ms > 0 && !f.netns)
    throw UsageError(
        "--rto-min needs --netns: it is set on the routes of each rank's own network namespace, "
        "never on this host's");
  if (v.loss > 0 && !f.netns)
    throw UsageError(
        "--loss needs --netns: the packets are dropped inside each rank's own "
        "network namespace, never on this host's interfaces");
  const std::string& providers = f.launched_provider.empty() ? f.providers : f.launched_provider;
  if (providers != "none") v.providers = split(providers, ',');
  if (v.providers.empty() && p.sockets.empty())
    throw UsageError(
        "nothing to run: no provider (-p none) and no socket baseline (--sockets none)");
  return v;
}

// Under loss a run can take minutes (every lost packet holds a round trip for a retransmission
// timer), and the table comes at its end: before it, a line saying so; then, on rank 0, a line
// per row as it is measured (also whenever stderr is a terminal).
double round_trip_hit(double loss) { return 1 - (1 - loss) * (1 - loss); }

void say_what_runs(const LatFlags& f, const LatValidated& v) {
  if (v.loss <= 0) return;
  std::cerr << "fabflow: lat: under " << report::fmt("%.3g", v.loss * 100) << "% loss about "
            << report::fmt("%.2g", round_trip_hit(v.loss) * 100)
            << "% of round trips wait for a retransmission (TCP: 10-200 ms or more; UDP: the ping "
               "counts as lost after 200 ms), so each run of "
            << f.iterations
            << " round trips can take minutes (-I 1000 for a quicker look); a line follows "
               "for each row as it is measured, the table at the end\n"
            << std::flush;
}

void say_row(const LatRow& r) {
  std::cerr << "fabflow: lat: measured " << r.path << " " << r.provider << " " << r.mode
            << (r.recv_post.empty() ? "" : " recv " + r.recv_post) << (r.inlined ? " inline" : "")
            << " " << report::size_text(r.size) << ": p50 "
            << report::fmt("%.2f", r.latency.p50 / 1e3) << " us, p99 "
            << report::fmt("%.2f", r.latency.p99 / 1e3) << " us"
            << (r.lost ? ", lost " + std::to_string(r.lost) : "") << "\n"
            << std::flush;
}

int run_lat_rank(const LatFlags& f, const LatValidated& v) {
  LatParams given = v.params;
  if (v.loss > 0 || ::isatty(STDERR_FILENO)) given.on_row = say_row;
  return run_family_rank(f, given, [&](Rank& rank, const LatParams& params) {
    const std::string loss_method = v.loss > 0 ? tools::install_loss(v.loss) : "";
    if (f.rto_min_ms > 0) tools::install_rto_min(f.rto_min_ms);
    rank.boot.barrier();  // both drop points are in place before anything is measured
    LatResult r =
        f.launched_sockets ? run_lat_sockets(params, rank.boot) : run_lat_fabric(params, rank.boot);
    if (rank.boot.rank() != 0) return;
    RunEnvironment& env = r.env;
    const std::vector<LatRow>& rows = r.rows;
    const std::string& more = r.more_hint;
    finish_environment(env);
    if (!f.samples.empty()) append_lat_samples(f.samples, rows);
    for (const auto& n : r.notes) std::cerr << "fabflow: note: " << n << "\n";
    if (f.json) {
      print_lat_json(std::cout, env, rows, v.loss, loss_method, more, f.rto_min_ms);
      report::warn_stderr(env);
      return;
    }
    std::vector<std::string> config = {
        "iterations " + std::to_string(f.iterations) + "  warm-up " + std::to_string(f.warmup),
        "latency: one-way (half of each round trip, one clock reading per round trip)"};
    if (f.rate > 0)
      config.push_back("open loop (loop column): pings sent at " + lat_rate_text(f.rate) +
                       "/s on schedule; each sample is half the time from the ping's scheduled "
                       "send to its reply (no coordinated omission)");
    const std::vector<RecvPost>& posts = params.recv_posts;
    if (std::find(posts.begin(), posts.end(), RecvPost::one) == posts.end() || posts.size() > 1)
      config.push_back("receives (recv column): one = one fi_recv per message; list = " +
                       std::to_string(f.recv_batch) +
                       " per batch, FI_MORE on all but the last (FI_MORE " +
                       (more.empty() ? std::string("n/a") : more) + "); multi = FI_MULTI_RECV " +
                       "buffers of " + std::to_string(f.recv_batch) + " messages, two posted");
    if (v.loss > 0) {
      // A ping-pong round trip is two packets; one lost stalls it until a retransmission.
      const double hit = round_trip_hit(v.loss);
      config.push_back("loss: " + loss_method);
      config.push_back("  a round trip loses one of its two packets with probability " +
                       report::fmt("%.2f", hit * 100) +
                       "%: TCP then waits for its retransmission timer (the tail loss probe, "
                       "about max(2 srtt, 10 ms), or the RTO, at least 200 ms), UDP counts the "
                       "ping lost after 200 ms; so p99 and above move once that exceeds 1%");
    }
    if (f.rto_min_ms > 0)
      config.push_back("TCP rto_min " + std::to_string(f.rto_min_ms) +
                       " ms on the routes of each rank's namespace (the kernel's default: 200)");
    if (f.launched_sockets)
      config.push_back("kernel sockets on " + rank.boot.local_address() + ", path MTU " +
                       (rows.empty() ? std::string("n/a") : std::to_string(rows.front().mtu)));
    report::print_header(std::cout, env, "lat", config);
    print_lat_table(std::cout, rows);
    std::cout.flush();
  });
}

}  // namespace

Runner add_bench_lat(CLI::App* app, const Invocation& self) {
  auto f = add_bench_flags<LatFlags>(
      *app, "message size(s): 64 | 64,4K | 8:8K (powers of two); default 8:8K",
      "progress thread: auto (where a passive peer needs one), on, off");
  add_choice<LatMode>(*app, "-m,--mode", f->modes, "fabric transfer mode(s)", /*list=*/true);
  add_choice<Switch>(*app, "--inject", f->inject_modes,
                     "inject (inline) off, on, or both: off,on (on: sizes up to the inject size)",
                     /*list=*/true);
  add_choice<SocketProto>(*app, "--sockets", f->sockets, "socket baselines in the same run",
                          /*list=*/true, {"none"});
  add_choice<SocketWait>(*app, "--socket-wait", f->socket_waits,
                         "how the socket baselines wait: in the kernel, or spinning",
                         /*list=*/true);
  add_number<std::uint64_t>(*app, "-I,--iterations", f->iterations, 1, kMaxCount,
                            "measured round trips per row");
  add_number<unsigned>(*app, "--reap-every", f->reap_every, 1, 256,
                       "write-like mode: receives posted at once, and completions reaped once "
                       "per that many messages");
  add_choice<RecvPost>(*app, "--recv-post", f->recv_posts,
                       "send mode: receives re-posted one per call, as a list (FI_MORE), or in "
                       "multi-receive buffers (FI_MULTI_RECV), or several: one,list,multi",
                       /*list=*/true);
  add_number<unsigned>(*app, "--recv-batch", f->recv_batch, 1, 64,
                       "receives per list, messages per multi-receive buffer");
  add_real(*app, "--rate", f->rate, 0, 1e9,
           "send mode: also run an open loop at this many pings per second (latency from the "
           "scheduled send time); 0: closed loop only");
  add_number<std::uint64_t>(*app, "-w,--warmup", f->warmup, 0, kMaxCount,
                            "warm-up round trips, not measured");
  app->add_option("--samples", f->samples,
                  "write every sample (ns, one per line, a '#' line before each row's) to FILE");
  app->add_option("--loss", f->loss,
                  "with --netns: drop this share of packets in each rank's namespace (1%; "
                  "netem, else iptables)");
  add_number<unsigned>(*app, "--rto-min", f->rto_min_ms, 1, 60000,
                       "with --netns: TCP's minimum retransmission timeout in ms on each rank's "
                       "routes (ip route ... rto_min; the kernel's default is 200)");
  app->add_flag("--launched-sockets", f->launched_sockets)->group("");

  return [f, self]() -> int {
    LatValidated v = validate(*f);
    if (started_by_launcher()) return run_lat_rank(*f, v);
    if (!f->samples.empty()) {
      std::ofstream create(f->samples, std::ios::trunc);
      if (!create) throw UsageError("--samples: cannot write " + f->samples);
    }
    if (v.loss > 0 && !tools::loss_tool_installed())
      throw UsageError(
          "--loss: neither tc (netem) nor iptables is installed (apt install "
          "iptables)");
    // A transport that needs both ranks in one network namespace (local:
    // docs/local-transport.md) is reported as not run under --netns, and the other rows still are.
    std::vector<std::string> providers;
    for (const auto& p : v.providers) {
      if (!f->netns || !probe_transport(provider_options(p, v.params.target.endpoint, {}))
                            .one_network_namespace) {
        providers.push_back(p);
        continue;
      }
      const std::string why = "the " + p + " transport needs both ranks in one network namespace";
      if (f->json)
        std::cout << nlohmann::json{{"bench", "lat"},
                                    {"type", "latency"},
                                    {"path", "fabric"},
                                    {"provider", p},
                                    {"unsupported", why}}
                         .dump()
                  << "\n";
      std::cerr << "fabflow: note: " << p << " not run with --netns: " << why << "\n";
    }
    say_what_runs(*f, v);
    int status = 0;
    if (!providers.empty())
      status = launch_each_provider(self, *f, providers, v.params.target.endpoint);
    if (status == 0 && !v.params.sockets.empty()) {
      std::string why;
      if (f->netns && !netns_available(&why)) throw UsageError("--netns: " + why);
      if (!providers.empty() && !f->json) std::cout << "\n" << std::flush;
      status = launch_local(
          self_launch(self, *f, {"--launched-provider", "none", "--launched-sockets"}));
    }
    return status;
  };
}

}  // namespace fabflow::cli
