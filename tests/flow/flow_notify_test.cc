// separate_notify_endpoint: every design point on shm, tcp (msg), tcp;ofi_rxm (rdm) and local
// with its notifications on a second transport (FIFO order, exactly once, contents); the
// refusals (one transport, transports of different kinds, the data transport twice); a
// misbehaving peer whose out-of-range counters arrive over the notify endpoint.
#include <gtest/gtest.h>

#include <chrono>

#include "flow/layout.h"
#include "support/flow_support.h"

namespace fabflow::flow::test {
namespace {

using namespace std::chrono_literals;

QueueOptions separate_options(const Design& d) {
  QueueOptions o;
  o.design = d;
  o.capacity = 8;  // hundreds of wrap-arounds
  o.item_bytes = 100;
  o.separate_notify_endpoint = true;
  return o;
}

// Items per point: FABFLOW_FLOW_NOTIFY_ITEMS, else FABFLOW_FLOW_ITEMS (the sanitizer trees
// lower it), at most 3000 (132 points, each setting up four transports).
std::size_t separate_items() {
  return env_count("FABFLOW_FLOW_NOTIFY_ITEMS",
                   std::min<std::size_t>(3000, env_count("FABFLOW_FLOW_ITEMS", 3000)));
}

class FlowSeparateNotify : public ::testing::TestWithParam<Point> {};

TEST_P(FlowSeparateNotify, FifoExactlyOnceWithContents) {
  const auto& pt = GetParam();
  auto o = separate_options(pt.design);
  const std::size_t n = separate_items();
  Result r;
  ASSERT_EQ(stream(pt.provider, o, {n, 13, true}, &r), "");
  // The notifications are counted as before: only the endpoint they travel on changed.
  if (pt.design.data != DataFlow::pull) {
    EXPECT_EQ(r.producer.data_ops, n + end_markers(pt.design));
  }
  if (pt.design.transfer == TransferNotify::push) {
    EXPECT_GT(r.producer.transfer_ops, 0u);
  }
  if (pt.design.transfer == TransferNotify::pull) {
    EXPECT_GT(r.consumer.transfer_ops, 0u);
  }
  if (pt.design.space == SpaceNotify::pull) {
    EXPECT_GT(r.producer.space_ops, 0u);
  } else {
    EXPECT_GT(r.consumer.space_ops, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(All, FlowSeparateNotify, ::testing::ValuesIn(points(kAll)), point_name);

// The data mover and batching move notifications from another thread / in batches.
class FlowSeparateNotifyPresets : public ::testing::TestWithParam<Provider> {};

TEST_P(FlowSeparateNotifyPresets, BatchingAndDataMover) {
  for (const char* design : {"push1-push-pull", "push1-watermark-push", "pull-pull-push2"})
    for (const char* preset : {"batching", "datamover"}) {
      auto o = QueueOptions::preset(preset, *Design::parse(design));
      o.capacity = 16;
      o.item_bytes = 48;
      o.separate_notify_endpoint = true;
      ASSERT_EQ(stream(GetParam(), o, {env_count("FABFLOW_FLOW_PRESET_ITEMS", 200), 5, false}), "")
          << design << " " << preset;
    }
}

// With an active consumer, whose helper thread drives both endpoints.
TEST_P(FlowSeparateNotifyPresets, ActiveConsumer) {
  for (const char* design :
       {"push1-push-pull", "push1-watermark-push", "pull-pull-push2", "push2-event-push2"})
    for (const char* preset : {"basic", "datamover"}) {
      auto o = QueueOptions::preset(preset, *Design::parse(design));
      o.capacity = 16;
      o.item_bytes = 48;
      o.separate_notify_endpoint = true;
      o.active_consumer = true;
      ASSERT_EQ(stream(GetParam(), o, {env_count("FABFLOW_FLOW_PRESET_ITEMS", 500), 9, true}), "")
          << design << " " << preset;
    }
}

INSTANTIATE_TEST_SUITE_P(All, FlowSeparateNotifyPresets, ::testing::ValuesIn(kAll),
                         [](const auto& info) { return label_of(info.param); });

// ---- refusals: before any collective step, on both ranks alike ----

template <class F>
std::string expect_usage_error(F&& make, const std::string& want) {
  try {
    make();
  } catch (const UsageError& e) {
    if (std::string(e.what()).find(want) == std::string::npos)
      throw Error("UsageError without '" + want + "': " + e.what());
    return e.what();
  }
  throw Error("no UsageError (want '" + want + "')");
}

TEST(FlowSeparateNotifyUsage, OneTransportOverloadRefusesTheOption) {
  auto o = separate_options(*Design::parse("push1-push-pull"));
  std::string seen;
  auto err = run_pair(transport_options(kLocal, o), [&](int rank, Transport& t, Bootstrap& boot) {
    if (rank == 0)
      seen = expect_usage_error([&] { make_producer(t, boot, 1, o); }, "needs a second transport");
    else
      expect_usage_error([&] { make_consumer(t, boot, 0, o); }, "needs a second transport");
  });
  ASSERT_EQ(err, "");
  EXPECT_NE(seen.find("required_notify_ops"), std::string::npos) << seen;
}

TEST(FlowSeparateNotifyUsage, TransportsOfDifferentKindsRefused) {
  auto o = separate_options(*Design::parse("push1-push-push"));
  auto err = run_pair(transport_options(kLocal, o), [&](int rank, Transport& t, Bootstrap& boot) {
    // A libfabric shm transport (never connected: refused before it would be used).
    auto other = open_transport(notify_transport_options(kShm, o));
    const char* want = "is not of the data transport's kind";
    if (rank == 0)
      expect_usage_error([&] { make_producer(t, *other, boot, 1, o); }, want);
    else
      expect_usage_error([&] { make_consumer(t, *other, boot, 0, o); }, want);
  });
  ASSERT_EQ(err, "");
}

TEST(FlowSeparateNotifyUsage, DataTransportTwiceOrOptionOffRefused) {
  auto o = separate_options(*Design::parse("push1-push-push"));
  auto err = run_pair(transport_options(kLocal, o), [&](int rank, Transport& t, Bootstrap& boot) {
    const int peer = 1 - rank;
    expect_usage_error([&] { make_producer(t, t, boot, peer, o); }, "given twice");
    auto off = o;
    off.separate_notify_endpoint = false;
    auto n = open_transport(notify_transport_options(kLocal, o));
    expect_usage_error([&] { make_consumer(t, *n, boot, peer, off); },
                       "separate_notify_endpoint is off");
  });
  ASSERT_EQ(err, "");
}

// ---- misbehaving peers: counters out of range, over the notify endpoint ----

void post_until_taken(Transport& t, const std::function<Status()>& post) {
  auto deadline = std::chrono::steady_clock::now() + 5s;
  Status st;
  while ((st = post()) == Status::again && std::chrono::steady_clock::now() < deadline)
    t.progress();
  if (st != Status::ok) throw Error("attack post: " + t.last_error());
}

class FlowSeparateNotifyMisbehaving : public ::testing::TestWithParam<Provider> {};

// A fake producer writes a tail counter far beyond head + capacity into the consumer's tail
// cell, which lives in the notify region: the consumer fails with a protocol violation.
TEST_P(FlowSeparateNotifyMisbehaving, TailCounterOutOfRange) {
  auto o = separate_options(*Design::parse("push1-push-push"));
  std::string seen;
  auto err =
      run_pair(transport_options(GetParam(), o), [&](int rank, Transport& t, Bootstrap& boot) {
        auto n = open_notify(GetParam(), o, boot);
        auto settle = [&] {
          boot.barrier([&] {
            t.progress();
            n->progress();
          });
        };
        if (rank == 0) {
          auto cons = make_consumer(t, *n, boot, 1, o);
          std::vector<std::byte> buf(o.item_bytes);
          std::size_t len = 0;
          Status st = cons->dequeue(buf, &len, 5s);
          if (st != Status::failed) throw Error("dequeue gave " + std::string(to_string(st)));
          seen = cons->error();
          settle();
        } else {
          FakeEnd fake(t, boot, 0, o, 0, n.get());
          static std::uint64_t bogus = 1'000'000'000;
          post_until_taken(*n, [&] {
            return n->post_write(0, &bogus, 8, nullptr, fake.nremote,
                                 fake.layout.cell(detail::kPeerCell), 0, kInject);
          });
          settle();
        }
      });
  ASSERT_EQ(err, "");
  EXPECT_NE(seen.find("tail counter 1000000000 is out of range"), std::string::npos) << seen;
}

// A fake consumer writes a head counter beyond what was sent into the producer's head cell.
TEST_P(FlowSeparateNotifyMisbehaving, HeadCounterOutOfRange) {
  auto o = separate_options(*Design::parse("push1-watermark-push"));
  std::string seen;
  auto err =
      run_pair(transport_options(GetParam(), o), [&](int rank, Transport& t, Bootstrap& boot) {
        auto n = open_notify(GetParam(), o, boot);
        auto settle = [&] {
          boot.barrier([&] {
            t.progress();
            n->progress();
          });
        };
        if (rank == 0) {
          auto prod = make_producer(t, *n, boot, 1, o);
          std::vector<std::byte> buf(8);
          if (Status st = enqueue_until_failure(*prod, buf, 10s); st != Status::failed)
            throw Error("enqueue gave " + std::string(to_string(st)) + " for 10 s");
          seen = prod->error();
          settle();
        } else {
          FakeEnd fake(t, boot, 0, o, 1, n.get());
          static std::uint64_t bogus = 1ull << 40;
          post_until_taken(*n, [&] {
            return n->post_write(0, &bogus, 8, nullptr, fake.nremote,
                                 fake.layout.cell(detail::kPeerCell), 0, kInject);
          });
          settle();
        }
      });
  ASSERT_EQ(err, "");
  EXPECT_NE(seen.find("head counter"), std::string::npos) << seen;
}

INSTANTIATE_TEST_SUITE_P(All, FlowSeparateNotifyMisbehaving, ::testing::ValuesIn(kAll),
                         [](const auto& info) { return label_of(info.param); });

}  // namespace
}  // namespace fabflow::flow::test
