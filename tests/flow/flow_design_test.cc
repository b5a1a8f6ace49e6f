// Design naming and parsing, presets, capability checks, slot layout and validation.
#include <gtest/gtest.h>

#include <fabflow/flow.h>

#include <cstring>
#include <set>
#include <vector>

#include "flow/layout.h"

namespace fabflow::flow {
namespace {

TEST(FlowDesign, ExactlyThirtyThreeWithUniqueRoundTrippingNames) {
  auto all = Design::all();
  ASSERT_EQ(all.size(), 33u);
  std::set<std::string> names;
  for (const auto& d : all) {
    EXPECT_TRUE(d.valid());
    auto name = d.name();
    names.insert(name);
    auto back = Design::parse(name);
    ASSERT_TRUE(back) << name;
    EXPECT_EQ(*back, d);
  }
  EXPECT_EQ(names.size(), 33u);
  EXPECT_EQ(all.front().name(), "push1-watermark-push");
  EXPECT_EQ(all.back().name(), "pull-pull-push2");
}

TEST(FlowDesign, CountsPerDataFlow) {
  int push1 = 0, push2 = 0, pull = 0;
  for (const auto& d : Design::all()) {
    if (d.data == DataFlow::push1) ++push1;
    if (d.data == DataFlow::push2) ++push2;
    if (d.data == DataFlow::pull) ++pull;
  }
  EXPECT_EQ(push1, 12);
  EXPECT_EQ(push2, 12);
  EXPECT_EQ(pull, 9);
}

TEST(FlowDesign, InvalidCombinationsRejected) {
  EXPECT_FALSE((Design{DataFlow::push1, TransferNotify::event, SpaceNotify::pull}.valid()));
  EXPECT_FALSE((Design{DataFlow::push2, TransferNotify::imm, SpaceNotify::pull}.valid()));
  EXPECT_FALSE((Design{DataFlow::pull, TransferNotify::imm, SpaceNotify::pull}.valid()));
  EXPECT_FALSE((Design{DataFlow::pull, TransferNotify::event, SpaceNotify::push}.valid()));
  EXPECT_FALSE(Design::parse("push1-event-pull"));
  EXPECT_FALSE(Design::parse("pull-imm-push"));
  EXPECT_FALSE(Design::parse("push3-push-pull"));
  EXPECT_FALSE(Design::parse("push1-push"));
  EXPECT_FALSE(Design::parse("push1-push-pull-x"));
  EXPECT_FALSE(Design::parse(""));
  EXPECT_FALSE(Design::parse("push1--pull"));
  EXPECT_EQ((Design{DataFlow::push1, TransferNotify::event, SpaceNotify::pull}.name()), "invalid");
}

TEST(FlowDesign, Presets) {
  auto d = *Design::parse("push1-push-pull");
  auto basic = QueueOptions::preset("basic", d);
  EXPECT_FALSE(basic.batching);
  EXPECT_FALSE(basic.active_producer);
  EXPECT_EQ(basic.design, d);
  EXPECT_TRUE(QueueOptions::preset("batching", d).batching);
  auto mover = QueueOptions::preset("datamover", d);
  EXPECT_TRUE(mover.active_producer);
  EXPECT_FALSE(QueueOptions::preset("batching", *Design::parse("push2-event-push2")).batching);
  EXPECT_THROW(QueueOptions::preset("turbo", d), UsageError);
}

TEST(FlowDesign, WhyUnsupported) {
  Capabilities caps;
  caps.provider = "toy";
  caps.rma = true;
  caps.inject_size = 64;
  caps.cq_data_size = 0;
  caps.max_msg_size = 1 << 20;
  QueueOptions o;
  o.design = *Design::parse("push1-imm-pull");
  EXPECT_EQ(why_unsupported(caps, o), "flow: push1-imm-pull needs remote CQ data, toy has none");
  caps.cq_data_size = 8;
  EXPECT_EQ(why_unsupported(caps, o), "");
  // separate_notify_endpoint is supported; the notifications' operations and inject size are
  // checked against the notify transport's capabilities.
  o.separate_notify_endpoint = true;
  EXPECT_EQ(why_unsupported(caps, o), "");
  o.design = *Design::parse("push1-push-pull");
  Capabilities no_rma = caps;
  no_rma.rma = false;
  EXPECT_EQ(why_unsupported(caps, caps, o), "");
  EXPECT_NE(why_unsupported(caps, no_rma, o).find("(notify endpoint)"), std::string::npos)
      << why_unsupported(caps, no_rma, o);
  Capabilities small_inject = caps;
  small_inject.inject_size = 4;
  EXPECT_NE(why_unsupported(caps, small_inject, o).find("8-byte counters"), std::string::npos);
  o.design = *Design::parse("push1-imm-pull");
  o.separate_notify_endpoint = false;
  o.capacity = 0;
  EXPECT_NE(why_unsupported(caps, o).find("capacity"), std::string::npos);
  o.capacity = 8;
  o.design = *Design::parse("push2-event-pull");
  o.batching = true;
  EXPECT_NE(why_unsupported(caps, o).find("cannot batch"), std::string::npos);
  o.batching = false;
  o.design = *Design::parse("push1-push-push");
  caps.inject_size = 4;
  EXPECT_NE(why_unsupported(caps, o).find("8-byte counters"), std::string::npos);
  o.socket = true;
  EXPECT_EQ(why_unsupported(caps, o), "");
}

TEST(FlowDesign, RequiredOps) {
  QueueOptions o;
  o.design = *Design::parse("push1-imm-push2");
  auto ops = required_ops(o);
  EXPECT_EQ(ops, (std::vector<Op>{Op::writedata, Op::send}));
  o.design = *Design::parse("pull-pull-pull");
  EXPECT_EQ(required_ops(o), (std::vector<Op>{Op::read}));
  EXPECT_TRUE(required_notify_ops(o).empty());
  // Separate: the data transport gets the data flow's operations, the notify transport the rest.
  o.separate_notify_endpoint = true;
  o.design = *Design::parse("push1-imm-push2");
  EXPECT_EQ(required_ops(o), (std::vector<Op>{Op::writedata}));
  EXPECT_EQ(required_notify_ops(o), (std::vector<Op>{Op::send}));
  o.design = *Design::parse("push2-push-pull");
  EXPECT_EQ(required_ops(o), (std::vector<Op>{Op::send}));
  EXPECT_EQ(required_notify_ops(o), (std::vector<Op>{Op::write, Op::read}));
}

TEST(FlowSlot, LayoutGeometry) {
  auto l = detail::Layout::make(8, 100, 4);
  EXPECT_EQ(l.stride, 16u + 104u + 16u);
  EXPECT_EQ(l.slot(0), 0u);
  EXPECT_EQ(l.slot(9), l.stride);  // wraps
  EXPECT_EQ(l.ring_bytes % detail::kCellBytes, 0u);
  EXPECT_GE(l.ring_bytes, 8 * l.stride);
  EXPECT_EQ(l.pool_cell(3) + 8, l.region_bytes);
  EXPECT_EQ(l.notify_bytes, 0u);
  EXPECT_EQ(l.peer_data_bytes(), l.cell(detail::kCells));
  // Separate: cells (and a notification pool) at the start of the notify region.
  auto n = detail::Layout::make(8, 100, 4, true, true);
  EXPECT_EQ(n.region_bytes, n.ring_bytes);
  EXPECT_EQ(n.cell(0), 0u);
  EXPECT_EQ(n.pool_cell(3) + 8, n.notify_bytes);
  EXPECT_EQ(n.peer_data_bytes(), n.ring_bytes);
  EXPECT_EQ(n.peer_notify_bytes(), detail::kCells * detail::kCellBytes);
  // ... or a data pool (imm receives) after the ring, the cells alone in the notify region.
  auto d = detail::Layout::make(8, 100, 4, true, false);
  EXPECT_EQ(d.pool_cell(3) + 8, d.region_bytes);
  EXPECT_EQ(d.notify_bytes, detail::kCells * detail::kCellBytes);
  EXPECT_EQ(detail::slot_used(0), 32u);
  EXPECT_EQ(detail::slot_used(1), 40u);
}

// Compact slots: each on its own cache lines, the payload right before the word that ends it.
TEST(FlowSlot, CompactGeometry) {
  using detail::Layout;
  auto l = Layout::make(8, 56, 4, false, false, SlotFormat::compact);
  EXPECT_TRUE(l.compact);
  EXPECT_EQ(l.stride, 64u);  // a 56-byte item and its word: one line
  EXPECT_EQ(l.payload_at(56), 0u);
  EXPECT_EQ(l.payload_at(5), 64u - 8u - 8u);
  EXPECT_EQ(Layout::make(8, 64, 4, false, false, SlotFormat::compact).stride, 128u);
  auto b = Layout::make(8, 100, 4, false, false, SlotFormat::compact);
  EXPECT_EQ(b.stride, 128u);
  EXPECT_EQ(b.wire_begin(100), 128u - 8u - 104u);
  EXPECT_EQ(b.wire_end(100), 128u);  // a write of the item ends with the word
  EXPECT_EQ(b.wire_begin(0), 120u);
  EXPECT_EQ(b.word_at(), 120u);
  EXPECT_EQ(b.ring_bytes, 8 * 128u);
  // Word first (direct stores): the word at 0, the payload after it whatever its length, so a
  // 64-byte item's first 56 bytes share the word's line; same stride.
  auto w = Layout::make(8, 64, 4, false, false, SlotFormat::compact);
  w.word_first = true;
  EXPECT_EQ(w.stride, 128u);
  EXPECT_EQ(w.word_at(), 0u);
  EXPECT_EQ(w.payload_at(64), 8u);
  EXPECT_EQ(w.payload_at(5), 8u);
  // Framed keeps the header at 0 and ends at the trailer.
  auto f = Layout::make(8, 100, 4);
  EXPECT_FALSE(f.compact);
  EXPECT_EQ(f.payload_at(7), detail::kSlotHeader);
  EXPECT_EQ(f.wire_begin(7), 0u);
  EXPECT_EQ(f.wire_end(7), detail::slot_used(7));
}

// The forced-torn case of compact slots: the payload of the new lap is in place but the word is
// still the previous lap's (the producer's write stopped before its last 8 bytes). Only the word
// publishes a slot, so it is absent; a wrong sequence, an impossible length or flag is refused.
TEST(FlowSlot, CompactWordIsTheOnlyPublisher) {
  constexpr std::size_t kStride = detail::compact_stride(100);
  constexpr std::size_t kWord = kStride - 8, kAt = kStride - 8 - 104;
  alignas(64) std::byte slot[kStride] = {};
  std::byte old_item[100], new_item[100];
  for (std::size_t i = 0; i < sizeof old_item; ++i) {
    old_item[i] = std::byte(i + 1);
    new_item[i] = std::byte(200 - i);
  }
  std::uint32_t len = 0, flags = 0;
  EXPECT_EQ(detail::check_compact(slot, kWord, 0, 100, &len, &flags), detail::SlotState::absent);
  detail::write_compact(slot, kWord, kAt, 3, old_item, 100, 0);
  EXPECT_EQ(detail::check_compact(slot, kWord, 3, 100, &len, &flags), detail::SlotState::valid);
  EXPECT_EQ(len, 100u);
  EXPECT_EQ(std::memcmp(slot + kAt, old_item, 100), 0);
  // One lap later (capacity 8): the new payload lands, the word does not (yet).
  std::memcpy(slot + kAt, new_item, 100);
  EXPECT_EQ(detail::check_compact(slot, kWord, 11, 100, &len, &flags), detail::SlotState::absent);
  detail::write_compact(slot, kWord, kAt, 11, new_item, 100, 0);
  EXPECT_EQ(detail::check_compact(slot, kWord, 11, 100, &len, &flags), detail::SlotState::valid);
  EXPECT_EQ(detail::check_compact(slot, kWord, 3, 100, &len, &flags), detail::SlotState::absent);
  EXPECT_EQ(detail::check_compact(slot, kWord, 12, 100, &len, &flags), detail::SlotState::absent);
  // A length beyond item_bytes, or a close marker with a length: a protocol violation.
  EXPECT_EQ(detail::check_compact(slot, kWord, 11, 64, &len, &flags), detail::SlotState::bad);
  std::uint64_t w = detail::compact_word(12, 4, detail::kFlagClose);
  std::memcpy(slot + kWord, &w, 8);
  EXPECT_EQ(detail::check_compact(slot, kWord, 12, 100, &len, &flags), detail::SlotState::bad);
  detail::write_compact(slot, kWord, kAt, 13, nullptr, 0, detail::kFlagClose);
  EXPECT_EQ(detail::check_compact(slot, kWord, 13, 100, &len, &flags), detail::SlotState::valid);
  EXPECT_EQ(flags, detail::kFlagClose);
  EXPECT_EQ(len, 0u);
  // Any other flag bit cannot be expressed: the word has one.
  w = detail::compact_word(14, 1u << 30, 0);
  std::memcpy(slot + kWord, &w, 8);
  EXPECT_EQ(detail::check_compact(slot, kWord, 14, std::size_t{1} << 30, &len, &flags),
            detail::SlotState::valid);
  EXPECT_EQ(len, 1u << 30);
}

// The same promises with the word first (direct stores): the word at 0 alone publishes.
TEST(FlowSlot, WordFirstCompactWordIsTheOnlyPublisher) {
  auto l = detail::Layout::make(8, 100, 0, false, false, SlotFormat::compact);
  l.word_first = true;
  alignas(64) std::byte slot[detail::compact_stride(100)] = {};
  std::byte item[100];
  for (std::size_t i = 0; i < sizeof item; ++i) item[i] = std::byte(i + 7);
  std::uint32_t len = 0, flags = 0;
  detail::write_compact(slot, l.word_at(), l.payload_at(100), 3, item, 100, 0);
  EXPECT_EQ(detail::check_compact(slot, l.word_at(), 3, 100, &len, &flags),
            detail::SlotState::valid);
  EXPECT_EQ(std::memcmp(slot + 8, item, 100), 0);
  std::uint64_t first;
  std::memcpy(&first, slot, 8);
  EXPECT_EQ(first, detail::compact_word(3, 100, 0));
  // Read as a word-last slot, the same bytes publish nothing.
  EXPECT_EQ(detail::check_compact(slot, l.stride - 8, 3, 100, &len, &flags),
            detail::SlotState::absent);
  // One lap later the payload lands first: absent until the word; a bad length is refused.
  std::memset(slot + 8, 0x11, 100);
  EXPECT_EQ(detail::check_compact(slot, l.word_at(), 11, 100, &len, &flags),
            detail::SlotState::absent);
  const std::uint64_t w = detail::compact_word(11, 101, 0);
  std::memcpy(slot, &w, 8);
  EXPECT_EQ(detail::check_compact(slot, l.word_at(), 11, 100, &len, &flags),
            detail::SlotState::bad);
}

// Which transports and designs get compact slots, and what refuses them.
TEST(FlowSlot, CompactOnlyWhereWritesArePlacedInOrder) {
  Capabilities ordered, unordered;
  ordered.provider = "local";
  ordered.rma = true;
  ordered.in_order_data = true;
  unordered.provider = "tcp";
  unordered.rma = true;
  QueueOptions o;
  o.design = *Design::parse("push1-watermark-pull");
  EXPECT_EQ(slot_format(ordered, o), SlotFormat::compact);
  EXPECT_EQ(slot_format(unordered, o), SlotFormat::framed);
  // Coalesced writes that the consumer polls stay framed; with a tail counter they need not.
  o.batching = true;
  EXPECT_EQ(slot_format(ordered, o), SlotFormat::framed);
  o.design = *Design::parse("push1-push-pull");
  EXPECT_EQ(slot_format(ordered, o), SlotFormat::compact);
  o.batching = false;
  o.active_producer = true;
  EXPECT_EQ(slot_format(ordered, o), SlotFormat::compact);
  o.active_producer = false;
  o.design = *Design::parse("pull-watermark-pull");
  EXPECT_EQ(slot_format(ordered, o), SlotFormat::framed);
  o.slot_format = SlotFormat::compact;
  EXPECT_NE(why_unsupported(ordered, o).find("compact slots need push1 data"), std::string::npos);
  o.design = *Design::parse("push1-watermark-pull");
  EXPECT_NE(why_unsupported(unordered, o).find("compact slots need writes placed in order"),
            std::string::npos);
  o.slot_format = SlotFormat::framed;
  EXPECT_EQ(slot_format(ordered, o), SlotFormat::framed);
}

TEST(FlowSlot, HeaderAndTrailerMustBothMatch) {
  alignas(8) std::byte buf[256] = {};
  const char msg[] = "hello flow";
  std::uint32_t len = 0, flags = 0;
  EXPECT_EQ(detail::check_slot(buf, 0, 100, &len, &flags), detail::SlotState::absent);
  detail::write_slot(buf, 4, msg, sizeof msg, 0);
  EXPECT_EQ(detail::check_slot(buf, 4, 100, &len, &flags), detail::SlotState::valid);
  EXPECT_EQ(len, sizeof msg);
  EXPECT_EQ(detail::check_slot(buf, 5, 100, &len, &flags), detail::SlotState::absent);
  // A torn write: the trailer is not there yet.
  std::byte* trailer = buf + detail::kSlotHeader + detail::round8(sizeof msg);
  trailer[0] = std::byte{0};
  EXPECT_EQ(detail::check_slot(buf, 4, 100, &len, &flags), detail::SlotState::absent);
  // A header that claims more than item_bytes is a protocol violation, not a read past the slot.
  detail::write_slot(buf, 7, msg, sizeof msg, 0);
  EXPECT_EQ(detail::check_slot(buf, 7, 4, &len, &flags), detail::SlotState::bad);
  detail::write_slot(buf, 8, nullptr, 0, detail::kFlagClose);
  EXPECT_EQ(detail::check_slot(buf, 8, 4, &len, &flags), detail::SlotState::valid);
  EXPECT_EQ(flags, detail::kFlagClose);
  detail::write_slot(buf, 9, nullptr, 0, 0x80);
  EXPECT_EQ(detail::check_slot(buf, 9, 4, &len, &flags), detail::SlotState::bad);
}

// A read of a slot the producer is writing one lap later, where the write's stores land in no
// set order (a memcpy, a store split across two cache lines): the header's sequence number and
// the trailer's are new, while its length word and the trailer's last word are still those of
// the previous lap. When the two items' trailers fall at the same place, the old length and the
// old last word agree with each other: the last word carries the sequence number too, so the
// read is not taken for the new item (seen on `local`, a slot whose header straddled a line).
TEST(FlowSlot, StaleLengthWithFreshSequenceNumbersIsNotValid) {
  alignas(8) std::byte old_slot[64] = {}, new_slot[64] = {}, seen[64] = {};
  const char old_item[5] = {1, 2, 3, 4, 5}, new_item[2] = {9, 8};
  detail::write_slot(old_slot, 2527, old_item, sizeof old_item, 0);
  detail::write_slot(new_slot, 2535, new_item, sizeof new_item, 0);
  static_assert(detail::round8(sizeof old_item) == detail::round8(sizeof new_item));
  std::memcpy(seen, old_slot, sizeof seen);
  std::memcpy(seen, new_slot, 8);  // the header's sequence number
  const std::size_t trailer = detail::kSlotHeader + detail::round8(sizeof new_item);
  std::memcpy(seen + detail::kSlotHeader, new_slot + detail::kSlotHeader,
              trailer + 8 - detail::kSlotHeader);  // payload and the trailer's sequence number
  std::uint32_t len = 0, flags = 0;
  EXPECT_EQ(detail::check_slot(seen, 2535, 100, &len, &flags), detail::SlotState::absent);
  // Once the rest lands, the slot is the new item.
  std::memcpy(seen, new_slot, sizeof seen);
  EXPECT_EQ(detail::check_slot(seen, 2535, 100, &len, &flags), detail::SlotState::valid);
  EXPECT_EQ(len, sizeof new_item);
}

// Pull-watermark slots carry a payload sum: a read that got new header and trailer around a
// stale cache line of the previous lap (string copies need not run front to back) is torn.
TEST(FlowSlot, PayloadSumCatchesAStaleLine) {
  for (bool in_order : {false, true})
    for (bool coalesced : {false, true}) {
      EXPECT_TRUE(
          detail::needs_sum(DataFlow::pull, TransferNotify::watermark, in_order, coalesced));
      EXPECT_FALSE(detail::needs_sum(DataFlow::pull, TransferNotify::push, in_order, coalesced));
      EXPECT_FALSE(detail::needs_sum(DataFlow::push1, TransferNotify::push, in_order, coalesced));
      EXPECT_FALSE(
          detail::needs_sum(DataFlow::push2, TransferNotify::watermark, in_order, coalesced));
    }
  // Push1 slots polled while a provider's copy may still place them: where writes are not
  // placed in order, and where one write carries several slots (local places only a write's
  // last word last: a data mover's batch of 2 KB items was read torn on local, 4 runs in 120
  // of bench queue --design datamover -S 64,2K before the sum).
  EXPECT_TRUE(detail::needs_sum(DataFlow::push1, TransferNotify::watermark, false, false));
  EXPECT_FALSE(detail::needs_sum(DataFlow::push1, TransferNotify::watermark, true, false));
  EXPECT_TRUE(detail::needs_sum(DataFlow::push1, TransferNotify::watermark, true, true));
  EXPECT_TRUE(detail::coalesces_writes(TransferNotify::watermark, true, false));
  EXPECT_TRUE(detail::coalesces_writes(TransferNotify::watermark, false, true));
  EXPECT_FALSE(detail::coalesces_writes(TransferNotify::watermark, false, false));
  EXPECT_FALSE(detail::coalesces_writes(TransferNotify::push, true, true));
  alignas(64) std::byte buf[512] = {};
  std::byte old_item[200], new_item[200];
  for (std::size_t i = 0; i < sizeof old_item; ++i) {
    old_item[i] = std::byte(i * 7 + 1);
    new_item[i] = std::byte(i * 13 + 5);
  }
  std::uint32_t len = 0, flags = 0;
  detail::write_slot(buf, 3, old_item, 200, 0, true);
  EXPECT_EQ(detail::check_slot(buf, 3, 256, &len, &flags, true), detail::SlotState::valid);
  // The same slot one lap later, then one 64-byte line of the payload from the old lap.
  detail::write_slot(buf, 11, new_item, 200, 0, true);
  EXPECT_EQ(detail::check_slot(buf, 11, 256, &len, &flags, true), detail::SlotState::valid);
  EXPECT_EQ(len, 200u);
  std::memcpy(buf + 64, old_item + 48, 64);
  EXPECT_EQ(detail::check_slot(buf, 11, 256, &len, &flags, true), detail::SlotState::torn);
  // Every single flipped bit of a short and a long payload is caught.
  for (std::uint32_t n : {5u, 200u}) {
    detail::write_slot(buf, 20, new_item, n, 0, true);
    for (std::uint32_t bit = 0; bit < n * 8; ++bit) {
      buf[detail::kSlotHeader + bit / 8] ^= std::byte(1u << (bit % 8));
      ASSERT_EQ(detail::check_slot(buf, 20, 256, &len, &flags, true), detail::SlotState::torn)
          << n << " " << bit;
      buf[detail::kSlotHeader + bit / 8] ^= std::byte(1u << (bit % 8));
    }
    EXPECT_EQ(detail::check_slot(buf, 20, 256, &len, &flags, true), detail::SlotState::valid);
  }
  // Long payloads take xxHash's dispatched (vector) path: a stale byte in any 64-byte line of a
  // 64 KB item, or the same bytes under another sequence number or length, is caught.
  {
    constexpr std::uint32_t kLong = 64 << 10;
    std::vector<std::byte> big(detail::slot_used(kLong) + 64), item(kLong);
    for (std::size_t i = 0; i < item.size(); ++i) item[i] = std::byte(i * 31 + 7);
    std::byte* slot = big.data();
    detail::write_slot(slot, 40, item.data(), kLong, 0, true);
    EXPECT_EQ(detail::check_slot(slot, 40, kLong, &len, &flags, true), detail::SlotState::valid);
    for (std::size_t line = 0; line < kLong / 64; ++line) {
      std::byte& b = slot[detail::kSlotHeader + line * 64 + line % 64];
      b ^= std::byte{0x20};
      ASSERT_EQ(detail::check_slot(slot, 40, kLong, &len, &flags, true), detail::SlotState::torn)
          << line;
      b ^= std::byte{0x20};
    }
    EXPECT_NE(detail::payload_sum(40, kLong, item.data()),
              detail::payload_sum(41, kLong, item.data()));
    EXPECT_NE(detail::payload_sum(40, kLong, item.data()),
              detail::payload_sum(40, kLong - 8, item.data()));
  }
  // The end-of-stream marker carries a sum too.
  detail::write_slot(buf, 21, nullptr, 0, detail::kFlagClose, true);
  EXPECT_EQ(detail::check_slot(buf, 21, 256, &len, &flags, true), detail::SlotState::valid);
  EXPECT_EQ(flags, detail::kFlagClose);
}

TEST(FlowSlot, HelloMismatchIsAPeerError) {
  detail::Hello mine;
  mine.role = 0;
  mine.capacity = 8;
  mine.item_bytes = 64;
  detail::Hello theirs = mine;
  theirs.role = 1;
  std::vector<std::byte> key(4, std::byte{1});
  auto blob = detail::encode_hello(theirs, key);
  EXPECT_EQ(detail::decode_hello(blob, 1, mine).size(), 4u);
  theirs.capacity = 16;
  EXPECT_THROW(detail::decode_hello(detail::encode_hello(theirs, key), 1, mine), PeerError);
  theirs.capacity = 8;
  // Ends that resolved different slot formats (one compact, one framed) never meet.
  theirs.format = static_cast<std::uint8_t>(SlotFormat::compact);
  EXPECT_THROW(detail::decode_hello(detail::encode_hello(theirs, key), 1, mine), PeerError);
  theirs.format = mine.format;
  theirs.role = 0;
  EXPECT_THROW(detail::decode_hello(detail::encode_hello(theirs, key), 1, mine), PeerError);
  EXPECT_THROW(detail::decode_hello(std::span<const std::byte>(blob.data(), 10), 1, mine),
               PeerError);
}

// Rank 2 opens a queue with rank 1 as its peer, while rank 1's end pairs with rank 0: rank 2
// is told, instead of writing into a ring another producer owns.
TEST(FlowSlot, AThirdRankOpeningAQueueIsRefused) {
  detail::Hello mine;  // rank 2, a producer, peer 1
  mine.role = 0;
  mine.capacity = 8;
  mine.item_bytes = 64;
  mine.rank = 2;
  mine.peer = 1;
  detail::Hello theirs = mine;  // rank 1, the consumer, peer 0
  theirs.role = 1;
  theirs.rank = 1;
  theirs.peer = 0;
  const std::vector<std::byte> key(4, std::byte{1});
  try {
    detail::decode_hello(detail::encode_hello(theirs, key), 1, mine);
    ADD_FAILURE() << "a third rank was let in";
  } catch (const PeerError& e) {
    EXPECT_EQ(e.rank(), 1);
    EXPECT_NE(std::string(e.what()).find("pairs its queue end with rank 0, not with rank 2"),
              std::string::npos)
        << e.what();
  }
  theirs.peer = 2;  // rank 1 pairs with this rank: accepted
  EXPECT_EQ(detail::decode_hello(detail::encode_hello(theirs, key), 1, mine).size(), 4u);
}

// Word-first slots: a producer with compact slots says so, and the consumer learns it; any
// other end claiming them, or a value other than 0 and 1, is a malformed hello.
TEST(FlowSlot, HelloWordFirstOnlyFromACompactProducer) {
  detail::Hello consumer;
  consumer.role = 1;
  consumer.capacity = 8;
  consumer.item_bytes = 64;
  consumer.format = static_cast<std::uint8_t>(SlotFormat::compact);
  detail::Hello producer = consumer;
  producer.role = 0;
  producer.word_first = 1;
  std::vector<std::byte> key(4, std::byte{1});
  detail::Hello got;
  EXPECT_EQ(
      detail::decode_hello(detail::encode_hello(producer, key), 0, consumer, nullptr, &got).size(),
      4u);
  EXPECT_EQ(got.word_first, 1);
  producer.word_first = 2;
  EXPECT_THROW(detail::decode_hello(detail::encode_hello(producer, key), 0, consumer), PeerError);
  // From a consumer (to a producer), or with framed slots: refused.
  consumer.word_first = 1;
  producer.word_first = 0;
  EXPECT_THROW(detail::decode_hello(detail::encode_hello(consumer, key), 1, producer), PeerError);
  consumer.word_first = 0;
  producer.word_first = 1;
  producer.format = consumer.format = static_cast<std::uint8_t>(SlotFormat::framed);
  EXPECT_THROW(detail::decode_hello(detail::encode_hello(producer, key), 0, consumer), PeerError);
}

TEST(FlowSlot, HelloWithANotifyKey) {
  detail::Hello mine;
  mine.role = 0;
  mine.separate = 1;
  detail::Hello theirs = mine;
  theirs.role = 1;
  std::vector<std::byte> key(4, std::byte{1}), nkey(3, std::byte{2});
  auto blob = detail::encode_hello(theirs, key, nkey);
  std::span<const std::byte> got_nkey;
  EXPECT_EQ(detail::decode_hello(blob, 1, mine, &got_nkey).size(), 4u);
  ASSERT_EQ(got_nkey.size(), 3u);
  EXPECT_EQ(got_nkey[0], std::byte{2});
  // The peer without a notify key, or shared while this end is separate: a PeerError.
  EXPECT_THROW(detail::decode_hello(detail::encode_hello(theirs, key), 1, mine), PeerError);
  theirs.separate = 0;
  EXPECT_THROW(detail::decode_hello(detail::encode_hello(theirs, key), 1, mine), PeerError);
  // Lengths that do not add up to the blob (untrusted, u32 each).
  theirs.separate = 1;
  blob = detail::encode_hello(theirs, key, nkey);
  detail::Hello forged;
  std::memcpy(&forged, blob.data(), sizeof forged);
  forged.notify_key_len = 0xffffffffu;
  std::memcpy(blob.data(), &forged, sizeof forged);
  EXPECT_THROW(detail::decode_hello(blob, 1, mine, &got_nkey), PeerError);
  forged.notify_key_len = 3;
  forged.key_len = 0xfffffffeu;
  std::memcpy(blob.data(), &forged, sizeof forged);
  EXPECT_THROW(detail::decode_hello(blob, 1, mine, &got_nkey), PeerError);
}

}  // namespace
}  // namespace fabflow::flow
