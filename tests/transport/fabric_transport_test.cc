// What only the libfabric transport has: its key layout (a length field read from the peer's
// blob) and provider selection. Every operation over shm, tcp msg and tcp;ofi_rxm rdm is in the
// transport contract suite (contract_test.cc).
#include <fabflow/bootstrap.h>
#include <fabflow/transport.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/ranks.h"

namespace fabflow {
namespace {

// The key blob (fabric_transport.cc): u32 magic | u16 version | u16 raw_len | u64 base |
// u64 length | u64 key | raw bytes. A length that overflows base + length, or that is larger
// than any region, is refused at import, before any operation could use it.
TEST(FabricKeys, AnImpossibleLengthIsRefusedOnEveryProvider) {
  for (const auto& [provider, endpoint] :
       {std::pair{"shm", EndpointType::rdm}, std::pair{"tcp", EndpointType::msg},
        std::pair{"tcp", EndpointType::rdm}}) {
    TransportOptions o;
    o.provider = provider;
    o.endpoint = endpoint;
    o.ops = {Op::write};
    const std::string err = testing::run_ranks(2, o, [](int rank, Transport& t, Bootstrap&) {
      if (rank != 0) return;
      auto mr = t.allocate(64, kAllAccess);
      const auto good = t.export_key(*mr);
      for (const std::uint64_t length : {~0ull, ~0ull - 32, 1ull << 62}) {
        auto blob = good;
        std::memcpy(blob.data() + 16, &length, sizeof length);
        try {
          t.import_key(1, blob);
        } catch (const PeerError&) {
          continue;
        }
        throw Error("accepted a key of length " + std::to_string(length));
      }
    });
    EXPECT_EQ(err, "") << provider << " " << to_string(endpoint);
  }
}

TEST(FabricSelect, UnknownProviderListsAvailable) {
  TransportOptions o;
  o.provider = "nosuchfabric";
  try {
    probe_libfabric(o);
    FAIL() << "unknown provider accepted";
  } catch (const UsageError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("unknown provider 'nosuchfabric'"), std::string::npos) << m;
    EXPECT_NE(m.find("shm"), std::string::npos) << m;
    EXPECT_NE(m.find("tcp"), std::string::npos) << m;
  }
}

TEST(FabricSelect, AtomicsOnTcpMsgRefusedWithReason) {
  TransportOptions o;
  o.provider = "tcp";
  o.endpoint = EndpointType::msg;
  o.ops = {Op::fadd};
  try {
    probe_libfabric(o);
    FAIL() << "atomics on tcp msg accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("tcp"), std::string::npos) << e.what();
  }
}

TEST(FabricSelect, ShmReportsInjectSizeAndManualProgress) {
  TransportOptions o;
  o.provider = "shm";
  o.ops = {Op::send, Op::write};
  Capabilities c = probe_libfabric(o);
  EXPECT_EQ(c.provider, "shm");
  EXPECT_EQ(c.endpoint, EndpointType::rdm);
  EXPECT_GT(c.inject_size, 0u);
  EXPECT_TRUE(c.data_progress_manual);
  EXPECT_TRUE(c.rma);
}

TEST(FabricSelect, DiscoverListsTcpAndShm) {
  auto all = discover_libfabric();
  bool tcp = false, shm = false;
  for (const auto& c : all) {
    tcp |= c.provider == "tcp";
    shm |= c.provider == "shm";
  }
  EXPECT_TRUE(tcp);
  EXPECT_TRUE(shm);
}

}  // namespace
}  // namespace fabflow
