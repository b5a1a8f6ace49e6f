// `fabflow bench lat`: one-way latency of every transfer mode, inline on and off, on each
// provider, and the kernel's UDP and TCP sockets (blocking and spinning) as rows of the same
// run, same sizes, same pinning, same statistics. The fabric rows are bench raw's ping-pong
// (run_raw, latency test); the socket rows run_socket_pingpong.
#include <fabflow/bench/raw.h>
#include <fabflow/bench/sockets.h>
#include <fabflow/bootstrap.h>
#include <fabflow/launcher.h>
#include <fabflow/transport.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>

#include "bench/report.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/subprocess.h"

namespace fabflow::cli {
namespace {

// The fabric transfer modes: send/recv, write with remote CQ data, write polled in memory
// (the target polls the sequence number in the payload's first and last 8 bytes; no
// completion at the target), and WRITE-like send/recv (receives posted in a batch, each
// message seen in its buffer's memory, completions reaped once per batch).
enum class LatMode : std::uint8_t { send, writedata, write, write_like };
inline constexpr NameTable<LatMode, 4> kLatModeNames{{{{"send", LatMode::send},
                                                       {"writedata", LatMode::writedata},
                                                       {"write", LatMode::write},
                                                       {"write-like", LatMode::write_like}}}};
constexpr const auto& name_table(LatMode) noexcept { return kLatModeNames; }

Op op_of(LatMode m) {
  switch (m) {
    case LatMode::send: return Op::send;
    case LatMode::writedata: return Op::writedata;
    case LatMode::write: return Op::write;
    case LatMode::write_like: return Op::send;
  }
  return Op::send;
}

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

struct LatValidated {
  std::vector<std::size_t> sizes;
  std::vector<LatMode> modes;
  std::vector<RecvPost> recv_posts;
  std::vector<bool> inject_modes;
  std::vector<SocketProto> sockets;
  std::vector<SocketWait> waits;
  std::vector<std::string> providers;
  EndpointType endpoint = EndpointType::automatic;
  double loss = 0;  // packet drop probability (--loss), 0..1
};

// The socket baseline's parameters for one protocol and wait.
SocketParams socket_params(const LatFlags& f, const std::vector<std::size_t>& sizes,
                           SocketProto proto, SocketWait wait) {
  SocketParams p;
  p.proto = proto;
  p.wait = wait;
  p.sizes = sizes;
  p.iterations = f.iterations;
  p.warmup = f.warmup;
  p.timeout_ms = f.timeout_ms;
  p.loss_timeout_ms = std::min<std::uint64_t>(200, f.timeout_ms);  // a UDP ping counted lost
  p.keep_samples = !f.samples.empty();
  return p;
}

LatValidated validate(const LatFlags& f) {
  LatValidated v;
  v.sizes = parse_sizes(f.sizes.empty() ? "8:8K" : f.sizes);
  v.modes = parse_choice_list<LatMode>(f.modes);
  v.recv_posts = parse_choice_list<RecvPost>(f.recv_posts);
  const bool send = std::find(v.modes.begin(), v.modes.end(), LatMode::send) != v.modes.end();
  if (!send && (f.rate > 0 || v.recv_posts != std::vector<RecvPost>{RecvPost::one}))
    throw UsageError("--recv-post and --rate apply to the send mode: add -m send");
  for (Switch s : parse_choice_list<Switch>(f.inject_modes))
    v.inject_modes.push_back(s == Switch::on);
  if (f.sockets != "none") v.sockets = parse_choice_list<SocketProto>(f.sockets);
  v.waits = parse_choice_list<SocketWait>(f.socket_waits);
  for (SocketProto proto : v.sockets)
    validate_socket_params(socket_params(f, v.sizes, proto, SocketWait::spin));
  v.loss = parse_loss(f.loss);
  if (v.loss > 0 && !f.netns)
    throw UsageError(
        "--loss needs --netns: the packets are dropped inside each rank's own "
        "network namespace, never on this host's interfaces");
  v.endpoint = parse_name<EndpointType>(f.endpoint).value();
  const std::string& providers = f.launched_provider.empty() ? f.providers : f.launched_provider;
  if (providers != "none") v.providers = split(providers, ',');
  if (v.providers.empty() && v.sockets.empty())
    throw UsageError(
        "nothing to run: no provider (-p none) and no socket baseline (--sockets none)");
  return v;
}

// Drops packets in this rank's own network namespace (both ranks do, so each packet meets one
// drop point): netem on eth0's egress where the kernel has it, else an iptables statistic rule
// on eth0's input. Returns what was installed; throws UsageError with the tool's refusal.
std::string install_loss(double p) {
  const std::string percent = report::fmt("%g", p * 100) + "%";
  auto run = [](std::vector<std::string> argv) {
    ChildOptions o;
    o.argv = std::move(argv);
    o.capture_stderr = true;
    o.timeout = std::chrono::seconds(10);
    ChildResult r = run_child(o, [](const std::string&) {});
    while (!r.err.empty() && r.err.back() == '\n') r.err.pop_back();
    return r;
  };
  if (const std::string tc = find_binary("tc", "/usr/sbin:/sbin"); !tc.empty()) {
    if (run({tc, "qdisc", "add", "dev", "eth0", "root", "netem", "loss", percent}).status == 0)
      return "netem loss " + percent + " on eth0's egress in each rank's namespace";
  }
  const std::string iptables = find_binary("iptables", "/usr/sbin:/sbin");
  if (iptables.empty())
    throw UsageError(
        "--loss: this kernel has no netem and iptables is not installed "
        "(apt install iptables)");
  const ChildResult r = run({iptables, "-A", "INPUT", "-i", "eth0", "-m", "statistic", "--mode",
                             "random", "--probability", report::fmt("%.6f", p), "-j", "DROP"});
  if (r.status != 0)
    throw UsageError("--loss: iptables refused the rule: " + r.err.substr(0, r.err.find('\n')));
  return "iptables statistic match dropping " + percent +
         " of the packets arriving on eth0 in each rank's namespace (no netem here)";
}

// "250k", "1.5M", "800": a rate for the table and the header.
std::string rate_text(double r) {
  if (r >= 1e6) return report::fmt("%gM", r / 1e6);
  if (r >= 1e3) return report::fmt("%gk", r / 1e3);
  return report::fmt("%g", r);
}

// One row of the run, fabric or socket.
struct LatRow {
  std::string path;       // "fabric" or "socket"
  std::string provider;   // the fabric provider, or "udp" / "tcp"
  std::string mode;       // send, writedata, write; block, spin
  std::string recv_post;  // fabric modes that post receives: one, list, multi; else empty
  double rate = 0;        // open loop: pings per second (0: closed loop)
  bool inlined = false;
  std::size_t size = 0;
  std::uint64_t iterations = 0;
  std::uint64_t lost = 0;
  std::size_t mtu = 0;
  LatencyStats latency;
  std::vector<double> samples;  // with --samples
};

// --samples FILE: for each row a line "# path provider mode inject=on|off size=N" and then
// every sample in ns, one per line, in measurement order. The launcher truncates the file;
// each launch's rank 0 appends its rows.
void append_samples(const std::string& path, const std::vector<LatRow>& rows) {
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

void print_table(std::ostream& out, const std::vector<LatRow>& rows) {
  out << "\n  path    provider  mode       recv  loop     inline  bytes    iters  mean(us)   "
         "p50(us)"
         "   p99(us) p99.9(us) p99.99(us)   max(us) stdev(us)\n";
  char line[320];
  for (const auto& r : rows) {
    const auto& l = r.latency;
    const std::string loop = r.rate > 0 ? rate_text(r.rate) + "/s" : "closed";
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

void print_json(std::ostream& out, const RunEnvironment& env, const std::vector<LatRow>& rows,
                double loss, const std::string& loss_method, const std::string& more) {
  for (const auto& r : rows) {
    nlohmann::json j = report::base_row(env, "lat");
    j["loss_percent"] = loss * 100;
    if (loss > 0) j["loss_method"] = loss_method;
    j["type"] = "latency";
    j["path"] = r.path;
    j["provider"] = r.provider;
    j["mode"] = r.mode;
    if (!r.recv_post.empty()) {
      j["recv_post"] = r.recv_post;
      if (r.recv_post == "list") j["recv_more_hint"] = more;
    }
    j["loop"] = r.rate > 0 ? "open" : "closed";
    if (r.rate > 0) j["rate_per_s"] = r.rate;
    j["inject"] = r.inlined;
    j["size_bytes"] = r.size;
    j["iterations"] = r.iterations;
    j["latency_kind"] = "one_way";
    j["latency_ns"] = report::latency_json(r.latency);
    if (r.path == "socket") {
      j["lost"] = r.lost;
      j["path_mtu"] = r.mtu;
    }
    out << j.dump() << "\n";
  }
  out.flush();
}

// Rank side, fabric: every mode, inline off and on (on only for sizes up to the provider's
// inject size), through run_raw's latency test.
std::vector<LatRow> run_fabric(const LatFlags& f, const LatValidated& v, Rank& rank,
                               RunEnvironment& env, std::vector<std::string>& notes,
                               std::string& more) {
  std::vector<LatRow> rows;
  const std::string provider = v.providers.front();
  for (LatMode mode : v.modes) {
    TransportOptions opts;
    opts.provider = provider;
    opts.endpoint = v.endpoint;
    opts.ops = {op_of(mode)};
    opts.node = rank.boot.local_address();
    opts.same_host = rank.target.same_host;
    Capabilities caps;
    try {
      caps = probe_transport(opts);
    } catch (const UsageError& e) {
      notes.push_back(std::string(name_of(mode)) + ": not run: " + e.what());
      continue;
    }
    if (mode == LatMode::write_like && caps.rx_lands_on_poll) {
      notes.push_back("write-like: not run on " + caps.provider +
                      ": it places a message in the posted buffer only when the receiver polls "
                      "its completions");
      continue;
    }
    // Send rows: each receive posting, closed loop and (with --rate) open loop.
    struct Variant {
      RecvPost post;
      double rate;
    };
    std::vector<Variant> variants;
    for (RecvPost post : mode == LatMode::send ? v.recv_posts : std::vector{RecvPost::one}) {
      variants.push_back({post, 0});
      if (mode == LatMode::send && f.rate > 0) variants.push_back({post, f.rate});
    }
    for (bool inlined : v.inject_modes)
      for (const Variant& variant : variants) {
        if (variant.post == RecvPost::multi) {
          TransportOptions multi = opts;
          multi.multi_recv = true;
          std::string why;
          try {
            if (!probe_transport(multi).multi_recv)
              why = caps.provider + " has no multi-receive buffers (FI_MULTI_RECV)";
          } catch (const UsageError& e) {
            why = e.what();
          }
          if (!why.empty()) {
            const std::string note = "send --recv-post multi: not run: " + why;
            if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
            continue;
          }
        }
        RawParams p;
        p.recv_post = variant.post;
        p.recv_batch = f.recv_batch;
        p.rate = variant.rate;
        p.op = op_of(mode);
        p.test = RawTest::latency;
        p.inject = inlined;
        p.iterations = f.iterations;
        p.warmup = f.warmup;
        p.cpu = rank.target.cpu;
        p.timeout_ms = f.timeout_ms;
        p.keep_samples = !f.samples.empty();
        p.reap_every = mode == LatMode::write_like ? f.reap_every : 0;
        p.sizes.clear();
        for (std::size_t s : v.sizes)
          if (s <= caps.max_msg_size && (!inlined || s <= caps.inject_size)) p.sizes.push_back(s);
        if (p.sizes.empty()) continue;
        opts.thread_safe = raw_progress_thread(p, caps, rank.boot.rank());
        opts.multi_recv = variant.post == RecvPost::multi;
        auto t = open_transport(opts);
        t->connect(rank.boot);
        RawResult r = run_raw(p, *t, rank.boot);
        if (env.clock.empty()) env = r.env;
        if (more.empty()) more = r.more_hint;
        const std::string post = mode == LatMode::send ? std::string(name_of(variant.post)) : "";
        for (auto& row : r.rows)
          rows.push_back({"fabric", caps.provider, std::string(name_of(mode)), post, variant.rate,
                          row.injected, row.size, row.iterations, 0, 0, row.latency,
                          std::move(row.samples)});
      }
  }
  return rows;
}

// Rank side, sockets: every protocol and wait.
std::vector<LatRow> run_sockets(const LatFlags& f, const LatValidated& v, Rank& rank,
                                RunEnvironment& env) {
  const Clock clock;
  env = machine_environment();
  env.clock = clock.name();
  gather_pinning(env, rank.boot, rank.target.cpu);
  std::vector<LatRow> rows;
  for (SocketProto proto : v.sockets)
    for (SocketWait wait : v.waits) {
      for (auto& r : run_socket_pingpong(socket_params(f, v.sizes, proto, wait), rank.boot, clock))
        rows.push_back({"socket", std::string(name_of(proto)), std::string(name_of(wait)), "", 0,
                        false, r.size, r.iterations, r.lost, r.mtu, r.latency,
                        std::move(r.samples)});
    }
  return rows;
}

int run_lat_rank(const LatFlags& f, const LatValidated& v) {
  return run_rank(f, [&](Rank& rank) {
    RunEnvironment env;
    std::vector<std::string> notes;
    std::string more;  // what the provider does with FI_MORE
    const std::string loss_method = v.loss > 0 ? install_loss(v.loss) : "";
    rank.boot.barrier();  // both drop points are in place before anything is measured
    const std::vector<LatRow> rows = f.launched_sockets ? run_sockets(f, v, rank, env)
                                                        : run_fabric(f, v, rank, env, notes, more);
    if (rank.boot.rank() != 0) return;
    finish_environment(env);
    if (!f.samples.empty()) append_samples(f.samples, rows);
    for (const auto& n : notes) std::cerr << "fabflow: note: " << n << "\n";
    if (f.json) {
      print_json(std::cout, env, rows, v.loss, loss_method, more);
      report::warn_stderr(env);
      return;
    }
    std::vector<std::string> config = {
        "iterations " + std::to_string(f.iterations) + "  warm-up " + std::to_string(f.warmup),
        "latency: one-way (half of each round trip, one clock reading per round trip)"};
    if (f.rate > 0)
      config.push_back("open loop (loop column): pings sent at " + rate_text(f.rate) +
                       "/s on schedule; each sample is half the time from the ping's scheduled "
                       "send to its reply (no coordinated omission)");
    if (std::find(v.recv_posts.begin(), v.recv_posts.end(), RecvPost::one) == v.recv_posts.end() ||
        v.recv_posts.size() > 1)
      config.push_back("receives (recv column): one = one fi_recv per message; list = " +
                       std::to_string(f.recv_batch) +
                       " per batch, FI_MORE on all but the last (FI_MORE " +
                       (more.empty() ? std::string("n/a") : more) + "); multi = FI_MULTI_RECV " +
                       "buffers of " + std::to_string(f.recv_batch) + " messages, two posted");
    if (v.loss > 0) {
      // A ping-pong round trip is two packets; one lost stalls it until a retransmission.
      const double hit = 1 - (1 - v.loss) * (1 - v.loss);
      config.push_back("loss: " + loss_method);
      config.push_back("  a round trip loses one of its two packets with probability " +
                       report::fmt("%.2f", hit * 100) +
                       "%: TCP then waits for its retransmission timer (the tail loss probe, "
                       "about max(2 srtt, 10 ms), or the RTO, at least 200 ms), UDP counts the "
                       "ping lost after 200 ms; so p99 and above move once that exceeds 1%");
    }
    if (f.launched_sockets)
      config.push_back("kernel sockets on " + rank.boot.local_address() + ", path MTU " +
                       (rows.empty() ? std::string("n/a") : std::to_string(rows.front().mtu)));
    report::print_header(std::cout, env, "lat", config);
    print_table(std::cout, rows);
    std::cout.flush();
  });
}

}  // namespace

Runner add_bench_lat(CLI::App& bench, const Invocation& self) {
  auto* app = bench.add_subcommand(
      "lat",
      "latency toolkit: every transfer mode, inline on and off, against UDP and TCP sockets");
  auto f = std::make_shared<LatFlags>();
  add_common_flags(*app, *f, "message size(s): 64 | 64,4K | 8:8K (powers of two); default 8:8K",
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
  app->add_flag("--launched-sockets", f->launched_sockets)->group("");

  return [f, self]() -> int {
    LatValidated v = validate(*f);
    if (started_by_launcher()) return run_lat_rank(*f, v);
    if (!f->samples.empty()) {
      std::ofstream create(f->samples, std::ios::trunc);
      if (!create) throw UsageError("--samples: cannot write " + f->samples);
    }
    if (v.loss > 0 && find_binary("iptables", "/usr/sbin:/sbin").empty() &&
        find_binary("tc", "/usr/sbin:/sbin").empty())
      throw UsageError(
          "--loss: neither tc (netem) nor iptables is installed (apt install "
          "iptables)");
    // The local transport needs both ranks in one network namespace (docs/local-transport.md):
    // under --netns it is reported as not run, and the other rows still are.
    std::vector<std::string> providers;
    for (const auto& p : v.providers) {
      if (!f->netns || p != "local") {
        providers.push_back(p);
        continue;
      }
      const std::string why = "the local transport needs both ranks in one network namespace";
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
    int status = 0;
    if (!providers.empty()) status = launch_each_provider(self, *f, providers, v.endpoint);
    if (status == 0 && !v.sockets.empty()) {
      std::string why;
      if (f->netns && !netns_available(&why)) throw UsageError("--netns: " + why);
      if (!providers.empty() && !f->json) std::cout << "\n" << std::flush;
      status = launch_local(
          self_launch(self, f->netns, {"--launched-provider", "none", "--launched-sockets"}));
    }
    return status;
  };
}

}  // namespace fabflow::cli
