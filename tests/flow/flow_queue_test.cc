// Conformance of every design point on shm, tcp (msg), tcp;ofi_rxm (rdm) and local between two
// threads: FIFO order, exactly-once delivery and payload contents over random-size items with
// random pauses, ring wrap-around, full / empty, end of stream, notification counts, misbehaving
// and vanishing peers. FlowStress (10^7 items per point) runs only with FABFLOW_FLOW_STRESS=1.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string_view>

#include "flow/layout.h"
#include "support/flow_support.h"

namespace fabflow::flow::test {
namespace {

using namespace std::chrono_literals;

QueueOptions conformance_options(const Design& d) {
  QueueOptions o;
  o.design = d;
  o.capacity = 8;  // thousands of wrap-arounds
  o.item_bytes = 100;
  return o;
}

class FlowConformance : public ::testing::TestWithParam<Point> {
 protected:
  void full_empty_and_end_of_stream(bool active);
};

void full_empty_and_end_of_stream_body(const Point& pt, bool active);

TEST_P(FlowConformance, FifoExactlyOnceWithContents) {
  const auto& pt = GetParam();
  auto o = conformance_options(pt.design);
  Result r;
  // 10^5 items per point, 2.5 * 10^4 over tcp, where an item costs a round of the provider's
  // socket progress (about 30 us on loopback) and the 132 tcp points would take most of the
  // stage's time. FABFLOW_FLOW_ITEMS sets both; scripts/stress.sh moves 10^7.
  const bool tcp = std::string_view(pt.provider.name) == "tcp";
  const std::size_t n = env_count("FABFLOW_FLOW_ITEMS", tcp ? 25000 : 100000);
  auto err = stream(pt.provider, o, {n, 11, true}, &r);
  ASSERT_EQ(err, "");
  // One data operation per item (plus the end-of-stream markers) without batching.
  if (pt.design.data != DataFlow::pull) {
    EXPECT_EQ(r.producer.data_ops, n + end_markers(pt.design));
  }
  if (pt.design.transfer == TransferNotify::watermark ||
      pt.design.transfer == TransferNotify::imm || pt.design.transfer == TransferNotify::event) {
    EXPECT_EQ(r.producer.transfer_ops, 0u);
    EXPECT_EQ(r.consumer.transfer_ops, 0u);
  }
  if (pt.design.transfer == TransferNotify::push) {
    EXPECT_GT(r.producer.transfer_ops, 0u);
  }
  if (pt.design.space == SpaceNotify::pull) {
    EXPECT_EQ(r.consumer.space_ops, 0u);
    EXPECT_GT(r.producer.space_ops, 0u);
  } else {
    EXPECT_EQ(r.producer.space_ops, 0u);
    EXPECT_GT(r.consumer.space_ops, 0u);
  }
}

TEST_P(FlowConformance, BatchingAndDataMover) {
  const auto& pt = GetParam();
  for (const char* preset : {"batching", "datamover"}) {
    auto o = QueueOptions::preset(preset, pt.design);
    o.capacity = 16;
    o.item_bytes = 48;
    Result r;
    auto err = stream(pt.provider, o, {env_count("FABFLOW_FLOW_PRESET_ITEMS", 200), 5, false}, &r);
    ASSERT_EQ(err, "") << preset;
  }
}

// The active consumer (a helper thread validating slots ahead of the owner, pulling them on
// pull designs), alone, with batching, and with a data mover on the other side.
TEST_P(FlowConformance, ActiveConsumer) {
  const auto& pt = GetParam();
  for (const char* preset : {"basic", "batching", "datamover"}) {
    auto o = QueueOptions::preset(preset, pt.design);
    o.active_consumer = true;
    o.capacity = 8;
    o.item_bytes = 100;
    Result r;
    const std::size_t n = env_count("FABFLOW_FLOW_PRESET_ITEMS", 2000);
    auto err = stream(pt.provider, o, {n, 17, true}, &r);
    ASSERT_EQ(err, "") << preset;
    EXPECT_EQ(r.consumer.items, n) << preset;
  }
}

// The batched calls (reserve_many / commit_many, peek_many / release_many) mixed with the
// one-item ones, partial commits and releases: the same order, contents and count, with a
// passive and an active consumer and with a data mover.
TEST_P(FlowConformance, BatchedCalls) {
  const auto& pt = GetParam();
  struct Case {
    const char* preset;
    bool active;
  };
  for (Case c : {Case{"basic", false}, Case{"basic", true}, Case{"datamover", false}}) {
    auto o = QueueOptions::preset(c.preset, pt.design);
    o.active_consumer = c.active;
    o.capacity = 16;
    o.item_bytes = 100;
    Result r;
    const std::size_t n = env_count("FABFLOW_FLOW_PRESET_ITEMS", 2000);
    auto err = stream(pt.provider, o, {n, 23, true, 12}, &r);
    ASSERT_EQ(err, "") << c.preset << (c.active ? " active" : "");
    EXPECT_EQ(r.consumer.items, n) << c.preset;
  }
}

// What the batched calls give at the edges, on local (both slot formats) and shm: a batch is
// never more than the free slots or the items there, 0 gives back (commit) or keeps (release),
// the end of stream behind a batch comes with the next call, and counts beyond what was granted
// or peeked fail the queue with a line naming the call.
void expect_that(bool ok, const std::string& what) {
  if (!ok) throw Error(what);
}

// A ring of 8 slots of 32 bytes on `p`.
QueueOptions small_ring(const Provider& p) {
  QueueOptions o;
  o.capacity = 8;
  o.item_bytes = 32;
  return on(p, o);
}

TEST(FlowBatchedCalls, BatchesStopAtFreeSlotsAndAtTheItemsThere) {
  for (const Provider& p : {kLocal, kLocalFramed, kShm}) {
    SCOPED_TRACE(label_of(p));
    const auto o = small_ring(p);
    auto err = run_pair(transport_options(p, o), [&](int rank, Transport& t, Bootstrap& boot) {
      auto progress = [&] { t.progress(); };
      if (rank == 0) {
        auto prod = make_producer(t, boot, 1, o);
        std::vector<std::span<std::byte>> slots(5);
        std::size_t granted = 0;
        expect_that(prod->reserve_many(32, slots, &granted) == Status::ok && granted == 5,
                    "reserve 5 of 8 free");
        for (std::size_t i = 0; i < 5; ++i) std::memset(slots[i].data(), int(i), 32);
        expect_that(prod->commit_many(5) == Status::ok, "commit 5: " + prod->error());
        expect_that(prod->reserve_many(16, slots, &granted) == Status::ok && granted == 3,
                    "3 slots free, granted " + std::to_string(granted));
        for (std::size_t i = 0; i < 3; ++i) std::memset(slots[i].data(), int(5 + i), 16);
        expect_that(prod->commit_many(3) == Status::ok, "commit 3: " + prod->error());
        expect_that(prod->reserve_many(16, slots, &granted) == Status::full && granted == 0,
                    "a full ring granted a slot");
        expect_that(prod->flush(5s) == Status::ok, "flush: " + prod->error());
        boot.barrier(progress);  // the consumer takes the 8 items
        expect_that(prod->close(5s) == Status::ok, "close: " + prod->error());
        boot.barrier(progress);
      } else {
        auto cons = make_consumer(t, boot, 0, o);
        std::vector<std::span<const std::byte>> items(6);
        std::size_t n = 0;
        boot.barrier(progress);
        // Items 0..5 in one call once they are all there (shm places them as this end drives
        // progress: a batch short of them is kept, release_many(0), and peeked again).
        auto deadline = std::chrono::steady_clock::now() + 5s;
        for (;;) {
          Status st = cons->peek_many(items, &n);
          expect_that(st == Status::ok || st == Status::empty, "peek_many: " + cons->error());
          if (st == Status::ok && n == 6) break;
          if (st == Status::ok) expect_that(cons->release_many(0) == Status::ok, "keep");
          expect_that(std::chrono::steady_clock::now() < deadline, "6 items never there");
        }
        for (std::size_t i = 0; i < 6; ++i)
          expect_that(items[i].size() == (i < 5 ? 32u : 16u) && items[i][0] == std::byte(i),
                      "item " + std::to_string(i));
        expect_that(cons->release_many(2) == Status::ok, "release 2: " + cons->error());
        // The next call starts at item 2 and ends at the last one: 6 items, not 8.
        expect_that(cons->peek_many(items, &n) == Status::ok && n == 6 &&
                        items[0][0] == std::byte(2) && items[5][0] == std::byte(7),
                    "items 2..7 in one call, got " + std::to_string(n));
        expect_that(cons->release_many(6) == Status::ok, "release 6: " + cons->error());
        Status st;  // the producer closes meanwhile
        deadline = std::chrono::steady_clock::now() + 5s;
        while ((st = cons->peek_many(items, &n)) == Status::empty &&
               std::chrono::steady_clock::now() < deadline) {
        }
        expect_that(st == Status::closed && n == 0, "no end of stream: " + cons->error());
        expect_that(cons->stats().items == 8,
                    "consumer counted " + std::to_string(cons->stats().items));
        boot.barrier(progress);
      }
    });
    ASSERT_EQ(err, "");
  }
}

TEST(FlowBatchedCalls, CountsBeyondTheGrantFailTheQueue) {
  for (const Provider& p : {kLocal, kShm}) {
    SCOPED_TRACE(label_of(p));
    const auto o = small_ring(p);
    auto err = run_pair(transport_options(p, o), [&](int rank, Transport& t, Bootstrap& boot) {
      auto progress = [&] { t.progress(); };
      std::size_t n = 9;
      if (rank == 0) {
        auto prod = make_producer(t, boot, 1, o);
        auto none = make_producer(t, boot, 1, o);
        std::vector<std::span<std::byte>> slots(4), empty;
        expect_that(none->reserve_many(32, empty, &n) == Status::failed && n == 0,
                    "reserve_many of no slots");
        expect_that(none->error().find("reserve_many") != std::string::npos, none->error());
        expect_that(prod->reserve_many(32, slots, &n) == Status::ok && n == 4, "reserve 4");
        expect_that(prod->commit_many(0) == Status::ok, "commit_many(0) gives them back");
        expect_that(prod->commit_many(1) == Status::failed, "a commit after giving back");
        expect_that(prod->error().find("commit_many") != std::string::npos, prod->error());
        boot.barrier(progress);
      } else {
        auto cons = make_consumer(t, boot, 0, o);
        auto none = make_consumer(t, boot, 0, o);
        std::vector<std::span<const std::byte>> empty;
        expect_that(none->peek_many(empty, &n) == Status::failed && n == 0,
                    "peek_many of no items");
        expect_that(none->error().find("peek_many") != std::string::npos, none->error());
        expect_that(cons->release_many(1) == Status::failed, "release_many without a peek");
        expect_that(cons->error().find("release_many") != std::string::npos, cons->error());
        boot.barrier(progress);
      }
    });
    ASSERT_EQ(err, "");
  }
}

TEST_P(FlowConformance, FullEmptyAndEndOfStream) {
  for (bool active : {false, true}) {
    SCOPED_TRACE(active ? "active consumer" : "passive consumer");
    full_empty_and_end_of_stream(active);
  }
}

void full_empty_and_end_of_stream_body(const Point& pt, bool active) {
  auto o = on(pt.provider, conformance_options(pt.design));
  o.active_consumer = active;
  auto err = run_pair(transport_options(pt.provider, o), [&](int rank, Transport& t,
                                                             Bootstrap& boot) {
    std::vector<std::byte> buf(o.item_bytes, std::byte{7});
    auto progress = [&] { t.progress(); };
    if (rank == 0) {
      auto prod = make_producer(t, boot, 1, o);
      boot.barrier(progress);  // the consumer saw empty
      for (std::size_t i = 0; i < o.capacity; ++i)
        if (Status st = prod->try_enqueue({buf.data(), i}); st != Status::ok)
          throw Error("fill " + std::to_string(i) + ": " + std::string(to_string(st)) + " " +
                      prod->error());
      if (prod->try_enqueue({buf.data(), 1}) != Status::full)
        throw Error("a full ring took an item");
      if (prod->enqueue({buf.data(), 1}, 20ms) != Status::timeout)
        throw Error("a full ring did not time out");
      if (prod->stats().full == 0) throw Error("full not counted");
      if (prod->flush(5s) != Status::ok) throw Error("flush: " + prod->error());
      boot.barrier(progress);
      if (Status st = prod->close(5s); st != Status::ok) throw Error("close: " + prod->error());
      if (prod->try_enqueue({buf.data(), 1}) != Status::closed) throw Error("enqueue after close");
      boot.barrier(progress);
    } else {
      auto cons = make_consumer(t, boot, 0, o);
      std::size_t len = 0;
      if (cons->try_dequeue(buf, &len) != Status::empty) throw Error("an empty ring gave an item");
      if (cons->dequeue(buf, &len, 20ms) != Status::timeout)
        throw Error("an empty ring did not time out");
      if (cons->stats().empty == 0) throw Error("empty not counted");
      boot.barrier(progress);
      boot.barrier(progress);  // the producer is full
      for (std::size_t i = 0; i < o.capacity; ++i) {
        std::span<const std::byte> item;
        Status st;
        auto deadline = std::chrono::steady_clock::now() + 5s;
        while ((st = cons->peek(&item)) == Status::empty &&
               std::chrono::steady_clock::now() < deadline) {
        }
        if (st != Status::ok) throw Error("peek " + std::to_string(i) + ": " + cons->error());
        if (item.size() != i) throw Error("item " + std::to_string(i) + " has the wrong length");
        if (cons->release() != Status::ok) throw Error("release: " + cons->error());
      }
      if (cons->dequeue(buf, &len, 5s) != Status::closed)
        throw Error("no end of stream: " + cons->error());
      boot.barrier(progress);  // the queue (and its head counter) lives until the producer closed
    }
  });
  ASSERT_EQ(err, "");
}

void FlowConformance::full_empty_and_end_of_stream(bool active) {
  full_empty_and_end_of_stream_body(GetParam(), active);
}

INSTANTIATE_TEST_SUITE_P(All, FlowConformance, ::testing::ValuesIn(points(kAllFormats)),
                         point_name);

// Compact slots asked for with writes the consumer polls and a producer that would coalesce
// them (batching, data mover): one write per slot, each published by its own last word.
TEST(FlowCompactSlots, CoalescingProducersWriteOneSlotPerWrite) {
  for (const char* preset : {"batching", "datamover"}) {
    auto o = QueueOptions::preset(preset, *Design::parse("push1-watermark-pull"));
    o.slot_format = SlotFormat::compact;
    o.capacity = 16;
    o.item_bytes = 48;
    const std::size_t n = env_count("FABFLOW_FLOW_PRESET_ITEMS", 2000);
    Result r;
    ASSERT_EQ(stream(kLocal, o, {n, 23, true}, &r), "") << preset;
    EXPECT_EQ(r.producer.data_ops, n + end_markers(o.design)) << preset;  // and the markers
  }
}

// Pull data with watermark transfer and batch reads of 16 slots of 8 KiB: the consumer reads
// a batch's last header before the batch where the producer was ahead (trusted reads, no sums
// recomputed) and reads speculatively, with the sums, where it was not. The random pauses on
// both sides give both kinds, with a passive and an active consumer, with and without a data
// mover; order, count and contents as everywhere.
class FlowProbedBatches : public ::testing::TestWithParam<Provider> {};

TEST_P(FlowProbedBatches, LargeItemsIntact) {
  for (const char* design : {"pull-watermark-pull", "pull-watermark-push", "pull-watermark-push2"})
    for (const char* preset : {"batching", "datamover"})
      for (bool active : {false, true}) {
        SCOPED_TRACE(std::string(design) + " " + preset + (active ? " active" : ""));
        auto o = QueueOptions::preset(preset, *Design::parse(design));
        o.active_consumer = active;
        o.capacity = 64;
        o.item_bytes = 8192;
        const std::size_t n = env_count("FABFLOW_FLOW_PRESET_ITEMS", 2000);
        Result r;
        ASSERT_EQ(stream(GetParam(), o, {n, 23, true, 0, 100}, &r), "");
        EXPECT_EQ(r.consumer.items, n);
      }
}

INSTANTIATE_TEST_SUITE_P(All, FlowProbedBatches, ::testing::Values(kShm, kTcp, kRxm, kLocal),
                         [](const auto& info) { return label_of(info.param); });

class FlowStress : public ::testing::TestWithParam<Point> {};

// The separate stress target (`ninja stress`, scripts/stress.sh): 10^7 items per point.
TEST_P(FlowStress, TenMillionItems) {
  if (!std::getenv("FABFLOW_FLOW_STRESS")) GTEST_SKIP() << "set FABFLOW_FLOW_STRESS=1 to run";
  auto o = conformance_options(GetParam().design);
  o.capacity = 64;
  ASSERT_EQ(
      stream(GetParam().provider, o, {env_count("FABFLOW_FLOW_STRESS_ITEMS", 10'000'000), 3, true}),
      "");
}

INSTANTIATE_TEST_SUITE_P(All, FlowStress, ::testing::ValuesIn(points(kAllFormats)), point_name);

// ---- misbehaving peers ----

template <class Victim>
std::string misbehave(const Provider& p, const QueueOptions& o, Victim victim,
                      const std::function<void(Transport&, FakeEnd&)>& attack, int fake_role,
                      bool word_first = false) {
  return run_pair(transport_options(p, o), [&](int rank, Transport& t, Bootstrap& boot) {
    if (rank == 0) {
      victim(t, boot);
    } else {
      FakeEnd fake(t, boot, 0, o, fake_role, nullptr, word_first);
      attack(t, fake);
      boot.barrier([&] { t.progress(); });
    }
  });
}

void post_ok(Transport& t, const std::function<Status()>& post) {
  auto deadline = std::chrono::steady_clock::now() + 5s;
  Status st;
  while ((st = post()) == Status::again && std::chrono::steady_clock::now() < deadline)
    t.progress();
  if (st != Status::ok) throw Error("attack post: " + t.last_error());
}

// The victim of a consumer-side attack: its first dequeue must fail within `timeout`; the
// error lands in *seen.
std::function<void(Transport&, Bootstrap&)> consumer_must_fail(const QueueOptions& o,
                                                               std::chrono::milliseconds timeout,
                                                               std::string* seen) {
  return [&o, timeout, seen](Transport& t, Bootstrap& boot) {
    auto cons = make_consumer(t, boot, 1, o);
    std::vector<std::byte> buf(o.item_bytes);
    std::size_t len = 0;
    Status st = cons->dequeue(buf, &len, timeout);
    if (st != Status::failed) throw Error("dequeue gave " + std::string(to_string(st)));
    *seen = cons->error();
    boot.barrier([&] { t.progress(); });
  };
}

// The victim of a producer-side attack: it enqueues until the queue fails, within `timeout`;
// the error lands in *seen.
std::function<void(Transport&, Bootstrap&)> producer_must_fail(const QueueOptions& o,
                                                               std::chrono::milliseconds timeout,
                                                               std::string* seen) {
  return [&o, timeout, seen](Transport& t, Bootstrap& boot) {
    auto prod = make_producer(t, boot, 1, o);
    std::vector<std::byte> buf(8);
    if (Status st = enqueue_until_failure(*prod, buf, timeout); st != Status::failed)
      throw Error("enqueue gave " + std::string(to_string(st)) + " for " +
                  std::to_string(timeout.count()) + " ms");
    *seen = prod->error();
    boot.barrier([&] { t.progress(); });
  };
}

class FlowMisbehaving : public ::testing::TestWithParam<Provider> {};

TEST_P(FlowMisbehaving, TailCounterOutOfRange) {
  QueueOptions o = on(GetParam(), conformance_options(*Design::parse("push1-push-push")));
  std::string seen;
  auto err = misbehave(
      GetParam(), o, consumer_must_fail(o, 5s, &seen),
      [&](Transport& t, FakeEnd& fake) {
        static std::uint64_t bogus = 1'000'000'000;
        post_ok(t, [&] {
          return t.post_write(0, &bogus, 8, nullptr, fake.remote,
                              fake.layout.cell(detail::kPeerCell), 0, kInject);
        });
      },
      0);
  ASSERT_EQ(err, "");
  EXPECT_NE(seen.find("tail counter 1000000000 is out of range"), std::string::npos) << seen;
}

void head_counter_out_of_range(const Provider& p, const Design& d, bool mover);

// Pushed data and pulled data (where the bound is what was written, not sent), with the
// range check in the owner thread and in the data mover.
TEST_P(FlowMisbehaving, HeadCounterOutOfRange) {
  for (const char* name : {"push1-watermark-push", "pull-watermark-push"})
    for (bool mover : {false, true}) {
      SCOPED_TRACE(std::string(name) + (mover ? " with a data mover" : ""));
      head_counter_out_of_range(GetParam(), *Design::parse(name), mover);
    }
}

void head_counter_out_of_range(const Provider& p, const Design& d, bool mover) {
  QueueOptions o = on(p, conformance_options(d));
  o.active_producer = mover;
  std::string seen;
  auto err = misbehave(
      p, o, producer_must_fail(o, 10s, &seen),
      [&](Transport& t, FakeEnd& fake) {
        static std::uint64_t bogus = 1ull << 40;
        post_ok(t, [&] {
          return t.post_write(0, &bogus, 8, nullptr, fake.remote,
                              fake.layout.cell(detail::kPeerCell), 0, kInject);
        });
      },
      1);
  ASSERT_EQ(err, "");
  EXPECT_NE(seen.find("head counter"), std::string::npos) << seen;
}

// Space pull: the producer reads the consumer's own head cell (a posted read, or on local with
// compact slots a load of the mapped cell); a value beyond what was sent fails it there too.
TEST_P(FlowMisbehaving, HeadCellOutOfRange) {
  QueueOptions o = on(GetParam(), conformance_options(*Design::parse("push1-watermark-pull")));
  std::string seen;
  auto err = misbehave(
      GetParam(), o, producer_must_fail(o, 10s, &seen),
      [&](Transport&, FakeEnd& fake) {
        const std::uint64_t bogus = 1ull << 40;
        std::memcpy(fake.mr->data() + fake.layout.cell(detail::kOwnCell), &bogus, 8);
      },
      1);
  ASSERT_EQ(err, "");
  EXPECT_NE(seen.find("head counter 1099511627776 is beyond"), std::string::npos) << seen;
}

// A pull-watermark producer whose slot never matches its payload sum: the consumer re-reads it
// a bounded number of times, then fails; it never hands out the item.
TEST_P(FlowMisbehaving, PayloadSumNeverMatches) {
  if (GetParam().slots != SlotFormat::automatic) GTEST_SKIP() << "pull data has framed slots";
  QueueOptions o = conformance_options(*Design::parse("pull-watermark-pull"));
  std::string seen;
  auto err = misbehave(
      GetParam(), o,
      // Each re-read is a round trip that the fake producer serves only from its barrier's
      // progress loop: slow on tcp under ASan.
      consumer_must_fail(o, 30s, &seen),
      [&](Transport&, FakeEnd& fake) {
        // Slot 0 of the fake producer's own ring, which the consumer reads: header and trailer
        // right, one payload byte changed after the sum was taken. Built aside and published
        // with the header's sequence number last: a consumer reading the ring meanwhile (on
        // local it reads the mapped memory itself) must never see the slot before the change.
        std::byte item[40] = {};
        alignas(8) std::byte slot[detail::slot_used(sizeof item)];
        detail::write_slot(slot, 0, item, sizeof item, 0, true);
        slot[detail::kSlotHeader + 3] = std::byte{1};
        std::memcpy(fake.mr->data() + 8, slot + 8, sizeof slot - 8);
        std::uint64_t seq;
        std::memcpy(&seq, slot, 8);
        detail::store_release(fake.mr->data(), seq);
      },
      0);
  ASSERT_EQ(err, "");
  EXPECT_NE(seen.find("payload sum"), std::string::npos) << seen;
}

// Trusted reads. Options whose batch read is large enough for the consumer to probe its last
// header first: 16 slots of 8 KiB.
QueueOptions probed_batches(const char* design) {
  QueueOptions o = conformance_options(*Design::parse(design));
  o.batching = true;
  o.capacity = 16;
  o.item_bytes = 8192;
  return o;
}

// Publishes items of `slots` slots of the fake producer's ring, each with one payload byte
// changed after its sum was taken: slots 1.. first, then slot 0 (header last in each).
void publish_wrong_sums(FakeEnd& fake, std::size_t slots, std::size_t item_bytes) {
  std::vector<std::byte> item(item_bytes);
  std::vector<std::uint64_t> buf(detail::slot_used(item_bytes) / 8 + 1);
  auto* slot = reinterpret_cast<std::byte*>(buf.data());
  for (std::size_t k = 0; k < slots; ++k) {
    const std::size_t i = (k + 1) % slots;  // 1, 2, ..., slots - 1, then 0
    detail::write_slot(slot, i, item.data(), static_cast<std::uint32_t>(item_bytes), 0, true);
    slot[detail::kSlotHeader + 3] ^= std::byte{1};
    std::byte* at = fake.mr->data() + fake.layout.slot(i);
    std::memcpy(at + 8, slot + 8, detail::slot_used(item_bytes) - 8);
    std::uint64_t seq;
    std::memcpy(&seq, slot, 8);
    detail::store_release(at, seq);
  }
}

// A batch whose last slot the consumer saw published before it read the batch cannot have been
// read mid-write, so its sums are not recomputed: the items are taken as the producer wrote
// them (here with wrong sums, which only a misbehaving producer writes).
TEST_P(FlowMisbehaving, ReadOfAPublishedBatchIsTrusted) {
  if (GetParam().slots != SlotFormat::automatic) GTEST_SKIP() << "pull data has framed slots";
  QueueOptions o = on(GetParam(), probed_batches("pull-watermark-pull"));
  std::string seen;
  // The batch is whole before the consumer's first read (the first barrier), so its first
  // probe sees it published; the second keeps the fake's ring alive while it reads.
  auto err =
      run_pair(transport_options(GetParam(), o), [&](int rank, Transport& t, Bootstrap& boot) {
        if (rank == 0) {
          auto cons = make_consumer(t, boot, 1, o);
          boot.barrier([&] { t.progress(); });
          std::vector<std::byte> buf(o.item_bytes);
          std::size_t len = 0;
          if (Status st = cons->dequeue(buf, &len, 30s); st != Status::ok)
            seen = std::string(to_string(st)) + ": " + cons->error();
          else if (len != o.item_bytes)
            seen = "length " + std::to_string(len);
          boot.barrier([&] { t.progress(); });
        } else {
          FakeEnd fake(t, boot, 0, o, 0);
          publish_wrong_sums(fake, o.capacity, o.item_bytes);
          boot.barrier([&] { t.progress(); });
          boot.barrier([&] { t.progress(); });
        }
      });
  ASSERT_EQ(err, "");
  EXPECT_EQ(seen, "");
}

// ... and one it did not see published is checked: a batch whose last slot never comes, read
// again and again, fails on the first slot's sum as a small one does.
TEST_P(FlowMisbehaving, ReadOfAnUnpublishedBatchIsSummed) {
  if (GetParam().slots != SlotFormat::automatic) GTEST_SKIP() << "pull data has framed slots";
  QueueOptions o = probed_batches("pull-watermark-pull");
  std::string seen;
  auto err = misbehave(
      GetParam(), o, consumer_must_fail(o, 30s, &seen),
      [&](Transport&, FakeEnd& fake) { publish_wrong_sums(fake, 1, o.item_bytes); }, 0);
  ASSERT_EQ(err, "");
  EXPECT_NE(seen.find("payload sum"), std::string::npos) << seen;
}

// In both slot formats (local runs compact and, forced, framed; libfabric providers framed),
// compact with the word last and first.
TEST_P(FlowMisbehaving, SlotLengthBeyondItemBytes) {
  QueueOptions o = on(GetParam(), conformance_options(*Design::parse("push1-watermark-pull")));
  for (bool word_first : {false, true}) {
    std::string seen;
    auto err = misbehave(
        GetParam(), o, consumer_must_fail(o, 5s, &seen),
        [&](Transport& t, FakeEnd& fake) {
          // Slot 0 with a valid sequence number and a length far past item_bytes: the framed
          // header, or the compact word (at the end of the slot, or at its start).
          std::byte* s = fake.mr->data();
          std::size_t at = 0, len = 16;
          if (fake.layout.compact) {
            at = fake.layout.word_at();
            len = detail::kCompactWord;
            const std::uint64_t word = detail::compact_word(0, 1u << 20, 0);
            std::memcpy(s + at, &word, 8);
          } else {
            std::uint64_t seq = 1, meta = 1u << 20;
            std::memcpy(s, &seq, 8);
            std::memcpy(s + 8, &meta, 8);
          }
          post_ok(t, [&] {
            return t.post_write(0, s + at, len, fake.mr->desc(), fake.remote, at, 0, kSignal);
          });
          Completion c[1];
          auto deadline = std::chrono::steady_clock::now() + 5s;
          while (t.poll_tx(c) == 0 && std::chrono::steady_clock::now() < deadline) {
          }
        },
        0, word_first);
    ASSERT_EQ(err, "") << (word_first ? "word first" : "word last");
    EXPECT_NE(seen.find("protocol violation"), std::string::npos) << seen;
    if (GetParam().slots == SlotFormat::framed || GetParam().name != std::string("local")) break;
  }
}

INSTANTIATE_TEST_SUITE_P(All, FlowMisbehaving, ::testing::ValuesIn(kAllFormats),
                         [](const auto& info) { return label_of(info.param); });

// ---- vanishing peers ----

class FlowPeerDeath : public ::testing::TestWithParam<Point> {};

// The consumer waits for items; the producer's rank aborts: failed within peer_timeout, with
// a passive consumer and with an active one (its helper thread keeps pumping meanwhile).
void consumer_sees_producer_vanish(const Point& point, bool active) {
  auto o = conformance_options(point.design);
  o.active_consumer = active;
  o.peer_timeout = 300ms;
  std::atomic<std::int64_t> elapsed_ms{-1};
  std::atomic<bool> consumer_done{false}, first_item{false};
  auto boots = make_thread_bootstraps(2);
  std::string error;
  std::thread producer([&] {
    auto t = open_transport(transport_options(point.provider, o));
    t->connect(*boots[0]);
    auto prod = make_producer(*t, *boots[0], 1, o);
    std::byte b[4] = {};
    prod->enqueue(b, 1s);
    prod->flush(1s);
    // Keep the provider progressing (shm connects lazily; pull designs read from this side)
    // until the consumer has the first item, then vanish.
    for (auto end = std::chrono::steady_clock::now() + 5s;
         !first_item.load() && !consumer_done.load() && std::chrono::steady_clock::now() < end;)
      t->progress();
    boots[0]->abort("test: producer vanishes");
    // The rank is gone for the bootstrap; its transport (shared provider state in this one
    // process, which the consumer's reads may still touch) stays until the consumer gave up.
    while (!consumer_done.load()) std::this_thread::sleep_for(1ms);
  });
  std::thread consumer([&] {
    auto t = open_transport(transport_options(point.provider, o));
    t->connect(*boots[1]);
    auto cons = make_consumer(*t, *boots[1], 0, o);
    std::vector<std::byte> buf(o.item_bytes);
    std::size_t len = 0;
    Status st = cons->dequeue(buf, &len, 5s);
    if (st != Status::ok) error = "first item: " + cons->error();
    first_item = true;
    auto start = std::chrono::steady_clock::now();
    st = cons->dequeue(buf, &len, 10s);
    elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count();
    if (st != Status::failed)
      error = "after the producer vanished: " + std::string(to_string(st));
    else if (cons->error().empty())
      error = "failed without an error()";
    consumer_done = true;
  });
  producer.join();
  consumer.join();
  ASSERT_EQ(error, "");
  EXPECT_LE(elapsed_ms.load(), 50 + 300 + 200);
}

TEST_P(FlowPeerDeath, ConsumerSeesProducerVanish) {
  consumer_sees_producer_vanish(GetParam(), false);
}
TEST_P(FlowPeerDeath, ActiveConsumerSeesProducerVanish) {
  consumer_sees_producer_vanish(GetParam(), true);
}

// The producer is full; the consumer's rank aborts: failed within peer_timeout.
TEST_P(FlowPeerDeath, ProducerSeesConsumerVanish) {
  auto o = conformance_options(GetParam().design);
  o.peer_timeout = 300ms;
  auto boots = make_thread_bootstraps(2);
  std::string error;
  std::int64_t elapsed_ms = -1;
  std::atomic<bool> producer_done{false};
  std::thread consumer([&] {
    auto t = open_transport(transport_options(GetParam().provider, o));
    t->connect(*boots[1]);
    auto cons = make_consumer(*t, *boots[1], 0, o);
    std::this_thread::sleep_for(100ms);
    boots[1]->abort("test: consumer vanishes");
    // The rank is gone for the bootstrap; its transport (shared provider state in this one
    // process) stays until the producer has given up.
    while (!producer_done.load()) std::this_thread::sleep_for(1ms);
  });
  std::thread producer([&] {
    auto t = open_transport(transport_options(GetParam().provider, o));
    t->connect(*boots[0]);
    auto prod = make_producer(*t, *boots[0], 1, o);
    std::byte b[4] = {};
    for (std::size_t i = 0; i < o.capacity; ++i) prod->try_enqueue(b);
    auto start = std::chrono::steady_clock::now();
    Status st = prod->enqueue(b, 10s);
    elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count();
    if (st != Status::failed)
      error = "enqueue after the consumer vanished: " + std::string(to_string(st));
    producer_done = true;
  });
  producer.join();
  consumer.join();
  ASSERT_EQ(error, "");
  EXPECT_LE(elapsed_ms, 100 + 300 + 200);
}

std::vector<Point> death_points() {
  std::vector<Point> out;
  for (const char* name :
       {"push1-watermark-push", "push1-imm-pull", "push2-event-push2", "pull-pull-pull"})
    for (const auto& p : kAll) out.push_back({*Design::parse(name), p});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Some, FlowPeerDeath, ::testing::ValuesIn(death_points()), point_name);

}  // namespace
}  // namespace fabflow::flow::test
