// What bench bulk and bench xfer check of the bytes they count (src/bench/message_pattern.h):
// a stamped message passes and names itself; a changed byte in a checked range, a stale
// message and a spoiled range fail with the offset; a large message's sample rotates over all
// its pages. Then both benches end to end on local and tcp, with one byte flipped in transit by
// the fault transport (FaultPlan::corrupt_rma_op): each fails naming the message and the offset,
// and the same run without the flip passes.
#include "bench/message_pattern.h"

#include <gtest/gtest.h>

#include <fabflow/bench/bulk.h>
#include <fabflow/bench/xfer.h>
#include <fabflow/bootstrap.h>
#include <fabflow/fault.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fabflow::bench {
namespace {

std::vector<std::pair<std::size_t, std::size_t>> ranges_of(std::size_t size, std::uint64_t seq) {
  std::vector<std::pair<std::size_t, std::size_t>> r;
  MessagePattern::ranges(size, seq, [&](std::size_t off, std::size_t len) {
    r.push_back({off, len});
  });
  return r;
}

TEST(MessagePattern, StampedMessagesPassAndNameTheirMessage) {
  for (std::size_t size : {1, 7, 8, 9, 4096, 65536, 65537, 1 << 20, (1 << 20) + 3}) {
    std::vector<std::byte> msg(size);
    for (std::uint64_t seq : {0ull, 1ull, 999ull}) {
      MessagePattern::stamp(msg, seq);
      EXPECT_FALSE(MessagePattern::check(msg, seq)) << size << " bytes, message " << seq;
      std::uint64_t w = 0;
      if (size >= 8) {
        std::memcpy(&w, msg.data(), 8);
        if (ranges_of(size, seq).front().first == 0) EXPECT_EQ(MessagePattern::seq_of(w, 0), seq);
      }
    }
  }
}

TEST(MessagePattern, AChangedByteIsFoundAtItsOffset) {
  for (std::size_t size : {5, 64, 4093, 4096}) {  // up to a page: every byte is checked
    std::vector<std::byte> msg(size);
    for (std::size_t i = 0; i < size; i += (size > 100 ? 97 : 1)) {
      MessagePattern::stamp(msg, 42);
      msg[i] ^= std::byte{0x40};
      const auto bad = MessagePattern::check(msg, 42);
      ASSERT_TRUE(bad) << size << " bytes, byte " << i;
      EXPECT_EQ(bad->offset, i);
      EXPECT_EQ(bad->got ^ bad->want, 0x40);
    }
  }
  // A larger message: a byte in a sampled page is found, with its offset in the message.
  const std::size_t size = std::size_t{8} << 20;
  std::vector<std::byte> msg(size);
  MessagePattern::stamp(msg, 7);
  const auto [off, len] = ranges_of(size, 7)[5];
  msg[off + len / 2] ^= std::byte{1};
  const auto bad = MessagePattern::check(msg, 7);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->offset, off + len / 2);
}

TEST(MessagePattern, AStaleOrSpoiledMessageFails) {
  for (std::size_t size : {64, 65536, 3 << 20}) {
    std::vector<std::byte> msg(size);
    MessagePattern::stamp(msg, 10);
    // The previous message left in the buffer is not this one...
    EXPECT_TRUE(MessagePattern::check(msg, 11)) << size;
    // ... nor a range spoiled before a copy that then skipped it.
    MessagePattern::stamp(msg, 11);
    MessagePattern::spoil(msg, 11);
    EXPECT_TRUE(MessagePattern::check(msg, 11)) << size;
  }
}

TEST(MessagePattern, ALaterMessageIsAcceptedOnlyWhereAsked) {
  std::vector<std::byte> msg(4096);
  MessagePattern::stamp(msg, 30);  // message 10's bytes already overwritten by message 30
  // As bench xfer asks: a later message of the same slot, within the phase's messages (a
  // corrupted word names a message far outside them).
  auto later = [](std::uint64_t s) { return s > 10 && s < 1000 && (s - 10) % 20 == 0; };
  EXPECT_FALSE(MessagePattern::check(msg, 10, later));
  EXPECT_TRUE(MessagePattern::check(msg, 10));
  MessagePattern::stamp(msg, 29);  // not a message of the same slot
  EXPECT_TRUE(MessagePattern::check(msg, 10, later));
  MessagePattern::stamp(msg, 30);
  msg[100] ^= std::byte{2};
  EXPECT_TRUE(MessagePattern::check(msg, 10, later));
}

TEST(MessagePattern, ALargeMessagesSampleIsBoundedAndRotatesOverEveryPage) {
  const std::size_t sizes[] = {4097,
                               65536,
                               65536 + 100,
                               300 * 4096 + 5,
                               (std::size_t{4} << 20) + 100,
                               std::size_t{64} << 20};
  for (std::size_t size : sizes) {
    const std::size_t pages = (size + MessagePattern::kPage - 1) / MessagePattern::kPage;
    std::set<std::size_t> seen;
    std::size_t most = 0;
    for (std::uint64_t seq = 0; seq < 2 * pages; ++seq) {
      std::size_t bytes = 0;
      const auto r = ranges_of(size, seq);
      EXPECT_EQ(r.back().first + r.back().second, size);  // the last page, always
      for (auto [off, len] : r) {
        bytes += len;
        seen.insert(off / MessagePattern::kPage);
      }
      most = std::max(most, bytes);
      // Every page within ceil(pages / count) messages, count = pages / 16 (1..16).
      const std::size_t count = std::clamp<std::size_t>(pages / 16, 1, 16);
      if (seq + 1 == (pages + count - 1) / count) EXPECT_EQ(seen.size(), pages) << size;
    }
    EXPECT_EQ(seen.size(), pages) << size;
    // About a sixteenth up to 1 MiB (at least one page and the last), 17 pages at most.
    EXPECT_LE(most, std::max<std::size_t>(2 * MessagePattern::kPage, size / 16 + 2 * 4096)) << size;
    EXPECT_LE(most, 17 * MessagePattern::kPage) << size;
  }
}

// ---- the benches, with one byte flipped in transit ----

// Runs `run(rank, boot)` on two threads; the ranks' errors, joined.
std::string two_ranks(const std::function<void(int, Bootstrap&)>& run) {
  auto boots = make_thread_bootstraps(2);
  std::string errors[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        run(r, *boots[static_cast<std::size_t>(r)]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        boots[static_cast<std::size_t>(r)]->abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  return errors[0] + (errors[0].empty() || errors[1].empty() ? "" : "; ") + errors[1];
}

// Both ranks' transports wrapped; the 4th RMA operation either makes has one byte flipped
// (past the channel's and engine's setup), or none.
Target target(const char* provider, bool flip) {
  Target t;
  t.provider = provider;
  t.same_host = true;
  t.timeout_ms = 5000;
  t.wrap = [flip](std::unique_ptr<Transport> inner) {
    FaultPlan plan;
    if (flip) plan.corrupt_rma_op = 4;
    return make_fault_transport(std::move(inner), plan);
  };
  return t;
}

class VerifiedBench : public ::testing::TestWithParam<const char*> {};

TEST_P(VerifiedBench, BulkNamesTheCorruptedMessage) {
  for (bool flip : {false, true}) {
    BulkParams p;
    p.target = target(GetParam(), flip);
    // One page, checked whole (wherever the flip lands), moved by RMA: above the eager limit.
    p.sizes = {4096};
    p.eager_limit = 1024;
    p.protocols = {bulk::Protocol::rndv_write, bulk::Protocol::rndv_read, bulk::Protocol::pipeline};
    p.bytes_per_point = 1 << 18;
    const std::string err = two_ranks([&](int, Bootstrap& boot) { run_bulk(p, boot); });
    if (!flip) {
      EXPECT_EQ(err, "");
      continue;
    }
    EXPECT_TRUE(std::regex_search(
        err, std::regex("bench bulk: [a-z-]+, 4096 bytes: (ping-pong|streamed) message [0-9]+ "
                        "from rank [01] arrived wrong at offset [0-9]+ \\(0x[0-9a-f]{2} where "
                        "0x[0-9a-f]{2} was sent\\)")))
        << err;
  }
}

TEST_P(VerifiedBench, XferNamesTheCorruptedTransfer) {
  for (bulk::Direction dir : {bulk::Direction::write, bulk::Direction::read})
    for (bool flip : {false, true}) {
      XferParams p;
      p.target = target(GetParam(), flip);
      // One page per transfer, checked whole. Batches of 1 walk the 64 windows of the batches
      // of 64: the 32 batches of a phase never come back to a window before rank 1 has checked
      // it, so the flip cannot be overwritten first.
      p.sizes = {4096};
      p.batches = {1, 64};
      p.directions = {dir};
      p.bytes_per_point = 128 << 10;
      const std::string err = two_ranks([&](int, Bootstrap& boot) { run_xfer(p, boot); });
      const std::string d(bulk::kDirectionNames.name(dir));
      if (!flip) {
        EXPECT_EQ(err, "") << d;
        continue;
      }
      EXPECT_TRUE(std::regex_search(
          err, std::regex("bench xfer: " + d +
                          " of 1 x 4096 bytes \\(contiguous\\): batch [0-9]+, transfer 0 arrived "
                          "wrong at offset "
                          "[0-9]+ \\(0x[0-9a-f]{2} where 0x[0-9a-f]{2} was sent\\)")))
          << d << ": " << err;
    }
}

INSTANTIATE_TEST_SUITE_P(Providers, VerifiedBench, ::testing::Values("local", "tcp"));

}  // namespace
}  // namespace fabflow::bench
