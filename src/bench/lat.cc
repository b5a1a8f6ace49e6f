// bench lat's engine: the fabric rows through run_raw's latency test, the socket rows through
// run_socket_pingpong (include/fabflow/bench/lat.h).
#include <fabflow/bench/lat.h>
#include <fabflow/bootstrap.h>
#include <fabflow/transport.h>

#include <algorithm>

namespace fabflow {

Op op_of(LatMode m) noexcept {
  switch (m) {
    case LatMode::send: return Op::send;
    case LatMode::writedata: return Op::writedata;
    case LatMode::write: return Op::write;
    case LatMode::write_like: return Op::send;
  }
  return Op::send;
}

SocketParams lat_socket_params(const LatParams& p, SocketProto proto, SocketWait wait) {
  SocketParams s;
  s.proto = proto;
  s.wait = wait;
  s.sizes = p.sizes;
  s.iterations = p.iterations;
  s.warmup = p.warmup;
  s.timeout_ms = p.target.timeout_ms;
  s.loss_timeout_ms = std::min<std::uint64_t>(200, p.target.timeout_ms);  // a UDP ping lost
  s.keep_samples = p.keep_samples;
  return s;
}

namespace {

// Whether the provider gives multi-receive buffers to `opts`; empty, or why not.
std::string multi_recv_refusal(TransportOptions opts, const Capabilities& caps) {
  opts.multi_recv = true;
  try {
    if (!probe_transport(opts).multi_recv)
      return caps.provider + " has no multi-receive buffers (FI_MULTI_RECV)";
  } catch (const UsageError& e) {
    return e.what();
  }
  return {};
}

}  // namespace

LatResult run_lat_fabric(const LatParams& params, Bootstrap& boot) {
  LatResult out;
  for (LatMode mode : params.modes) {
    TransportOptions opts = params.target.transport({op_of(mode)}, boot.local_address());
    Capabilities caps;
    try {
      caps = probe_transport(opts);
    } catch (const UsageError& e) {
      out.notes.push_back(std::string(name_of(mode)) + ": not run: " + e.what());
      continue;
    }
    if (!caps.reliable && mode != LatMode::send) {
      out.notes.push_back(std::string(name_of(mode)) + ": not run on " + caps.provider +
                          "'s unreliable (dgram) endpoint: only the send ping-pong counts a lost "
                          "message instead of waiting for it");
      continue;
    }
    if (mode == LatMode::write_like && caps.rx_lands_on_poll) {
      out.notes.push_back("write-like: not run on " + caps.provider +
                          ": it places a message in the posted buffer only when the receiver "
                          "polls its completions");
      continue;
    }
    // Send rows: each receive posting, closed loop and (with a rate) open loop.
    struct Variant {
      RecvPost post;
      double rate;
    };
    std::vector<Variant> variants;
    for (RecvPost post : mode == LatMode::send ? params.recv_posts : std::vector{RecvPost::one}) {
      if (!caps.reliable && post != RecvPost::one) {
        out.notes.push_back("send --recv-post " + std::string(name_of(post)) + ": not run on " +
                            caps.provider +
                            "'s unreliable (dgram) endpoint: it keeps a receive posted per slot");
        continue;
      }
      variants.push_back({post, 0});
      if (mode == LatMode::send && params.rate > 0 && caps.reliable)
        variants.push_back({post, params.rate});
    }
    if (!caps.reliable && mode == LatMode::send && params.rate > 0)
      out.notes.push_back("send --rate: the open loop is not run on " + caps.provider +
                          "'s unreliable (dgram) endpoint: a lost answer would stall its window");
    for (bool inlined : params.inject_modes)
      for (const Variant& variant : variants) {
        if (variant.post == RecvPost::multi) {
          const std::string why = multi_recv_refusal(opts, caps);
          if (!why.empty()) {
            const std::string note = "send --recv-post multi: not run: " + why;
            if (std::find(out.notes.begin(), out.notes.end(), note) == out.notes.end())
              out.notes.push_back(note);
            continue;
          }
        }
        RawParams p;
        p.recv_post = variant.post;
        p.recv_batch = params.recv_batch;
        p.rate = variant.rate;
        p.op = op_of(mode);
        p.test = RawTest::latency;
        p.inject = inlined;
        p.iterations = params.iterations;
        p.warmup = params.warmup;
        p.target = params.target;
        p.keep_samples = params.keep_samples;
        p.reap_every = mode == LatMode::write_like ? params.reap_every : 0;
        p.sizes.clear();
        for (std::size_t s : params.sizes)
          if (s <= caps.max_msg_size && (!inlined || s <= caps.inject_size)) p.sizes.push_back(s);
        if (p.sizes.empty()) continue;
        RawResult r = run_raw(p, boot);
        if (out.env.clock.empty()) out.env = r.env;
        if (out.more_hint.empty()) out.more_hint = r.more_hint;
        const std::string post = mode == LatMode::send ? std::string(name_of(variant.post)) : "";
        for (auto& row : r.rows) {
          out.rows.push_back({"fabric", caps.provider, std::string(name_of(mode)), post,
                              variant.rate, row.injected, row.size, row.iterations - row.lost,
                              row.lost, 0, row.latency, std::move(row.samples)});
          if (params.on_row && boot.rank() == 0) params.on_row(out.rows.back());
        }
      }
  }
  return out;
}

LatResult run_lat_sockets(const LatParams& params, Bootstrap& boot) {
  LatResult out;
  const Clock clock;
  out.env = machine_environment();
  out.env.clock = clock.name();
  gather_pinning(out.env, boot, params.target.cpu);
  for (SocketProto proto : params.sockets)
    for (SocketWait wait : params.waits)
      for (auto& r : run_socket_pingpong(lat_socket_params(params, proto, wait), boot, clock)) {
        out.rows.push_back({"socket", std::string(name_of(proto)), std::string(name_of(wait)), "",
                            0, false, r.size, r.iterations, r.lost, r.mtu, r.latency,
                            std::move(r.samples)});
        if (params.on_row && boot.rank() == 0) params.on_row(out.rows.back());
      }
  return out;
}

}  // namespace fabflow
