// A producer's close() returns ok once the consumer has every item, whatever the consumer does
// after it has seen the end of stream: here it drops its end and stops driving progress
// (issue 44, item 3).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "support/flow_support.h"

namespace fabflow::flow::test {
namespace {

using namespace std::chrono_literals;

class FlowCloseAfterClosed : public ::testing::TestWithParam<Point> {};

void close_after_closed(const Point& pt, bool drive) {
  QueueOptions o = on(pt.provider, QueueOptions{});
  o.design = pt.design;
  o.capacity = 8;
  o.item_bytes = 64;
  constexpr std::size_t kItems = 20;
  std::atomic<bool> producer_done{false};
  auto err =
      run_pair(transport_options(pt.provider, o), [&](int rank, Transport& t, Bootstrap& boot) {
        std::vector<std::byte> buf(o.item_bytes, std::byte{3});
        if (rank == 0) {
          auto prod = make_producer(t, boot, 1, o);
          for (std::size_t i = 0; i < kItems; ++i)
            if (prod->enqueue({buf.data(), 1 + i % o.item_bytes}, 5s) != Status::ok)
              throw Error("enqueue: " + prod->error());
          const Status st = prod->close(5s);
          producer_done = true;
          if (st != Status::ok)
            throw Error("close: " + std::string(to_string(st)) + ": " + prod->error());
          if (drive) boot.barrier([&] { t.progress(); });
        } else {
          auto cons = make_consumer(t, boot, 0, o);
          std::size_t len = 0, got = 0;
          Status st;
          while ((st = cons->dequeue(buf, &len, 5s)) == Status::ok) ++got;
          if (st != Status::closed) throw Error("dequeue: " + cons->error());
          if (got != kItems) throw Error("got " + std::to_string(got) + " items");
          cons.reset();
          // No more progress on this end until the producer's close has returned (or, the other
          // way a program goes on: progress from something else, a barrier here).
          if (drive) {
            boot.barrier([&] { t.progress(); });
            return;
          }
          const auto deadline = std::chrono::steady_clock::now() + 8s;
          while (!producer_done && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(1ms);
        }
      });
  EXPECT_EQ(err, "") << (drive ? "consumer in a barrier" : "consumer stopped");
}

TEST_P(FlowCloseAfterClosed, ProducerCloseNeedsNothingFromAConsumerThatStopped) {
  close_after_closed(GetParam(), false);
  // A consumer that drives progress after it dropped its end: where the producer reads heads,
  // a read still in flight then must not reach the dropped ring.
  if (GetParam().design.space == SpaceNotify::pull) close_after_closed(GetParam(), true);
}

INSTANTIATE_TEST_SUITE_P(All, FlowCloseAfterClosed, ::testing::ValuesIn(points(kAll)), point_name);

TEST(FlowRxDepth, TheReceivesEachDesignKeepsPosted) {
  auto depth = [](const char* design, std::size_t capacity, std::size_t pool = 0) {
    QueueOptions o;
    const auto d = Design::parse(design);
    if (!d) ADD_FAILURE() << design;
    o.design = d.value_or(o.design);
    o.capacity = capacity;
    o.recv_pool = pool;
    return required_rx_depth(o);
  };
  EXPECT_EQ(depth("push1-watermark-pull", 1024), 0u);
  EXPECT_EQ(depth("push2-watermark-pull", 1024), 1024u);      // one per ring slot
  EXPECT_EQ(depth("push2-watermark-pull", 1024, 100), 100u);  // recv_pool bounds the ring
  EXPECT_EQ(depth("push1-imm-pull", 1024), 64u);              // remote CQ data's pool
  EXPECT_EQ(depth("push1-watermark-push2", 1024), 64u);       // pushed heads' pool
  EXPECT_EQ(depth("push1-watermark-push2", 16), 16u);
  EXPECT_EQ(depth("push1-imm-push2", 512), 64u);  // one pool on each end
  EXPECT_EQ(depth("push2-event-push2", 512), 512u);
}

// On tcp (a receive queue of 256 by default), a push2 queue of 1024 slots is refused with the
// way out, and runs once the transport is opened with required_rx_depth (issue 44, item 3).
TEST(FlowRxDepth, Push2OnTcpIsRefusedWithTheWayOutAndRunsWithIt) {
  QueueOptions o;
  o.design = *Design::parse("push2-watermark-pull");
  o.capacity = 1024;
  o.item_bytes = 64;
  TransportOptions to = transport_options(kTcp, o);
  ASSERT_LT(to.rx_depth, required_rx_depth(o));
  auto refused = run_pair(to, [&](int rank, Transport& t, Bootstrap& boot) {
    if (rank == 0)
      make_producer(t, boot, 1, o);
    else
      make_consumer(t, boot, 0, o);
  });
  EXPECT_NE(refused.find("keeps 1024 receives posted"), std::string::npos) << refused;
  EXPECT_NE(refused.find("required_rx_depth"), std::string::npos) << refused;
  to.rx_depth = required_rx_depth(o);
  constexpr std::size_t kItems = 3000;
  auto err = run_pair(to, [&](int rank, Transport& t, Bootstrap& boot) {
    std::vector<std::byte> buf(o.item_bytes);
    if (rank == 0) {
      auto prod = make_producer(t, boot, 1, o);
      for (std::size_t i = 0; i < kItems; ++i) {
        const std::size_t len = item_len(5, i, o.item_bytes);
        fill_item(5, i, buf.data(), len);
        if (prod->enqueue({buf.data(), len}, 5s) != Status::ok) throw Error(prod->error());
      }
      if (prod->close(5s) != Status::ok) throw Error("close: " + prod->error());
    } else {
      auto cons = make_consumer(t, boot, 0, o);
      std::vector<std::byte> want(o.item_bytes);
      for (std::size_t i = 0; i < kItems; ++i) {
        std::size_t len = 0;
        if (cons->dequeue(buf, &len, 5s) != Status::ok) throw Error(cons->error());
        fill_item(5, i, want.data(), item_len(5, i, o.item_bytes));
        if (len != item_len(5, i, o.item_bytes) || std::memcmp(buf.data(), want.data(), len) != 0)
          throw Error("item " + std::to_string(i) + " differs");
      }
      std::size_t len = 0;
      if (cons->dequeue(buf, &len, 5s) != Status::closed) throw Error("no end of stream");
    }
  });
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace fabflow::flow::test
