// The transfer engine with ranks as threads on local, shm and tcp: batches of WRITEs and READs
// move intact bytes and the notification arrives after the data; descriptors that are forged,
// truncated or made for another rank are refused; transfers out of range are refused before
// anything moves; a cancelled batch ends closed; a peer that is gone fails the wait.
#include <gtest/gtest.h>

#include <fabflow/bootstrap.h>
#include <fabflow/bulk/transfer.h>

#include <cstring>

#include "bulk/descriptor.h"
#include "support/ranks.h"

namespace fabflow::bulk {
namespace {

TransportOptions engine_transport(const char* provider) {
  TransportOptions t;
  t.provider = provider;
  t.ops = Engine::required_ops();
  t.rx_depth = 512;
  return t;
}

// Byte i of pattern `seed`.
std::byte pattern(std::uint64_t seed, std::uint64_t i) {
  return static_cast<std::byte>((seed * 131 + i * 7 + (i >> 9)) & 0xff);
}
void fill(Memory& m, std::uint64_t seed) {
  for (std::size_t i = 0; i < m.size(); ++i) m.data()[i] = pattern(seed, i);
}
// The first offset in [from, from + len) of `m` that does not hold pattern `seed` at
// `pattern_offset + (offset - from)`, or -1.
long mismatch(const Memory& m, std::uint64_t from, std::uint64_t len, std::uint64_t seed,
              std::uint64_t pattern_offset) {
  for (std::uint64_t i = 0; i < len; ++i)
    if (m.data()[from + i] != pattern(seed, pattern_offset + i)) return static_cast<long>(from + i);
  return -1;
}

// Each rank's engine, a 1 MiB memory and the peer's memory, described and imported over the
// bootstrap (rank r describes its memory for rank 1 - r).
struct Pair {
  Engine engine;
  std::shared_ptr<Memory> mine;
  RemoteRegion theirs;
  Pair(Transport& t, Bootstrap& boot, EngineOptions o = {})
      : engine(t, boot, o), mine(engine.allocate(1 << 20)) {
    const int peer = 1 - boot.rank();
    auto all = boot.allgather(engine.describe(*mine, peer));
    theirs = engine.import(peer, all[static_cast<std::size_t>(peer)]);
  }
};

class Transfer : public ::testing::TestWithParam<const char*> {};

// Rank 0 WRITEs three ranges of its memory into rank 1's in one batch with a notification;
// rank 1, told, checks the bytes, then READs a range of rank 0's memory and notifies back.
TEST_P(Transfer, WritesAndReadsMoveIntactBytesAndTheNotificationComesAfter) {
  const std::string err = testing::run_ranks(
      2, engine_transport(GetParam()), [&](int rank, Transport& t, Bootstrap& boot) {
        Pair p(t, boot);
        if (rank == 0) {
          fill(*p.mine, 5);
          const std::vector<TransferRequest> batch{
              {p.mine, 0, &p.theirs, 4096, 100000, Direction::write},
              {p.mine, 200000, &p.theirs, 500000, 300000, Direction::write},
              {p.mine, (1 << 20) - 10, &p.theirs, 0, 10, Direction::write}};
          const Handle h = p.engine.submit(batch, 42);
          if (p.engine.wait(h) != Status::ok) throw Error(p.engine.error(h));
          p.engine.release(h);
          const Notification back = p.engine.wait_notification();  // rank 1 read; serve it
          if (back.peer != 1 || back.tag != 43) throw Error("wrong notification back");
          return;
        }
        const Notification n = p.engine.wait_notification();
        if (n.peer != 0 || n.tag != 42) throw Error("wrong notification");
        for (auto [at, len, from] : {std::array<std::uint64_t, 3>{4096, 100000, 0},
                                     {500000, 300000, 200000},
                                     {0, 10, (1 << 20) - 10}})
          if (long bad = mismatch(*p.mine, at, len, 5, from); bad >= 0)
            throw Error("written byte " + std::to_string(bad) + " differs");
        const std::vector<TransferRequest> read{
            {p.mine, 900000, &p.theirs, 123, 65536, Direction::read}};
        const Handle h = p.engine.submit(read, 43);
        if (p.engine.wait(h) != Status::ok) throw Error(p.engine.error(h));
        if (long bad = mismatch(*p.mine, 900000, 65536, 5, 123); bad >= 0)
          throw Error("read byte " + std::to_string(bad) + " differs");
      });
  EXPECT_EQ(err, "");
}

// More operations than max_outstanding: the rest queue and go out as earlier ones complete.
// The transfers are not adjacent (1000 bytes every 1024), so none merge: 64 operations.
TEST_P(Transfer, ABatchLargerThanTheOutstandingLimitQueues) {
  EngineOptions o;
  o.max_outstanding = 3;
  const std::string err = testing::run_ranks(
      2, engine_transport(GetParam()), [&](int rank, Transport& t, Bootstrap& boot) {
        Pair p(t, boot, o);
        if (rank == 1) {
          const Notification n = p.engine.wait_notification();
          if (n.tag != 9) throw Error("wrong tag");
          for (std::uint64_t i = 0; i < 64; ++i)
            if (long bad = mismatch(*p.mine, i * 1024, 1000, 6, i * 1024); bad >= 0)
              throw Error("byte " + std::to_string(bad) + " differs");
          return;
        }
        fill(*p.mine, 6);
        std::vector<TransferRequest> batch;
        for (std::uint64_t i = 0; i < 64; ++i)
          batch.push_back({p.mine, i * 1024, &p.theirs, i * 1024, 1000, Direction::write});
        const Handle h = p.engine.submit(batch, 9);
        if (p.engine.wait(h) != Status::ok) throw Error(p.engine.error(h));
        if (p.engine.endpoint_operations()[0] != 64)
          throw Error(std::to_string(p.engine.endpoint_operations()[0]) + " operations, not 64");
      });
  EXPECT_EQ(err, "");
}

// Entries out of range, of no bytes or without memory are refused before anything is posted;
// descriptors made for another rank, forged or truncated are refused at import.
TEST_P(Transfer, BadTransfersAndDescriptorsAreRefused) {
  const std::string err = testing::run_ranks(
      3, engine_transport(GetParam()), [&](int rank, Transport& t, Bootstrap& boot) {
        Engine e(t, boot);
        auto mine = e.allocate(4096);
        // Rank 0 describes its memory for rank 2 only; every rank sees the blob.
        auto all = boot.allgather(rank == 0 ? e.describe(*mine, 2) : std::vector<std::byte>{});
        const auto& blob = all[0];
        auto refused = [&](const std::function<void()>& f, const std::string& want) {
          try {
            f();
          } catch (const Error& x) {
            if (std::string(x.what()).find(want) == std::string::npos)
              throw Error("refused with '" + std::string(x.what()) + "', not '" + want + "'");
            return;
          }
          throw Error("not refused: " + want);
        };
        if (rank == 1) {
          refused([&] { e.import(0, blob); }, "was made for rank 2, not for rank 1");
          return;
        }
        if (rank != 2) return;
        refused([&] { e.import(1, blob); }, "describes memory of rank 0");
        refused([&] { e.import(0, std::span(blob).first(20)); }, "is truncated (20 bytes)");
        auto forged = blob;
        forged[0] = std::byte{0};
        refused([&] { e.import(0, forged); }, "not a transfer engine descriptor");
        auto longer = blob;
        longer.push_back(std::byte{0});
        refused([&] { e.import(0, longer); }, "has a key of");
        const RemoteRegion r = e.import(0, blob);
        if (r.size() != 4096) throw Error("imported " + std::to_string(r.size()) + " bytes");
        auto one = [&](std::uint64_t lo, std::uint64_t ro, std::size_t len) {
          const TransferRequest q{mine, lo, &r, ro, len, Direction::write};
          e.submit(std::span(&q, 1));
        };
        refused([&] { one(4000, 0, 200); }, "entry 0 of the batch reaches [4000, +200) of a local");
        refused([&] { one(0, 4000, 200); }, "reaches [4000, +200) of rank 0's memory");
        refused([&] { one(0, ~std::uint64_t{0} - 8, 16); }, "of rank 0's memory of 4096 bytes");
        refused([&] { one(0, 0, 0); }, "moves 0 bytes");
        const TransferRequest none{nullptr, 0, &r, 0, 8, Direction::write};
        refused([&] { e.submit(std::span(&none, 1)); }, "names no local or no remote memory");
        refused([&] { e.submit({}); }, "an empty batch");
      });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Providers, Transfer, ::testing::Values("local", "shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

// A cancelled batch ends closed, whatever of it was in flight.
TEST(TransferCancel, ACancelledBatchEndsClosed) {
  EngineOptions o;
  o.max_outstanding = 1;
  const std::string err =
      testing::run_ranks(2, engine_transport("tcp"), [&](int rank, Transport& t, Bootstrap& boot) {
        Pair p(t, boot, o);
        if (rank == 0) {
          std::vector<TransferRequest> batch;
          for (std::uint64_t i = 0; i < 32; ++i)
            batch.push_back({p.mine, i * 4096, &p.theirs, i * 4096, 4096, Direction::write});
          const Handle h = p.engine.submit(batch, 1);
          p.engine.cancel(h);
          if (const Status s = p.engine.wait(h); s != Status::closed)
            throw Error("cancelled batch ended " + std::string(to_string(s)));
        }
        boot.barrier([&] { p.engine.progress(); });
      });
  EXPECT_EQ(err, "");
}

// The peer leaves without serving: a READ from it cannot complete, and the wait fails with the
// bootstrap's word for it (a WRITE may complete at the initiator on tcp whatever the target
// does).
TEST(TransferPeer, APeerThatIsGoneFailsTheWait) {
  EngineOptions o;
  o.peer_timeout = std::chrono::milliseconds(1500);
  std::string seen;
  testing::run_ranks(2, engine_transport("tcp"), [&](int rank, Transport& t, Bootstrap& boot) {
    Pair p(t, boot, o);
    if (rank == 1) {
      boot.abort("rank 1 leaves");
      return;
    }
    std::vector<TransferRequest> batch;
    for (std::uint64_t i = 0; i < 64; ++i)
      batch.push_back({p.mine, i * 8192, &p.theirs, i * 8192, 8192, Direction::read});
    const Handle h = p.engine.submit(batch);
    if (p.engine.wait(h) == Status::failed) seen = p.engine.error(h);
  });
  // The bootstrap's word ("transfer, waiting for a batch: rank 1 aborted: rank 1 leaves") or,
  // when rank 1's endpoint closes first, the provider's error on the reads.
  EXPECT_EQ(seen.rfind("transfer", 0), 0u) << seen;
}

TEST(TransferDescriptor, EncodesAndDecodesWithEveryCheck) {
  const std::vector<std::byte> key(24, std::byte{7});
  const auto blob = detail::encode_descriptor(3, 5, 11, 1 << 20, {key, {}, key});
  const auto d = detail::decode_descriptor(blob, 3, 5);
  EXPECT_EQ(d.memory, 11u);
  EXPECT_EQ(d.length, 1u << 20);
  ASSERT_EQ(d.keys.size(), 3u);  // one per endpoint, the second without a key
  EXPECT_EQ(d.keys[0].size(), 24u);
  EXPECT_TRUE(d.keys[1].empty());
  EXPECT_EQ(d.keys[2].size(), 24u);
  EXPECT_EQ(d.key.size(), 3 * 4 + 2 * 24u);
  EXPECT_THROW(detail::decode_descriptor(blob, 3, 4), PeerError);
  EXPECT_THROW(detail::decode_descriptor(detail::encode_descriptor(3, 5, 11, 0, {key}), 3, 5),
               PeerError);
  EXPECT_THROW(detail::decode_descriptor(detail::encode_descriptor(3, 5, 11, 8, {}), 3, 5),
               PeerError);  // no endpoint
  EXPECT_THROW(detail::decode_descriptor(detail::encode_descriptor(3, 5, 11, 8, {{}, {}}), 3, 5),
               PeerError);  // no endpoint with a key
  auto lying = blob;        // the first key's length runs past the descriptor
  lying[32] = std::byte{0xff};
  EXPECT_THROW(detail::decode_descriptor(lying, 3, 5), PeerError);
}

}  // namespace
}  // namespace fabflow::bulk
