// Socket helpers of the TCP bootstrap: an owning fd, "host:port" parsing, resolving, listening
// and connecting with a deadline.
#pragma once

#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/errno_text.h"
#include "common/fd.h"

namespace fabflow::bootstrap_detail {

using SteadyClock = std::chrono::steady_clock;

using fabflow::Fd;

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
};

// Parses "host:port" (IPv4 dotted quad or host name, port 1..65535). On failure returns nullopt
// and sets `why` to a short phrase such as "is not host:port".
std::optional<HostPort> parse_host_port(std::string_view text, std::string* why);

// "8 s", "0.5 s": a duration for messages.
std::string seconds_text(std::chrono::milliseconds d);
using fabflow::errno_text;

// Milliseconds from now until `deadline`, rounded up, clamped to [0, INT_MAX].
int ms_until(SteadyClock::time_point deadline);

// Resolves an IPv4 address for hp; throws Error naming the host.
sockaddr_in resolve_ipv4(const HostPort& hp);

// The first non-loopback IPv4 address this host's name resolves to, for a coordinator that
// ranks on other nodes must reach. Throws Error naming the host.
std::string host_ipv4();

// A listening socket on addr (SO_REUSEADDR); when addr is not local, on any address with
// addr's port. Throws Error.
Fd listen_tcp(const sockaddr_in& addr, const std::string& label);

// Adopts an inherited socket as the coordinator's listener: checks that it listens, makes it
// non-blocking and close-on-exec. Throws UsageError.
Fd adopt_listener(Fd fd);

// Connects to addr, retrying refused or unreachable attempts until `deadline`. Returns a
// non-blocking socket; throws Error "cannot reach coordinator LABEL within T (reason)".
// `fd` with Nagle's algorithm off: the bootstrap's frames are small and answered at once, and
// with it on a frame written in two parts waits for the peer's delayed ACK (40 ms on Linux).
Fd no_delay(Fd fd);

Fd connect_until(const sockaddr_in& addr, const std::string& label,
                 SteadyClock::time_point deadline, std::chrono::milliseconds timeout);

sockaddr_in local_name(int fd);  // getsockname
std::string numeric_host(const sockaddr_in& addr);

}  // namespace fabflow::bootstrap_detail
