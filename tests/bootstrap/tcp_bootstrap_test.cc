// Multi-process tests of the TCP bootstrap: every rank is a forked child that reports through
// its exit status and a few lines; the parent never creates a bootstrap with a coordinator.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include "bootstrap/wire.h"
#include "fabflow/bootstrap.h"
#include "fabflow/status.h"
#include "support/forked.h"

namespace fabflow::test {
namespace {

using bootstrap_detail::Bytes;
using bootstrap_detail::Fd;
using bootstrap_detail::Frame;
using bootstrap_detail::FrameBuffer;
using bootstrap_detail::Msg;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Bytes text_bytes(std::string_view s) {
  Bytes b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

std::string text_of(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// Rank r's distinct blob for one round: sizes from empty to 300 kB.
Bytes pattern(int rank, int round) {
  std::size_t n = rank == 1 ? 0 : static_cast<std::size_t>(rank * 997 + round * 131) % 5000;
  if (rank == 2 && round == 1) n += 300000;
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = static_cast<std::byte>((i * 31 + rank * 7 + round * 13) & 0xff);
  return b;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void expect_exit_ok(std::vector<Child>& children) {
  for (std::size_t r = 0; r < children.size(); ++r) {
    EXPECT_EQ(children[r].finish(), 0) << "rank " << r << " said:\n" << children[r].output();
  }
}

// All-gathers distinct blobs for several rounds and barriers in between.
int allgather_rounds(int rank, const ChildIo& io, const BootstrapConfig& config) {
  auto b = make_tcp_bootstrap(config);
  if (b->rank() != rank || b->size() != config.size || b->local_address() != "127.0.0.1") {
    io.say("wrong identity: rank " + std::to_string(b->rank()) + " address " + b->local_address());
    return 2;
  }
  for (int round = 0; round < 4; ++round) {
    const auto all = b->allgather(pattern(rank, round));
    if (all.size() != static_cast<std::size_t>(config.size)) return 3;
    for (int r = 0; r < config.size; ++r) {
      if (all[r] != pattern(r, round)) {
        io.say("round " + std::to_string(round) + ": blob of rank " + std::to_string(r) +
               " differs");
        return 4;
      }
    }
    for (int i = 0; i < 3; ++i) b->barrier();
    int calls = 0;
    b->barrier([&] { ++calls; });
  }
  return b->peer_failed() ? 5 : 0;
}

// After one barrier, waits (like a benchmark loop) until a peer failure shows; then the next
// barrier must throw PeerError naming `dead`.
int expect_peer_failure(const ChildIo& io, Bootstrap& b, int dead, const std::string& what) {
  const auto start = Clock::now();
  while (!b.peer_failed()) {
    if (seconds_since(start) > 2.0) {
      io.say("no failure seen within 2 s");
      return 10;
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
  try {
    b.barrier();
  } catch (const PeerError& e) {
    io.say(e.what());
    return e.rank() == dead && contains(e.what(), what) ? 0 : 11;
  }
  io.say("barrier after the failure did not throw");
  return 12;
}

// A client speaking the wire protocol by hand, for the coordinator's rejections.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) std::abort();
  }

  void send(const Bytes& bytes) const {
    ASSERT_EQ(::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }

  // The next frame, or nullopt on EOF or timeout.
  // The next frame but the coordinator's liveness reports, which arrive every beat.
  std::optional<Frame> read(milliseconds timeout = milliseconds(5000)) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      if (auto f = in_.take(bootstrap_detail::kMaxFrame)) {
        if (f->type == static_cast<std::uint32_t>(Msg::liveness)) continue;
        return f;
      }
      if (!fill(deadline)) return std::nullopt;
    }
  }

  // True when the peer closes the connection within `timeout` (anything it sends is dropped).
  bool closed_within(milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, bootstrap_detail::ms_until(deadline)) != 1) return false;
      char buf[4096];
      if (::recv(fd_.get(), buf, sizeof buf, 0) <= 0) return true;
    }
  }

  // Answers the challenge with a HELLO; returns the coordinator's reply.
  std::optional<Frame> hello(std::uint32_t rank, std::uint32_t size, const std::string& secret,
                             std::uint32_t magic = bootstrap_detail::kMagic,
                             std::uint32_t version = bootstrap_detail::kVersion) {
    auto challenge = read();
    if (!challenge || challenge->type != static_cast<std::uint32_t>(Msg::challenge))
      return std::nullopt;
    challenge_ = bootstrap_detail::decode_challenge(challenge->body);
    hello_.rank = rank;
    hello_.size = size;
    hello_.client_nonce = bootstrap_detail::random_nonce();
    hello_.mac = bootstrap_detail::hello_mac(secret, challenge_, rank, size, hello_.client_nonce);
    send(bootstrap_detail::encode_hello(hello_, magic, version));
    return read();
  }

  // The coordinator's reply to a rejected HELLO, or a note on what came instead.
  std::string rejection(std::uint32_t rank, std::uint32_t size, const std::string& secret,
                        std::uint32_t magic = bootstrap_detail::kMagic,
                        std::uint32_t version = bootstrap_detail::kVersion) {
    auto reply = hello(rank, size, secret, magic, version);
    if (!reply) return "(no reply)";
    if (reply->type != static_cast<std::uint32_t>(Msg::reject))
      return "(type " + std::to_string(reply->type) + ")";
    if (!closed_within(milliseconds(5000))) return "(not closed)";
    return text_of(reply->body);
  }

  bool welcome_is_valid(const Frame& f, const std::string& secret) const {
    bootstrap_detail::Mac mac{};
    if (f.type != static_cast<std::uint32_t>(Msg::welcome) || f.body.size() != mac.size())
      return false;
    std::memcpy(mac.data(), f.body.data(), mac.size());
    return bootstrap_detail::same_mac(
        mac, bootstrap_detail::welcome_mac(secret, challenge_, hello_.client_nonce));
  }

  int fd() const { return fd_.get(); }

 private:
  bool fill(Clock::time_point deadline) {
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, bootstrap_detail::ms_until(deadline)) != 1) return false;
    auto space = in_.prepare(65536);
    const ssize_t n = ::recv(fd_.get(), space.data(), space.size(), 0);
    if (n <= 0) return false;
    in_.commit(static_cast<std::size_t>(n));
    return true;
  }

  Fd fd_;
  FrameBuffer in_;
  bootstrap_detail::Nonce challenge_{};
  bootstrap_detail::Hello hello_;
};

TEST(BootstrapTcp, SingleRankNeedsNoCoordinator) {
  BootstrapConfig config;
  config.rank = 0;
  config.size = 1;
  auto b = make_tcp_bootstrap(config);
  const Bytes mine = text_bytes("alone");
  const auto all = b->allgather(mine);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], mine);
  b->barrier();
  EXPECT_FALSE(b->peer_failed());
}

TEST(BootstrapTcp, AllgatherTwoRanks) {
  auto children = spawn_ranks(2, loopback(), allgather_rounds);
  expect_exit_ok(children);
}

TEST(BootstrapTcp, AllgatherEightRanks) {
  auto children = spawn_ranks(8, loopback(), allgather_rounds);
  expect_exit_ok(children);
}

TEST(BootstrapTcp, RanksAsThreadsOfOneProcess) {
  // In-process, so that LeakSanitizer sees the coordinator's teardown; all threads are joined
  // before the test ends, and later tests fork from a single-threaded process again.
  auto listener = loopback();
  const std::string coord = listener.address();
  const int fd = listener.fd.get();
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    BootstrapConfig config = rank_config(r, 3, coord);
    if (r == 0) config.listen_fd = fd;  // ownership passes to rank 0's bootstrap
    threads.emplace_back([&bad, config] {
      const ChildIo quiet(-1, -1);
      try {
        if (allgather_rounds(config.rank, quiet, config) != 0) ++bad;
      } catch (const std::exception&) {
        ++bad;
      }
    });
  }
  for (auto& t : threads) t.join();
  static_cast<void>(listener.fd.release());  // closed by rank 0's bootstrap
  EXPECT_EQ(bad.load(), 0);
}

TEST(BootstrapTcp, RankZeroBindsTheCoordinatorAddress) {
  // Without an inherited socket rank 0 binds host:port itself; a port freed just before can be
  // taken by someone else in between, so a few attempts are allowed for that case only.
  for (int attempt = 0;; ++attempt) {
    const std::string coord = loopback().address();
    std::vector<Child> children;
    for (int r = 0; r < 3; ++r) {
      children.push_back(Child::spawn(
          [&, r](const ChildIo& io) { return allgather_rounds(r, io, rank_config(r, 3, coord)); }));
    }
    std::vector<int> status;
    for (auto& c : children) status.push_back(c.finish());
    if (status[0] != 0 && contains(children[0].output(), "Address already in use") && attempt < 3)
      continue;
    for (int r = 0; r < 3; ++r)
      EXPECT_EQ(status[r], 0) << "rank " << r << " said:\n" << children[r].output();
    return;
  }
}

TEST(BootstrapTcp, WrongSecretIsRejectedWhileTheRunCompletes) {
  auto listener = loopback();
  const std::string coord = listener.address();
  BootstrapConfig config0 = rank_config(0, 2, coord);
  config0.listen_fd = listener.fd.get();
  Child rank0 = Child::spawn([&](const ChildIo& io) { return allgather_rounds(0, io, config0); });
  listener.fd.reset();

  Child intruder = Child::spawn([&](const ChildIo& io) {
    BootstrapConfig config = rank_config(1, 2, coord);
    config.secret = "not-the-secret";
    try {
      make_tcp_bootstrap(config);
    } catch (const Error& e) {
      io.say(e.what());
      return 0;
    }
    return 1;
  });
  ASSERT_EQ(intruder.finish(), 0) << intruder.output();
  EXPECT_EQ(intruder.output(),
            "bootstrap: coordinator at " + coord + " rejected this process: wrong secret\n");

  Child rank1 = Child::spawn(
      [&](const ChildIo& io) { return allgather_rounds(1, io, rank_config(1, 2, coord)); });
  EXPECT_EQ(rank0.finish(), 0) << rank0.output();
  EXPECT_EQ(rank1.finish(), 0) << rank1.output();
}

TEST(BootstrapTcp, CoordinatorRejectsBadHandshakes) {
  auto listener = loopback();
  const int port = listener.port;
  BootstrapConfig config0 = rank_config(0, 2, "");
  config0.listen_fd = listener.fd.get();
  Child rank0 = Child::spawn([&](const ChildIo& io) {
    auto b = make_tcp_bootstrap(config0);
    b->barrier();
    const auto all = b->allgather(text_bytes("zero"));
    if (text_of(all[0]) != "zero" || text_of(all[1]) != "one") return 2;
    io.say("done");
    return 0;
  });
  listener.fd.reset();
  const std::string secret = "test-secret";

  EXPECT_EQ(RawClient(port).rejection(1, 2, secret, 0xdeadbeef),
            "bad magic (not a fabflow bootstrap client)");
  EXPECT_EQ(RawClient(port).rejection(1, 2, secret, bootstrap_detail::kMagic, 7),
            "protocol version 7 is not supported (the coordinator speaks 2)");
  EXPECT_EQ(RawClient(port).rejection(1, 2, "guess"), "wrong secret");
  EXPECT_EQ(RawClient(port).rejection(5, 2, secret), "rank 5 is out of range for size 2");
  EXPECT_EQ(RawClient(port).rejection(1, 3, secret),
            "size 3 does not match the coordinator's size 2");

  // Join as rank 1 by hand; READY proves rank 0 joined too, so both ranks are taken.
  RawClient me(port);
  auto welcome = me.hello(1, 2, secret);
  ASSERT_TRUE(welcome && me.welcome_is_valid(*welcome, secret));
  auto ready = me.read();
  ASSERT_TRUE(ready && ready->type == static_cast<std::uint32_t>(Msg::ready));
  EXPECT_EQ(RawClient(port).rejection(1, 2, secret), "rank 1 already joined");
  EXPECT_EQ(RawClient(port).rejection(0, 2, secret), "rank 0 already joined");

  me.send(bootstrap_detail::encode_gather(bootstrap_detail::Collective::barrier, {}));
  auto result = me.read();
  ASSERT_TRUE(result && result->type == static_cast<std::uint32_t>(Msg::result));
  EXPECT_TRUE(bootstrap_detail::decode_result(result->body, 0).empty());
  me.send(
      bootstrap_detail::encode_gather(bootstrap_detail::Collective::allgather, text_bytes("one")));
  result = me.read();
  ASSERT_TRUE(result && result->type == static_cast<std::uint32_t>(Msg::result));
  const auto blobs = bootstrap_detail::decode_result(result->body, 2);
  EXPECT_EQ(text_of(blobs[0]), "zero");
  EXPECT_EQ(text_of(blobs[1]), "one");
  me.send(bootstrap_detail::encode_empty(Msg::bye));
  EXPECT_EQ(rank0.finish(), 0) << rank0.output();
}

TEST(BootstrapTcp, GarbageConnectionsDoNotDisturbTheRun) {
  auto listener = loopback();
  const int port = listener.port;
  std::vector<Child> children =
      spawn_ranks(3, std::move(listener), allgather_rounds, milliseconds(5000), 1);

  RawClient silent(port);  // connects and never speaks
  RawClient http(port);
  const std::string request = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  http.send(text_bytes(request));
  RawClient huge(port);
  huge.send(Bytes{std::byte{0}, std::byte{0}, std::byte{0}, std::byte{2}, std::byte{0xff},
                  std::byte{0xff}, std::byte{0xff}, std::byte{0xff}});
  RawClient bogus_hello(port);
  Bytes frame =
      bootstrap_detail::FrameBuilder(Msg::hello).bytes(Bytes(200, std::byte{0x5a})).finish();
  bogus_hello.send(frame);
  RawClient random(port);
  Bytes noise(3000);
  for (std::size_t i = 0; i < noise.size(); ++i)
    noise[i] = static_cast<std::byte>((i * 7919 + 17) % 251);
  random.send(noise);
  { RawClient hangs_up(port); }

  for (int r = 1; r < 3; ++r) {
    children.push_back(Child::spawn([&, r](const ChildIo& io) {
      return allgather_rounds(r, io, rank_config(r, 3, "127.0.0.1:" + std::to_string(port)));
    }));
  }
  EXPECT_TRUE(http.closed_within(milliseconds(5000)));
  EXPECT_TRUE(huge.closed_within(milliseconds(5000)));
  EXPECT_TRUE(bogus_hello.closed_within(milliseconds(5000)));
  EXPECT_TRUE(random.closed_within(milliseconds(5000)));
  expect_exit_ok(children);  // while `silent` is still connected
}

TEST(BootstrapTcp, UnreachableCoordinatorFailsWithinTheTimeout) {
  const auto closed_port = loopback(false);  // bound, not listening: connections are refused
  const auto start = Clock::now();
  try {
    make_tcp_bootstrap(rank_config(1, 2, closed_port.address(), milliseconds(500)));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "bootstrap: cannot reach coordinator " +
                                         closed_port.address() +
                                         " within 0.5 s (Connection refused)");
  }
  EXPECT_GE(seconds_since(start), 0.45);
  EXPECT_LT(seconds_since(start), 2.0);
}

TEST(BootstrapTcp, ClientRejectsImpostorCoordinators) {
  auto listener = loopback();
  const std::string coord = listener.address();
  // A fake coordinator in a child: first some other protocol, then one that does not know the
  // secret. The parent is the client (rank 1 starts no thread).
  Child impostor = Child::spawn([&](const ChildIo&) {
    auto serve = [&](const Bytes& first, bool answer_hello) {
      Fd conn(::accept(listener.fd.get(), nullptr, nullptr));
      if (::send(conn.get(), first.data(), first.size(), MSG_NOSIGNAL) < 0) return false;
      char buf[4096];
      if (answer_hello && ::recv(conn.get(), buf, sizeof buf, 0) > 0) {
        const Bytes welcome = bootstrap_detail::encode_welcome(bootstrap_detail::Mac{});
        if (::send(conn.get(), welcome.data(), welcome.size(), MSG_NOSIGNAL) < 0) return false;
      }
      while (::recv(conn.get(), buf, sizeof buf, 0) > 0) {
      }
      return true;
    };
    const bool ok =
        serve(text_bytes("SSH-2.0-OpenSSH_9.2\r\n"), false) &&
        serve(bootstrap_detail::encode_challenge(bootstrap_detail::random_nonce()), true);
    return ok ? 0 : 1;
  });
  listener.fd.reset();
  for (const std::string expected :
       {" is not a fabflow coordinator (frame of ", " does not know the shared secret"}) {
    try {
      make_tcp_bootstrap(rank_config(1, 2, coord));
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), "bootstrap: coordinator at " + coord + expected)) << e.what();
    }
  }
  EXPECT_EQ(impostor.finish(), 0) << impostor.output();
}

TEST(BootstrapTcp, MissingRankTimesOut) {
  auto listener = loopback();
  const std::string coord = listener.address();
  auto children = spawn_ranks(
      3, std::move(listener),
      [](int, const ChildIo& io, const BootstrapConfig& config) {
        const auto start = Clock::now();
        try {
          make_tcp_bootstrap(config);
        } catch (const Error& e) {
          io.say(e.what());
          return seconds_since(start) < 3.0 ? 0 : 3;
        }
        return 2;
      },
      milliseconds(1000), 2);
  for (auto& c : children) {
    EXPECT_EQ(c.finish(), 0) << c.output();
    EXPECT_EQ(c.output(),
              "bootstrap: timed out after 1 s waiting for 1 of 3 ranks to join coordinator " +
                  coord + " (missing: 2)\n");
  }
}

// A rank that never joins because its secret is wrong: the join timeout says an attempt was
// rejected and why, not only which rank is missing.
TEST(BootstrapTcp, JoinTimeoutSaysAnAttemptWasRejected) {
  auto listener = loopback();
  const std::string coord = listener.address();
  BootstrapConfig config0 = rank_config(0, 2, coord, milliseconds(1500));
  config0.listen_fd = listener.fd.get();
  Child rank0 = Child::spawn([&](const ChildIo& io) {
    try {
      make_tcp_bootstrap(config0);
    } catch (const Error& e) {
      io.say(e.what());
      return 0;
    }
    return 1;
  });
  listener.fd.reset();
  Child intruder = Child::spawn([&](const ChildIo&) {
    BootstrapConfig config = rank_config(1, 2, coord, milliseconds(1500));
    config.secret = "not-the-secret";
    try {
      make_tcp_bootstrap(config);
    } catch (const Error&) {
      return 0;
    }
    return 1;
  });
  EXPECT_EQ(intruder.finish(), 0) << intruder.output();
  EXPECT_EQ(rank0.finish(), 0) << rank0.output();
  EXPECT_EQ(rank0.output(),
            "bootstrap: timed out after 1.5 s waiting for 1 of 2 ranks to join "
            "coordinator " +
                coord +
                " (missing: 1; 1 attempt to join was rejected, the last for: "
                "wrong secret)\n");
}

TEST(BootstrapTcp, RankExitingWithoutByeIsAPeerFailure) {
  auto children =
      spawn_ranks(3, loopback(), [](int rank, const ChildIo& io, const BootstrapConfig& config) {
        auto b = make_tcp_bootstrap(config);
        b->barrier();
        if (rank == 2) ::_exit(0);  // no destructor, no BYE: like a crash
        return expect_peer_failure(io, *b, 2, "bootstrap: rank 2 vanished (connection closed)");
      });
  expect_exit_ok(children);
}

TEST(BootstrapTcp, KilledRankIsAPeerFailure) {
  auto children =
      spawn_ranks(3, loopback(), [](int rank, const ChildIo& io, const BootstrapConfig& config) {
        auto b = make_tcp_bootstrap(config);
        b->barrier();
        if (rank == 1) {
          io.say("joined");
          return io.wait_go(milliseconds(10000)) ? 0 : 1;
        }
        return expect_peer_failure(io, *b, 1, "bootstrap: rank 1 vanished (connection closed)");
      });
  ASSERT_EQ(children[1].next_line(milliseconds(10000)), "joined") << children[1].output();
  children[1].kill(SIGKILL);
  EXPECT_EQ(children[1].finish(), 128 + SIGKILL);
  EXPECT_EQ(children[0].finish(), 0) << children[0].output();
  EXPECT_EQ(children[2].finish(), 0) << children[2].output();
}

TEST(BootstrapTcp, CoordinatorDeathIsAPeerFailure) {
  auto children =
      spawn_ranks(3, loopback(), [](int rank, const ChildIo& io, const BootstrapConfig& config) {
        auto b = make_tcp_bootstrap(config);
        b->barrier();
        if (rank == 0) {
          if (io.wait_go(milliseconds(10000)))
            ::_exit(0);  // no BYE, coordinator gone: like a crash
          return 1;
        }
        io.say("passed");
        return expect_peer_failure(io, *b, 0, "bootstrap: rank 0 vanished");
      });
  EXPECT_EQ(children[1].next_line(milliseconds(10000)), "passed");
  EXPECT_EQ(children[2].next_line(milliseconds(10000)), "passed");
  children[0].go();
  expect_exit_ok(children);
}

TEST(BootstrapTcp, AbortReachesEveryOtherRank) {
  auto children =
      spawn_ranks(3, loopback(), [](int rank, const ChildIo& io, const BootstrapConfig& config) {
        auto b = make_tcp_bootstrap(config);
        b->barrier();
        if (rank != 1)
          return expect_peer_failure(io, *b, 1, "bootstrap: rank 1 aborted: disk full");
        b->abort("disk full");
        try {
          b->barrier();
        } catch (const PeerError&) {
          return 3;
        } catch (const Error& e) {
          return contains(e.what(), "this process aborted (disk full)") ? 0 : 4;
        }
        return 2;
      });
  expect_exit_ok(children);
}

TEST(BootstrapTcp, OrderlyExitIsNotAFailure) {
  // Rank 2 leaves first, then rank 0 (whose coordinator lingers), while rank 1 keeps polling.
  auto children =
      spawn_ranks(3, loopback(), [](int rank, const ChildIo& io, const BootstrapConfig& config) {
        auto b = make_tcp_bootstrap(config);
        b->barrier();
        if (rank == 2) return 0;
        if (rank == 0) {
          if (!io.wait_go(milliseconds(10000))) return 2;
          const auto start = Clock::now();
          b.reset();
          io.say("left after " + std::to_string(seconds_since(start)) + " s");
          return seconds_since(start) < 2.0 ? 0 : 3;
        }
        if (!io.wait_go(milliseconds(10000))) return 2;
        const auto start = Clock::now();
        while (seconds_since(start) < 0.3) {
          if (b->peer_failed()) return 4;
          std::this_thread::sleep_for(milliseconds(1));
        }
        return 0;
      });
  EXPECT_EQ(children[2].finish(), 0) << children[2].output();
  children[0].go();  // rank 2 is gone; rank 0 now waits in its destructor for rank 1
  children[1].go();
  EXPECT_EQ(children[1].finish(), 0) << children[1].output();
  EXPECT_EQ(children[0].finish(), 0) << children[0].output();
}

TEST(BootstrapTcp, RankLeavingBeforeABarrierFailsIt) {
  auto children =
      spawn_ranks(2, loopback(), [](int rank, const ChildIo& io, const BootstrapConfig& config) {
        auto b = make_tcp_bootstrap(config);
        if (rank == 1) return 0;
        try {
          b->barrier();
        } catch (const PeerError& e) {
          io.say(e.what());
          return e.rank() == 1 && contains(e.what(), "rank 1 exited without entering the barrier")
                     ? 0
                     : 3;
        }
        return 2;
      });
  expect_exit_ok(children);
}

TEST(BootstrapTcp, MismatchedCollectivesFail) {
  auto children =
      spawn_ranks(2, loopback(), [](int rank, const ChildIo& io, const BootstrapConfig& config) {
        auto b = make_tcp_bootstrap(config);
        try {
          if (rank == 0) {
            b->barrier();
          } else {
            b->allgather(text_bytes("x"));
          }
        } catch (const PeerError& e) {
          io.say(e.what());
          return contains(e.what(), "entered") ? 0 : 3;
        }
        return 2;
      });
  expect_exit_ok(children);
}

TEST(BootstrapTcp, AllgatherAboveTheFrameLimitFails) {
  auto children =
      spawn_ranks(2, loopback(), [](int, const ChildIo& io, const BootstrapConfig& config) {
        auto b = make_tcp_bootstrap(config);
        try {
          b->allgather(Bytes(std::size_t{40} << 20, std::byte{1}));
        } catch (const PeerError&) {
          return 3;
        } catch (const Error& e) {
          io.say(e.what());
          return contains(e.what(), "exceeds the frame limit") ? 0 : 4;
        }
        return 2;
      });
  expect_exit_ok(children);
}

TEST(BootstrapTcp, CollectiveTimesOut) {
  auto children = spawn_ranks(
      2, loopback(),
      [](int rank, const ChildIo& io, const BootstrapConfig& config) {
        auto b = make_tcp_bootstrap(config);
        if (rank == 1) return io.wait_go(milliseconds(10000)) ? 0 : 1;
        const auto start = Clock::now();
        try {
          b->allgather(text_bytes("x"));
        } catch (const PeerError&) {
          return 3;
        } catch (const Error& e) {
          io.say(e.what());
          const double took = seconds_since(start);
          return took >= 1.9 && took < 4.0 ? 0 : 4;
        }
        return 2;
      },
      milliseconds(2000));
  // Rank 1 is alive (its heartbeats arrive) but does not enter: slow, not stuck.
  EXPECT_EQ(children[0].next_line(milliseconds(10000)),
            "bootstrap: allgather timed out after 2 s waiting for the other ranks (every rank "
            "was answering: slow, not stuck)");
  children[1].go();  // rank 0's coordinator waits for rank 1's BYE before it exits
  EXPECT_EQ(children[0].finish(), 0) << children[0].output();
  EXPECT_EQ(children[1].finish(), 0) << children[1].output();
}

// A rank stopped with SIGSTOP is alive to the kernel (its socket stays open) but sends no
// heartbeat: the others' waits end within the silence bound, naming it, even a barrier whose
// callback leaves it unbounded. Rank `stopped` stops itself after a first barrier.
void expect_stopped_rank_named(int stopped) {
  auto children =
      spawn_ranks(3, loopback(), [stopped](int rank, const ChildIo& io, BootstrapConfig config) {
        config.silence = milliseconds(1000);
        config.timeout = milliseconds(20000);  // the silence bound, not the timeout, ends it
        auto b = make_tcp_bootstrap(config);
        b->barrier();
        if (rank == stopped) {
          ::raise(SIGSTOP);
          return 0;
        }
        const auto start = Clock::now();
        try {
          b->barrier([] { std::this_thread::sleep_for(milliseconds(1)); });
        } catch (const PeerError& e) {
          io.say(std::to_string(e.rank()) + " " + e.what());
          std::printf("rank %d: the barrier ended %.2f s after it began\n", rank,
                      seconds_since(start));
          return 0;
        }
        return 2;
      });
  for (int r = 0; r < 3; ++r) {
    if (r == stopped) continue;
    const auto line = children[r].next_line(milliseconds(15000));
    ASSERT_TRUE(line) << "rank " << r << " did not report: " << children[r].output();
    EXPECT_TRUE(line->starts_with(std::to_string(stopped) + " bootstrap: rank " +
                                  std::to_string(stopped) + " stopped answering"))
        << *line;
  }
  ::kill(children[stopped].pid(), SIGKILL);
  for (int r = 0; r < 3; ++r) {
    const int status = children[r].finish();
    if (r != stopped) {
      EXPECT_EQ(status, 0) << children[r].output();
    }
  }
}

TEST(BootstrapTcp, AStoppedRankIsNamedWithinTheSilenceBound) { expect_stopped_rank_named(2); }

TEST(BootstrapTcp, AStoppedCoordinatorIsNamedWithinTheSilenceBound) {
  expect_stopped_rank_named(0);
}

TEST(BootstrapTcp, BarrierCallbackRunsWhileWaiting) {
  auto children =
      spawn_ranks(2, loopback(), [](int rank, const ChildIo& io, const BootstrapConfig& config) {
        auto b = make_tcp_bootstrap(config);
        if (rank == 1) {
          if (!io.wait_go(milliseconds(10000))) return 2;
          b->barrier();
          return 0;
        }
        int calls = 0;
        b->barrier([&] {
          if (++calls == 1) io.say("waiting");
        });
        return calls > 0 ? 0 : 3;
      });
  ASSERT_EQ(children[0].next_line(milliseconds(10000)), "waiting");
  children[1].go();
  expect_exit_ok(children);
}

}  // namespace
}  // namespace fabflow::test
