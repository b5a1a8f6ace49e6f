// queue_service: a server that clients connect to whenever they like, started by hand in two
// shells (no launcher, no fixed set of ranks).
//
// The server listens and, for each client that connects, opens a flow queue over that
// connection, dequeues every item, checks that the items arrive in order and exactly once, and
// prints a line per client: its items and their checksum, or why the client failed (a client
// killed mid-stream fails its own session only; the server goes on). The client enqueues N
// numbered items of 64 bytes and prints its checksum, which must equal the server's line for it.
// Clients are served side by side, each on a thread of its own. Ctrl-C (SIGINT) or SIGTERM
// stops the server: it accepts no one more and finishes the clients in flight.
//
//   export FABFLOW_SECRET=some-secret          # both shells: connections prove it
//   queue_service serve 127.0.0.1:7000         # shell 1: prints "listening on 127.0.0.1:7000"
//   queue_service connect 127.0.0.1:7000       # shell 2, as often as you like
//   queue_service connect 127.0.0.1:7000 -n 100000 -p tcp
//
// -p names the transport (both sides must name the same one); without it both find out that
// they share this host and use local (connect_transport's "auto").
#include <fabflow/flow.h>
#include <fabflow/node.h>
#include <fabflow/transport.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::chrono::seconds kTimeout{10};
volatile std::sig_atomic_t stop = 0;

// FNV-1a over the bytes of every item, in order.
struct Checksum {
  std::uint64_t value = 14695981039346656037ull;
  void add(std::span<const std::byte> bytes) {
    for (std::byte b : bytes) value = (value ^ std::to_integer<unsigned>(b)) * 1099511628211ull;
  }
};

fabflow::flow::QueueOptions queue_options() {
  fabflow::flow::QueueOptions q;
  q.item_bytes = 64;
  return q;
}

fabflow::TransportOptions transport_options(const std::string& provider) {
  fabflow::TransportOptions t;
  t.provider = provider;
  t.ops = fabflow::flow::required_ops(queue_options());
  t.rx_depth = std::max(t.rx_depth, fabflow::flow::required_rx_depth(queue_options()));
  return t;
}

// One client's stream; returns the line the server prints for it.
std::string serve_one(fabflow::Peer& peer, const std::string& provider) {
  std::string choice;
  auto transport =
      fabflow::connect_transport(transport_options(provider), peer.bootstrap(), &choice);
  auto queue = fabflow::flow::make_consumer(*transport, peer.bootstrap(), 1, queue_options());
  std::uint64_t item[8];
  std::uint64_t items = 0;
  Checksum sum;
  for (;;) {
    std::size_t len = 0;
    const fabflow::Status s =
        queue->dequeue(std::as_writable_bytes(std::span(item)), &len, kTimeout);
    if (s == fabflow::Status::closed) break;
    if (s != fabflow::Status::ok) return "failed: " + queue->error();
    if (len != sizeof item || item[0] != items)
      return "failed: item " + std::to_string(items) + " out of order or torn";
    sum.add(std::as_bytes(std::span(item)));
    ++items;
  }
  peer.bootstrap().barrier([&] { transport->progress(); });
  char line[160];
  std::snprintf(line, sizeof line, "%llu items in order over %s, checksum %016llx",
                static_cast<unsigned long long>(items), choice.c_str(),
                static_cast<unsigned long long>(sum.value));
  return line;
}

// One client's session on a thread of its own, so that clients are served side by side.
struct Session {
  std::thread thread;
  std::shared_ptr<std::atomic<bool>> done = std::make_shared<std::atomic<bool>>(false);
};

int serve(const std::string& address, const std::string& provider) {
  std::signal(SIGINT, [](int) { stop = 1; });
  std::signal(SIGTERM, [](int) { stop = 1; });
  fabflow::Node node;
  node.listen(address);
  std::printf("listening on %s\n", node.address().c_str());
  std::fflush(stdout);
  std::vector<Session> sessions;
  while (!stop) {
    std::unique_ptr<fabflow::Peer> peer;
    try {
      peer = node.accept(std::chrono::milliseconds(200));
    } catch (const std::exception& e) {  // a client that vanished while its session began
      std::printf("client ?: failed: %s\n", e.what());
    }
    std::erase_if(sessions, [](Session& s) {
      if (!*s.done) return false;
      s.thread.join();
      return true;
    });
    if (!peer) continue;
    Session s;
    s.thread = std::thread([peer = std::move(peer), provider, done = s.done] {
      std::string line;
      try {
        line = serve_one(*peer, provider);
      } catch (const std::exception& e) {  // this client only
        line = std::string("failed: ") + e.what();
      }
      std::printf("client %s: %s\n", peer->remote().c_str(), line.c_str());
      std::fflush(stdout);
      *done = true;
    });
    sessions.push_back(std::move(s));
  }
  for (Session& s : sessions) s.thread.join();  // the clients in flight finish first
  std::printf("stopped\n");
  return 0;
}

int produce(const std::string& address, const std::string& provider, std::uint64_t n) {
  auto peer = fabflow::Node().connect(address, kTimeout);
  std::string choice;
  auto transport =
      fabflow::connect_transport(transport_options(provider), peer->bootstrap(), &choice);
  auto queue = fabflow::flow::make_producer(*transport, peer->bootstrap(), 0, queue_options());
  Checksum sum;
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t item[8] = {i, ~i, i * 0x9e3779b97f4a7c15ull};
    if (queue->enqueue(std::as_bytes(std::span(item)), kTimeout) != fabflow::Status::ok) {
      std::fprintf(stderr, "queue_service: enqueue failed: %s\n", queue->error().c_str());
      return 1;
    }
    sum.add(std::as_bytes(std::span(item)));
  }
  if (queue->close(kTimeout) != fabflow::Status::ok) {
    std::fprintf(stderr, "queue_service: close failed: %s\n", queue->error().c_str());
    return 1;
  }
  peer->bootstrap().barrier([&] { transport->progress(); });
  std::printf("%llu items sent over %s, checksum %016llx\n", static_cast<unsigned long long>(n),
              choice.c_str(), static_cast<unsigned long long>(sum.value));
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: queue_service serve HOST:PORT [-p PROVIDER] | connect HOST:PORT [-n ITEMS] "
               "[-p PROVIDER]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 3) return usage();
  const std::string mode = argv[1], address = argv[2];
  std::string provider = "auto";
  std::uint64_t items = 1000000;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "-p") == 0 && i + 1 < argc) {
      provider = argv[++i];
    } else if (std::strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
      char* end = nullptr;
      items = std::strtoull(argv[++i], &end, 10);
      if (*end != '\0' || items == 0) return usage();
    } else {
      return usage();
    }
  }
  if (mode == "serve") return serve(address, provider);
  if (mode == "connect") return produce(address, provider, items);
  return usage();
} catch (const fabflow::UsageError& e) {
  std::fprintf(stderr, "queue_service: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "queue_service: %s\n", e.what());
  return 1;
}
