// The transfer engine's limits and released memory on local, shm and tcp: a batch above
// max_batch is refused whole with one clear error and the next batch runs, with one
// notification; a transfer above the largest operation is split and lands intact, an 8 MiB one
// in the transport's preferred operations or those asked for; a memory its
// owner releases while a batch uses it stays alive until the batch ends; a peer's memory, once
// the peer said it released it, is refused with one clear error while its other memory serves.
#include <gtest/gtest.h>

#include <fabflow/bootstrap.h>
#include <fabflow/bulk/transfer.h>

#include <chrono>
#include <cstring>
#include <string>

#include "support/ranks.h"

// A namespace of its own: the test files are compiled together in unity batches.
namespace fabflow::bulk::transfer_limits_test {
namespace {

TransportOptions options(const char* provider) {
  TransportOptions t;
  t.provider = provider;
  t.ops = Engine::required_ops();
  t.rx_depth = 512;
  return t;
}

std::byte byte_at(std::uint64_t seed, std::uint64_t i) {
  return static_cast<std::byte>((seed * 37 + i * 11 + (i >> 10)) & 0xff);
}

long differs(const Memory& m, std::uint64_t at, std::uint64_t len, std::uint64_t seed,
             std::uint64_t from) {
  for (std::uint64_t i = 0; i < len; ++i)
    if (m.data()[at + i] != byte_at(seed, from + i)) return static_cast<long>(at + i);
  return -1;
}

// Each rank's memory of `len` bytes, described to the other and imported.
struct Ends {
  std::shared_ptr<Memory> mine;
  RemoteRegion theirs;
  Ends(Engine& e, Bootstrap& boot, std::size_t len) : mine(e.allocate(len)) {
    const int peer = 1 - boot.rank();
    auto all = boot.allgather(e.describe(*mine, peer));
    theirs = e.import(peer, all[static_cast<std::size_t>(peer)]);
  }
};

class TransferLimits : public ::testing::TestWithParam<const char*> {};

TEST_P(TransferLimits, ABatchAboveTheLimitIsRefusedAndTheNextRuns) {
  EngineOptions o;
  o.max_batch = 16;
  const std::string err =
      testing::run_ranks(2, options(GetParam()), [&](int rank, Transport& t, Bootstrap& boot) {
        Engine e(t, boot, o);
        Ends p(e, boot, 1 << 16);
        if (rank == 1) {
          const Notification n = e.wait_notification();
          if (n.tag != 2) throw Error("notification " + std::to_string(n.tag) + ", not 2");
          if (long bad = differs(*p.mine, 0, 16 * 1024, 4, 0); bad >= 0)
            throw Error("byte " + std::to_string(bad) + " differs");
          return;
        }
        for (std::size_t i = 0; i < p.mine->size(); ++i) p.mine->data()[i] = byte_at(4, i);
        std::vector<TransferRequest> batch;
        for (std::uint64_t i = 0; i < 17; ++i)
          batch.push_back({p.mine, i * 1024, &p.theirs, i * 1024, 1024, Direction::write});
        try {
          e.submit(batch, 1);
          throw Error("a batch of 17 transfers was taken");
        } catch (const UsageError& x) {
          if (std::string(x.what()) !=
              "transfer: a batch of 17 transfers is above the engine's max_batch (16)")
            throw Error(std::string("refused with: ") + x.what());
        }
        batch.pop_back();
        const Handle h = e.submit(batch, 2);
        if (e.wait(h) != Status::ok) throw Error(e.error(h));
      });
  EXPECT_EQ(err, "");
}

TEST_P(TransferLimits, ATransferAboveTheLargestOperationIsSplit) {
  EngineOptions o;
  o.max_operation = 4096;
  o.max_outstanding = 3;
  const std::string err =
      testing::run_ranks(2, options(GetParam()), [&](int rank, Transport& t, Bootstrap& boot) {
        Engine e(t, boot, o);
        Ends p(e, boot, 1 << 20);
        if (rank == 1) {
          e.wait_notification();
          if (long bad = differs(*p.mine, 1000, 300001, 5, 7); bad >= 0)
            throw Error("byte " + std::to_string(bad) + " differs");
          if (p.mine->data()[999] != std::byte{0} || p.mine->data()[301001] != std::byte{0})
            throw Error("a byte beside the transfer was written");
          return;
        }
        for (std::size_t i = 0; i < p.mine->size(); ++i) p.mine->data()[i] = byte_at(5, i);
        const TransferRequest big{p.mine, 7, &p.theirs, 1000, 300001, Direction::write};
        const Handle h = e.submit(std::span(&big, 1), 3);
        if (e.wait(h) != Status::ok) throw Error(e.error(h));
      });
  EXPECT_EQ(err, "");
}

// An 8 MiB WRITE is posted in the transport's preferred operations by default (tcp: 1 MiB each;
// local: its largest, 1 MiB; shm: one), in those max_operation asks for when set (256 KiB: 32),
// and within the transport's largest when asked above it; every byte lands each time.
TEST_P(TransferLimits, AnEightMegabyteWriteIsPostedInTheOperationsItShouldBe) {
  const std::string provider = GetParam();
  struct Round {
    std::size_t asked;         // set_max_operation's argument
    std::uint64_t operations;  // expected on this provider
  };
  const std::vector<Round> rounds =
      provider == "shm"   ? std::vector<Round>{{0, 1}, {256 << 10, 32}, {8 << 20, 1}}
      : provider == "tcp" ? std::vector<Round>{{0, 8}, {256 << 10, 32}, {8 << 20, 1}}
                          : std::vector<Round>{{0, 8}, {256 << 10, 32}, {8 << 20, 8}};
  const std::size_t len = 8 << 20;
  const std::string err =
      testing::run_ranks(2, options(GetParam()), [&](int rank, Transport& t, Bootstrap& boot) {
        if (provider == "tcp" && t.caps().rma_preferred_size != (1u << 20))
          throw Error("tcp's preferred operation is " +
                      std::to_string(t.caps().rma_preferred_size) + " bytes, not 1 MiB");
        if (provider != "tcp" && t.caps().rma_preferred_size != 0)
          throw Error(provider + " states a preferred operation size");
        Engine e(t, boot);
        Ends p(e, boot, len);
        for (std::uint64_t k = 0; k < rounds.size(); ++k) {
          e.set_max_operation(rounds[k].asked);
          if (rank == 1) {
            e.wait_notification();
            if (long bad = differs(*p.mine, 0, len, 10 + k, 0); bad >= 0)
              throw Error("round " + std::to_string(k) + ": byte " + std::to_string(bad) +
                          " differs");
          } else {
            for (std::size_t i = 0; i < len; ++i) p.mine->data()[i] = byte_at(10 + k, i);
            const std::uint64_t before = e.endpoint_operations()[0];
            const TransferRequest all{p.mine, 0, &p.theirs, 0, len, Direction::write};
            const Handle h = e.submit(std::span(&all, 1), k);
            if (e.wait(h) != Status::ok) throw Error(e.error(h));
            e.release(h);
            const std::uint64_t ops = e.endpoint_operations()[0] - before;
            if (ops != rounds[k].operations)
              throw Error("round " + std::to_string(k) + " (max_operation " +
                          std::to_string(rounds[k].asked) + "): " + std::to_string(ops) +
                          " operations, expected " + std::to_string(rounds[k].operations));
          }
          boot.barrier([&] { e.progress(); });  // rank 1 has checked before the next round
        }
      });
  EXPECT_EQ(err, "");
}

// Rank 0 lets go of its memory right after submitting: the batch holds it until it is done.
TEST_P(TransferLimits, MemoryReleasedByItsOwnerDuringABatchLivesUntilItEnds) {
  const std::string err =
      testing::run_ranks(2, options(GetParam()), [&](int rank, Transport& t, Bootstrap& boot) {
        Engine e(t, boot);
        Ends p(e, boot, 1 << 20);
        if (rank == 1) {
          e.wait_notification();
          if (long bad = differs(*p.mine, 0, 1 << 20, 6, 0); bad >= 0)
            throw Error("byte " + std::to_string(bad) + " differs");
          return;
        }
        for (std::size_t i = 0; i < p.mine->size(); ++i) p.mine->data()[i] = byte_at(6, i);
        const TransferRequest all{p.mine, 0, &p.theirs, 0, 1 << 20, Direction::write};
        const Handle h = e.submit(std::span(&all, 1), 4);
        p.mine.reset();
        if (e.wait(h) != Status::ok) throw Error(e.error(h));
      });
  EXPECT_EQ(err, "");
}

// Rank 1 releases the memory rank 0 would write into (a second memory of rank 1 stays): once
// the word has come, a batch reaching it is refused with one clear error, a batch to the
// other memory still runs, and no byte lands in the other memory but its own.
TEST_P(TransferLimits, APeersReleasedMemoryIsRefusedOnceItSaysSo) {
  const std::string err =
      testing::run_ranks(2, options(GetParam()), [&](int rank, Transport& t, Bootstrap& boot) {
        Engine e(t, boot);
        Ends p(e, boot, 1 << 16);
        Ends other(e, boot, 1 << 16);
        if (rank == 1) p.mine.reset();  // released: its engine tells rank 0
        boot.barrier([&] { e.progress(); });
        if (rank == 0) {
          const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
          while (!e.released(p.theirs))
            if (std::chrono::steady_clock::now() > end) throw Error("no word of the release");
          if (e.released(other.theirs)) throw Error("the other memory is said released");
          std::memset(p.mine->data(), 0x5a, p.mine->size());
          const TransferRequest w{p.mine, 0, &p.theirs, 0, 1 << 16, Direction::write};
          try {
            e.submit(std::span(&w, 1));
            throw Error("a write into released memory was taken");
          } catch (const UsageError& x) {
            if (std::string(x.what()).find("which rank 1 released") == std::string::npos)
              throw Error(std::string("refused with: ") + x.what());
          }
          const TransferRequest ok{p.mine, 0, &other.theirs, 0, 100, Direction::write};
          const Handle h = e.submit(std::span(&ok, 1), 5);
          if (e.wait(h) != Status::ok) throw Error(e.error(h));
        } else {
          e.wait_notification();
          for (std::size_t i = 0; i < other.mine->size(); ++i)
            if (other.mine->data()[i] != static_cast<std::byte>(i < 100 ? 0x5a : 0))
              throw Error("byte " + std::to_string(i) + " of the other memory is wrong");
        }
      });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Providers, TransferLimits, ::testing::Values("local", "shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace fabflow::bulk::transfer_limits_test
