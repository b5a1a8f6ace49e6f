// Node: clients connect to a running listener whenever they like, each gets a session of its own
// over which a flow queue opens; bad connections are refused without stopping the listener; a
// client killed mid-session fails that session only, within its bound.
#include <fabflow/bulk.h>
#include <fabflow/bulk/transfer.h>
#include <fabflow/flow.h>
#include <fabflow/rr.h>
#include <fabflow/node.h>
#include <fabflow/transport.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <chrono>
#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/wire.h"

namespace fabflow {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

NodeOptions options(std::string secret = "node-test") {
  NodeOptions o;
  o.secret = std::move(secret);
  o.timeout = 2000ms;
  o.handshake = 500ms;
  return o;
}

constexpr std::uint64_t kItems = 20000;

flow::QueueOptions queue_options() {
  flow::QueueOptions q;
  q.item_bytes = 64;
  return q;
}

TransportOptions transport_for(const std::string& provider) {
  TransportOptions t;
  t.provider = provider;
  t.ops = flow::required_ops(queue_options());
  t.rx_depth = std::max(t.rx_depth, flow::required_rx_depth(queue_options()));
  return t;
}

// The client's side of a session: kItems numbered items, then close.
void produce(Peer& peer, const std::string& provider, std::uint64_t first) {
  auto t = connect_transport(transport_for(provider), peer.bootstrap());
  auto q = flow::make_producer(*t, peer.bootstrap(), 0, queue_options());
  for (std::uint64_t i = 0; i < kItems; ++i) {
    std::uint64_t item[8] = {first + i, ~(first + i)};
    ASSERT_EQ(q->enqueue(std::as_bytes(std::span(item)), 5000ms), Status::ok) << q->error();
  }
  ASSERT_EQ(q->close(5000ms), Status::ok) << q->error();
  peer.bootstrap().barrier([&] { t->progress(); });
}

// The server's side: every item, in order, exactly once.
void consume(Peer& peer, const std::string& provider, std::uint64_t first) {
  auto t = connect_transport(transport_for(provider), peer.bootstrap());
  auto q = flow::make_consumer(*t, peer.bootstrap(), 1, queue_options());
  std::uint64_t item[8];
  std::uint64_t next = first;
  for (;;) {
    std::size_t len = 0;
    const Status s = q->dequeue(std::as_writable_bytes(std::span(item)), &len, 5000ms);
    if (s == Status::closed) break;
    ASSERT_EQ(s, Status::ok) << q->error();
    ASSERT_EQ(len, sizeof item);
    ASSERT_EQ(item[0], next);
    ASSERT_EQ(item[1], ~next);
    ++next;
  }
  EXPECT_EQ(next - first, kItems);
  peer.bootstrap().barrier([&] { t->progress(); });
}

class NodeSessions : public ::testing::TestWithParam<std::string> {};

// Three clients, one after another, each connecting after the server was already running.
TEST_P(NodeSessions, ClientsArriveAndLeaveWhileTheServerRuns) {
  Node server(options());
  server.listen("127.0.0.1:0");
  const std::string at = server.address();
  std::thread serving([&] {
    for (std::uint64_t c = 0; c < 3; ++c) {
      auto peer = server.accept(10s);
      ASSERT_NE(peer, nullptr);
      EXPECT_EQ(peer->bootstrap().rank(), 0);
      consume(*peer, GetParam(), c * kItems);
    }
    EXPECT_EQ(server.accept(100ms), nullptr);  // nobody else came
  });
  for (std::uint64_t c = 0; c < 3; ++c) {
    std::this_thread::sleep_for(50ms);
    auto peer = Node(options()).connect(at, 5s);
    EXPECT_EQ(peer->bootstrap().rank(), 1);
    produce(*peer, GetParam(), c * kItems);
  }
  serving.join();
  EXPECT_EQ(server.refused(), 0u);
}

// Over one Peer, one after the other: rr calls with the accepting side as the responder (its
// requester sits at rank 0 of the session all the same), then a bulk message each way.
TEST_P(NodeSessions, CallsAndBulkOpenOverAPeerWhicheverSideAccepted) {
  Node server(options());
  server.listen("127.0.0.1:0");
  const std::string at = server.address();
  TransportOptions t;
  t.provider = GetParam();
  rr::ChannelOptions calls;
  calls.request_bytes = calls.response_bytes = 8;
  constexpr std::size_t kBulk = std::size_t{3} << 20;
  std::thread serving([&] {
    auto peer = server.accept(10s);
    ASSERT_NE(peer, nullptr);
    auto r = rr::open_responder(*peer, calls, t);
    const rr::Handler twice = [](int, std::span<const std::byte> in, std::span<std::byte> out) {
      std::uint64_t n = 0;
      std::memcpy(&n, in.data(), sizeof n);
      n *= 2;
      std::memcpy(out.data(), &n, sizeof n);
      return sizeof n;
    };
    while (!r->done()) {
      unsigned served = 0;
      ASSERT_NE(r->serve(&twice, &served), Status::failed) << r->error();
    }
    r.session->barrier([&] { r.transport->progress(); });
    auto b = bulk::open_channel(*peer, {}, t);
    std::vector<std::byte> buf(kBulk);
    ASSERT_EQ(b->recv(b.peer, 7, buf), kBulk);
    for (std::size_t i = 0; i < kBulk; ++i) ASSERT_EQ(buf[i], std::byte(i * 7 % 251)) << i;
    std::ranges::reverse(buf);
    b->send(b.peer, 8, buf);
    b.session->barrier([&] { b->progress(); });
  });
  auto peer = Node(options()).connect(at, 5s);
  {
    auto r = rr::open_requester(*peer, calls, 1, t);
    EXPECT_EQ(r.session->rank(), 0);  // the requester's rank, though this side connected
    EXPECT_EQ(peer->bootstrap().rank(), 1);
    for (std::uint64_t i = 0; i < 100; ++i) {
      std::memcpy(r->request_buffer(0).data(), &i, sizeof i);
      rr::Response resp;
      r->call(0, 0, sizeof i, &resp, *r.session);
      std::uint64_t got = 0;
      ASSERT_EQ(resp.data.size(), sizeof got);
      std::memcpy(&got, resp.data.data(), sizeof got);
      r->release(resp);
      ASSERT_EQ(got, 2 * i);
    }
    ASSERT_EQ(r->close(), Status::ok) << r->error();
    r.session->barrier([&] { r.transport->progress(); });
  }
  auto b = bulk::open_channel(*peer, {}, t);
  EXPECT_EQ(b.peer, 0);
  std::vector<std::byte> out(kBulk), back(kBulk);
  for (std::size_t i = 0; i < kBulk; ++i) out[i] = std::byte(i * 7 % 251);
  b->send(b.peer, 7, out);
  ASSERT_EQ(b->recv(b.peer, 8, back), kBulk);
  std::ranges::reverse(back);
  EXPECT_EQ(back, out);
  b.session->barrier([&] { b->progress(); });
  serving.join();
}

INSTANTIATE_TEST_SUITE_P(Node, NodeSessions, ::testing::Values("local", "shm", "tcp"),
                         [](const auto& info) { return info.param; });

TEST(Node, AWrongSecretIsRefusedAndTheListenerGoesOn) {
  Node server(options());
  server.listen("127.0.0.1:0");
  std::thread serving([&] {
    auto peer = server.accept(10s);
    ASSERT_NE(peer, nullptr);
    EXPECT_EQ(peer->bootstrap().allgather(std::as_bytes(std::span("s", 1)))[1].size(), 1u);
  });
  try {
    Node(options("another secret")).connect(server.address(), 5s);
    ADD_FAILURE() << "connected with a wrong secret";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("refused this process: wrong secret"), std::string::npos)
        << e.what();
  }
  auto peer = Node(options()).connect(server.address(), 5s);
  peer->bootstrap().allgather(std::as_bytes(std::span("c", 1)));
  serving.join();
  EXPECT_EQ(server.refused(), 1u);
}

TEST(Node, NothingListeningFailsWithinTheTimeoutNamingTheAddress) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);  // a port nobody listens on
  const std::string at = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  const auto start = Clock::now();
  try {
    Node(options()).connect(at, 300ms);
    ADD_FAILURE() << "connected to nothing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing answers at " + at), std::string::npos)
        << e.what();
  }
  EXPECT_LT(Clock::now() - start, 1500ms);
  EXPECT_THROW(Node(options()).connect("127.0.0.1", 300ms), UsageError);
  EXPECT_THROW(Node(options()).listen("no-port"), UsageError);
}

// A raw TCP connection to the listener, sending `bytes` (nothing when empty).
int raw_connection(const std::string& address, const std::vector<std::byte>& bytes) {
  const auto colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  if (!bytes.empty())
    EXPECT_EQ(::send(s, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
  return s;
}

std::vector<std::byte> text(std::string_view s) {
  const auto b = std::as_bytes(std::span(s.data(), s.size()));
  return {b.begin(), b.end()};
}

// Silent, garbled, oversized, another version, and 100 left half-way: none of them delays a
// good client, and each is dropped.
TEST(Node, BadConnectionsNeitherBlockNorStopTheListener) {
  using namespace bootstrap_detail;
  Node server(options());
  server.listen("127.0.0.1:0");
  const std::string at = server.address();
  std::vector<int> bad;
  bad.push_back(raw_connection(at, {}));
  bad.push_back(raw_connection(at, text("GET / HTTP/1.0\r\n\r\n")));
  std::vector<std::byte> huge(8, std::byte{0});
  huge[0] = std::byte{2};
  huge[4] = huge[5] = huge[6] = huge[7] = std::byte{0x7f};  // a HELLO announcing 2 GB
  bad.push_back(raw_connection(at, huge));
  Hello old;
  bad.push_back(raw_connection(at, encode_hello(old, kMagic, kVersion + 7)));
  for (int i = 0; i < 100; ++i) bad.push_back(raw_connection(at, {}));

  std::thread serving([&] {
    auto peer = server.accept(10s);
    ASSERT_NE(peer, nullptr);
    peer->bootstrap().barrier();
  });
  const auto start = Clock::now();
  auto peer = Node(options()).connect(at, 5s);
  peer->bootstrap().barrier();
  EXPECT_LT(Clock::now() - start, 2000ms);
  serving.join();
  EXPECT_EQ(server.accept(700ms), nullptr);  // the silent ones time out meanwhile
  EXPECT_EQ(server.refused(), bad.size());
  for (int s : bad) ::close(s);
}

// A client SIGKILLed or SIGSTOPped mid-session: that session fails within its timeout + 1 s, the
// next client is served.
class NodeDeparture : public ::testing::TestWithParam<int> {};

TEST_P(NodeDeparture, ADepartedClientFailsItsSessionOnly) {
  Node server(options());
  server.listen("127.0.0.1:0");
  const std::string at = server.address();
  const pid_t child = ::fork();  // before any thread of this test
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      auto peer = Node(options()).connect(at, 5s);
      for (;;) ::pause();
    } catch (...) {
    }
    ::_exit(1);
  }
  auto peer = server.accept(10s);
  ASSERT_NE(peer, nullptr);
  ::kill(child, GetParam());
  const auto gone = Clock::now();
  while (!peer->bootstrap().peer_failed() && Clock::now() - gone < 5s)
    std::this_thread::sleep_for(10ms);
  const auto noticed = Clock::now() - gone;
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(peer->bootstrap().peer_failed());
  EXPECT_LT(noticed, 3000ms);  // its timeout (2 s) + 1 s
  ASSERT_TRUE(peer->bootstrap().failure());
  EXPECT_NE(peer->bootstrap().failure()->what.find("rank 1"), std::string::npos)
      << peer->bootstrap().failure()->what;
  peer.reset();

  std::thread client([&] {
    auto p = Node(options()).connect(at, 5s);
    p->bootstrap().barrier();
  });
  auto next = server.accept(10s);
  ASSERT_NE(next, nullptr);
  next->bootstrap().barrier();
  client.join();
}

INSTANTIATE_TEST_SUITE_P(Node, NodeDeparture, ::testing::Values(SIGKILL, SIGSTOP),
                         [](const auto& info) {
                           return std::string(info.param == SIGKILL ? "killed" : "stopped");
                         });

}  // namespace
}  // namespace fabflow
