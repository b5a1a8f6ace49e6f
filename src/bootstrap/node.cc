// Node: run-time connections over the bootstrap's wire (docs/bootstrap.md, "Run-time
// connections"). A connection proves the secret with the bootstrap's own challenge, HELLO and
// WELCOME, under the pre-authentication bounds; the listener then opens a coordinator for that
// connection alone, sends its address in a SESSION frame, and both sides join it as the two
// ranks of a job, with a secret derived from the handshake's nonces.
#include <fabflow/node.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <deque>
#include <optional>

#include "bootstrap/net.h"
#include "bootstrap/wire.h"

namespace fabflow {

using namespace bootstrap_detail;

namespace {

// The HELLO's rank field of a node connection (a job's ranks are far below it), and the tag that
// derives a session's secret: neither the HELLO nor its MAC gives the session's secret away.
constexpr std::uint32_t kNodeHello = 0xfffffff0u;
constexpr std::uint32_t kSessionSecret = 0xfffffff1u;
constexpr std::size_t kNodeMaxPending =
    1024;  // handshakes in progress; the oldest is dropped past it

std::string node_hex(const Mac& mac) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::byte b : mac) {
    s += digits[std::to_integer<unsigned>(b) >> 4];
    s += digits[std::to_integer<unsigned>(b) & 15];
  }
  return s;
}

std::string node_session_secret(const std::string& secret, const Nonce& challenge,
                                const Nonce& client) {
  return node_hex(hello_mac(secret, challenge, kSessionSecret, 2, client));
}

std::string node_secret(const NodeOptions& o) {
  if (!o.secret.empty()) return o.secret;
  if (!o.secret_file.empty()) return BootstrapConfig::read_secret_file(o.secret_file);
  if (const char* s = std::getenv("FABFLOW_SECRET"); s && *s) return s;
  if (const char* f = std::getenv("FABFLOW_SECRET_FILE"); f && *f)
    return BootstrapConfig::read_secret_file(f);
  throw UsageError(
      "node: no secret: set NodeOptions::secret or secret_file, FABFLOW_SECRET or "
      "FABFLOW_SECRET_FILE");
}

HostPort node_address(const std::string& address) {
  std::string why;
  auto hp = parse_host_port(address, &why);
  if (!hp) throw UsageError("node: address '" + address + "' " + why);
  return *hp;
}

// Sends all of `frame` before `deadline`; false when the peer hung up or time ran out.
bool node_send(int fd, const Bytes& frame, SteadyClock::time_point deadline) {
  std::size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = ::send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, ms_until(deadline)) <= 0) return false;
  }
  return true;
}

// Reads what the socket has into `in`; false when the peer hung up.
bool node_fill(int fd, FrameBuffer& in) {
  for (;;) {
    std::span<std::byte> room = in.prepare(512);
    const ssize_t n = ::recv(fd, room.data(), room.size(), 0);
    if (n > 0) {
      in.commit(static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return false;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
}

// The next frame (at most `max` body bytes) before `deadline`; nullopt on timeout or hang-up.
std::optional<Frame> node_read_frame(int fd, FrameBuffer& in, SteadyClock::time_point deadline,
                                     std::size_t max, bool* closed) {
  for (;;) {
    if (auto f = in.take(max)) return f;
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, ms_until(deadline));
    if (n <= 0) return std::nullopt;
    if (!node_fill(fd, in)) {
      *closed = true;
      if (auto f = in.take(max)) return f;
      return std::nullopt;
    }
  }
}

// `text` with "rank 0" and "rank 1" exchanged (a failure's line as the mirrored view names them).
std::string swap_rank_names(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const bool digit_follows =
        i + 6 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 6]));
    if (text.compare(i, 5, "rank ") == 0 && i + 5 < text.size() &&
        (text[i + 5] == '0' || text[i + 5] == '1') && !digit_follows) {
      out += text[i + 5] == '0' ? "rank 1" : "rank 0";
      i += 5;
      continue;
    }
    out += text[i];
  }
  return out;
}

// A two-rank session with its ranks swapped: rank r of the view is rank 1 - r of the session.
class SwappedSession final : public Bootstrap {
 public:
  explicit SwappedSession(Bootstrap& session) : in_(session) {}
  int rank() const override { return 1 - in_.rank(); }
  int size() const override { return 2; }
  int local_rank() const override { return 1 - in_.local_rank(); }
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> mine) override {
    auto all = in_.allgather(mine);
    if (all.size() == 2) std::swap(all[0], all[1]);
    return all;
  }
  void barrier(const std::function<void()>& while_waiting) override { in_.barrier(while_waiting); }
  bool peer_failed() override { return in_.peer_failed(); }
  std::optional<Failure> failure() override {
    auto f = in_.failure();
    if (!f) return f;
    if (f->rank == 0 || f->rank == 1) f->rank = 1 - f->rank;
    f->what = swap_rank_names(f->what);
    return f;
  }
  std::vector<Silence> silent_peers(std::chrono::milliseconds at_least) override {
    auto all = in_.silent_peers(at_least);
    for (Silence& s : all)
      if (s.rank == 0 || s.rank == 1) s.rank = 1 - s.rank;
    return all;
  }
  std::chrono::milliseconds silence_bound() const override { return in_.silence_bound(); }
  void abort(const std::string& reason) override { in_.abort(reason); }
  std::string local_address() const override { return in_.local_address(); }

 private:
  Bootstrap& in_;
};

class NodeSessionPeer final : public Peer {
 public:
  NodeSessionPeer(std::unique_ptr<Bootstrap> boot, std::string remote)
      : boot_(std::move(boot)), swapped_(*boot_), remote_(std::move(remote)) {}
  Bootstrap& bootstrap() override { return *boot_; }
  Bootstrap& bootstrap_as(int rank) override {
    if (rank != 0 && rank != 1)
      throw UsageError("node: a session has ranks 0 and 1, not " + std::to_string(rank));
    return rank == boot_->rank() ? *boot_ : swapped_;
  }
  const std::string& remote() const override { return remote_; }

 private:
  std::unique_ptr<Bootstrap> boot_;
  SwappedSession swapped_;
  std::string remote_;
};

BootstrapConfig node_session_config(const NodeOptions& o, int rank, const std::string& coordinator,
                                    std::string secret) {
  BootstrapConfig c;
  c.rank = rank;
  c.size = 2;
  c.local_rank = rank;
  c.coordinator = coordinator;
  c.secret = std::move(secret);
  c.timeout = o.timeout;
  c.silence = o.timeout;
  return c;
}

}  // namespace

struct Node::State {
  // A connection that has not proved the secret yet.
  struct Pending {
    Fd fd;
    std::string remote;
    Nonce challenge{};
    FrameBuffer in;
    SteadyClock::time_point deadline;
  };

  NodeOptions options;
  std::string secret;
  Fd listener;
  std::string address;
  std::deque<Pending> pending;
  std::size_t refused = 0;

  void drop(std::deque<Pending>::iterator it, std::string_view reason) {
    if (!reason.empty())
      node_send(it->fd.get(), encode_text(Msg::reject, reason), SteadyClock::now());
    ++refused;
    pending.erase(it);
  }
  void take_connections();
  std::unique_ptr<Peer> admit(Pending& p, const Hello& hello);
};

Node::Node(NodeOptions options) : s_(std::make_unique<State>()) {
  s_->options = std::move(options);
  if (s_->options.timeout.count() <= 0 || s_->options.handshake.count() <= 0)
    throw UsageError("node: the timeout and the handshake bound must be positive");
  s_->secret = node_secret(s_->options);
}

Node::~Node() = default;

std::size_t Node::refused() const noexcept { return s_->refused; }

void Node::listen(const std::string& address) {
  // Port 0 asks the kernel for any free one (parse_host_port takes 1..65535).
  const bool any_port = address.ends_with(":0");
  std::string given = address;
  if (any_port) given.back() = '1';
  HostPort hp = node_address(given);
  if (any_port) hp.port = 0;
  s_->listener = listen_tcp(resolve_ipv4(hp), hp.str());
  const sockaddr_in bound = local_name(s_->listener.get());
  s_->address = HostPort{numeric_host(bound), ntohs(bound.sin_port)}.str();
}

std::string Node::address() const { return s_->address; }

// Every connection waiting on the listener becomes a pending handshake: a CHALLENGE sent.
void Node::State::take_connections() {
  for (;;) {
    sockaddr_in from{};
    socklen_t len = sizeof from;
    Fd fd = no_delay(Fd(::accept4(listener.get(), reinterpret_cast<sockaddr*>(&from), &len,
                                  SOCK_NONBLOCK | SOCK_CLOEXEC)));
    if (!fd) return;
    if (pending.size() >= kNodeMaxPending) drop(pending.begin(), "");
    Pending p;
    p.fd = std::move(fd);
    p.remote = HostPort{numeric_host(from), ntohs(from.sin_port)}.str();
    p.challenge = random_nonce();
    p.deadline = SteadyClock::now() + options.handshake;
    if (!node_send(p.fd.get(), encode_challenge(p.challenge), p.deadline)) {
      ++refused;
      continue;
    }
    pending.push_back(std::move(p));
  }
}

// A connection that proved the secret: its session's coordinator, then the session itself.
std::unique_ptr<Peer> Node::State::admit(Pending& p, const Hello& hello) {
  const std::string host = numeric_host(local_name(p.fd.get()));  // where the peer reached us
  Fd session = listen_tcp(resolve_ipv4(HostPort{host, 0}), host + ":0");
  const std::string coordinator = HostPort{host, ntohs(local_name(session.get()).sin_port)}.str();
  const auto deadline = SteadyClock::now() + options.timeout;
  if (!node_send(p.fd.get(), encode_welcome(welcome_mac(secret, p.challenge, hello.client_nonce)),
                 deadline) ||
      !node_send(p.fd.get(), encode_text(Msg::session, coordinator), deadline))
    throw Error("node: " + p.remote + " hung up before its session began");
  BootstrapConfig c = node_session_config(
      options, 0, coordinator, node_session_secret(secret, p.challenge, hello.client_nonce));
  c.listen_fd = session.release();
  return std::make_unique<NodeSessionPeer>(make_tcp_bootstrap(std::move(c)), p.remote);
}

std::unique_ptr<Peer> Node::accept(std::chrono::milliseconds timeout) {
  if (!s_->listener) throw UsageError("node: accept() before listen()");
  const auto deadline = SteadyClock::now() + timeout;
  std::vector<pollfd> fds;
  for (;;) {
    const auto now = SteadyClock::now();
    for (auto it = s_->pending.begin(); it != s_->pending.end();)
      if (now >= it->deadline) {
        s_->drop(it, "no HELLO within the handshake bound");
        it = s_->pending.begin();
      } else {
        ++it;
      }
    if (now >= deadline) return nullptr;
    auto wake = deadline;
    for (const State::Pending& p : s_->pending) wake = std::min(wake, p.deadline);
    fds.assign(1, pollfd{s_->listener.get(), POLLIN, 0});
    for (const State::Pending& p : s_->pending) fds.push_back(pollfd{p.fd.get(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), ms_until(wake)) < 0 && errno != EINTR)
      throw Error(errno_text("node: poll"));
    // Handshakes first (their fds are the ones polled), then new connections.
    std::size_t i = 1;
    for (auto it = s_->pending.begin(); it != s_->pending.end(); ++i) {
      if (i >= fds.size() || !fds[i].revents) {
        ++it;
        continue;
      }
      State::Pending& p = *it;
      const bool open = node_fill(p.fd.get(), p.in);
      std::optional<Frame> f;
      try {
        f = p.in.take(kMaxHandshakeFrame);
      } catch (const ProtocolError& e) {
        s_->drop(it, e.what());
        it = s_->pending.begin();
        i = fds.size();  // the fds no longer line up: poll again
        continue;
      }
      if (!f) {
        if (!open) {
          s_->drop(it, "");
          it = s_->pending.begin();
          i = fds.size();
          continue;
        }
        ++it;
        continue;
      }
      std::string why;
      Hello hello;
      if (f->type != static_cast<std::uint32_t>(Msg::hello)) {
        why = "expected HELLO";
      } else {
        try {
          hello = decode_hello(f->body);
          if (hello.rank != kNodeHello || hello.size != 2)
            why = "this is a fabflow node, not a job's coordinator";
          else if (!same_mac(hello.mac, hello_mac(s_->secret, p.challenge, hello.rank, hello.size,
                                                  hello.client_nonce)))
            why = "wrong secret";
        } catch (const ProtocolError& e) {
          why = e.what();
        }
      }
      if (!why.empty()) {
        s_->drop(it, why);
        it = s_->pending.begin();
        i = fds.size();
        continue;
      }
      State::Pending admitted = std::move(p);
      s_->pending.erase(it);
      return s_->admit(admitted, hello);
    }
    if (fds[0].revents) s_->take_connections();
  }
}

std::unique_ptr<Peer> Node::connect(const std::string& address, std::chrono::milliseconds timeout) {
  const HostPort hp = node_address(address);
  const std::string label = hp.str();
  const std::string at = "node: " + label;
  const auto deadline = SteadyClock::now() + timeout;
  Fd fd;
  try {
    fd = connect_until(resolve_ipv4(hp), label, deadline, timeout);
  } catch (const Error& e) {
    const std::string what = e.what();
    const std::size_t open = what.rfind(" (");
    throw Error("node: nothing answers at " + label + " within " + seconds_text(timeout) +
                (open == std::string::npos ? "" : what.substr(open)));
  }
  FrameBuffer in;
  bool closed = false;
  auto next = [&](const char* waiting_for) {
    std::optional<Frame> f;
    try {
      f = node_read_frame(fd.get(), in, deadline, kMaxHandshakeFrame, &closed);
    } catch (const ProtocolError& e) {
      throw Error(at + " is not a fabflow node (" + e.what() + ")");
    }
    if (!f) {
      throw Error(at + (closed ? " closed the connection" : " did not answer") + " waiting for " +
                  waiting_for + " (within " + seconds_text(timeout) + ")");
    }
    if (f->type == static_cast<std::uint32_t>(Msg::reject))
      throw Error(at + " refused this process: " + printable(f->body));
    return std::move(*f);
  };
  Frame challenge = next("its challenge");
  if (challenge.type != static_cast<std::uint32_t>(Msg::challenge))
    throw Error(at + " is not a fabflow node (unexpected first message)");
  Nonce server_nonce;
  try {
    server_nonce = decode_challenge(challenge.body);
  } catch (const ProtocolError& e) {
    throw Error(at + ": " + e.what());
  }
  Hello hello;
  hello.rank = kNodeHello;
  hello.size = 2;
  hello.client_nonce = random_nonce();
  hello.mac = hello_mac(s_->secret, server_nonce, hello.rank, hello.size, hello.client_nonce);
  if (!node_send(fd.get(), encode_hello(hello), deadline))
    throw Error(at + " closed the connection during the handshake");
  Frame welcome = next("its welcome");
  Mac mac{};
  if (welcome.type != static_cast<std::uint32_t>(Msg::welcome) || welcome.body.size() != mac.size())
    throw Error(at + " sent an unexpected message instead of its welcome");
  std::ranges::copy(welcome.body, mac.begin());
  if (!same_mac(mac, welcome_mac(s_->secret, server_nonce, hello.client_nonce)))
    throw Error(at + " does not know the shared secret");
  Frame session = next("its session's address");
  if (session.type != static_cast<std::uint32_t>(Msg::session))
    throw Error(at + " sent an unexpected message instead of its session's address");
  const std::string coordinator = printable(session.body);
  std::string why;
  if (!parse_host_port(coordinator, &why))
    throw Error(at + " gave a session address that " + why + ": " + coordinator);
  fd.reset();
  return std::make_unique<NodeSessionPeer>(
      make_tcp_bootstrap(
          node_session_config(s_->options, 1, coordinator,
                              node_session_secret(s_->secret, server_nonce, hello.client_nonce))),
      label);
}

}  // namespace fabflow
