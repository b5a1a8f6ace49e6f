// The UDP and TCP ping-pong baselines (docs/bench-output.md, "bench lat"). Rank 1 echoes,
// rank 0 measures: one clock reading per answered round trip, half of each reported, as bench
// raw's fabric ping-pong. A UDP ping carries its sequence number in its first bytes; an answer
// with another number is a late answer to a ping already counted lost and is dropped. A
// zero-length datagram ends a size (pings are at least one byte).
#include <fabflow/bench/sockets.h>
#include <fabflow/bootstrap.h>
#include <fabflow/status.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "common/errno_text.h"
#include "common/fd.h"

namespace fabflow {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long a blocking call sleeps at most before it looks at its deadline.
constexpr milliseconds kBlockSlice{20};

[[noreturn]] void fail(const std::string& what, int err) {
  throw Error("socket baseline: " + what + ": " + errno_text(err));
}

// getaddrinfo for a numeric host and port; throws PeerError (peer's address) or Error.
struct Address {
  addrinfo* ai = nullptr;
  Address(const std::string& host, const std::string& port, int socktype, bool passive, int peer) {
    addrinfo hints{};
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    hints.ai_socktype = socktype;
    if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &ai); rc != 0) {
      const std::string what = "socket baseline: bad address '" + host + " " + port + "': ";
      if (peer >= 0) throw PeerError(peer, what + gai_strerror(rc));
      throw Error(what + gai_strerror(rc));
    }
  }
  ~Address() { ::freeaddrinfo(ai); }
  Address(const Address&) = delete;
  Address& operator=(const Address&) = delete;
};

// One rank's socket and how it waits.
class Endpoint {
 public:
  Endpoint(Fd fd, const SocketParams& p, int peer) : fd_(std::move(fd)), p_(p), peer_(peer) {
    if (p.proto == SocketProto::tcp) {
      int one = 1;
      if (::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
        fail("setsockopt(TCP_NODELAY)", errno);
    }
    // Blocking calls wake at least every kBlockSlice to look at their deadline: one recv per
    // message, as a plain blocking socket program does, instead of poll(2) and then recv.
    const timeval slice{0, static_cast<suseconds_t>(kBlockSlice.count() * 1000)};
    if (p.wait == SocketWait::block &&
        (::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof slice) != 0 ||
         ::setsockopt(fd_.get(), SOL_SOCKET, SO_SNDTIMEO, &slice, sizeof slice) != 0))
      fail("setsockopt(SO_RCVTIMEO / SO_SNDTIMEO)", errno);
  }

  int fd() const { return fd_.get(); }

  // Sends all of buf (a datagram or a run of stream bytes).
  void send_all(const std::byte* buf, std::size_t len) {
    const int flags = MSG_NOSIGNAL | (p_.wait == SocketWait::spin ? MSG_DONTWAIT : 0);
    std::size_t sent = 0;
    const auto deadline = SteadyClock::now() + milliseconds(p_.timeout_ms);
    do {
      const ssize_t n = ::send(fd_.get(), buf + sent, len - sent, flags);
      if (n >= 0) {
        sent += static_cast<std::size_t>(n);
        continue;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) peer_gone("send", errno);
      if (SteadyClock::now() > deadline) silent();
    } while (sent < len);
  }

  // Receives one datagram (udp) or up to len stream bytes (tcp) into buf, waiting until
  // about `deadline` (blocking: up to one kBlockSlice past it); returns the bytes read, or -1
  // when the deadline passed first.
  ssize_t receive(std::byte* buf, std::size_t len, SteadyClock::time_point deadline) {
    const bool block = p_.wait == SocketWait::block;
    for (unsigned spins = 0;; ++spins) {
      const ssize_t n = ::recv(fd_.get(), buf, len, block ? 0 : MSG_DONTWAIT);
      if (n > 0 || (n == 0 && p_.proto == SocketProto::udp)) return n;
      if (n == 0) throw PeerError(peer_, "socket baseline: the peer closed its tcp connection");
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) peer_gone("recv", errno);
      // Blocking: a slice passed. Spinning: look at the time every 1024 empty polls only.
      if ((block || (spins & 1023) == 1023) && SteadyClock::now() > deadline) return -1;
    }
  }

  // All of len stream bytes (tcp).
  void receive_all(std::byte* buf, std::size_t len) {
    const auto deadline = SteadyClock::now() + milliseconds(p_.timeout_ms);
    for (std::size_t got = 0; got < len;) {
      const ssize_t n = receive(buf + got, len - got, deadline);
      if (n < 0) silent();
      got += static_cast<std::size_t>(n);
    }
  }

  [[noreturn]] void silent() const {
    throw PeerError(peer_, "socket baseline: no answer from rank " + std::to_string(peer_) +
                               " for " + std::to_string(p_.timeout_ms) + " ms");
  }

 private:
  [[noreturn]] void peer_gone(const char* call, int err) const {
    throw PeerError(peer_, std::string("socket baseline: ") + call + " to rank " +
                               std::to_string(peer_) + ": " + errno_text(err));
  }

  Fd fd_;
  const SocketParams& p_;
  int peer_;
};

int socktype(SocketProto proto) { return proto == SocketProto::udp ? SOCK_DGRAM : SOCK_STREAM; }

// Rank 1: bind (and listen), publish "host port", accept (tcp) or learn the sender from its
// first datagram (udp, then connected to it).
Endpoint open_echo(const SocketParams& p, Bootstrap& boot) {
  const std::string host = boot.local_address();
  Address a(host, "0", socktype(p.proto), true, -1);
  Fd fd(::socket(a.ai->ai_family, socktype(p.proto) | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) fail("socket", errno);
  if (::bind(fd.get(), a.ai->ai_addr, a.ai->ai_addrlen) != 0) fail("bind to " + host, errno);
  if (p.proto == SocketProto::tcp && ::listen(fd.get(), 1) != 0) fail("listen", errno);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    fail("getsockname", errno);
  const unsigned port = ss.ss_family == AF_INET6
                            ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                            : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  const std::string address = host + " " + std::to_string(port);
  const auto* first = reinterpret_cast<const std::byte*>(address.data());
  boot.allgather({first, first + address.size()});
  if (p.proto == SocketProto::udp) return Endpoint(std::move(fd), p, 0);
  pollfd pfd{fd.get(), POLLIN, 0};
  const int ready =
      ::poll(&pfd, 1, static_cast<int>(std::min<std::uint64_t>(p.timeout_ms, 1 << 30)));
  if (ready <= 0) throw PeerError(0, "socket baseline: rank 0 did not connect");
  Fd conn(::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (conn.get() < 0) fail("accept", errno);
  return Endpoint(std::move(conn), p, 0);
}

// Rank 0: read rank 1's address (untrusted: checked) and connect to it.
Endpoint open_pinger(const SocketParams& p, Bootstrap& boot) {
  const auto all = boot.allgather({});
  const auto& blob = all.at(1);
  const std::string text(reinterpret_cast<const char*>(blob.data()), blob.size());
  const auto sp = text.rfind(' ');
  if (sp == std::string::npos || text.size() > 128)
    throw PeerError(1, "socket baseline: malformed address from rank 1");
  Address a(text.substr(0, sp), text.substr(sp + 1), socktype(p.proto), false, 1);
  Fd fd(::socket(a.ai->ai_family, socktype(p.proto) | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) fail("socket", errno);
  if (::connect(fd.get(), a.ai->ai_addr, a.ai->ai_addrlen) != 0)
    throw PeerError(1, "socket baseline: connect to rank 1 (" + text + "): " + errno_text(errno));
  return Endpoint(std::move(fd), p, 1);
}

std::uint64_t total_round_trips(const SocketParams& p) { return p.warmup + p.iterations; }

void put_seq(std::vector<std::byte>& buf, std::size_t size, std::uint64_t seq) {
  std::memcpy(buf.data(), &seq, std::min(size, sizeof seq));
}
bool has_seq(const std::vector<std::byte>& buf, std::size_t size, std::uint64_t seq) {
  return std::memcmp(buf.data(), &seq, std::min(size, sizeof seq)) == 0;
}

// Rank 1, udp: echoes every datagram of a size until its zero-length end, then acknowledges
// the end three times (the pinger resends it until one acknowledgement arrives). An end that
// comes before any ping of the size is a resent end of the size before: acknowledged again,
// not taken as this size's end.
void echo_udp(Endpoint& e, const SocketParams& p, bool& connected) {
  std::vector<std::byte> buf(kMaxUdpPayload);
  bool pinged = false;
  for (;;) {
    ssize_t n;
    if (!connected) {
      // The first datagram names the pinger; later ones go through the connected socket.
      pollfd pfd{e.fd(), POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(std::min<std::uint64_t>(p.timeout_ms, 1 << 30))) <= 0)
        e.silent();
      sockaddr_storage from{};
      socklen_t len = sizeof from;
      n = ::recvfrom(e.fd(), buf.data(), buf.size(), MSG_DONTWAIT,
                     reinterpret_cast<sockaddr*>(&from), &len);
      if (n < 0) fail("recvfrom", errno);
      if (::connect(e.fd(), reinterpret_cast<sockaddr*>(&from), len) != 0) fail("connect", errno);
      connected = true;
    } else {
      n = e.receive(buf.data(), buf.size(), SteadyClock::now() + milliseconds(p.timeout_ms));
      if (n < 0) e.silent();
    }
    if (n == 0) {
      for (int i = 0; i < 3; ++i) e.send_all(buf.data(), 0);
      if (pinged) return;
      continue;
    }
    pinged = true;
    e.send_all(buf.data(), static_cast<std::size_t>(n));
  }
}

// Rank 0, udp: ends a size; resends the end until acknowledged or timeout_ms passed.
void end_udp_size(Endpoint& e, const SocketParams& p) {
  std::vector<std::byte> buf(kMaxUdpPayload);
  const auto give_up = SteadyClock::now() + milliseconds(p.timeout_ms);
  while (SteadyClock::now() < give_up) {
    e.send_all(buf.data(), 0);
    const auto wait_until = SteadyClock::now() + milliseconds(p.loss_timeout_ms);
    for (ssize_t n; (n = e.receive(buf.data(), buf.size(), wait_until)) >= 0;)
      if (n == 0) return;  // acknowledged (late answers to lost pings are dropped)
  }
  e.silent();
}

SocketRow ping_size(Endpoint& e, const SocketParams& p, std::size_t size, const Clock& clock) {
  SocketRow row;
  row.proto = p.proto;
  row.wait = p.wait;
  row.size = size;
  std::vector<std::byte> out(size, std::byte{0x5a});
  std::vector<std::byte> in(p.proto == SocketProto::udp ? kMaxUdpPayload : size);
  std::vector<double> samples;
  samples.reserve(p.iterations);
  auto silent_since = SteadyClock::now();
  std::uint64_t prev = clock.now();
  for (std::uint64_t i = 0; i < total_round_trips(p); ++i) {
    put_seq(out, size, i);
    e.send_all(out.data(), size);
    bool answered = true;
    if (p.proto == SocketProto::tcp) {
      e.receive_all(in.data(), size);
      if (!has_seq(in, size, i)) throw PeerError(1, "socket baseline: tcp answer out of order");
    } else {
      const auto wait_until = SteadyClock::now() + milliseconds(p.loss_timeout_ms);
      answered = false;
      for (ssize_t n; !answered && (n = e.receive(in.data(), in.size(), wait_until)) >= 0;)
        answered = static_cast<std::size_t>(n) == size && has_seq(in, size, i);
    }
    const std::uint64_t now = clock.now();
    if (!answered) {
      if (i >= p.warmup) ++row.lost;
      if (SteadyClock::now() - silent_since > milliseconds(p.timeout_ms)) e.silent();
    } else {
      silent_since = SteadyClock::now();
      if (i >= p.warmup) samples.push_back(clock.to_ns(now - prev) / 2);
    }
    prev = now;  // after a loss the next sample starts from the timeout's end
  }
  if (p.proto == SocketProto::udp) end_udp_size(e, p);
  row.iterations = samples.size();
  if (p.keep_samples) row.samples = samples;  // in measurement order, before sorting
  row.latency = summarize(samples);
  int mtu = 0;
  socklen_t len = sizeof mtu;
  if (::getsockopt(e.fd(), IPPROTO_IP, IP_MTU, &mtu, &len) == 0 && mtu > 0)
    row.mtu = static_cast<std::size_t>(mtu);
  return row;
}

}  // namespace

void validate_socket_params(const SocketParams& p) {
  if (p.sizes.empty()) throw UsageError("socket baseline: no sizes given");
  for (std::size_t s : p.sizes) {
    if (s == 0) throw UsageError("socket baseline: size 0 (a ping is at least one byte)");
    if (p.proto == SocketProto::udp && s > kMaxUdpPayload)
      throw UsageError("size " + std::to_string(s) + " is above UDP's largest datagram of " +
                       std::to_string(kMaxUdpPayload) + " bytes");
    if (s > (std::size_t{1} << 30))
      throw UsageError("size " + std::to_string(s) + " is above the socket baseline's 1G");
  }
  if (p.iterations == 0) throw UsageError("socket baseline: iterations must be at least 1");
  if (p.loss_timeout_ms == 0 || p.loss_timeout_ms > p.timeout_ms)
    throw UsageError("socket baseline: the loss timeout must be in 1..timeout ms");
}

std::vector<SocketRow> run_socket_pingpong(const SocketParams& params, Bootstrap& boot,
                                           const Clock& clock) {
  validate_socket_params(params);
  if (boot.size() != 2)
    throw UsageError("socket baseline: needs exactly 2 ranks, got " + std::to_string(boot.size()));
  std::vector<SocketRow> rows;
  if (boot.rank() == 1) {
    Endpoint e = open_echo(params, boot);
    bool connected = false;
    std::vector<std::byte> buf;
    for (std::size_t size : params.sizes) {
      if (params.proto == SocketProto::udp) {
        echo_udp(e, params, connected);
        continue;
      }
      buf.resize(size);
      for (std::uint64_t i = 0; i < total_round_trips(params); ++i) {
        e.receive_all(buf.data(), size);
        e.send_all(buf.data(), size);
      }
    }
    // Each socket stays open until both ranks are done: the pinger leaves at the first of the
    // echo's three end acknowledgements, and a socket closed before the last one lands makes
    // the echo's next send fail with ECONNREFUSED (ICMP port unreachable).
    boot.barrier();
  } else {
    Endpoint e = open_pinger(params, boot);
    for (std::size_t size : params.sizes) rows.push_back(ping_size(e, params, size, clock));
    boot.barrier();
  }
  return rows;
}

}  // namespace fabflow
