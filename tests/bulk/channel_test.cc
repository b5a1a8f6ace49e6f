// The bulk channel: every protocol on every transport moves messages of every boundary size
// intact (checksums), many in flight matched in order by tag; and what a peer or user gets
// wrong ends in one clear error.
#include <gtest/gtest.h>

#include <fabflow/bootstrap.h>
#include <fabflow/bulk.h>
#include <fabflow/fault.h>
#include <fabflow/transport.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/ranks.h"

// A namespace of its own: the test files are compiled together in unity batches.
namespace fabflow::bulk::channel_test {
namespace {

using fabflow::testing::run_ranks;

struct Provider {
  const char* name;
  EndpointType endpoint;
};
const Provider kProviders[] = {{"shm", EndpointType::rdm},
                               {"tcp", EndpointType::msg},
                               {"tcp", EndpointType::rdm},
                               {"local", EndpointType::rdm}};

TransportOptions transport_options(const Provider& p) {
  TransportOptions t;
  t.provider = p.name;
  t.endpoint = p.endpoint;
  t.ops = {Op::send, Op::write, Op::read};
  return t;
}

// Small shapes, so that every boundary is a few KiB away.
ChannelOptions small_options() {
  ChannelOptions o;
  o.eager_limit = 1024;
  o.bounce_size = 4096;
  o.frag_size = 16384;
  o.max_frag = 65536;
  o.frag_growth = 2.0;
  o.depth = 2;
  o.copy_ahead = 4096;
  o.rx_buffers = 8;
  o.peer_timeout = std::chrono::milliseconds(5000);
  return o;
}

// The bytes of message `n` of `len` bytes: a function of both, so a misplaced fragment shows.
void fill(std::span<std::byte> b, std::uint64_t n) {
  std::uint64_t x = n * 0x9e3779b97f4a7c15ull + b.size();
  for (std::size_t i = 0; i < b.size(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b[i] = static_cast<std::byte>(x);
  }
}
bool intact(std::span<const std::byte> b, std::uint64_t n) {
  std::vector<std::byte> want(b.size());
  fill(want, n);
  return b.empty() || std::memcmp(want.data(), b.data(), b.size()) == 0;
}

// The sizes around every boundary of small_options(), plus larger random ones.
std::vector<std::size_t> boundary_sizes() {
  const ChannelOptions o = small_options();
  const std::size_t off = o.eager_limit + o.copy_ahead;  // first fragment offset
  std::vector<std::size_t> s = {0,
                                1,
                                o.eager_limit - 1,
                                o.eager_limit,
                                o.eager_limit + 1,
                                o.bounce_size - 1,
                                o.bounce_size,
                                o.bounce_size + 1,
                                off - 1,
                                off,
                                off + 1,
                                off + o.frag_size - 1,
                                off + o.frag_size,
                                off + o.frag_size + 1,
                                off + 3 * o.frag_size + 7,
                                1000003};
  std::mt19937_64 rng(42);
  for (int i = 0; i < 3; ++i) s.push_back(rng() % (std::size_t{4} << 20));
  return s;
}

struct Case {
  Provider provider;
  Protocol protocol;
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  std::string n = std::string(i.param.provider.name) + "_" +
                  std::string(to_string(i.param.provider.endpoint)) + "_" +
                  std::string(to_string(i.param.protocol));
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

std::vector<Case> all_cases() {
  std::vector<Case> c;
  for (const Provider& p : kProviders) {
    for (Protocol proto : kAllProtocols) c.push_back({p, proto});
    c.push_back({p, Protocol::automatic});
  }
  return c;
}

class BulkProtocol : public ::testing::TestWithParam<Case> {};

// Both directions, every boundary size, start and end off page boundaries.
TEST_P(BulkProtocol, EveryBoundarySizeArrivesIntact) {
  const Case c = GetParam();
  std::string err =
      run_ranks(2, transport_options(c.provider), [&](int rank, Transport& t, Bootstrap& boot) {
        ChannelOptions o = small_options();
        o.protocol = c.protocol;
        auto ch = open_channel(t, boot, o);
        const int peer = 1 - rank;
        std::uint64_t n = 0;
        for (std::size_t size : boundary_sizes()) {
          if (c.protocol == Protocol::eager && size > o.eager_limit) continue;
          for (int dir = 0; dir < 2; ++dir, ++n) {
            // One byte past a page boundary: neither start nor end is aligned.
            std::vector<std::byte> buf(size + 4096 + 2);
            std::span<std::byte> msg(buf.data() + 1, size);
            if (rank == dir) {
              fill(msg, n);
              ch->send(peer, 7, msg);
            } else {
              std::memset(buf.data(), 0xee, buf.size());
              ASSERT_EQ(ch->recv(peer, 7, std::span(buf.data() + 1, size + 4096)), size);
              ASSERT_TRUE(intact(msg, n)) << size << " bytes, message " << n;
              // Nothing written past the message or before the buffer.
              ASSERT_EQ(buf[0], std::byte{0xee});
              ASSERT_EQ(buf[size + 1], std::byte{0xee}) << size;
            }
          }
        }
      });
  EXPECT_EQ(err, "");
}

// Many messages in flight both ways, four tags, receives posted in another order across tags
// than the sends: each tag's messages match its receives in order.
TEST_P(BulkProtocol, ManyInFlightMatchInOrderPerTag) {
  const Case c = GetParam();
  std::string err =
      run_ranks(2, transport_options(c.provider), [&](int rank, Transport& t, Bootstrap& boot) {
        ChannelOptions o = small_options();
        o.protocol = c.protocol;
        auto ch = open_channel(t, boot, o);
        const int peer = 1 - rank;
        constexpr int kMessages = 24, kTags = 4;
        auto size_of = [&](int from, int i) {
          std::size_t s = (std::size_t(i) * 7919 + std::size_t(from) * 104729) % 100000;
          return c.protocol == Protocol::eager ? s % (o.eager_limit + 1) : s;
        };
        std::vector<std::vector<std::byte>> out(kMessages), in(kMessages);
        std::vector<RequestPtr> reqs;
        for (int i = 0; i < kMessages; ++i) {
          out[i].resize(size_of(rank, i));
          fill(out[i], std::uint64_t(rank) * 1000 + i);
          reqs.push_back(ch->isend(peer, i % kTags, out[i]));
        }
        // Receives: tag 3's first, then 2's, ...; within a tag in order.
        std::vector<int> order;
        for (int tag = kTags - 1; tag >= 0; --tag)
          for (int i = tag; i < kMessages; i += kTags) order.push_back(i);
        std::vector<RequestPtr> recvs(kMessages);
        for (int i : order) {
          in[i].resize(100000);
          recvs[i] = ch->irecv(peer, i % kTags, in[i]);
        }
        for (auto& r : reqs) ch->wait(r);
        for (int i = 0; i < kMessages; ++i) {
          ASSERT_EQ(ch->wait(recvs[i]), size_of(peer, i)) << "message " << i;
          ASSERT_TRUE(
              intact(std::span(in[i]).first(size_of(peer, i)), std::uint64_t(peer) * 1000 + i))
              << "message " << i;
        }
      });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(All, BulkProtocol, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace fabflow::bulk::channel_test
