// auto (QueueOptions::automatic): both ends choose the same design from the advise profile, or
// from the rule without one, open it and move intact items; ends that choose differently are
// told so by the hello.
#include <gtest/gtest.h>

#include <cstring>

#include "support/advice_support.h"
#include "support/flow_support.h"

namespace fabflow::flow::test {
namespace {

using namespace std::chrono_literals;
using fabflow::testing::advice_profile;
using fabflow::testing::write_temp;

class FlowAuto : public ::testing::TestWithParam<Provider> {};

// Runs a queue of `o` (automatic) over `p` with 500 items checked on arrival; returns the
// producer's and the consumer's why() through *why (or the run's error).
std::string run_auto(const Provider& p, const QueueOptions& o, std::array<std::string, 2>* why) {
  constexpr std::size_t kItems = 500;
  return run_pair(transport_options(p, o), [&](int rank, Transport& t, Bootstrap& boot) {
    std::vector<std::byte> buf(o.item_bytes), want(o.item_bytes);
    if (rank == 0) {
      auto prod = make_producer(t, boot, 1, o);
      (*why)[0] = prod->why();
      for (std::size_t i = 0; i < kItems; ++i) {
        const std::size_t len = item_len(9, i, o.item_bytes);
        fill_item(9, i, buf.data(), len);
        if (prod->enqueue({buf.data(), len}, 5s) != Status::ok) throw Error(prod->error());
      }
      if (prod->close(5s) != Status::ok) throw Error("close: " + prod->error());
    } else {
      auto cons = make_consumer(t, boot, 0, o);
      (*why)[1] = cons->why();
      for (std::size_t i = 0; i < kItems; ++i) {
        std::size_t len = 0;
        if (cons->dequeue(buf, &len, 5s) != Status::ok) throw Error(cons->error());
        fill_item(9, i, want.data(), item_len(9, i, o.item_bytes));
        if (len != item_len(9, i, o.item_bytes) || std::memcmp(buf.data(), want.data(), len) != 0)
          throw Error("item " + std::to_string(i) + " differs");
      }
      std::size_t len = 0;
      if (cons->dequeue(buf, &len, 5s) != Status::closed) throw Error("no end of stream");
    }
  });
}

QueueOptions auto_options(const std::string& profile) {
  QueueOptions o;
  o.automatic = true;
  o.item_bytes = 64;
  o.capacity = 64;
  o.profile = profile;
  return o;
}

// The profile ranks, on each provider the test runs, a design that no provider can open
// first (auto passes over it and says why), then pull-push-push (not the rule's choice).
TEST_P(FlowAuto, BothEndsOpenTheProfilesDesign) {
  const Provider& p = GetParam();
  const std::string caps_provider =
      p.endpoint == EndpointType::rdm && std::string(p.name) == "tcp" ? "tcp;ofi_rxm" : p.name;
  const auto profile =
      write_temp(std::string(p.name) + "-auto.json",
                 advice_profile({{caps_provider, "push9-nothing-push", 9e6, "winner"},
                                 {caps_provider, "pull-push-push", 5e6, "behind"},
                                 {caps_provider, "push1-watermark-pull", 4e6, "behind"}})
                     .dump());
  std::array<std::string, 2> why;
  ASSERT_EQ(run_auto(p, auto_options(profile), &why), "");
  for (const auto& w : why) {
    EXPECT_EQ(w.rfind("auto on " + caps_provider + ": pull-push-push (profile " + profile, 0), 0)
        << w;
    EXPECT_NE(w.find("push9-nothing-push cannot open here: not a design point"), std::string::npos)
        << w;
  }
}

TEST_P(FlowAuto, WithoutAProfileTheRuleChoosesAndSaysWhy) {
  std::array<std::string, 2> why;
  const auto none = ::testing::TempDir() + "/fabflow-absent-advise-queue.json";
  ASSERT_EQ(run_auto(GetParam(), auto_options(none), &why), "");
  for (const auto& w : why) {
    EXPECT_NE(w.find(": push1-watermark-pull (the rule: push1-watermark-pull, the thesis' "
                     "Design #1"),
              std::string::npos)
        << w;
    EXPECT_NE(w.find("no profile used: no profile at " + none), std::string::npos) << w;
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, FlowAuto, ::testing::Values(kLocal, kShm, kTcp, kRxm),
                         [](const auto& info) { return label_of(info.param); });

// Two ends whose profiles differ choose different designs: the hello refuses the queue and
// names both.
TEST(FlowAutoDisagree, TheHelloRefusesEndsThatChoseDifferently) {
  auto profile = [](const std::string& name, const std::string& design) {
    return write_temp(name, advice_profile({{"local", design, 1e6, "winner"}}).dump());
  };
  const auto a = profile("a.json", "pull-push-push");
  const auto b = profile("b.json", "push1-push-push");
  const QueueOptions oa = auto_options(a), ob = auto_options(b);
  auto err = run_pair(transport_options(kLocal, oa), [&](int rank, Transport& t, Bootstrap& boot) {
    if (rank == 0)
      make_producer(t, boot, 1, oa);
    else
      make_consumer(t, boot, 0, ob);
  });
  // Whichever end finds it first names the other's design and its own.
  EXPECT_TRUE(
      err.find("rank 0 opened pull-push-push, this end push1-push-push") != std::string::npos ||
      err.find("rank 1 opened push1-push-push, this end pull-push-push") != std::string::npos)
      << err;
}

TEST(FlowAutoOptions, AutoAsksForEveryOperationAndReceiveItMayNeed) {
  QueueOptions o = auto_options("");
  EXPECT_EQ(required_ops(o), (std::vector<Op>{Op::send, Op::write, Op::read}));
  QueueOptions push2 = o;
  push2.automatic = false;
  push2.design = *Design::parse("push2-event-push2");
  EXPECT_EQ(required_rx_depth(o), required_rx_depth(push2));
  o.objective = "fastest";
  Capabilities caps;
  EXPECT_NE(why_unsupported(caps, o).find("objective 'fastest' is not throughput, p50 or p99"),
            std::string::npos);
}

}  // namespace
}  // namespace fabflow::flow::test
