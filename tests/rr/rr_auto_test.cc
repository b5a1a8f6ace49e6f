// auto (ChannelOptions::automatic): every rank chooses the same pattern from the advise
// profile, or by the rule without one, and the channel carries intact requests and responses;
// ranks that choose differently are told so by the hello.
#include <gtest/gtest.h>

#include <fabflow/bootstrap.h>
#include <fabflow/rr.h>

#include <cstring>
#include <thread>

#include "support/advice_support.h"
#include "support/ranks.h"

namespace fabflow::rr {
namespace {

using namespace std::chrono_literals;
using fabflow::testing::advice_profile;
using fabflow::testing::write_temp;

ChannelOptions auto_options(const std::string& profile) {
  ChannelOptions o;
  o.automatic = true;
  o.request_bytes = 64;
  o.response_bytes = 4096;
  o.profile = profile;
  return o;
}

TransportOptions auto_transport(const char* provider, const ChannelOptions& o) {
  TransportOptions t;
  t.provider = provider;
  t.ops = required_ops(o);
  return t;
}

// One requester (rank 0) calls 200 times, each response echoing its request's tag; returns
// the run's error and each end's why() in *why.
std::string echo(const char* provider, const ChannelOptions& requester_o,
                 const ChannelOptions& responder_o, std::array<std::string, 2>* why) {
  return fabflow::testing::run_ranks(
      2, auto_transport(provider, requester_o), [&](int rank, Transport& t, Bootstrap& boot) {
        if (rank == 1) {
          auto r = make_responder(t, boot, responder_o, 1);
          (*why)[1] = r->why();
          const Handler h = [](int, std::span<const std::byte> req, std::span<std::byte> resp) {
            std::memcpy(resp.data(), req.data(), 8);
            return resp.size();
          };
          const auto end = std::chrono::steady_clock::now() + 10s;
          while (!r->done()) {
            unsigned n = 0;
            if (r->serve(&h, &n) == Status::failed) throw Error(r->error());
            if (std::chrono::steady_clock::now() > end) throw Error("responder timed out");
            if (n == 0) std::this_thread::yield();
          }
          return;
        }
        auto q = make_requester(t, boot, requester_o, 1, 1);
        (*why)[0] = q->why();
        for (std::uint64_t i = 0; i < 200; ++i) {
          std::memcpy(q->request_buffer(0).data(), &i, 8);
          Response resp;
          q->call(0, 0, 64, &resp, boot);
          std::uint64_t back = 0;
          std::memcpy(&back, resp.data.data(), 8);
          if (back != i || resp.data.size() != 4096) throw Error("response " + std::to_string(i));
          q->release(resp);
        }
        if (q->close() != Status::ok) throw Error(q->error());
      });
}

class RrAuto : public ::testing::TestWithParam<const char*> {};

// The profile's best row is of the dispatcher model and its next one names no pattern: auto
// passes over both, saying why, and opens SendWrite (not the rule's WriteWrite).
TEST_P(RrAuto, EveryRankOpensTheProfilesPattern) {
  const std::string provider = GetParam();
  const auto profile =
      write_temp(provider + "-rr-auto.json",
                 advice_profile({{provider, "WriteWrite/dispatcher", 9e5, "winner"},
                                 {provider, "Shout/private", 8e5, "tied"},
                                 {provider, "SendWrite/private", 7e5, "behind"}},
                                "4K", "rr")
                     .dump());
  std::array<std::string, 2> why;
  const ChannelOptions o = auto_options(profile);
  ASSERT_EQ(echo(GetParam(), o, o, &why), "");
  for (const auto& w : why) {
    EXPECT_EQ(w.rfind("auto on " + provider + ": SendWrite (profile " + profile, 0), 0) << w;
    EXPECT_NE(w.find("WriteWrite/dispatcher cannot open here: auto opens private connections"),
              std::string::npos)
        << w;
  }
}

TEST_P(RrAuto, WithoutAProfileTheRuleChoosesWriteWrite) {
  std::array<std::string, 2> why;
  const ChannelOptions o = auto_options(::testing::TempDir() + "/fabflow-absent-advise-rr.json");
  ASSERT_EQ(echo(GetParam(), o, o, &why), "");
  for (const auto& w : why)
    EXPECT_NE(w.find(": WriteWrite (the rule: WriteWrite, as seed 000"), std::string::npos) << w;
}

INSTANTIATE_TEST_SUITE_P(Providers, RrAuto, ::testing::Values("local", "shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

TEST(RrAutoProfile, AProfileOfOtherRequestSizesIsNotUsed) {
  const auto profile =
      write_temp("rr-req.json",
                 advice_profile({{"local", "SendSend/private", 1, "winner"}}, "4K", "rr").dump());
  ChannelOptions o = auto_options(profile);
  o.request_bytes = 256;
  Capabilities caps;
  caps.provider = "local";
  caps.rma = true;
  caps.max_msg_size = std::size_t{1} << 30;
  const AutoPattern c = choose_pattern(caps, o);
  EXPECT_NE(c.why.find("it measured 64-byte requests, not 256"), std::string::npos) << c.why;
}

TEST(RrAutoDisagree, TheHelloRefusesRanksThatChoseDifferently) {
  auto profile = [](const std::string& name, const std::string& design) {
    return write_temp(name, advice_profile({{"local", design, 1e6, "winner"}}, "4K", "rr").dump());
  };
  std::array<std::string, 2> why;
  const auto err = echo("local", auto_options(profile("rr-a.json", "SendSend/private")),
                        auto_options(profile("rr-b.json", "WriteSend/private")), &why);
  // Whichever rank finds it first names the other's pattern and its own.
  EXPECT_TRUE(err.find("rank 1 opened WriteSend, this rank SendSend") != std::string::npos ||
              err.find("rank 0 opened SendSend, this rank WriteSend") != std::string::npos)
      << err;
}

}  // namespace
}  // namespace fabflow::rr
