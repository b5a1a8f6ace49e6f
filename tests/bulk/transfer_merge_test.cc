// The transfer engine's merge of contiguous transfers: the runs a batch becomes (adjacent
// entries merge; a gap on either side, another memory, another registration of the peer's or
// another direction keeps them apart; entries out of order stay apart; every entry in one run,
// in order), then the engine on local, shm and tcp posting contiguous blocks in fewer
// operations (within max_operation) and scattered ones one each, every byte landing, a merged
// run striped over two endpoints like one transfer, and two forked ranks on local and tcp
// moving 16 contiguous and 16 scattered 64 KiB blocks.
#include <gtest/gtest.h>

#include <fabflow/bootstrap.h>
#include <fabflow/bulk/transfer.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>

#include "bulk/transfer_merge.h"
#include "support/forked.h"
#include "support/ranks.h"

// A namespace of its own: the test files are compiled together in unity batches.
namespace fabflow::bulk::transfer_merge_test {
namespace {

using detail::contiguous_runs;

// Stand-ins for local memories: the merge compares memories by identity and never reads one,
// so each is a pointer that owns nothing (shared_ptr's aliasing constructor).
std::array<std::max_align_t, 3> stand_in_storage;
std::shared_ptr<Memory> stand_in(std::size_t k) {
  return std::shared_ptr<Memory>(std::shared_ptr<void>(),
                                 reinterpret_cast<Memory*>(&stand_in_storage[k]));
}

RemoteRegion remote(std::uint32_t id, std::uint64_t key) {
  RemoteRegion r;
  r.peer = 1;
  r.id = id;
  r.length = 1 << 24;
  r.endpoints.push_back({0x10000, 1 << 24, key, 1});
  return r;
}

constexpr std::size_t k64K = 64 << 10;

// `n` blocks of `len` bytes, block i at local_at + i * stride and remote_at + i * stride.
std::vector<TransferRequest> blocks(const std::shared_ptr<Memory>& m, const RemoteRegion& r,
                                    std::size_t n, std::uint64_t len, std::uint64_t stride,
                                    std::uint64_t local_at = 0, std::uint64_t remote_at = 0,
                                    Direction d = Direction::write) {
  std::vector<TransferRequest> out;
  for (std::size_t i = 0; i < n; ++i)
    out.push_back({m, local_at + i * stride, &r, remote_at + i * stride, len, d});
  return out;
}

// "first+count:local,remote,length" per run, for readable failures.
std::string text(const std::vector<detail::Run>& runs) {
  std::string s;
  for (const detail::Run& x : runs)
    s += std::to_string(x.first) + "+" + std::to_string(x.count) + ":" +
         std::to_string(x.local_offset) + "," + std::to_string(x.remote_offset) + "," +
         std::to_string(x.length) + " ";
  return s;
}

TEST(TransferMergeRuns, AdjacentEntriesAreOneRun) {
  const auto m = stand_in(0);
  const RemoteRegion r = remote(7, 42);
  // Offsets that differ between the sides: adjacency is per side.
  const auto runs = contiguous_runs(blocks(m, r, 16, k64K, k64K, 4096, 100));
  ASSERT_EQ(runs.size(), 1u) << text(runs);
  EXPECT_EQ(runs[0].first, 0u);
  EXPECT_EQ(runs[0].count, 16u);
  EXPECT_EQ(runs[0].local_offset, 4096u);
  EXPECT_EQ(runs[0].remote_offset, 100u);
  EXPECT_EQ(runs[0].length, 16 * k64K);
  // Blocks of unequal lengths merge as well.
  std::vector<TransferRequest> mixed{{m, 0, &r, 0, 10, Direction::read},
                                     {m, 10, &r, 10, 3, Direction::read},
                                     {m, 13, &r, 13, 100000, Direction::read}};
  const auto m2 = contiguous_runs(mixed);
  ASSERT_EQ(m2.size(), 1u) << text(m2);
  EXPECT_EQ(m2[0].length, 100013u);
}

TEST(TransferMergeRuns, AGapOnEitherSideSplitsTheRun) {
  const auto m = stand_in(0);
  const RemoteRegion r = remote(7, 42);
  auto local_gap = blocks(m, r, 4, k64K, k64K);
  local_gap[2].local_offset += 1;  // entries 0-1 and 2-3 are contiguous locally, not 1 to 2
  local_gap[3].local_offset += 1;
  auto runs = contiguous_runs(local_gap);
  ASSERT_EQ(runs.size(), 2u) << text(runs);
  EXPECT_EQ(runs[0].count, 2u);
  EXPECT_EQ(runs[1].first, 2u);
  EXPECT_EQ(runs[1].count, 2u);
  EXPECT_EQ(runs[1].local_offset, 2 * k64K + 1);

  auto remote_gap = blocks(m, r, 4, k64K, k64K);
  remote_gap[3].remote_offset += 4096;
  runs = contiguous_runs(remote_gap);
  ASSERT_EQ(runs.size(), 2u) << text(runs);
  EXPECT_EQ(runs[0].count, 3u);
  EXPECT_EQ(runs[1].remote_offset, 3 * k64K + 4096);

  // Scattered: a block-sized gap after each, on both sides.
  runs = contiguous_runs(blocks(m, r, 16, k64K, 2 * k64K));
  ASSERT_EQ(runs.size(), 16u) << text(runs);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].first, i);
    EXPECT_EQ(runs[i].length, k64K);
  }
}

TEST(TransferMergeRuns, OtherMemoriesKeysOrDirectionsDoNotMerge) {
  const auto m = stand_in(0), other = stand_in(1);
  const RemoteRegion r = remote(7, 42);
  const RemoteRegion copy = remote(7, 42);          // a second import of the same descriptor
  const RemoteRegion other_memory = remote(8, 42);  // another memory of the peer
  const RemoteRegion other_key = remote(7, 43);     // the same id under another key
  RemoteRegion other_peer = remote(7, 42);
  other_peer.peer = 2;
  auto pair = [&](const std::shared_ptr<Memory>& m2, const RemoteRegion& r2, Direction d2) {
    std::vector<TransferRequest> b{{m, 0, &r, 0, 4096, Direction::write},
                                   {m2, 4096, &r2, 4096, 4096, d2}};
    return contiguous_runs(b).size();
  };
  EXPECT_EQ(pair(m, r, Direction::write), 1u);
  EXPECT_EQ(pair(m, copy, Direction::write), 1u);
  EXPECT_EQ(pair(other, r, Direction::write), 2u);
  EXPECT_EQ(pair(m, other_memory, Direction::write), 2u);
  EXPECT_EQ(pair(m, other_key, Direction::write), 2u);
  EXPECT_EQ(pair(m, other_peer, Direction::write), 2u);
  EXPECT_EQ(pair(m, r, Direction::read), 2u);
}

TEST(TransferMergeRuns, EntriesOutOfOrderStayApartAndInOrder) {
  const auto m = stand_in(0);
  const RemoteRegion r = remote(7, 42);
  // Contiguous memory listed backwards: no two consecutive entries continue each other.
  std::vector<TransferRequest> backwards;
  for (std::size_t i = 4; i-- > 0;)
    backwards.push_back({m, i * k64K, &r, i * k64K, k64K, Direction::write});
  const auto runs = contiguous_runs(backwards);
  ASSERT_EQ(runs.size(), 4u) << text(runs);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(runs[i].first, i);
    EXPECT_EQ(runs[i].local_offset, (3 - i) * k64K);
  }
}

TEST(TransferMergeRuns, MergeOffIsOneRunPerEntry) {
  const auto m = stand_in(0);
  const RemoteRegion r = remote(7, 42);
  const auto runs = contiguous_runs(blocks(m, r, 16, k64K, k64K), false);
  ASSERT_EQ(runs.size(), 16u) << text(runs);
  for (std::size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].count, 1u);
}

// A run whose end wraps around 2^64 is continued by nothing (the engine refuses such entries
// before; the merge does not rely on it).
TEST(TransferMergeRuns, OffsetsThatWrapDoNotMerge) {
  const auto m = stand_in(0);
  const RemoteRegion r = remote(7, 42);
  const std::uint64_t top = UINT64_MAX - 9;
  std::vector<TransferRequest> b{{m, 0, &r, top, 20, Direction::write},
                                 {m, 20, &r, 10, 20, Direction::write}};
  EXPECT_EQ(contiguous_runs(b).size(), 2u);
}

// Random batches over two memories and two regions, in blocks that continue each other or
// not: the runs cover every entry once, in order, each run's entries continue each other on
// both sides, and no run could have taken the next run's first entry.
TEST(TransferMergeRuns, RunsPartitionTheBatchAndAreMaximal) {
  std::mt19937_64 rng(63);
  const std::array<std::shared_ptr<Memory>, 2> mems{stand_in(0), stand_in(2)};
  const std::array<RemoteRegion, 2> regions{remote(1, 5), remote(2, 6)};
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<TransferRequest> b;
    const std::size_t n = 1 + rng() % 40;
    std::uint64_t local = 0, far = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t len = 1 + rng() % 5000;
      if (rng() % 3 == 0) local += rng() % 2 ? 1 : 0;   // a gap (or none) on the local side
      if (rng() % 3 == 0) far += rng() % 2 ? 4096 : 0;  // and on the remote side
      b.push_back({mems[rng() % 4 == 0 ? 1 : 0], local, &regions[rng() % 4 == 0 ? 1 : 0], far, len,
                   rng() % 6 == 0 ? Direction::read : Direction::write});
      local += len;
      far += len;
    }
    const auto runs = contiguous_runs(b);
    std::size_t next = 0;
    for (std::size_t k = 0; k < runs.size(); ++k) {
      const detail::Run& x = runs[k];
      ASSERT_EQ(x.first, next) << "trial " << trial << ": " << text(runs);
      ASSERT_GE(x.count, 1u);
      std::uint64_t length = 0;
      for (std::size_t i = x.first; i < x.first + x.count; ++i) {
        const TransferRequest& e = b[i];
        ASSERT_EQ(e.local, b[x.first].local);
        ASSERT_EQ(e.remote, b[x.first].remote);
        ASSERT_EQ(e.direction, b[x.first].direction);
        ASSERT_EQ(e.local_offset, x.local_offset + length) << "trial " << trial;
        ASSERT_EQ(e.remote_offset, x.remote_offset + length) << "trial " << trial;
        length += e.length;
      }
      ASSERT_EQ(x.length, length);
      next = x.first + x.count;
      if (k + 1 < runs.size()) {  // maximal: the next entry does not continue this run
        const TransferRequest& last = b[next - 1];
        const TransferRequest& following = b[next];
        const bool continues = following.local == last.local && following.remote == last.remote &&
                               following.direction == last.direction &&
                               following.local_offset == x.local_offset + x.length &&
                               following.remote_offset == x.remote_offset + x.length;
        ASSERT_FALSE(continues) << "trial " << trial << ": " << text(runs);
      }
    }
    ASSERT_EQ(next, b.size());
  }
}

// --- the engine ---

TransportOptions options(const char* provider) {
  TransportOptions t;
  t.provider = provider;
  t.ops = Engine::required_ops();
  t.rx_depth = 512;
  t.same_host = true;
  return t;
}

std::byte byte_at(std::uint64_t seed, std::uint64_t i) {
  return static_cast<std::byte>((seed * 29 + i * 3 + (i >> 12)) & 0xff);
}

// A round: rank 0 moves `blocks` blocks of `len` bytes at `stride` (write: its memory into
// rank 1's; read: rank 1's into its own) in one batch with a notification, under
// max_operation `op` (0: the default), and expects `operations` posted.
struct Round {
  Direction direction;
  std::size_t blocks;
  std::uint64_t len, stride;
  std::size_t op;
  std::uint64_t operations;
};

// Byte by byte: every block of the round holds pattern `seed` (at its own offset) and every
// byte between and after the blocks (up to `span`) is still 0. "" or the first difference.
std::string check_blocks(const Memory& m, const Round& r, std::uint64_t seed, std::uint64_t span) {
  for (std::uint64_t at = 0; at < span; ++at) {
    const bool inside = at / r.stride < r.blocks && at % r.stride < r.len;
    const std::byte want = inside ? byte_at(seed, at) : std::byte{0};
    if (m.data()[at] != want)
      return "byte " + std::to_string(at) + (inside ? " of a block" : " outside the blocks") +
             " differs";
  }
  return "";
}

// Runs `rounds` between two ranks of `boot` over `t`; throws with the first failure.
void run_rounds(Transport& t, Bootstrap& boot, const std::vector<Round>& rounds,
                EngineOptions o = {}) {
  constexpr std::uint64_t kSpan = 4 << 20;
  Engine e(t, boot, o);
  auto mine = e.allocate(kSpan);
  const int peer = 1 - boot.rank();
  auto all = boot.allgather(e.describe(*mine, peer));
  const RemoteRegion theirs = e.import(peer, all[static_cast<std::size_t>(peer)]);
  for (std::uint64_t k = 0; k < rounds.size(); ++k) {
    const Round& r = rounds[k];
    const std::string round = "round " + std::to_string(k) + ": ";
    const bool write = r.direction == Direction::write;
    const std::uint64_t seed = 20 + k;
    // The side the data goes from holds the pattern; the side it goes to is zeroed.
    const bool source = (boot.rank() == 0) == write;
    for (std::uint64_t i = 0; i < kSpan; ++i)
      mine->data()[i] = source ? byte_at(seed, i) : std::byte{0};
    boot.barrier([&] { e.progress(); });
    if (boot.rank() == 0) {
      e.set_max_operation(r.op);
      std::vector<TransferRequest> batch;
      for (std::uint64_t i = 0; i < r.blocks; ++i)
        batch.push_back({mine, i * r.stride, &theirs, i * r.stride, r.len, r.direction});
      const std::uint64_t before = e.endpoint_operations()[0];
      const Handle h = e.submit(batch, k);
      if (e.wait(h) != Status::ok) throw Error(round + e.error(h));
      e.release(h);
      const std::uint64_t ops = e.endpoint_operations()[0] - before;
      if (ops != r.operations)
        throw Error(round + std::to_string(ops) + " operations, expected " +
                    std::to_string(r.operations));
      if (!write)
        if (std::string bad = check_blocks(*mine, r, seed, kSpan); !bad.empty())
          throw Error(round + "read " + bad);
    } else {
      const Notification n = e.wait_notification();  // after every byte of the batch landed
      if (n.peer != 0 || n.tag != k) throw Error(round + "wrong notification");
      if (write)
        if (std::string bad = check_blocks(*mine, r, seed, kSpan); !bad.empty())
          throw Error(round + "written " + bad);
    }
    boot.barrier([&] { e.progress(); });
  }
}

class TransferMerge : public ::testing::TestWithParam<const char*> {};

// 16 contiguous 64 KiB blocks: one operation (1 MiB, within every transport's default largest
// operation: tcp's preferred 1 MiB, local's largest 1 MiB, shm's); four under max_operation
// 256 KiB; 16 scattered ones: 16. Three contiguous 600000-byte blocks: 1.8 MB in two
// operations where the largest is 1 MiB (tcp, local), one on shm. READs merge too.
TEST_P(TransferMerge, ContiguousBlocksGoInFewerOperationsAndEveryByteLands) {
  const std::string provider = GetParam();
  const std::uint64_t big = provider == "shm" ? 1 : 2;
  const std::vector<Round> rounds{
      {Direction::write, 16, k64K, k64K, 0, 1},
      {Direction::write, 16, k64K, 2 * k64K, 0, 16},
      {Direction::write, 16, k64K, k64K, 256 << 10, 4},
      {Direction::write, 3, 600000, 600000, 0, big},
      {Direction::read, 16, k64K, k64K, 0, 1},
      {Direction::read, 16, k64K, 2 * k64K, 0, 16},
  };
  const std::string err =
      testing::run_ranks(2, options(GetParam()),
                         [&](int, Transport& t, Bootstrap& boot) { run_rounds(t, boot, rounds); });
  EXPECT_EQ(err, "");
}

// With merge_contiguous off, every transfer is an operation of its own.
TEST_P(TransferMerge, WithMergeOffEveryTransferIsAnOperation) {
  EngineOptions o;
  o.merge_contiguous = false;
  const std::vector<Round> rounds{{Direction::write, 16, k64K, k64K, 0, 16}};
  const std::string err = testing::run_ranks(
      2, options(GetParam()),
      [&](int, Transport& t, Bootstrap& boot) { run_rounds(t, boot, rounds, o); });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Providers, TransferMerge, ::testing::Values("local", "shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

// Two endpoints per rank: 16 contiguous 64 KiB WRITEs merge into one 1 MiB run, which (at least
// stripe_min) is cut into one 512 KiB part per endpoint; 16 scattered ones go to the endpoints in
// turn, 8 each. Every byte is in place when the notification arrives (the second endpoint's
// writes fenced before it).
class TransferMergeStripe : public ::testing::TestWithParam<const char*> {};

TEST_P(TransferMergeStripe, AMergedRunIsStripedLikeOneTransfer) {
  const std::string err =
      testing::run_ranks(2, options(GetParam()), [&](int rank, Transport& t, Bootstrap& boot) {
        auto second = open_transport(options(GetParam()));
        second->connect(boot);
        Engine e({&t, second.get()}, boot);
        constexpr std::uint64_t kSpan = 2 << 20;
        auto mine = e.allocate(kSpan);
        const int peer = 1 - rank;
        auto all = boot.allgather(e.describe(*mine, peer));
        const RemoteRegion theirs = e.import(peer, all[static_cast<std::size_t>(peer)]);
        for (std::uint64_t k = 0; k < 2; ++k) {
          const Round r{Direction::write, 16, k64K, k == 0 ? k64K : 2 * k64K, 0, 0};
          const std::uint64_t seed = 40 + k;
          for (std::uint64_t i = 0; i < kSpan; ++i)
            mine->data()[i] = rank == 0 ? byte_at(seed, i) : std::byte{0};
          boot.barrier([&] { e.progress(); });
          if (rank == 0) {
            std::vector<TransferRequest> batch;
            for (std::uint64_t i = 0; i < r.blocks; ++i)
              batch.push_back({mine, i * r.stride, &theirs, i * r.stride, r.len, r.direction});
            const std::vector<std::uint64_t> before = e.endpoint_operations();
            const Handle h = e.submit(batch, k);
            if (e.wait(h) != Status::ok) throw Error(e.error(h));
            e.release(h);
            const std::uint64_t want = k == 0 ? 1 : 8;
            for (std::size_t ep = 0; ep < 2; ++ep)
              if (const std::uint64_t n = e.endpoint_operations()[ep] - before[ep]; n != want)
                throw Error("round " + std::to_string(k) + ": endpoint " + std::to_string(ep) +
                            " posted " + std::to_string(n) + " operations, expected " +
                            std::to_string(want));
          } else {
            const Notification n = e.wait_notification();
            if (n.peer != 0 || n.tag != k) throw Error("wrong notification");
            if (std::string bad = check_blocks(*mine, r, seed, kSpan); !bad.empty())
              throw Error("round " + std::to_string(k) + ": " + bad);
          }
          boot.barrier([&] { e.progress(); });
        }
      });
  EXPECT_EQ(err, "");
}

// Not local: its memory reaches only the first endpoint (nothing to stripe).
INSTANTIATE_TEST_SUITE_P(Providers, TransferMergeStripe, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

// Two forked ranks (each its own process, bootstrap over loopback TCP): 16 contiguous 64 KiB
// blocks in one operation, 16 scattered ones in 16, written and read back, every byte checked.
class TransferMergeProcesses : public ::testing::TestWithParam<const char*> {};

TEST_P(TransferMergeProcesses, ContiguousAndScatteredBlocksLandIntact) {
  const char* provider = GetParam();
  const std::vector<Round> rounds{
      {Direction::write, 16, k64K, k64K, 0, 1},
      {Direction::write, 16, k64K, 2 * k64K, 0, 16},
      {Direction::read, 16, k64K, k64K, 0, 1},
      {Direction::read, 16, k64K, 2 * k64K, 0, 16},
  };
  auto children = test::spawn_ranks(
      2, test::loopback(), [&](int, const test::ChildIo& io, const BootstrapConfig& config) {
        auto boot = make_tcp_bootstrap(config);
        auto t = open_transport(options(provider));
        t->connect(*boot);
        run_rounds(*t, *boot, rounds);
        io.say("rounds done");
        return 0;
      });
  for (std::size_t r = 0; r < children.size(); ++r) {
    const int status = children[r].finish(std::chrono::milliseconds(60000));
    EXPECT_EQ(status, 0) << "rank " << r << ": " << children[r].output();
    EXPECT_NE(children[r].output().find("rounds done"), std::string::npos)
        << "rank " << r << ": " << children[r].output();
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, TransferMergeProcesses, ::testing::Values("local", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace fabflow::bulk::transfer_merge_test
