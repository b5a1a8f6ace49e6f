// auto (kv::Options::automatic): every rank chooses the same design from the kv advise profile,
// or by the rule without one, and the store answers intact GETs; ranks that open different
// designs are refused at the first step of setup.
#include <gtest/gtest.h>

#include <fabflow/bootstrap.h>
#include <fabflow/kv.h>

#include <array>
#include <fstream>
#include <mutex>
#include <thread>

#include "support/advice_support.h"

namespace fabflow::kv {
namespace {

using fabflow::testing::advice_profile;
using fabflow::testing::write_temp;

Options auto_options(const std::string& profile) {
  Options o;
  o.automatic = true;
  o.capacity = 64;
  o.profile = profile;
  return o;
}

// One client (rank 0) and one server (rank 1) on `provider`: the client PUTs 20 keys and reads
// each back. Returns the first error and each end's why() in *why.
std::string put_get(const char* provider, const Options& client_o, const Options& server_o,
                    std::array<std::string, 2>* why) {
  TransportOptions to;
  to.provider = provider;
  auto boots = make_thread_bootstraps(2);
  std::mutex m;
  std::string error;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Bootstrap& boot = *boots[static_cast<std::size_t>(r)];
      try {
        if (r == 1) {
          auto server = make_server(to, boot, 1, server_o);
          (*why)[1] = server->why();
          boot.barrier();
          server->run();
          return;
        }
        auto client = make_client(to, boot, 1, client_o);
        (*why)[0] = client->why();
        boot.barrier();
        client->cache_index(boot);
        std::vector<std::byte> v(client_o.value_bytes), back;
        for (std::uint64_t id = 0; id < 20; ++id) {
          fill_value(v, id, 1, id + 1);
          if (client->put(boot, key_of(id), v) != Code::ok)
            throw Error("put " + std::to_string(id));
          if (client->get(boot, key_of(id), &back) != Code::ok || back != v)
            throw Error("get " + std::to_string(id) + " differs");
        }
        client->close(boot);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(m);
        if (error.empty()) error = "rank " + std::to_string(r) + ": " + e.what();
        boot.abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  return error;
}

std::string kv_profile(const std::string& name, const std::vector<testing::RankedRow>& rows) {
  return write_temp(name, advice_profile(rows, "", "kv").dump());
}

class KvAuto : public ::testing::TestWithParam<const char*> {};

TEST_P(KvAuto, EveryRankOpensTheProfilesDesign) {
  const std::string provider = GetParam();
  const auto profile = kv_profile(provider + "-kv-auto.json", {{provider, "zipfian", 9e5, "winner"},
                                                               {provider, "read", 8e5, "behind"}});
  std::array<std::string, 2> why;
  const Options o = auto_options(profile);
  ASSERT_EQ(put_get(GetParam(), o, o, &why), "");
  for (const auto& w : why) {
    EXPECT_EQ(w.rfind("auto on " + provider + ": read (profile " + profile, 0), 0) << w;
    EXPECT_NE(w.find("zipfian cannot open here: not a design"), std::string::npos) << w;
  }
}

TEST_P(KvAuto, WithoutAProfileTheRuleChoosesHerd) {
  std::array<std::string, 2> why;
  const Options o = auto_options(::testing::TempDir() + "/fabflow-absent-advise-kv.json");
  ASSERT_EQ(put_get(GetParam(), o, o, &why), "");
  for (const auto& w : why)
    EXPECT_NE(w.find(": herd (the rule: herd, as seed 001"), std::string::npos) << w;
}

INSTANTIATE_TEST_SUITE_P(Providers, KvAuto, ::testing::Values("local", "shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

// Under a provider profile without atomics (efa's, its atomics taken out), the advise
// profile's atomic winner is passed over with the provider profile's reason.
TEST(KvAutoProviderProfile, ADesignTheProviderCannotRunIsPassedOver) {
  std::ifstream in(std::string(FABFLOW_SOURCE_DIR) + "/profiles/efa.json");
  auto envelope = nlohmann::json::parse(in);
  auto& caps = envelope.contains("capabilities") ? envelope["capabilities"] : envelope;
  ASSERT_TRUE(caps.contains("atomics"));
  caps["atomics"]["value"] = nlohmann::json::array();
  TransportOptions to;
  to.provider = "shm";
  to.profile = write_temp("efa-no-atomics.json", envelope.dump());
  to.ops = required_ops(Design::herd);
  const std::string provider = probe_transport(to).provider;
  const auto profile = kv_profile("efa-kv-atomic.json",
                                  {{provider, "atomic", 9e5, "winner"}, {provider, "read", 8e5}});
  const AutoDesign c = choose_design(to, auto_options(profile));
  EXPECT_EQ(c.name, "read") << c.why;
  EXPECT_NE(c.why.find("atomic cannot open here: "), std::string::npos) << c.why;
}

TEST(KvAutoProfile, AProfileOfOtherValueSizesIsNotUsed) {
  const auto profile = kv_profile("kv-values.json", {{"local", "read", 1, "winner"}});
  Options o = auto_options(profile);
  o.value_bytes = 100;
  TransportOptions to;
  to.provider = "local";
  const AutoDesign c = choose_design(to, o);
  EXPECT_EQ(c.name, "herd");
  EXPECT_NE(c.why.find("it measured 32-byte values, not 100"), std::string::npos) << c.why;
}

TEST(KvAutoDisagree, RanksThatOpenDifferentDesignsAreRefused) {
  std::array<std::string, 2> why;
  const auto err = put_get("local", auto_options(kv_profile("kv-a.json", {{"local", "read", 1}})),
                           auto_options(kv_profile("kv-b.json", {{"local", "herd", 1}})), &why);
  // Whichever rank finds it first names the other's design and its own.
  EXPECT_TRUE(err.find("rank 0 opened read, this rank herd") != std::string::npos ||
              err.find("rank 1 opened herd, this rank read") != std::string::npos)
      << err;
}

}  // namespace
}  // namespace fabflow::kv
