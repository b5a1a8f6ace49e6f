// service: a server that clients connect to whenever they like, started by hand in two shells
// (no launcher, no fixed set of ranks), and every pattern opened over the connection.
//
// The server listens and serves each client that connects on a thread of its own. A client's
// session runs three patterns over the same connection, one after the other:
//   1. a flow queue: the client enqueues N numbered 64-byte items; the server checks that they
//      arrive in order and exactly once and sums them;
//   2. request-response: the client makes M calls, each asking for a function of its number;
//      the client checks every answer, the server counts them;
//   3. a bulk transfer: the client sends B bytes of a pattern; the server sums what arrived.
// Both sides print one line with the counts and checksums, which must match. A client killed or
// stopped mid-session fails its own session only (the server prints why) and the server goes on.
// Ctrl-C (SIGINT) or SIGTERM stops the server: it accepts no one more and finishes the clients
// in flight.
//
//   export FABFLOW_SECRET=some-secret          # both shells: connections prove it
//   service serve 127.0.0.1:7000               # shell 1: prints "listening on 127.0.0.1:7000"
//   service connect 127.0.0.1:7000             # shell 2, as often as you like
//   service connect 127.0.0.1:7000 -n 100000 -m 1000 -b 1M -p tcp
//
// -p names the transport (both sides must name the same one); without it both find out that
// they share this host and use local (connect_transport's "auto").
#include <fabflow/bulk.h>
#include <fabflow/bulk/transfer.h>
#include <fabflow/flow.h>
#include <fabflow/node.h>
#include <fabflow/rr.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::chrono::seconds kTimeout{10};
constexpr std::uint64_t kMaxBulk = std::uint64_t{1} << 30;  // what a server accepts from a client
volatile std::sig_atomic_t stop = 0;

// FNV-1a over bytes, in order.
struct Checksum {
  std::uint64_t value = 14695981039346656037ull;
  void add(std::span<const std::byte> bytes) {
    for (std::byte b : bytes) value = (value ^ std::to_integer<unsigned>(b)) * 1099511628211ull;
  }
};

std::uint64_t answer_to(std::uint64_t call) { return call * 3 + 1; }

// What a client asks for, and the line both sides print for a session.
struct Session {
  std::uint64_t items = 1000000, calls = 100000, bytes = std::uint64_t{256} << 20;
  Checksum queue, bulk;
  std::string line(const std::string& over) const {
    char s[256];
    std::snprintf(s, sizeof s,
                  "%llu items in order (checksum %016llx), %llu calls answered, %llu bytes "
                  "(checksum %016llx) over %s",
                  static_cast<unsigned long long>(items),
                  static_cast<unsigned long long>(queue.value),
                  static_cast<unsigned long long>(calls), static_cast<unsigned long long>(bytes),
                  static_cast<unsigned long long>(bulk.value), over.c_str());
    return s;
  }
};

fabflow::flow::QueueOptions queue_options() {
  fabflow::flow::QueueOptions q;
  q.item_bytes = 64;
  return q;
}

fabflow::rr::ChannelOptions call_options() {
  fabflow::rr::ChannelOptions o;
  o.request_bytes = o.response_bytes = sizeof(std::uint64_t);
  return o;
}

fabflow::TransportOptions transport_options(const std::string& provider) {
  fabflow::TransportOptions t;
  t.provider = provider;
  return t;
}

void fail(const std::string& what) { throw fabflow::Error(what); }

// The pattern the client writes into its bulk buffer: 8-byte words numbered from 0.
void fill(std::span<std::byte> buf) {
  for (std::size_t i = 0; i + 8 <= buf.size(); i += 8) {
    const std::uint64_t w = (i / 8) * 0x9e3779b97f4a7c15ull;
    std::memcpy(buf.data() + i, &w, 8);
  }
}

// Server side of one client's session; returns the line it prints.
std::string serve_one(fabflow::Peer& peer, const std::string& provider) {
  Session s;
  std::string over;
  {  // 1. the flow queue
    auto queue = fabflow::flow::open_consumer(peer, queue_options(), transport_options(provider));
    over = queue.provider;
    std::uint64_t item[8];
    for (s.items = 0;; ++s.items) {
      std::size_t len = 0;
      const fabflow::Status st =
          queue->dequeue(std::as_writable_bytes(std::span(item)), &len, kTimeout);
      if (st == fabflow::Status::closed) break;
      if (st != fabflow::Status::ok) fail("queue: " + queue->error());
      if (len != sizeof item || item[0] != s.items)
        fail("queue: item " + std::to_string(s.items) + " out of order or torn");
      s.queue.add(std::as_bytes(std::span(item)));
    }
    queue.session->barrier([&] { queue.transport->progress(); });
  }
  {  // 2. request-response
    auto calls = fabflow::rr::open_responder(peer, call_options(), transport_options(provider));
    s.calls = 0;
    const fabflow::rr::Handler answer = [&](int, std::span<const std::byte> request,
                                            std::span<std::byte> response) -> std::size_t {
      std::uint64_t n = 0;
      if (request.size() != sizeof n) return 0;  // the client sees a short answer and says so
      std::memcpy(&n, request.data(), sizeof n);
      const std::uint64_t a = answer_to(n);
      std::memcpy(response.data(), &a, sizeof a);
      return sizeof a;
    };
    while (!calls->done()) {
      unsigned served = 0;
      const fabflow::Status st = calls->serve(&answer, &served);
      if (st == fabflow::Status::failed) fail("calls: " + calls->error());
      if (st == fabflow::Status::empty && calls.session->peer_failed())
        fail(calls.session->failure()->what);
      s.calls += served;
    }
    calls.session->barrier([&] { calls.transport->progress(); });
  }
  {  // 3. one bulk transfer: its size first, then the bytes
    auto bulk = fabflow::bulk::open_channel(peer, {}, transport_options(provider));
    std::uint64_t size = 0;
    bulk->recv(bulk.peer, 0, std::as_writable_bytes(std::span(&size, 1)));
    if (size > kMaxBulk)
      fail("bulk: the client announced " + std::to_string(size) + " bytes, over the " +
           std::to_string(kMaxBulk) + " this server takes");
    s.bytes = size;
    auto buf = bulk->allocate(std::max<std::uint64_t>(size, 8));
    const std::size_t got = bulk->recv(bulk.peer, 1, std::span(buf->data(), size));
    if (got != size)
      fail("bulk: " + std::to_string(got) + " bytes arrived of " + std::to_string(size));
    s.bulk.add(std::span(buf->data(), size));
    bulk.session->barrier([&] { bulk->progress(); });
  }
  return s.line(over);
}

int serve(const std::string& address, const std::string& provider) {
  std::signal(SIGINT, [](int) { stop = 1; });
  std::signal(SIGTERM, [](int) { stop = 1; });
  fabflow::Node node;
  node.listen(address);
  std::printf("listening on %s\n", node.address().c_str());
  std::fflush(stdout);
  struct Served {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done = std::make_shared<std::atomic<bool>>(false);
  };
  std::vector<Served> sessions;
  while (!stop) {
    std::unique_ptr<fabflow::Peer> peer;
    try {
      peer = node.accept(std::chrono::milliseconds(200));
    } catch (const std::exception& e) {  // a client that vanished while its session began
      std::printf("client ?: failed: %s\n", e.what());
    }
    std::erase_if(sessions, [](Served& s) {
      if (!*s.done) return false;
      s.thread.join();
      return true;
    });
    if (!peer) continue;
    Served s;
    s.thread = std::thread([peer = std::move(peer), provider, done = s.done]() mutable {
      std::string line;
      try {
        line = serve_one(*peer, provider);
      } catch (const std::exception& e) {  // this client only
        line = std::string("failed: ") + e.what();
      }
      const std::string remote = peer->remote();
      peer.reset();  // the session's resources go before the line says it is over
      std::printf("client %s: %s\n", remote.c_str(), line.c_str());
      std::fflush(stdout);
      *done = true;
    });
    sessions.push_back(std::move(s));
  }
  for (Served& s : sessions) s.thread.join();  // the clients in flight finish first
  std::printf("stopped\n");
  return 0;
}

int client(const std::string& address, const std::string& provider, Session s) {
  auto peer = fabflow::Node().connect(address, kTimeout);
  std::string over;
  {
    auto queue = fabflow::flow::open_producer(*peer, queue_options(), transport_options(provider));
    over = queue.provider;
    for (std::uint64_t i = 0; i < s.items; ++i) {
      std::uint64_t item[8] = {i, ~i, i * 0x9e3779b97f4a7c15ull};
      if (queue->enqueue(std::as_bytes(std::span(item)), kTimeout) != fabflow::Status::ok)
        fail("enqueue failed: " + queue->error());
      s.queue.add(std::as_bytes(std::span(item)));
    }
    if (queue->close(kTimeout) != fabflow::Status::ok) fail("close failed: " + queue->error());
    queue.session->barrier([&] { queue.transport->progress(); });
  }
  {
    auto calls = fabflow::rr::open_requester(*peer, call_options(), 1, transport_options(provider));
    for (std::uint64_t i = 0; i < s.calls; ++i) {
      std::memcpy(calls->request_buffer(0).data(), &i, sizeof i);
      fabflow::rr::Response r;
      calls->call(0, 0, sizeof i, &r, *calls.session);
      std::uint64_t a = 0;
      if (r.data.size() == sizeof a) std::memcpy(&a, r.data.data(), sizeof a);
      calls->release(r);
      if (r.data.size() != sizeof a || a != answer_to(i))
        fail("call " + std::to_string(i) + " got a wrong answer");
    }
    if (calls->close() != fabflow::Status::ok) fail("calls: close failed: " + calls->error());
    calls.session->barrier([&] { calls.transport->progress(); });
  }
  {
    auto bulk = fabflow::bulk::open_channel(*peer, {}, transport_options(provider));
    auto buf = bulk->allocate(std::max<std::uint64_t>(s.bytes, 8));
    fill(std::span(buf->data(), s.bytes));
    s.bulk.add(std::span(buf->data(), s.bytes));
    bulk->send(bulk.peer, 0, std::as_bytes(std::span(&s.bytes, 1)));
    bulk->send(bulk.peer, 1, std::span<const std::byte>(buf->data(), s.bytes));
    bulk.session->barrier([&] { bulk->progress(); });
  }
  std::printf("%s\n", s.line(over).c_str());
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: service serve HOST:PORT [-p PROVIDER] | connect HOST:PORT [-n ITEMS] "
               "[-m CALLS] [-b BYTES[K|M|G]] [-p PROVIDER]\n");
  return 2;
}

// A count with an optional K, M or G suffix (powers of two for bytes); nullopt when malformed.
std::optional<std::uint64_t> count(const char* text, bool suffix) {
  char* end = nullptr;
  errno = 0;
  std::uint64_t n = std::strtoull(text, &end, 10);
  if (end == text || errno != 0 || *text == '-') return std::nullopt;
  if (suffix && *end) {
    const unsigned shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 64;
    if (shift == 64 || end[1] != '\0' || n > (std::uint64_t{1} << (63 - shift)))
      return std::nullopt;
    n <<= shift;
  } else if (*end) {
    return std::nullopt;
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 3) return usage();
  const std::string mode = argv[1], address = argv[2];
  std::string provider = "auto";
  Session s;
  if (argc % 2 != 1) return usage();  // flags come with a value each
  for (int i = 3; i < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "-p") {
      provider = value;
      continue;
    }
    const auto n = count(value, flag == "-b");
    if (!n || (flag != "-n" && flag != "-m" && flag != "-b")) return usage();
    if (flag == "-b" && *n > kMaxBulk) {
      std::fprintf(stderr, "service: -b %s is over the 1G a server takes\n", value);
      return 2;
    }
    (flag == "-n" ? s.items : flag == "-m" ? s.calls : s.bytes) = *n;
  }
  if (mode == "serve") return serve(address, provider);
  if (mode == "connect") return client(address, provider, s);
  return usage();
} catch (const fabflow::UsageError& e) {
  std::fprintf(stderr, "service: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "service: %s\n", e.what());
  return 1;
}
