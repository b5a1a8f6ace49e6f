// The bulk channel's messages between Memories it allocated (Channel::allocate): every protocol
// delivers intact payload (checksums) on local, shm and tcp, at offsets inside the memories and
// with one side in user memory; on local a rendezvous whose advertised buffer is a Memory
// moves through the peer's mapping (mapped_bytes), one into user memory by cross-memory attach.
#include <gtest/gtest.h>

#include <fabflow/bootstrap.h>
#include <fabflow/bulk.h>
#include <fabflow/bulk/transfer.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/ranks.h"

// A namespace of its own: the test files are compiled together in unity batches.
namespace fabflow::bulk::channel_memory_test {
namespace {

using fabflow::testing::run_ranks;

std::uint64_t checksum(std::span<const std::byte> b) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (std::byte x : b) h = (h ^ static_cast<std::uint64_t>(x)) * 1099511628211ull;
  return h;
}

void fill(std::span<std::byte> b, std::uint64_t seed) {
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + b.size() + 1;
  for (std::byte& v : b) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = static_cast<std::byte>(x);
  }
}

// `provider`'s transport with the operations every protocol needs.
TransportOptions transport_for(const char* provider) {
  TransportOptions to;
  to.provider = provider;
  to.ops = {Op::send, Op::write, Op::read};
  return to;
}

struct Case {
  const char* provider;
  Protocol protocol;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  for (const char* p : {"local", "shm", "tcp"})
    for (Protocol proto : kAllProtocols) c.push_back({p, proto});
  return c;
}

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  std::string n = std::string(i.param.provider) + "_" + std::string(to_string(i.param.protocol));
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

class ChannelMemory : public ::testing::TestWithParam<Case> {};

// Rank 0 sends to rank 1 three messages per size: Memory to Memory, Memory to user memory and
// user memory to Memory; rank 1 compares each payload's checksum with the one rank 0 gave.
TEST_P(ChannelMemory, TwoSidedProtocolsDeliverIntactPayload) {
  const Case c = GetParam();
  const std::string err =
      run_ranks(2, transport_for(c.provider), [&](int rank, Transport& t, Bootstrap& boot) {
        ChannelOptions o;
        o.eager_limit = 1024;
        o.bounce_size = 4096;
        o.frag_size = 16384;
        o.depth = 2;
        o.copy_ahead = 4096;
        o.measure_costs = false;
        o.peer_timeout = std::chrono::milliseconds(5000);
        auto ch = open_channel(t, boot, o);
        constexpr std::size_t kOffset = 8;  // messages start off the memory's first byte
        auto mem = ch->allocate((1 << 20) + kOffset);
        std::vector<std::byte> user((1 << 20) + kOffset);
        std::uint64_t n = 0;
        for (std::size_t size : {std::size_t{1000}, std::size_t{100000}, std::size_t{1} << 20}) {
          if (c.protocol == Protocol::eager && size > o.eager_limit) continue;
          // 0: Memory -> Memory, 1: Memory -> user, 2: user -> Memory.
          for (int shape = 0; shape < 3; ++shape, ++n) {
            const bool from_memory = shape != 2, into_memory = shape != 1;
            std::span<std::byte> out((from_memory ? mem->data() : user.data()) + kOffset, size);
            std::span<std::byte> in((into_memory ? mem->data() : user.data()) + kOffset, size);
            std::uint64_t sum = 0;
            if (rank == 0) {
              fill(out, n);
              sum = checksum(out);
              ch->send(1, 3, out, c.protocol);
              ch->send(1, 4, std::as_bytes(std::span(&sum, 1)), Protocol::eager);
            } else {
              std::memset(mem->data(), 0xee, mem->size());
              ASSERT_EQ(ch->recv(0, 3, in), size);
              ch->recv(0, 4, std::as_writable_bytes(std::span(&sum, 1)));
              ASSERT_EQ(checksum(in), sum) << size << " bytes, shape " << shape;
              if (into_memory) {  // nothing written around the message
                ASSERT_EQ(mem->data()[kOffset - 1], std::byte{0xee});
                if (size + kOffset < mem->size()) {
                  ASSERT_EQ(mem->data()[kOffset + size], std::byte{0xee});
                }
              }
            }
          }
        }
        // On local the advertised buffer decides the path: a Memory is copied through the mapping
        // (counted by the rank that copies), elsewhere nothing is.
        const Stats& s = ch->stats();
        const auto mapped = allgather_value(boot, s.mapped_bytes, "mapped bytes");
        const bool rendezvous = c.protocol != Protocol::copy && c.protocol != Protocol::eager;
        const bool by_mapping = std::string(c.provider) == "local" &&
                                s.rendezvous_path.rfind("cross-memory attach", 0) == 0;
        if (rendezvous && by_mapping && mapped[0] + mapped[1] == 0)
          throw Error("no rendezvous went through the peer's mapping");
        if ((!rendezvous || !by_mapping) && mapped[0] + mapped[1] != 0)
          throw Error("mapped bytes counted where nothing goes through a mapping");
        // A rendezvous of 1 MiB between two Memories is a split copy: both ranks copy.
        if (rendezvous && by_mapping && (mapped[0] == 0 || mapped[1] == 0))
          throw Error("a rendezvous between two Memories was not copied by both sides");
      });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Providers, ChannelMemory, ::testing::ValuesIn(cases()), case_name);

// A Memory released by its user while a message uses it stays alive until the message is done.
TEST(ChannelMemoryLifetime, AMemoryReleasedDuringASendIsKeptUntilItCompletes) {
  const std::string err =
      run_ranks(2, transport_for("local"), [&](int rank, Transport& t, Bootstrap& boot) {
        ChannelOptions o;
        o.measure_costs = false;
        auto ch = open_channel(t, boot, o);
        constexpr std::size_t kSize = 1 << 20;
        if (rank == 0) {
          auto mem = ch->allocate(kSize);
          fill({mem->data(), kSize}, 9);
          const std::uint64_t sum = checksum({mem->data(), kSize});
          RequestPtr r = ch->isend(1, 1, {mem->data(), kSize}, Protocol::rndv_read);
          mem.reset();  // the request holds it
          ch->wait(r);
          ch->send(1, 2, std::as_bytes(std::span(&sum, 1)), Protocol::eager);
          return;
        }
        std::vector<std::byte> in(kSize);
        ch->recv(0, 1, in);
        std::uint64_t sum = 0;
        ch->recv(0, 2, std::as_writable_bytes(std::span(&sum, 1)));
        if (checksum(in) != sum) throw Error("the payload of a released memory differs");
      });
  EXPECT_EQ(err, "");
}

// On local, rendezvous (read and write based) between two Memories, eight in flight at once at
// an odd size: with split copies (the default threshold) both ranks copy a share of every
// message, without (split_copy_min 0) one rank each message; every payload arrives intact
// either way, and nothing is written around the receive buffers.
class ChannelSplitCopy : public ::testing::TestWithParam<std::size_t> {};

TEST_P(ChannelSplitCopy, BothRanksCopyAShareAndEveryPayloadArrivesIntact) {
  const std::size_t split_min = GetParam();
  const std::string err =
      run_ranks(2, transport_for("local"), [&](int rank, Transport& t, Bootstrap& boot) {
        ChannelOptions o;
        o.measure_costs = false;
        o.split_copy_min = split_min;
        o.peer_timeout = std::chrono::milliseconds(5000);
        auto ch = open_channel(t, boot, o);
        constexpr std::size_t kSize = (1 << 20) + 3 * 4096 + 5, kStride = kSize + 4096,
                              kMessages = 8;
        auto mem = ch->allocate(kMessages * kStride);
        std::memset(mem->data(), 0xee, mem->size());
        std::vector<std::uint64_t> sums(kMessages);
        std::vector<RequestPtr> reqs;
        for (std::size_t i = 0; i < kMessages; ++i) {
          std::span<std::byte> part(mem->data() + i * kStride, kSize);
          const Protocol p = std::array{Protocol::rndv_read, Protocol::pipeline_read,
                                        Protocol::rndv_write, Protocol::caching_pipeline}[i % 4];
          if (rank == 0) {
            fill(part, i + 100);
            sums[i] = checksum(part);
            reqs.push_back(ch->isend(1, 5, part, p));
          } else {
            reqs.push_back(ch->irecv(0, 5, part));
          }
        }
        for (RequestPtr& r : reqs) ch->wait(r);
        if (rank == 0) {
          ch->send(1, 6, std::as_bytes(std::span(sums)), Protocol::eager);
        } else {
          ch->recv(0, 6, std::as_writable_bytes(std::span(sums)));
          for (std::size_t i = 0; i < kMessages; ++i) {
            if (checksum({mem->data() + i * kStride, kSize}) != sums[i])
              throw Error("message " + std::to_string(i) + " arrived changed");
            for (std::size_t g = kSize; g < kStride; ++g)
              if (mem->data()[i * kStride + g] != std::byte{0xee})
                throw Error("a byte after message " + std::to_string(i) + " was written");
          }
        }
        const auto mapped = allgather_value(boot, ch->stats().mapped_bytes, "mapped bytes");
        if (mapped[0] + mapped[1] != kMessages * kSize)
          throw Error("the ranks copied " + std::to_string(mapped[0] + mapped[1]) + " bytes, not " +
                      std::to_string(kMessages * kSize));
        // Without splits the senders copy the write rendezvous' half of the messages, the
        // receivers the read rendezvous'; with them the sender copies the first half of every
        // message in whole pages, the receiver the rest.
        const std::uint64_t whole = kMessages / 2 * kSize, first = kSize / 2 / 4096 * 4096;
        if (split_min == 0
                ? (mapped[0] != whole || mapped[1] != whole)
                : (mapped[0] != kMessages * first || mapped[1] != kMessages * (kSize - first)))
          throw Error("ranks 0 and 1 copied " + std::to_string(mapped[0]) + " and " +
                      std::to_string(mapped[1]) + " bytes with split_copy_min " +
                      std::to_string(split_min));
      });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Threshold, ChannelSplitCopy,
                         ::testing::Values(std::size_t{0}, ChannelOptions{}.split_copy_min));

}  // namespace
}  // namespace fabflow::bulk::channel_memory_test
