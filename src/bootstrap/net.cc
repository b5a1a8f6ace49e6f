#include "bootstrap/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

#include "fabflow/status.h"

namespace fabflow::bootstrap_detail {
namespace {

bool valid_host_name(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  std::size_t start = 0;
  while (start <= host.size()) {
    const std::size_t dot = std::min(host.find('.', start), host.size());
    const std::string_view label = host.substr(start, dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
      return false;
    for (char c : label) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_';
      if (!ok) return false;
    }
    start = dot + 1;
  }
  return true;
}

[[noreturn]] void throw_errno(const std::string& what) {
  throw Error("bootstrap: " + what + ": " + errno_text(errno));
}

}  // namespace

std::optional<HostPort> parse_host_port(std::string_view text, std::string* why) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    *why = "is not host:port";
    return std::nullopt;
  }
  const std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port < 1 || port > 65535) {
    *why = "has no valid port (1..65535)";
    return std::nullopt;
  }
  const bool numeric =
      std::ranges::all_of(host, [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
  in_addr ignored{};
  if (numeric ? inet_pton(AF_INET, std::string(host).c_str(), &ignored) != 1
              : !valid_host_name(host)) {
    *why = numeric ? "has an invalid IPv4 address" : "has an invalid host name";
    return std::nullopt;
  }
  return HostPort{std::string(host), static_cast<std::uint16_t>(port)};
}

std::string seconds_text(std::chrono::milliseconds d) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

int ms_until(SteadyClock::time_point deadline) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
  return static_cast<int>(std::clamp<decltype(left)>(left, 0, INT_MAX));
}

sockaddr_in resolve_ipv4(const HostPort& hp) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(hp.host.c_str(), nullptr, &hints, &found); rc != 0 || found == nullptr) {
    throw Error("bootstrap: cannot resolve coordinator host " + hp.host + " (" + gai_strerror(rc) +
                ")");
  }
  sockaddr_in addr{};
  std::memcpy(&addr, found->ai_addr, sizeof addr);
  freeaddrinfo(found);
  addr.sin_port = htons(hp.port);
  return addr;
}

std::string host_ipv4() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) throw_errno("gethostname()");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(name, nullptr, &hints, &found); rc != 0 || found == nullptr) {
    throw Error(std::string("bootstrap: cannot resolve this host's name ") + name + " (" +
                gai_strerror(rc) + "); set FABFLOW_COORD=host:port");
  }
  std::string address;
  for (const addrinfo* a = found; a != nullptr && address.empty(); a = a->ai_next) {
    sockaddr_in addr{};
    std::memcpy(&addr, a->ai_addr, sizeof addr);
    if ((ntohl(addr.sin_addr.s_addr) >> 24) != 127) address = numeric_host(addr);
  }
  freeaddrinfo(found);
  if (address.empty()) {
    throw Error(std::string("bootstrap: this host's name ") + name +
                " resolves only to loopback addresses, which other nodes cannot reach; set "
                "FABFLOW_COORD=host:port");
  }
  return address;
}

Fd listen_tcp(const sockaddr_in& requested, const std::string& label) {
  sockaddr_in addr = requested;
  for (;;) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) throw_errno("socket() for the coordinator");
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      if (errno == EADDRNOTAVAIL && addr.sin_addr.s_addr != htonl(INADDR_ANY)) {
        addr.sin_addr.s_addr = htonl(INADDR_ANY);
        continue;
      }
      throw_errno("cannot listen on coordinator address " + label);
    }
    if (::listen(fd.get(), SOMAXCONN) != 0)
      throw_errno("cannot listen on coordinator address " + label);
    return fd;
  }
}

Fd adopt_listener(Fd fd) {
  const int raw = fd.get();
  int listening = 0;
  socklen_t len = sizeof listening;
  if (::getsockopt(raw, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) {
    throw UsageError("bootstrap: coordinator fd " + std::to_string(raw) +
                     " is not a listening socket");
  }
  const int flags = ::fcntl(raw, F_GETFL);
  if (flags < 0 || ::fcntl(raw, F_SETFL, flags | O_NONBLOCK) != 0 ||
      ::fcntl(raw, F_SETFD, FD_CLOEXEC) != 0) {
    throw_errno("fcntl on the coordinator fd");
  }
  return fd;
}

Fd no_delay(Fd fd) {
  const int one = 1;
  if (fd) ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

Fd connect_until(const sockaddr_in& addr, const std::string& label,
                 SteadyClock::time_point deadline, std::chrono::milliseconds timeout) {
  auto backoff = std::chrono::milliseconds(5);
  int last_error = ETIMEDOUT;
  for (;;) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) throw_errno("socket() for the coordinator connection");
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0)
      return no_delay(std::move(fd));
    last_error = errno;
    if (last_error == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      const int n = ::poll(&p, 1, ms_until(deadline));
      if (n > 0) {
        socklen_t len = sizeof last_error;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &last_error, &len);
        if (last_error == 0) return no_delay(std::move(fd));
      } else {
        last_error = n == 0 ? ETIMEDOUT : errno;
      }
    }
    const auto now = SteadyClock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<SteadyClock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  throw Error("bootstrap: cannot reach coordinator " + label + " within " + seconds_text(timeout) +
              " (" + errno_text(last_error) + ")");
}

sockaddr_in local_name(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) throw_errno("getsockname");
  return addr;
}

std::string numeric_host(const sockaddr_in& addr) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof buf);
  return buf;
}

}  // namespace fabflow::bootstrap_detail
