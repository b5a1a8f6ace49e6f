// bench connect: the server rank listens with a Node and serves every connection with a
// responder; the client rank connects, makes one 64-byte call over each new connection and
// times it, then holds idle connections and asks both processes what they hold.
#include <fabflow/bench/connect.h>
#include <fabflow/bootstrap.h>
#include <fabflow/node.h>
#include <fabflow/rr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "bench/engine.h"
#include "bootstrap/wire.h"

namespace fabflow {
namespace {

// What the server tells the client over the job's bootstrap: where it listens, and the secret
// its connections prove (a fresh one per run).
struct Listening {
  char address[64] = {};
  char secret[40] = {};
};

std::int64_t entries_in(const char* dir) {
  std::error_code ec;
  std::int64_t n = 0;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

rr::ChannelOptions call_options(const ConnectParams& p) {
  rr::ChannelOptions o;
  o.request_bytes = o.response_bytes = 64;
  o.peer_timeout = std::chrono::milliseconds(p.target.timeout_ms);
  return o;
}

NodeOptions node_options(const ConnectParams& p, const std::string& secret) {
  NodeOptions o;
  o.secret = secret;
  o.timeout = std::chrono::milliseconds(p.target.timeout_ms);
  return o;
}

// One connection, the client's side: a channel and one call. Returns the open requester.
Opened<rr::Requester> call_once(Peer& peer, const ConnectParams& p, const TransportOptions& to) {
  auto r = rr::open_requester(peer, call_options(p), 1, to);
  std::memset(r->request_buffer(0).data(), 0x5a, 64);
  rr::Response response;
  r->call(0, 0, 64, &response, *r.session);
  r->release(response);
  return r;
}

// Closes a requester the way its responder expects (close, then the session's last barrier).
void close_requester(Opened<rr::Requester>& r) {
  if (r->close() != Status::ok) throw Error("connect: closing a channel: " + r->error());
  r.session->barrier([&] { r.transport->progress(); });
}

// One connection, the server's side: a responder until its requester closed.
void serve_until_closed(Opened<rr::Responder>& r) {
  while (!r->done()) {
    unsigned served = 0;
    const Status s = r->serve(nullptr, &served);
    if (s == Status::failed) throw Error("connect: serving a connection: " + r->error());
    if (s == Status::empty && r.session->peer_failed())
      throw PeerError(0, "connect: " + r.session->failure()->what);
  }
  r.session->barrier([&] { r.transport->progress(); });
}

// The server answers the first call of an idle connection and then leaves it be.
void serve_first_call(Opened<rr::Responder>& r, std::chrono::milliseconds timeout) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    unsigned served = 0;
    const Status s = r->serve(nullptr, &served);
    if (s == Status::failed) throw Error("connect: serving a connection: " + r->error());
    if (served > 0) return;
    if (std::chrono::steady_clock::now() > give_up || r.session->peer_failed())
      throw Error("connect: an idle connection's first call never came");
  }
}

struct Side {
  ConnectParams p;
  TransportOptions to;
  Listening at;
  std::unique_ptr<Node> node;
  Capabilities caps;  // of the first transport opened (client)
};

ConnectRow connect_times(Side& s, bool client) {
  ConnectRow row;
  row.kind = ConnectRow::Kind::connect_time;
  const std::uint64_t total = s.p.warmup + s.p.connections;
  const auto timeout = std::chrono::milliseconds(s.p.target.timeout_ms);
  std::vector<double> samples;
  samples.reserve(s.p.connections);
  for (std::uint64_t i = 0; i < total; ++i) {
    if (!client) {
      auto peer = s.node->accept(timeout);
      if (!peer) throw Error("connect: the client stopped connecting");
      auto r = rr::open_responder(*peer, call_options(s.p), s.to);
      serve_until_closed(r);
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    auto peer = s.node->connect(s.at.address, timeout);
    auto r = call_once(*peer, s.p, s.to);
    const auto done = std::chrono::steady_clock::now();
    if (i >= s.p.warmup)
      samples.push_back(std::chrono::duration<double, std::nano>(done - start).count());
    if (row.transport.empty()) {
      row.transport = r.provider;
      s.caps = r.transport->caps();
    }
    close_requester(r);
  }
  row.connections = s.p.connections;
  if (client) row.connect = summarize(samples);
  return row;
}

// `count` idle connections at once; each side's holdings before and with them (both sent to
// the client, rank 0). A side that fails says why in the row; the other side's wait then ends
// within the timeout.
ConnectRow idle_peers(Side& s, Bootstrap& boot, std::size_t count) {
  const bool client = boot.rank() == 0;
  const auto timeout = std::chrono::milliseconds(s.p.target.timeout_ms);
  ConnectRow row;
  row.kind = ConnectRow::Kind::idle_peers;
  row.peers = count;
  boot.barrier();
  const ProcessHoldings before = process_holdings();
  std::vector<std::unique_ptr<Peer>> peers;
  std::vector<Opened<rr::Requester>> requesters;
  std::vector<Opened<rr::Responder>> responders;
  std::string failed;
  try {
    for (std::size_t k = 0; k < count; ++k) {
      if (client) {
        peers.push_back(s.node->connect(s.at.address, timeout));
        requesters.push_back(call_once(*peers.back(), s.p, s.to));
        if (row.transport.empty()) row.transport = requesters.back().provider;
      } else {
        auto peer = s.node->accept(timeout);
        if (!peer) throw Error("the client stopped connecting at " + std::to_string(k));
        peers.push_back(std::move(peer));
        responders.push_back(rr::open_responder(*peers.back(), call_options(s.p), s.to));
        serve_first_call(responders.back(), timeout);
      }
    }
  } catch (const std::exception& e) {
    failed = (client ? "client: " : "server: ") + std::string(e.what()) + " (at " +
             std::to_string(peers.size()) + " peers)";
  }
  const ProcessHoldings with = process_holdings();
  struct Report {
    ProcessHoldings before, with;
    char failed[200];
  } mine{before, with, {}};
  std::snprintf(mine.failed, sizeof mine.failed, "%s", failed.c_str());
  const auto all = allgather_value(boot, mine, "connect bench: holdings");
  // The client goes first; each session then ends on both sides. Closing a thousand takes
  // seconds, so these barriers wait as long as the other side lives (no timeout).
  const auto alive = [] {};
  requesters.clear();
  boot.barrier(alive);
  responders.clear();
  peers.clear();
  boot.barrier(alive);
  if (client) {
    row.client_before = all[0].before;
    row.client_with = all[0].with;
    row.server_before = all[1].before;
    row.server_with = all[1].with;
    for (const Report& r : all) {
      const std::string why(r.failed, strnlen(r.failed, sizeof r.failed));
      if (!why.empty()) row.failed += (row.failed.empty() ? "" : "; ") + why;
    }
  }
  return row;
}

std::string hex_secret() {
  std::string s;
  for (std::byte b : bootstrap_detail::random_nonce()) {
    static const char* digits = "0123456789abcdef";
    s += digits[std::to_integer<unsigned>(b) >> 4];
    s += digits[std::to_integer<unsigned>(b) & 15];
  }
  return s.substr(0, 32);
}

}  // namespace

ProcessHoldings process_holdings() {
  ProcessHoldings h;
  std::ifstream statm("/proc/self/statm");
  long long pages = 0, resident = 0;
  if (statm >> pages >> resident) h.rss_bytes = resident * ::sysconf(_SC_PAGESIZE);
  h.fds = entries_in("/proc/self/fd") - 1;  // the iterator's own
  h.threads = entries_in("/proc/self/task");
  return h;
}

ConnectResult run_connect(
    const ConnectParams& given, Bootstrap& boot,
    const std::function<void(const ConnectResult&, const ConnectRow&)>& on_row) {
  if (boot.size() != 2)
    throw UsageError("connect: runs as two ranks, a client (rank 0) and a server (rank 1)");
  if (given.connections < 1) throw UsageError("connect: connections must be at least 1");
  Side s;
  s.p = given;
  std::sort(s.p.peers.begin(), s.p.peers.end());
  Clock clock;
  ConnectResult result = bench::start_result<ConnectResult>(s.p, boot, clock);
  const bool client = boot.rank() == 0;
  s.to = s.p.target.transport(rr::required_ops(call_options(s.p)), boot.local_address());
  Listening mine;
  if (!client) {
    const std::string secret = hex_secret();
    s.node = std::make_unique<Node>(node_options(s.p, secret));
    s.node->listen(boot.local_address() + ":0");
    std::snprintf(mine.address, sizeof mine.address, "%s", s.node->address().c_str());
    std::snprintf(mine.secret, sizeof mine.secret, "%s", secret.c_str());
  }
  s.at = allgather_value(boot, mine, "connect bench: the server's address")[1];
  s.at.address[sizeof s.at.address - 1] = s.at.secret[sizeof s.at.secret - 1] = '\0';
  if (client) s.node = std::make_unique<Node>(node_options(s.p, s.at.secret));
  auto report = [&](ConnectRow row) {
    if (!client) return;
    result.rows.push_back(std::move(row));
    if (on_row) on_row(result, result.rows.back());
  };
  ConnectRow first = connect_times(s, client);
  bench::note_caps(result.env, s.caps);
  report(std::move(first));
  for (std::size_t count : s.p.peers) report(idle_peers(s, boot, count));
  return result;
}

}  // namespace fabflow
