// Hostile input at the coordinator: a second process floods it with garbage, slow (one byte at
// a time) and half-open (silent) connections while a real 8-rank job bootstraps over TCP. The
// job must complete within its timeout.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>
#include <deque>
#include <string>
#include <thread>

#include "bootstrap/wire.h"
#include "fabflow/bootstrap.h"
#include "support/forked.h"

namespace fabflow::test {
namespace {

using bootstrap_detail::Fd;

constexpr std::size_t kHeldSilent = 200;  // half-open connections the flooder holds, never closed
constexpr std::size_t kHeldSlow = 100;
constexpr std::size_t kHeld = 600;  // silent connections held in the `hold` flood    //
                                    // byte-trickling connections the flooder keeps open

// A non-blocking connection to 127.0.0.1:port; closing it sends a reset (no TIME_WAIT left
// behind, so that repeated runs do not run out of ephemeral ports).
Fd open_to(int port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return fd;
  const linger hard{1, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 &&
      errno != EINPROGRESS) {
    return Fd();
  }
  return fd;
}

// Floods 127.0.0.1:port until the parent says go(); reports "opened N". `hold`: only silent
// connections, never closed (up to kHeld), which would hold every pending slot of a
// coordinator that sheds newcomers rather than its oldest; otherwise a mix of garbage, slow and
// silent ones.
int flood(int port, bool hold, const ChildIo& io) {
  std::deque<Fd> silent;
  struct Slow {
    Fd fd;
    std::size_t sent = 0;
  };
  std::deque<Slow> slow;
  // A frame header announcing a hello of 4 GiB, then garbage: what the slow ones trickle.
  const unsigned char trickle[] = {0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8};
  unsigned char noise[3000];
  for (std::size_t i = 0; i < sizeof noise; ++i)
    noise[i] = static_cast<unsigned char>((i * 7919 + 17) % 251);
  std::uint64_t opened = 0;
  auto next_trickle = Clock::now();
  io.say("flooding");
  while (!io.wait_go(milliseconds(0))) {
    if (hold) {
      if (silent.size() < kHeld) {
        if (Fd s = open_to(port)) {
          ++opened;
          silent.push_back(std::move(s));
        }
      }
      std::this_thread::sleep_for(milliseconds(1));
      continue;
    }
    // Garbage: connect, spray bytes, reset.
    if (Fd g = open_to(port)) {
      ++opened;
      [[maybe_unused]] auto n = ::send(g.get(), noise, sizeof noise, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    // Half-open: connect and say nothing, and never close (the coordinator must drop them).
    if (silent.size() < kHeldSilent) {
      if (Fd s = open_to(port)) {
        ++opened;
        silent.push_back(std::move(s));
      }
    }
    // Slow: one byte every 100 ms on each.
    if (Fd s = open_to(port)) {
      ++opened;
      slow.push_back({std::move(s), 0});
      if (slow.size() > kHeldSlow) slow.pop_front();
    }
    if (Clock::now() >= next_trickle) {
      for (auto& s : slow) {
        if (s.sent < sizeof trickle &&
            ::send(s.fd.get(), trickle + s.sent, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) {
          ++s.sent;
        }
      }
      next_trickle = Clock::now() + milliseconds(100);
    }
    std::this_thread::sleep_for(milliseconds(1));  // about 2000 connections a second at most
  }
  io.say("opened " + std::to_string(opened));
  return 0;
}

int allgather_and_barrier(int rank, const ChildIo& io, const BootstrapConfig& config) {
  auto b = make_tcp_bootstrap(config);
  for (int round = 0; round < 3; ++round) {
    const std::string mine = "rank " + std::to_string(rank) + " round " + std::to_string(round);
    std::vector<std::byte> bytes(mine.size());
    std::memcpy(bytes.data(), mine.data(), mine.size());
    const auto all = b->allgather(bytes);
    if (all.size() != static_cast<std::size_t>(config.size)) return 2;
    for (int r = 0; r < config.size; ++r) {
      const std::string want = "rank " + std::to_string(r) + " round " + std::to_string(round);
      if (std::string(reinterpret_cast<const char*>(all[r].data()), all[r].size()) != want)
        return 3;
    }
    b->barrier();
  }
  io.say("done");
  return 0;
}

// Runs an 8-rank job (optionally under a flood); returns its wall time in seconds.
double run_job(bool flooded, bool hold, std::uint64_t* opened) {
  constexpr auto kTimeout = milliseconds(10000);
  auto listener = loopback();
  const int port = listener.port;
  std::optional<Child> flooder;
  if (flooded) {
    flooder.emplace(
        Child::spawn([port, hold](const ChildIo& io) { return flood(port, hold, io); }));
    EXPECT_EQ(flooder->next_line(milliseconds(5000)), "flooding");
    std::this_thread::sleep_for(milliseconds(300));  // the flood is in full swing
  }
  const auto start = Clock::now();
  auto ranks = spawn_ranks(8, std::move(listener), allgather_and_barrier, kTimeout);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_EQ(ranks[r].finish(kTimeout + milliseconds(5000)), 0) << "rank " << r << " said:\n"
                                                                 << ranks[r].output();
  }
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(took, std::chrono::duration<double>(kTimeout).count());
  if (flooder) {
    flooder->go();
    EXPECT_EQ(flooder->finish(), 0) << flooder->output();
    const std::string& out = flooder->output();
    const auto at = out.find("opened ");
    if (at != std::string::npos) *opened = std::stoull(out.substr(at + 7));
  }
  return took;
}

TEST(BootstrapFlood, EightRanksCompleteWhileTheCoordinatorIsFlooded) {
  std::uint64_t opened = 0;
  const double quiet = run_job(false, false, &opened);
  const double flooded = run_job(true, false, &opened);
  // A real flood: far more connections than the coordinator's pending cap (64).
  EXPECT_GT(opened, 500u);
  std::printf("bootstrap of 8 ranks: %.3f s quiet, %.3f s under a flood of %llu connections\n",
              quiet, flooded, static_cast<unsigned long long>(opened));
}

TEST(BootstrapFlood, SilentConnectionsHeldOpenDoNotLockTheRanksOut) {
  std::uint64_t opened = 0;
  const double took = run_job(true, true, &opened);
  EXPECT_GT(opened, 64u);
  std::printf("bootstrap of 8 ranks: %.3f s with %llu silent connections held open\n", took,
              static_cast<unsigned long long>(opened));
}

// A peer that trickles a plausible HELLO one byte at a time is closed at the 2 s handshake
// deadline, not held for the run's 10 s timeout.
TEST(BootstrapFlood, SlowSenderIsDroppedAtTheHandshakeDeadline) {
  auto listener = loopback();
  const int port = listener.port;
  auto ranks = spawn_ranks(2, std::move(listener), allgather_and_barrier, milliseconds(10000), 1);
  Fd fd = open_to(port);
  ASSERT_TRUE(fd);
  pollfd w{fd.get(), POLLOUT, 0};
  ASSERT_EQ(::poll(&w, 1, 5000), 1);
  const auto start = Clock::now();
  const unsigned char header[] = {0, 0, 0, 2, 0, 0, 0, 112};  // HELLO of the right length
  std::size_t sent = 0;
  bool closed = false;
  while (!closed && Clock::now() - start < milliseconds(8000)) {
    if (sent < sizeof header &&
        ::send(fd.get(), header + sent, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) {
      ++sent;
    }
    pollfd r{fd.get(), POLLIN, 0};
    if (::poll(&r, 1, 200) == 1) {
      char buf[512];
      while (true) {
        const ssize_t n = ::recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) closed = true;
        if (n <= 0) break;  // the challenge, read and ignored
      }
    }
  }
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_TRUE(closed);
  EXPECT_GT(took, 1.5);
  EXPECT_LT(took, 3.5);
  std::printf("slow sender closed after %.2f s (%zu bytes sent)\n", took, sent);
}

}  // namespace
}  // namespace fabflow::test
