// bench connect: run-time connections (fabflow::Node). How long a client takes from
// Node::connect to the first 64-byte round trip of a request-response channel opened over the
// new connection (p50/p99 over many connections, each closed before the next), and what each
// connected, idle peer costs the server process and the client process (resident memory, fds,
// threads) at the counts asked for (1, 100 and 1000 by default).
#pragma once

#include <fabflow/bench/common.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace fabflow {

class Bootstrap;

struct ConnectParams {
  bench::Target target;                          // provider, endpoint, timeout
  std::uint64_t connections = 200;               // measured connections
  std::uint64_t warmup = 20;                     // connections before them, not measured
  std::vector<std::size_t> peers{1, 100, 1000};  // idle peers held at once, one row each
};

// What one process holds, as /proc tells.
struct ProcessHoldings {
  std::int64_t rss_bytes = 0, fds = 0, threads = 0;
};

struct ConnectRow {
  enum class Kind : std::uint8_t { connect_time, idle_peers } kind = Kind::connect_time;
  std::string transport;  // what the sessions opened (connect_transport's choice)
  // connect_time: Node::connect called to the first round trip done, per connection.
  std::uint64_t connections = 0;
  LatencyStats connect;
  // idle_peers: `peers` connections, each with its channel open and idle; what the server and
  // the client held before the first and with all of them.
  std::size_t peers = 0;
  ProcessHoldings server_before, server_with, client_before, client_with;
  std::string failed;  // non-empty: the row stopped here (e.g. out of fds), said why
};

struct ConnectResult {
  RunEnvironment env;
  ConnectParams params;
  std::vector<ConnectRow> rows;  // rank 0 only
};

// Collective over a job of two ranks: rank 0 the client, rank 1 the server. `on_row` sees each
// row on rank 0 when complete. Throws UsageError / Error / PeerError.
ConnectResult run_connect(
    const ConnectParams& params, Bootstrap& boot,
    const std::function<void(const ConnectResult&, const ConnectRow&)>& on_row = {});

// This process's resident memory, fds and threads now.
ProcessHoldings process_holdings();

void print_connect_header(std::ostream& out, const ConnectResult& result);
void print_connect_row(std::ostream& out, const ConnectResult& result, const ConnectRow& row);
void print_connect_json(std::ostream& out, const ConnectResult& result, const ConnectRow& row);

}  // namespace fabflow
