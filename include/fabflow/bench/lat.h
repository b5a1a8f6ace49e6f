// bench lat: one-way latency of every fabric transfer mode, inline on and off, and the kernel's
// UDP and TCP sockets (blocking and spinning), as rows of one run with the same sizes, pinning
// and statistics. The fabric rows are bench raw's ping-pong (run_raw, latency test); the socket
// rows run_socket_pingpong. docs/bench-output.md, "bench lat".
#pragma once

#include <fabflow/bench/common.h>
#include <fabflow/bench/raw.h>
#include <fabflow/bench/sockets.h>
#include <fabflow/names.h>

#include <cstdint>
#include <iosfwd>
#include <functional>
#include <string>
#include <vector>

namespace fabflow {

class Bootstrap;

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

// The operation a mode's ping-pong performs.
Op op_of(LatMode m) noexcept;

// One row of the run, fabric or socket.
struct LatRow {
  std::string path;       // "fabric" or "socket"
  std::string provider;   // the fabric provider, or "udp" / "tcp"
  std::string mode;       // send, writedata, write, write-like; block, spin
  std::string recv_post;  // fabric modes that post receives: one, list, multi; else empty
  double rate = 0;        // open loop: pings per second (0: closed loop)
  bool inlined = false;
  std::size_t size = 0;
  std::uint64_t iterations = 0;
  std::uint64_t lost = 0;
  std::size_t mtu = 0;
  LatencyStats latency;
  std::vector<double> samples;  // with keep_samples
};

struct LatParams {
  bench::Target target;              // the provider (one per run), endpoint, pinning, timeout
  std::vector<std::size_t> sizes;    // message sizes
  std::vector<LatMode> modes;        // fabric rows
  std::vector<bool> inject_modes;    // inline off and/or on (on: sizes up to the inject size)
  std::vector<RecvPost> recv_posts;  // send mode: how receives are re-posted
  unsigned recv_batch = 16;          // receives per list, messages per multi-receive buffer
  double rate = 0;                   // > 0: open-loop send rows at this rate beside the closed
  unsigned reap_every = 64;          // write-like: receives posted at once, reaped per batch
  std::uint64_t iterations = 10000;
  std::uint64_t warmup = 1000;
  bool keep_samples = false;         // rows keep every sample
  std::vector<SocketProto> sockets;  // socket rows
  std::vector<SocketWait> waits;
  // Rank 0: called with each row as soon as it is measured (a long run's progress).
  std::function<void(const LatRow&)> on_row;
};

struct LatResult {
  RunEnvironment env;
  std::vector<LatRow> rows;        // on rank 0
  std::vector<std::string> notes;  // modes and postings not run, and why
  std::string more_hint;           // what the provider does with FI_MORE ("" before a row)
};

// The socket baseline's parameters for one protocol and wait (checked by
// validate_socket_params).
SocketParams lat_socket_params(const LatParams& p, SocketProto proto, SocketWait wait);

// Collective over the two ranks of `boot`. The fabric rows: every mode on params.target's
// provider, inline off and on, each posting and loop; a mode the provider cannot run is a note,
// not a failure.
LatResult run_lat_fabric(const LatParams& params, Bootstrap& boot);
// The socket rows: every protocol and wait, between the bootstrap's addresses.
LatResult run_lat_sockets(const LatParams& params, Bootstrap& boot);

// "250k", "1.5M", "800": a rate for the table and the header.
std::string lat_rate_text(double rate);
void print_lat_table(std::ostream& out, const std::vector<LatRow>& rows);
// One JSON line a row; the loss applied (0..1) and how, the FI_MORE hint of list postings, and
// the TCP minimum retransmission timeout set on the ranks' routes (--rto-min, ms; 0: the
// kernel's default, then the field is null).
void print_lat_json(std::ostream& out, const RunEnvironment& env, const std::vector<LatRow>& rows,
                    double loss, const std::string& loss_method, const std::string& more_hint,
                    unsigned rto_min_ms = 0);
// For each row a line "# path provider mode inject=on|off size=N [recv=P] [rate=R]", then every
// sample in ns, one per line, in measurement order, appended to `path`.
void append_lat_samples(const std::string& path, const std::vector<LatRow>& rows);

}  // namespace fabflow
