// The transfer engine over two endpoints per rank (striping) on local, shm and tcp: a batch of
// one large WRITE (cut into one part per endpoint) and small ones (dealt to the endpoints in
// turn) lands intact, with one notification after all of it; a striped READ comes back intact.
// On shm and tcp both endpoints carry bytes; on local only the first reaches the memory (the
// local transport shares only memory it allocated itself), so it carries everything.
#include <gtest/gtest.h>

#include <fabflow/bootstrap.h>
#include <fabflow/bulk/transfer.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "support/ranks.h"

// A namespace of its own: the test files are compiled together in unity batches.
namespace fabflow::bulk::transfer_stripe_test {
namespace {

TransportOptions options(const char* provider) {
  TransportOptions t;
  t.provider = provider;
  t.ops = Engine::required_ops();
  t.rx_depth = 512;
  return t;
}

std::byte byte_at(std::uint64_t seed, std::uint64_t i) {
  return static_cast<std::byte>((seed * 151 + i * 13 + (i >> 11)) & 0xff);
}

// Byte offset of the first difference between [at, at + len) of `m` and pattern `seed` from
// `from`, or -1.
long differs(const Memory& m, std::uint64_t at, std::uint64_t len, std::uint64_t seed,
             std::uint64_t from) {
  for (std::uint64_t i = 0; i < len; ++i)
    if (m.data()[at + i] != byte_at(seed, from + i)) return static_cast<long>(at + i);
  return -1;
}

class TransferStripe : public ::testing::TestWithParam<const char*> {};

TEST_P(TransferStripe, TwoEndpointsMoveIntactDataWithOneNotificationAfterIt) {
  const bool local = std::string(GetParam()) == "local";
  const std::string err =
      testing::run_ranks(2, options(GetParam()), [&](int rank, Transport& t, Bootstrap& boot) {
        auto second = open_transport(options(GetParam()));
        second->connect(boot);
        EngineOptions o;
        o.stripe_min = 64 * 1024;
        Engine e({&t, second.get()}, boot, o);
        if (e.endpoints() != 2) throw Error("the engine has " + std::to_string(e.endpoints()));
        constexpr std::size_t kLen = 4 << 20, kSmall = (3 << 20) + 8192;
        auto mine = e.allocate(kLen);
        const int peer = 1 - rank;
        auto all = boot.allgather(e.describe(*mine, peer));
        const RemoteRegion theirs = e.import(peer, all[static_cast<std::size_t>(peer)]);
        if (rank == 0) {
          for (std::size_t i = 0; i < kLen; ++i) mine->data()[i] = byte_at(3, i);
          std::vector<TransferRequest> batch{{mine, 100, &theirs, 4096, 3 << 20, Direction::write}};
          for (std::uint64_t i = 0; i < 8; ++i)  // after the large one's [4096, +3 MiB)
            batch.push_back(
                {mine, kSmall + i * 16384, &theirs, kSmall + i * 16384, 16000, Direction::write});
          const Handle h = e.submit(batch, 77);
          if (e.wait(h) != Status::ok) throw Error(e.error(h));
          e.release(h);
          const auto& bytes = e.endpoint_bytes();
          if (bytes[0] + bytes[1] != (3 << 20) + 8 * 16000)
            throw Error("the endpoints carried " + std::to_string(bytes[0] + bytes[1]) + " bytes");
          if (local ? bytes[1] != 0 : (bytes[0] == 0 || bytes[1] == 0))
            throw Error("endpoint bytes " + std::to_string(bytes[0]) + " and " +
                        std::to_string(bytes[1]));
          const Notification back = e.wait_notification();  // rank 1 read; serve it meanwhile
          if (back.peer != 1 || back.tag != 78) throw Error("wrong notification back");
          return;
        }
        const Notification n = e.wait_notification();
        if (n.peer != 0 || n.tag != 77) throw Error("wrong notification");
        // The data is in place when the notification is read.
        if (long bad = differs(*mine, 4096, 3 << 20, 3, 100); bad >= 0)
          throw Error("striped byte " + std::to_string(bad) + " differs");
        for (std::uint64_t i = 0; i < 8; ++i)
          if (long bad = differs(*mine, kSmall + i * 16384, 16000, 3, kSmall + i * 16384); bad >= 0)
            throw Error("small transfer byte " + std::to_string(bad) + " differs");
        // One notification per batch: no second one comes.
        Notification extra;
        for (auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
             std::chrono::steady_clock::now() < end;)
          if (e.poll_notification(&extra)) throw Error("a second notification arrived");
        // A striped READ of rank 0's memory back into this one.
        std::memset(mine->data(), 0, kLen);
        const std::vector<TransferRequest> read{
            {mine, 0, &theirs, 12345, 2 << 20, Direction::read}};
        const Handle h = e.submit(read, 78);
        if (e.wait(h) != Status::ok) throw Error(e.error(h));
        if (long bad = differs(*mine, 0, 2 << 20, 3, 12345); bad >= 0)
          throw Error("read byte " + std::to_string(bad) + " differs");
      });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Providers, TransferStripe, ::testing::Values("local", "shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

// The descriptor names the exporter's endpoints; an engine with another count refuses it.
TEST(TransferStripeDescriptor, AnEngineWithOtherEndpointsRefusesTheDescriptor) {
  const std::string err =
      testing::run_ranks(2, options("tcp"), [&](int rank, Transport& t, Bootstrap& boot) {
        auto second = open_transport(options("tcp"));
        second->connect(boot);
        std::unique_ptr<Engine> e =
            rank == 0 ? std::make_unique<Engine>(std::vector<Transport*>{&t, second.get()}, boot)
                      : std::make_unique<Engine>(t, boot);
        auto mine = e->allocate(4096);
        auto all = boot.allgather(e->describe(*mine, 1 - rank));
        if (rank != 1) return;
        try {
          e->import(0, all[0]);
        } catch (const PeerError& x) {
          if (std::string(x.what()).find("names 2 endpoints, this engine has 1") ==
              std::string::npos)
            throw Error(std::string("refused with: ") + x.what());
          return;
        }
        throw Error("a descriptor of two endpoints was imported by an engine of one");
      });
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace fabflow::bulk::transfer_stripe_test
