// The UDP and TCP ping-pong baselines between two threads of one process (thread bootstraps on
// 127.0.0.1): every answered round trip measured, none lost on loopback, bad parameters refused.
#include <fabflow/bench/sockets.h>
#include <fabflow/bootstrap.h>
#include <fabflow/status.h>
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <thread>
#include <vector>

namespace fabflow {
namespace {

// Runs the ping-pong on two threads; returns rank 0's rows, or the first error in `error`.
std::vector<SocketRow> pingpong(const SocketParams& p, std::string& error) {
  auto boots = make_thread_bootstraps(2);
  const Clock clock;
  std::array<std::vector<SocketRow>, 2> rows;
  std::array<std::string, 2> errors;
  std::array<std::thread, 2> threads;
  for (std::size_t r = 0; r < 2; ++r)
    threads[r] = std::thread([&, r] {
      try {
        rows[r] = run_socket_pingpong(p, *boots[r], clock);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        boots[r]->abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  error = errors[0].empty() ? errors[1] : errors[0];
  EXPECT_TRUE(rows[1].empty());
  return rows[0];
}

TEST(SocketBaseline, EveryProtocolAndWaitAnswersEveryPingOnLoopback) {
  for (SocketProto proto : {SocketProto::udp, SocketProto::tcp})
    for (SocketWait wait : {SocketWait::block, SocketWait::spin}) {
      SCOPED_TRACE(std::string(name_of(proto)) + " " + std::string(name_of(wait)));
      SocketParams p;
      p.proto = proto;
      p.wait = wait;
      p.sizes = {1, 64, 9000, proto == SocketProto::udp ? kMaxUdpPayload : 100000};
      p.iterations = 300;
      p.warmup = 20;
      std::string error;
      const auto rows = pingpong(p, error);
      ASSERT_EQ(error, "");
      ASSERT_EQ(rows.size(), p.sizes.size());
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const SocketRow& row = rows[i];
        EXPECT_EQ(row.size, p.sizes[i]);
        EXPECT_EQ(row.proto, proto);
        EXPECT_EQ(row.iterations, 300u);
        EXPECT_EQ(row.lost, 0u);
        EXPECT_EQ(row.latency.samples, 300u);
        EXPECT_GT(row.latency.min, 0);
        EXPECT_LE(row.latency.p50, row.latency.max);
        EXPECT_GE(row.mtu, 1500u);  // loopback: the route MTU, 65535 here
      }
    }
}

TEST(SocketBaseline, BadParametersAreOneLine) {
  SocketParams p;
  p.sizes = {kMaxUdpPayload + 1};
  EXPECT_THROW(validate_socket_params(p), UsageError);
  p.proto = SocketProto::tcp;
  EXPECT_NO_THROW(validate_socket_params(p));
  p.sizes = {0};
  EXPECT_THROW(validate_socket_params(p), UsageError);
  p.sizes = {64};
  p.loss_timeout_ms = p.timeout_ms + 1;
  EXPECT_THROW(validate_socket_params(p), UsageError);
  try {
    SocketParams udp;
    udp.sizes = {70000};
    validate_socket_params(udp);
    FAIL() << "a 70000-byte UDP ping accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "size 70000 is above UDP's largest datagram of 65507 bytes");
  }
}

}  // namespace
}  // namespace fabflow
