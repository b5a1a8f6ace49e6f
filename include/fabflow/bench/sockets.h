// Socket baselines for latency: UDP and TCP ping-pong between two ranks, waiting in the kernel
// (blocking calls) or spinning on non-blocking calls, measured the way bench raw measures a
// fabric ping-pong (one clock reading per round trip, half of it reported), so that a fabric
// and the kernel's sockets can be compared as rows of one run.
#pragma once

#include <fabflow/bench/common.h>
#include <fabflow/names.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fabflow {

class Bootstrap;

enum class SocketProto : std::uint8_t { udp, tcp };
inline constexpr NameTable<SocketProto, 2> kSocketProtoNames{
    {{{"udp", SocketProto::udp}, {"tcp", SocketProto::tcp}}}};
constexpr const auto& name_table(SocketProto) noexcept { return kSocketProtoNames; }

// How a rank waits for the next message: in the kernel (recv blocks), or spinning on recv with
// MSG_DONTWAIT (no sleep, no wake-up: the socket counterpart of polling a completion queue).
enum class SocketWait : std::uint8_t { block, spin };
inline constexpr NameTable<SocketWait, 2> kSocketWaitNames{
    {{{"block", SocketWait::block}, {"spin", SocketWait::spin}}}};
constexpr const auto& name_table(SocketWait) noexcept { return kSocketWaitNames; }

// The largest UDP payload (65,535 less the IPv4 and UDP headers).
inline constexpr std::size_t kMaxUdpPayload = 65507;

struct SocketParams {
  SocketProto proto = SocketProto::udp;
  SocketWait wait = SocketWait::spin;
  std::vector<std::size_t> sizes{64};  // each >= 1; udp: <= kMaxUdpPayload
  std::uint64_t iterations = 10000;
  std::uint64_t warmup = 1000;
  // A UDP ping whose answer has not come back after this long is counted lost and the next one
  // is sent; no answer at all for timeout_ms fails the run.
  std::uint64_t loss_timeout_ms = 200;
  std::uint64_t timeout_ms = 10000;
  bool keep_samples = false;  // rows keep every sample (SocketRow::samples)
};

struct SocketRow {
  SocketProto proto = SocketProto::udp;
  SocketWait wait = SocketWait::spin;
  std::size_t size = 0;
  std::uint64_t iterations = 0;  // round trips answered and measured
  std::uint64_t lost = 0;        // udp: pings counted lost (no answer within loss_timeout_ms)
  LatencyStats latency;          // one-way: half of each round trip, ns
  std::vector<double> samples;   // with SocketParams::keep_samples: every sample, in order
  std::size_t mtu = 0;           // path MTU of the connected socket (IP_MTU; 0: not known)
};

// Collective over exactly two ranks of `boot`: rank 1 listens on boot.local_address() and
// echoes, rank 0 sends and measures. Returns the rows on rank 0 (one per size), nothing on
// rank 1. Throws UsageError for bad parameters, Error / PeerError when a socket call fails or
// the peer falls silent.
std::vector<SocketRow> run_socket_pingpong(const SocketParams& params, Bootstrap& boot,
                                           const Clock& clock);

// Checks params without a peer; throws UsageError with one line.
void validate_socket_params(const SocketParams& params);

}  // namespace fabflow
