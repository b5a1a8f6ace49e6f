// connect_transport: "auto" finds out from the bootstrap whether the ranks share this host and
// opens local then, saying so; a named provider is opened as asked.
#include <fabflow/bootstrap.h>
#include <fabflow/transport.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace fabflow {
namespace {

// Both ranks' choices (the connect is collective: one thread per rank).
std::vector<std::string> choices_of(const TransportOptions& options) {
  auto boots = make_thread_bootstraps(2);
  std::vector<std::string> choice(2), provider(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      auto t = connect_transport(options, *boots[static_cast<std::size_t>(r)],
                                 &choice[static_cast<std::size_t>(r)]);
      provider[static_cast<std::size_t>(r)] = t->caps().provider;
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(provider[0], provider[1]);
  return choice;
}

TEST(ConnectTransport, AutoOnOneHostIsLocalAndSaysWhy) {
  TransportOptions o;  // provider "auto", same_host not set
  for (const std::string& c : choices_of(o))
    EXPECT_EQ(c, "auto: local (every rank shares this host)");
}

TEST(ConnectTransport, ANamedProviderIsOpenedAsAsked) {
  TransportOptions o;
  o.provider = "tcp";
  for (const std::string& c : choices_of(o)) EXPECT_EQ(c, "tcp msg (as asked)");
}

TEST(ConnectTransport, AutoForAnUnreliableEndpointSaysLocalHasNone) {
  TransportOptions o;
  o.endpoint = EndpointType::dgram;
  for (const std::string& c : choices_of(o))
    EXPECT_NE(c.find("but local has no dgram endpoint"), std::string::npos) << c;
}

}  // namespace
}  // namespace fabflow
