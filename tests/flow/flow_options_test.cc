// Behaviour behind the flow queues' performance: reads never block a call (two queues served by
// one thread per rank, no progress thread, the pattern of the bench's ping-pong), flush needs
// nothing from the consumer, a refusal found during setup reaches both ends, and the data
// mover keeps the stream correct with several batched writes in flight.
#include <gtest/gtest.h>

#include <array>
#include <chrono>

#include "support/flow_support.h"

namespace fabflow::flow::test {
namespace {

using namespace std::chrono_literals;

struct Case {
  const char* design;
  Provider provider;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return label(*Design::parse(info.param.design), info.param.provider);
}

// Spins `attempt` until it returns something other than `again_status`, calling `between`
// in between (driving the transport of the queue this thread is not waiting on), for at most
// 5 s.
template <class F, class G>
Status spin(F&& attempt, Status again_status, G&& between) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    Status st = attempt();
    if (st != again_status) return st;
    if (std::chrono::steady_clock::now() > deadline) return Status::timeout;
    between();
  }
}

// Two queues, 0->1 on transport A and 1->0 on transport B, one thread per rank, no progress
// thread: rank 0 sends item i and waits for its echo while driving A; rank 1 echoes while
// driving B. Designs that read (pull data, pull transfer, pull space) deadlocked here while a
// read was waited for inside a call.
class FlowTwoQueues : public ::testing::TestWithParam<Case> {};

TEST_P(FlowTwoQueues, PingPongWithoutProgressThreads) {
  QueueOptions o;
  o.design = *Design::parse(GetParam().design);
  o.capacity = 4;
  o.item_bytes = 32;
  const std::uint64_t n = env_count("FABFLOW_FLOW_PRESET_ITEMS", 200);
  auto boots = make_thread_bootstraps(2);
  std::array<std::string, 2> errors;
  std::array<std::thread, 2> threads;
  for (int r = 0; r < 2; ++r) {
    threads[static_cast<std::size_t>(r)] = std::thread([&, r] {
      auto& boot = *boots[static_cast<std::size_t>(r)];
      try {
        auto opts = transport_options(GetParam().provider, o);
        auto a = open_transport(opts);
        a->connect(boot);
        auto b = open_transport(opts);
        b->connect(boot);
        std::unique_ptr<Producer> p;
        std::unique_ptr<Consumer> c;
        if (r == 0) {
          p = make_producer(*a, boot, 1, o);
          c = make_consumer(*b, boot, 1, o);
        } else {
          c = make_consumer(*a, boot, 0, o);
          p = make_producer(*b, boot, 0, o);
        }
        Transport& out = r == 0 ? *a : *b;  // this rank's producer transport
        Transport& in = r == 0 ? *b : *a;
        std::vector<std::byte> buf(o.item_bytes);
        std::size_t len = 0;
        for (std::uint64_t i = 0; i < n; ++i) {
          auto send = [&] {
            std::memcpy(buf.data(), &i, 8);
            Status st =
                spin([&] { return p->try_enqueue(buf); }, Status::full, [&] { in.progress(); });
            if (st != Status::ok) throw Error("enqueue " + std::to_string(i) + ": " + p->error());
            if (p->flush(5s) != Status::ok) throw Error("flush: " + p->error());
          };
          if (r == 0) send();
          Status st = spin([&] { return c->try_dequeue(buf, &len); }, Status::empty,
                           [&] { out.progress(); });
          if (st != Status::ok)
            throw Error("dequeue " + std::to_string(i) + ": " + std::string(to_string(st)) + " " +
                        c->error());
          std::uint64_t got = 0;
          std::memcpy(&got, buf.data(), 8);
          if (got != i)
            throw Error("item " + std::to_string(i) + " arrived as " + std::to_string(got));
          if (r == 1) send();
        }
        // Close ours while draining theirs: neither rank may sit on one queue alone.
        bool closed = false, drained = false;
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (!closed || !drained) {
          if (!closed) {
            Status cs = p->close(0ms);
            if (cs == Status::ok)
              closed = true;
            else if (cs != Status::timeout)
              throw Error("close: " + p->error());
          }
          Status ds = c->try_dequeue(buf, &len);
          if (ds == Status::closed)
            drained = true;
          else if (ds != Status::empty)
            throw Error("end of stream: " + c->error());
          if (std::chrono::steady_clock::now() > deadline) throw Error("close did not finish");
        }
        boot.barrier([&] {
          a->progress();
          b->progress();
        });
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = "rank " + std::to_string(r) + ": " + e.what();
        boot.abort(e.what());
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
}

INSTANTIATE_TEST_SUITE_P(
    Reads, FlowTwoQueues,
    ::testing::Values(Case{"push1-watermark-pull", kShm}, Case{"push1-pull-pull", kShm},
                      Case{"pull-pull-pull", kShm}, Case{"pull-watermark-push", kShm},
                      Case{"push1-watermark-pull", kTcp}, Case{"pull-pull-pull", kTcp}),
    case_name);

// flush() makes items visible without asking the consumer anything: a space-pull producer that
// stays above the lazy-refresh threshold posts no head read, however often it flushes.
TEST(FlowFlush, NeedsNoSpaceNotification) {
  QueueOptions o;
  o.design = *Design::parse("push1-watermark-pull");
  o.capacity = 1024;
  o.item_bytes = 64;
  constexpr int kItems = 100;  // well below capacity * lazy_refresh
  QueueStats prod{};
  auto err = run_pair(transport_options(kShm, o), [&](int rank, Transport& t, Bootstrap& boot) {
    std::vector<std::byte> buf(o.item_bytes);
    std::size_t len = 0;
    if (rank == 0) {
      auto p = make_producer(t, boot, 1, o);
      for (int i = 0; i < kItems; ++i) {
        if (p->enqueue(buf, 5s) != Status::ok || p->flush(5s) != Status::ok)
          throw Error("enqueue/flush: " + p->error());
      }
      prod = p->stats();
      if (p->close(5s) != Status::ok) throw Error("close: " + p->error());
    } else {
      auto c = make_consumer(t, boot, 0, o);
      for (int i = 0; i < kItems; ++i)
        if (c->dequeue(buf, &len, 5s) != Status::ok) throw Error("dequeue: " + c->error());
      if (c->dequeue(buf, &len, 5s) != Status::closed) throw Error("no end of stream");
      boot.barrier([&] { t.progress(); });  // the queue lives until the producer's close returned
      return;
    }
    boot.barrier([&] { t.progress(); });
  });
  ASSERT_EQ(err, "");
  // Counted before the close, which does need the consumer's head.
  EXPECT_EQ(prod.space_ops, 0u) << "flush refreshed the head";
  EXPECT_EQ(prod.data_ops, static_cast<std::uint64_t>(kItems));
}

// Creates a producer on rank 0 and a consumer on rank 1, each with options_of(rank): what
// each end's creation threw as `Refusal` ("created" when it did not throw).
template <class Refusal, class OptionsOf>
std::array<std::string, 2> create_pair(const QueueOptions& o, OptionsOf&& options_of) {
  TransportOptions t = transport_options({"local", EndpointType::automatic}, o);
  std::array<std::string, 2> why;
  auto err = run_pair(t, [&](int rank, Transport& tr, Bootstrap& boot) {
    const QueueOptions mine = options_of(rank);
    try {
      if (rank == 0)
        make_producer(tr, boot, 1, mine);
      else
        make_consumer(tr, boot, 0, mine);
      why[static_cast<std::size_t>(rank)] = "created";
    } catch (const Refusal& e) {
      why[static_cast<std::size_t>(rank)] = e.what();
    }
  });
  EXPECT_EQ(err, "");
  return why;
}

// A refusal found by one end during setup (more receives to keep posted than the transport
// takes) reaches the other end through the hello: both throw UsageError with the reason, and
// neither waits for the other.
TEST(FlowRefusal, SetupRefusalReachesBothEnds) {
  QueueOptions o;
  o.design = *Design::parse("push2-watermark-pull");  // the consumer posts one receive per slot
  o.capacity = 1 << 14;  // more receives than the local transport's receive queue holds
  o.item_bytes = 16;
  auto why = create_pair<UsageError>(o, [&](int) { return o; });
  EXPECT_NE(why[0].find("receives"), std::string::npos) << why[0];
  EXPECT_EQ(why[0], why[1]);
}

// push2 rings hold min(capacity, recv_pool) slots: two ends that agree on capacity but not on
// recv_pool would disagree on the ring, so the hello compares the effective capacity and both
// ends refuse with the peer's figure.
TEST(FlowRefusal, Push2RecvPoolMismatchIsCaught) {
  QueueOptions o;
  o.design = *Design::parse("push2-watermark-push");
  o.capacity = 16;
  o.item_bytes = 16;
  auto why = create_pair<PeerError>(o, [&](int rank) {
    QueueOptions mine = o;
    mine.recv_pool = rank == 0 ? 4 : 8;
    return mine;
  });
  EXPECT_NE(
      why[0].find(
          "(8 x 16 bytes, this end 4 x 16 bytes; push2 rings hold min(capacity, recv_pool) slots)"),
      std::string::npos)
      << why[0];
  EXPECT_NE(why[1].find("(4 x 16 bytes, this end 8 x 16 bytes;"), std::string::npos) << why[1];
}

// The data mover with several coalesced writes in flight: FIFO, exactly once, contents, on a
// small ring that wraps thousands of times, with the owner thread spinning on try_enqueue.
class FlowDataMover : public ::testing::TestWithParam<Case> {};

TEST_P(FlowDataMover, ManyWritesInFlightKeepOrder) {
  auto o = QueueOptions::preset("datamover", *Design::parse(GetParam().design));
  o.capacity = 32;
  o.item_bytes = 40;
  const std::uint64_t n = env_count("FABFLOW_FLOW_ITEMS", 20000);
  QueueStats prod{};
  auto err = run_pair(transport_options(GetParam().provider, o), [&](int rank, Transport& t,
                                                                     Bootstrap& boot) {
    std::vector<std::byte> buf(o.item_bytes), want(o.item_bytes);
    if (rank == 0) {
      auto p = make_producer(t, boot, 1, o);
      for (std::uint64_t i = 0; i < n; ++i) {
        const std::size_t len = item_len(9, i, o.item_bytes);
        fill_item(9, i, buf.data(), len);
        // The mover owns the transport: the owner thread only spins.
        if (spin(
                [&] {
                  return p->try_enqueue({buf.data(), len});
                },
                Status::full, [] {}) != Status::ok)
          throw Error("enqueue " + std::to_string(i) + ": " + p->error());
      }
      if (p->close(5s) != Status::ok) throw Error("close: " + p->error());
      prod = p->stats();
    } else {
      auto c = make_consumer(t, boot, 0, o);
      std::size_t len = 0;
      for (std::uint64_t i = 0; i < n; ++i) {
        if (c->dequeue(buf, &len, 5s) != Status::ok)
          throw Error("dequeue " + std::to_string(i) + ": " + c->error());
        const std::size_t expect = item_len(9, i, o.item_bytes);
        fill_item(9, i, want.data(), expect);
        if (len != expect || std::memcmp(buf.data(), want.data(), len) != 0)
          throw Error("item " + std::to_string(i) + " is wrong");
      }
      if (c->dequeue(buf, &len, 5s) != Status::closed)
        throw Error("no end of stream: " + c->error());
      boot.barrier([&] { t.progress(); });  // the queue lives until the producer's close returned
      return;
    }
    boot.barrier([&] { t.progress(); });
  });
  ASSERT_EQ(err, "");
  EXPECT_EQ(prod.items, n);
  EXPECT_LT(prod.data_ops, n) << "the data mover did not coalesce";
}

INSTANTIATE_TEST_SUITE_P(Presets, FlowDataMover,
                         ::testing::Values(Case{"push1-watermark-pull", kShm},
                                           Case{"push1-imm-push", kShm},
                                           Case{"push1-push-push2", kShm},
                                           Case{"push1-watermark-pull", kTcp},
                                           Case{"push1-push-pull", kTcp}),
                         case_name);

}  // namespace
}  // namespace fabflow::flow::test
