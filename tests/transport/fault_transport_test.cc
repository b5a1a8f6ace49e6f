// The fault-injecting wrapper: each knob against an in-memory loopback transport, then a
// checksummed stream over real libfabric (shm, two threads) that must survive agains and
// reordered completions with every message arriving intact and exactly once.
#include <fabflow/bootstrap.h>
#include <fabflow/fault.h>
#include <fabflow/transport.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <numeric>
#include <thread>
#include <utility>
#include <vector>

namespace fabflow {
namespace {

std::uint64_t fnv1a(std::span<const std::byte> bytes,
                    std::uint64_t h = 0xcbf29ce484222325ull) noexcept {
  for (std::byte b : bytes) h = (h ^ static_cast<std::uint8_t>(b)) * 0x100000001b3ull;
  return h;
}

// A registration of the loopback transport: no keys, no descriptors. Move-only.
class LoopbackRegion final : public MemoryRegion {
 public:
  LoopbackRegion(void* addr, std::size_t len) : MemoryRegion(addr, len, nullptr) {}
};

// An in-memory transport that is its own peer: a send lands in the oldest posted recv (or
// waits for one), RMA and atomics act on local memory, completions queue up in order.
// Single-threaded test double.
class Loopback final : public Transport {
 public:
  Loopback() {
    caps_.provider = "loopback";
    caps_.endpoint = EndpointType::rdm;
    caps_.rma = true;
    caps_.atomics_u64 = true;
    caps_.cq_data_size = 8;
    caps_.max_msg_size = caps_.max_rma_size = 1 << 20;
  }

  std::string fail_next;  // non-empty: the next post or poll fails with this message

  const Capabilities& caps() const noexcept override { return caps_; }
  std::string_view name() const noexcept override { return "loopback"; }
  void connect(Bootstrap&) override {}
  std::unique_ptr<MemoryRegion> register_memory(void* addr, std::size_t len, unsigned) override {
    return std::make_unique<LoopbackRegion>(addr, len);
  }
  std::vector<std::byte> export_key(const MemoryRegion& mr) const override {
    std::vector<std::byte> blob(16);
    auto base = reinterpret_cast<std::uint64_t>(mr.data());
    std::uint64_t len = mr.size();
    std::memcpy(blob.data(), &base, 8);
    std::memcpy(blob.data() + 8, &len, 8);
    return blob;
  }
  RemoteMemory import_key(int peer, std::span<const std::byte> blob) override {
    if (blob.size() != 16) throw PeerError(peer, "loopback: bad key");
    RemoteMemory m;
    std::memcpy(&m.base, blob.data(), 8);
    std::memcpy(&m.length, blob.data() + 8, 8);
    m.peer = peer;
    return m;
  }

  Status post_send(int, const void* buf, std::size_t len, void*, std::uint64_t context,
                   unsigned flags) noexcept override {
    if (failing()) return Status::failed;
    auto* p = static_cast<const std::byte*>(buf);
    unexpected_.emplace_back(p, p + len);
    match();
    complete_tx(context, CompletionKind::send, flags);
    return Status::ok;
  }
  Status post_recv(int, void* buf, std::size_t len, void*,
                   std::uint64_t context) noexcept override {
    if (failing()) return Status::failed;
    recvs_.push_back({static_cast<std::byte*>(buf), len, context});
    match();
    return Status::ok;
  }
  Status post_write(int, const void* buf, std::size_t len, void*, const RemoteMemory& dst,
                    std::uint64_t offset, std::uint64_t context, unsigned flags,
                    std::optional<std::uint64_t> imm) noexcept override {
    if (failing()) return Status::failed;
    std::memcpy(reinterpret_cast<void*>(dst.base + offset), buf, len);
    complete_tx(context, CompletionKind::write, flags);
    if (imm) rx_.push_back({0, *imm, 0, CompletionKind::remote_write, true});
    return Status::ok;
  }
  Status post_read(int, void* buf, std::size_t len, void*, const RemoteMemory& src,
                   std::uint64_t offset, std::uint64_t context, unsigned flags) noexcept override {
    if (failing()) return Status::failed;
    std::memcpy(buf, reinterpret_cast<const void*>(src.base + offset), len);
    complete_tx(context, CompletionKind::read, flags);
    return Status::ok;
  }
  Status post_atomic(int, AtomicOp op, std::uint64_t operand, std::uint64_t compare,
                     std::uint64_t* result, void*, const RemoteMemory& dst, std::uint64_t offset,
                     std::uint64_t context, unsigned) noexcept override {
    if (failing()) return Status::failed;
    auto* target = reinterpret_cast<std::uint64_t*>(dst.base + offset);
    *result = *target;
    if (op == AtomicOp::fetch_add)
      *target += operand;
    else if (*target == compare)
      *target = operand;
    complete_tx(context, CompletionKind::atomic, kSignal);
    return Status::ok;
  }

  int poll_tx(std::span<Completion> out) noexcept override {
    return failing() ? -1 : take(tx_, out);
  }
  int poll_rx(std::span<Completion> out) noexcept override {
    return failing() ? -1 : take(rx_, out);
  }
  void progress() noexcept override {}
  const std::string& last_error() const noexcept override { return error_; }

 private:
  struct Recv {
    std::byte* buf;
    std::size_t len;
    std::uint64_t context;
  };

  bool failing() noexcept {
    if (fail_next.empty()) return false;
    error_ = std::exchange(fail_next, {});
    return true;
  }
  void complete_tx(std::uint64_t context, CompletionKind kind, unsigned flags) {
    if (flags & kSignal) tx_.push_back({context, 0, 0, kind, false});
  }
  void match() {
    while (!unexpected_.empty() && !recvs_.empty()) {
      const auto& msg = unexpected_.front();
      Recv r = recvs_.front();
      std::size_t n = std::min(msg.size(), r.len);
      std::memcpy(r.buf, msg.data(), n);
      rx_.push_back({r.context, 0, static_cast<std::uint32_t>(n), CompletionKind::recv, false});
      unexpected_.pop_front();
      recvs_.pop_front();
    }
  }
  static int take(std::deque<Completion>& q, std::span<Completion> out) {
    std::size_t n = std::min(q.size(), out.size());
    std::copy_n(q.begin(), n, out.begin());
    q.erase(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(n));
    return static_cast<int>(n);
  }

  Capabilities caps_;
  std::string error_;
  std::deque<std::vector<std::byte>> unexpected_;
  std::deque<Recv> recvs_;
  std::deque<Completion> tx_;
  std::deque<Completion> rx_;
};

struct Wrapped {
  Loopback* loopback;  // owned by `transport`
  std::unique_ptr<Transport> transport;
  const FaultCounters& counters() const { return *fault_counters(*transport); }
};

Wrapped wrap(FaultPlan plan) {
  auto inner = std::make_unique<Loopback>();
  Loopback* raw = inner.get();
  return {raw, make_fault_transport(std::move(inner), std::move(plan))};
}

// Retries `post` while it answers again; returns how many agains it took.
template <class Post>
int retry(Post&& post) {
  int agains = 0;
  Status s;
  while ((s = post()) == Status::again) ++agains;
  EXPECT_EQ(s, Status::ok);
  return agains;
}

std::vector<Completion> drain(Transport& t, bool rx, std::size_t batch = 16) {
  std::vector<Completion> all;
  std::vector<Completion> out(batch);
  for (;;) {
    int n = rx ? t.poll_rx(out) : t.poll_tx(out);
    EXPECT_GE(n, 0) << t.last_error();
    if (n <= 0) return all;
    all.insert(all.end(), out.begin(), out.begin() + n);
  }
}

TEST(FaultTransport, PassesEverythingThroughWithoutFaults) {
  auto w = wrap({});
  Transport& t = *w.transport;
  EXPECT_EQ(t.name(), "fault(loopback)");
  EXPECT_EQ(t.caps().provider, "loopback");
  EXPECT_EQ(fault_counters(*w.loopback), nullptr);

  std::array<std::uint64_t, 4> mem{0, 0, 5, 0};
  auto mr = t.register_memory(mem.data(), sizeof mem, kAllAccess);
  RemoteMemory remote = t.import_key(0, t.export_key(*mr));
  EXPECT_EQ(remote.base, reinterpret_cast<std::uint64_t>(mem.data()));

  std::uint64_t in = 0, out = 42, fetched = 0, read = 0;
  ASSERT_EQ(t.post_recv(0, &in, 8, nullptr, 1), Status::ok);
  ASSERT_EQ(t.post_send(0, &out, 8, nullptr, 2, kSignal), Status::ok);
  ASSERT_EQ(t.post_write(0, &out, 8, nullptr, remote, 0, 3, kSignal, 7), Status::ok);
  ASSERT_EQ(t.post_read(0, &read, 8, nullptr, remote, 0, 4, kSignal), Status::ok);
  ASSERT_EQ(t.post_atomic(0, AtomicOp::fetch_add, 3, 0, &fetched, nullptr, remote, 16, 5, 0),
            Status::ok);
  EXPECT_EQ(in, 42u);
  EXPECT_EQ(read, 42u);
  EXPECT_EQ(fetched, 5u);
  EXPECT_EQ(mem[2], 8u);

  auto tx = drain(t, false);
  ASSERT_EQ(tx.size(), 4u);
  for (std::size_t i = 0; i < tx.size(); ++i) EXPECT_EQ(tx[i].context, i + 2);
  auto rx = drain(t, true);
  ASSERT_EQ(rx.size(), 2u);
  EXPECT_EQ(rx[0].kind, CompletionKind::recv);
  EXPECT_EQ(rx[0].length, 8u);
  EXPECT_EQ(rx[1].kind, CompletionKind::remote_write);
  EXPECT_EQ(rx[1].data, 7u);

  const FaultCounters& c = w.counters();
  EXPECT_EQ(c.posts, 5u);
  EXPECT_EQ(c.agains + c.failures + c.corruptions + c.delayed + c.reordered, 0u);
}

TEST(FaultTransport, AgainsComeAtTheConfiguredRateAndRetriesDeliverEverything) {
  constexpr int kMessages = 5000;
  auto w = wrap({.seed = 7, .again_probability = 0.3});
  Transport& t = *w.transport;
  std::vector<std::uint32_t> got(kMessages, ~0u);
  int agains = 0;
  for (std::uint32_t i = 0; i < kMessages; ++i) {
    agains += retry([&] { return t.post_recv(0, &got[i], 4, nullptr, i); });
    agains += retry([&] { return t.post_send(0, &i, 4, nullptr, i, kSignal); });
  }
  const FaultCounters& c = w.counters();
  EXPECT_EQ(c.agains, static_cast<std::uint64_t>(agains));
  EXPECT_EQ(c.posts, 2u * kMessages);
  double rate = static_cast<double>(agains) / static_cast<double>(agains + 2 * kMessages);
  EXPECT_NEAR(rate, 0.3, 0.02);

  // An again posted nothing: exactly one completion per message, each in place.
  EXPECT_EQ(drain(t, false).size(), static_cast<std::size_t>(kMessages));
  EXPECT_EQ(drain(t, true).size(), static_cast<std::size_t>(kMessages));
  for (std::uint32_t i = 0; i < kMessages; ++i) ASSERT_EQ(got[i], i);
}

TEST(FaultTransport, TheSameSeedInjectsTheSameFaults) {
  auto pattern = [](std::uint64_t seed) {
    auto w = wrap({.seed = seed, .again_probability = 0.5});
    std::uint64_t v = 0;
    std::string s;
    for (int i = 0; i < 64; ++i)
      s += w.transport->post_send(0, &v, 8, nullptr, 0, 0) == Status::ok ? '.' : 'A';
    return s;
  };
  EXPECT_EQ(pattern(3), pattern(3));
  EXPECT_NE(pattern(3), pattern(4));
}

TEST(FaultTransport, DelaysEachCompletionExactlyNPolls) {
  constexpr unsigned kDelay = 3;
  auto w = wrap({.delay_completions = kDelay});
  Transport& t = *w.transport;
  std::uint64_t v = 0;
  std::array<Completion, 4> out;

  ASSERT_EQ(t.post_send(0, &v, 8, nullptr, 10, kSignal), Status::ok);
  for (unsigned i = 0; i < kDelay; ++i) ASSERT_EQ(t.poll_tx(out), 0) << "poll " << i;
  ASSERT_EQ(t.poll_tx(out), 1);
  EXPECT_EQ(out[0].context, 10u);

  // Two completions reaped one poll apart come out one poll apart.
  ASSERT_EQ(t.post_send(0, &v, 8, nullptr, 11, kSignal), Status::ok);
  ASSERT_EQ(t.poll_tx(out), 0);
  ASSERT_EQ(t.post_send(0, &v, 8, nullptr, 12, kSignal), Status::ok);
  for (unsigned i = 1; i < kDelay; ++i) ASSERT_EQ(t.poll_tx(out), 0);
  ASSERT_EQ(t.poll_tx(out), 1);
  EXPECT_EQ(out[0].context, 11u);
  ASSERT_EQ(t.poll_tx(out), 1);
  EXPECT_EQ(out[0].context, 12u);

  // The receive side keeps its own poll count.
  ASSERT_EQ(t.post_recv(0, &v, 8, nullptr, 20), Status::ok);
  for (unsigned i = 0; i < kDelay; ++i) ASSERT_EQ(t.poll_rx(out), 0);
  ASSERT_EQ(t.poll_rx(out), 1);
  EXPECT_EQ(out[0].context, 20u);
  EXPECT_EQ(w.counters().delayed, 4u);
}

TEST(FaultTransport, ReorderingKeepsEveryCompletionExactlyOnce) {
  constexpr std::uint64_t kOps = 64;
  constexpr unsigned kWindow = 4;
  auto w = wrap({.seed = 5, .reorder_window = kWindow});
  Transport& t = *w.transport;
  std::uint64_t v = 0;
  for (std::uint64_t i = 0; i < kOps; ++i)
    ASSERT_EQ(t.post_send(0, &v, 8, nullptr, i, kSignal), Status::ok);

  auto got = drain(t, false, 16);
  ASSERT_EQ(got.size(), kOps);
  std::uint64_t moved = 0;
  for (std::size_t pos = 0; pos < got.size(); ++pos) {
    EXPECT_EQ(got[pos].context / kWindow, pos / kWindow) << "left its window";
    moved += got[pos].context != pos;
  }
  std::vector<std::uint64_t> sorted;
  for (const Completion& c : got) sorted.push_back(c.context);
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::uint64_t> expected(kOps);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(sorted, expected);
  EXPECT_GT(moved, 0u);
  EXPECT_EQ(w.counters().reordered, moved);
}

TEST(FaultTransport, FailsEveryPostAfterNPosts) {
  auto w = wrap({.fail_after_posts = 5});
  Transport& t = *w.transport;
  std::uint64_t v = 0;
  RemoteMemory self{reinterpret_cast<std::uint64_t>(&v), 8, 0, 0};
  for (int i = 0; i < 5; ++i) ASSERT_EQ(t.post_send(0, &v, 8, nullptr, 0, 0), Status::ok);
  EXPECT_EQ(t.post_send(0, &v, 8, nullptr, 0, 0), Status::failed);
  EXPECT_EQ(t.last_error(), "fault: injected failure after 5 posts");
  EXPECT_EQ(t.post_recv(0, &v, 8, nullptr, 0), Status::failed);
  EXPECT_EQ(t.post_write(0, &v, 8, nullptr, self, 0, 0, 0), Status::failed);
  EXPECT_EQ(t.post_read(0, &v, 8, nullptr, self, 0, 0, 0), Status::failed);
  EXPECT_EQ(t.last_error(), "fault: injected failure after 5 posts");
  EXPECT_EQ(w.counters().posts, 5u);
  EXPECT_EQ(w.counters().failures, 4u);
}

TEST(FaultTransport, ReportsTheInnerTransportsOwnFailures) {
  auto w = wrap({});
  std::uint64_t v = 0;
  w.loopback->fail_next = "loopback: link down";
  EXPECT_EQ(w.transport->post_send(0, &v, 8, nullptr, 0, 0), Status::failed);
  EXPECT_EQ(w.transport->last_error(), "loopback: link down");
  EXPECT_EQ(w.counters().posts, 0u);
  EXPECT_EQ(w.counters().failures, 0u);

  std::array<Completion, 4> out;
  w.loopback->fail_next = "loopback: completion error";
  EXPECT_EQ(w.transport->poll_rx(out), -1);
  EXPECT_EQ(w.transport->last_error(), "loopback: completion error");
}

TEST(FaultTransport, CorruptionFlipsExactlyOneReceivedByteAndAChecksumSeesIt) {
  constexpr std::size_t kLen = 100;
  auto w = wrap({.seed = 9, .corrupt_recv_probability = 1.0});
  Transport& t = *w.transport;
  std::array<std::byte, kLen> payload;
  for (int round = 0; round < 50; ++round) {
    for (std::size_t i = 0; i < kLen; ++i)
      payload[i] = static_cast<std::byte>(i * 31 + static_cast<std::size_t>(round));
    std::array<std::byte, 2 * kLen> buf;
    buf.fill(std::byte{0xee});
    ASSERT_EQ(t.post_recv(0, buf.data(), buf.size(), nullptr, 1), Status::ok);
    ASSERT_EQ(t.post_send(0, payload.data(), kLen, nullptr, 2, 0), Status::ok);
    ASSERT_EQ(std::memcmp(buf.data(), payload.data(), kLen), 0) << "corrupted before delivery";
    ASSERT_EQ(drain(t, true).size(), 1u);
    int differing = 0;
    for (std::size_t i = 0; i < kLen; ++i) differing += buf[i] != payload[i];
    EXPECT_EQ(differing, 1);
    for (std::size_t i = kLen; i < buf.size(); ++i) ASSERT_EQ(buf[i], std::byte{0xee});
    EXPECT_NE(fnv1a(std::span(buf).first(kLen)), fnv1a(payload));
  }
  EXPECT_EQ(w.counters().corruptions, 50u);
}

TEST(FaultTransport, CorruptsAtTheConfiguredRateOnlyAtDelivery) {
  constexpr int kMessages = 2000;
  using Message = std::array<std::uint64_t, 4>;
  auto message = [](int i) { return Message{static_cast<std::uint64_t>(i), 1, 2, 3}; };
  auto checksum = [](const Message& m) { return fnv1a(std::as_bytes(std::span(m))); };
  auto w = wrap({.seed = 13, .delay_completions = 1, .corrupt_recv_probability = 0.25});
  Transport& t = *w.transport;
  std::vector<Message> bufs(kMessages);
  for (int i = 0; i < kMessages; ++i) {
    Message m = message(i);
    ASSERT_EQ(t.post_recv(0, bufs[i].data(), sizeof m, nullptr, i), Status::ok);
    ASSERT_EQ(t.post_send(0, m.data(), sizeof m, nullptr, i, 0), Status::ok);
  }
  for (int i = 0; i < kMessages; ++i)
    ASSERT_EQ(bufs[i], message(i)) << "changed before its completion was delivered";

  std::size_t delivered = 0;
  for (int i = 0; i < 100 && delivered < kMessages; ++i) delivered += drain(t, true, 64).size();
  ASSERT_EQ(delivered, static_cast<std::size_t>(kMessages));
  std::uint64_t corrupted = 0;
  for (int i = 0; i < kMessages; ++i) corrupted += checksum(bufs[i]) != checksum(message(i));
  EXPECT_EQ(corrupted, w.counters().corruptions);
  EXPECT_NEAR(static_cast<double>(corrupted) / kMessages, 0.25, 0.04);
}

// corrupt_rma_op 3: of the RMA operations (writes and reads, counted together), the third moves
// one flipped byte and no other does; a write's source is restored once its completion is
// delivered, a read's byte is flipped only then.
TEST(FaultTransport, CorruptsOneByteOfTheNthRmaOperationOnly) {
  constexpr std::size_t kLen = 256;
  for (bool third_is_read : {false, true}) {
    auto w = wrap({.seed = 5, .corrupt_rma_op = 3});
    Transport& t = *w.transport;
    std::vector<std::byte> src(kLen), dst(kLen), back(kLen);
    for (std::size_t i = 0; i < kLen; ++i) src[i] = static_cast<std::byte>(i * 7 + 1);
    const std::vector<std::byte> pristine = src;
    auto mr = t.register_memory(dst.data(), kLen, kAllAccess);
    RemoteMemory remote = t.import_key(0, t.export_key(*mr));
    auto differing = [&](const std::vector<std::byte>& a) {
      std::size_t n = 0;
      for (std::size_t i = 0; i < kLen; ++i) n += a[i] != pristine[i];
      return n;
    };
    for (std::uint64_t op = 1; op <= 4; ++op) {
      std::fill(dst.begin(), dst.end(), std::byte{0});
      std::fill(back.begin(), back.end(), std::byte{0});
      if (op == 3 && third_is_read) {
        std::memcpy(dst.data(), src.data(), kLen);
        ASSERT_EQ(t.post_read(0, back.data(), kLen, nullptr, remote, 0, op, kSignal), Status::ok);
        EXPECT_EQ(differing(back), 0u) << "flipped before the completion was delivered";
        ASSERT_EQ(drain(t, false).size(), 1u);
        EXPECT_EQ(differing(back), 1u);
        continue;
      }
      ASSERT_EQ(t.post_write(0, src.data(), kLen, nullptr, remote, 0, op, kSignal), Status::ok);
      EXPECT_EQ(differing(dst), op == 3 ? 1u : 0u) << "write " << op;
      ASSERT_EQ(drain(t, false).size(), 1u);
      EXPECT_EQ(differing(src), 0u) << "the source of write " << op << " is not restored";
    }
    EXPECT_EQ(w.counters().corruptions, 1u);
    EXPECT_EQ(w.counters().rma_ops, 4u);
  }
}

TEST(FaultTransport, CallsTheKillCallbackOnceAfterNPosts) {
  int kills = 0;
  auto w = wrap({.kill_after_posts = 3, .on_kill = [&] { ++kills; }});
  std::uint64_t v = 0;
  auto send = [&] { return w.transport->post_send(0, &v, 8, nullptr, 0, 0); };
  for (int i = 0; i < 2; ++i) ASSERT_EQ(send(), Status::ok);
  EXPECT_EQ(kills, 0);
  ASSERT_EQ(send(), Status::ok);
  EXPECT_EQ(kills, 1);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(send(), Status::ok);
  EXPECT_EQ(kills, 1);
}

TEST(FaultTransport, RejectsPlansOutOfRange) {
  auto make = [](FaultPlan plan) {
    return make_fault_transport(std::make_unique<Loopback>(), std::move(plan));
  };
  EXPECT_THROW(make({.again_probability = 1.5}), UsageError);
  EXPECT_THROW(make({.again_probability = -0.1}), UsageError);
  EXPECT_THROW(make({.corrupt_recv_probability = std::numeric_limits<double>::quiet_NaN()}),
               UsageError);
  EXPECT_THROW(make({.kill_after_posts = 1}), UsageError);
  EXPECT_THROW(make_fault_transport(nullptr, {}), UsageError);
  EXPECT_NO_THROW(make({.again_probability = 1.0, .corrupt_recv_probability = 0.0}));
}

// ---- over real libfabric: two threads on shm, every post through the fault wrapper ----

constexpr int kStreamMessages = 2000;
constexpr int kStreamWindow = 16;   // messages per batch; the receiver acks each batch
constexpr std::size_t kSlot = 128;  // u64 seq | u64 checksum | payload
constexpr std::uint64_t kAckContext = 1u << 20;
constexpr auto kStreamTimeout = std::chrono::seconds(10);

std::uint64_t message_checksum(const std::byte* slot) {
  return fnv1a({slot + 16, kSlot - 16}, fnv1a({slot, 8}));
}

void fill_message(std::byte* slot, std::uint64_t seq) {
  std::memcpy(slot, &seq, 8);
  for (std::size_t i = 16; i < kSlot; ++i) slot[i] = static_cast<std::byte>(seq * 131 + i * 7);
  std::uint64_t sum = message_checksum(slot);
  std::memcpy(slot + 8, &sum, 8);
}

// One rank's side of the stream: retries every again, collects send completions, gives up
// after 10 s or when the peer does.
// Single-threaded.
class StreamRank {
 public:
  StreamRank(Transport& t, Bootstrap& boot)
      : t_(t),
        boot_(boot),
        peer_(1 - boot.rank()),
        buf_((kStreamWindow + 1) * kSlot),
        mr_(t.register_memory(buf_.data(), buf_.size(), kAllAccess)),
        deadline_(std::chrono::steady_clock::now() + kStreamTimeout) {}

  std::byte* slot(int i) { return buf_.data() + static_cast<std::size_t>(i) * kSlot; }

  template <class Post>
  void post(Post&& p) {
    for (;;) {
      Status s = p();
      if (s == Status::ok) return;
      if (s != Status::again) throw Error("post: " + t_.last_error());
      reap_tx();
      tick();
    }
  }
  void send(int i, std::uint64_t context) {
    post([&] { return t_.post_send(peer_, slot(i), kSlot, mr_->desc(), context, kSignal); });
  }
  void recv(int i, std::uint64_t context) {
    post([&] { return t_.post_recv(peer_, slot(i), kSlot, mr_->desc(), context); });
  }
  void reap_tx() {
    std::array<Completion, 8> out;
    int n = t_.poll_tx(out);
    if (n < 0) throw Error("poll_tx: " + t_.last_error());
    for (int i = 0; i < n; ++i) tx_done.push_back(out[static_cast<std::size_t>(i)].context);
  }
  std::span<Completion> poll_rx() {
    int n = t_.poll_rx(rx_);
    if (n < 0) throw Error("poll_rx: " + t_.last_error());
    return std::span(rx_).first(static_cast<std::size_t>(n));
  }
  void tick() {
    t_.progress();
    std::this_thread::yield();  // the peer thread may share this core
    if (boot_.peer_failed()) throw PeerError(peer_, "the peer gave up");
    if (std::chrono::steady_clock::now() > deadline_)
      throw Error("stream made no progress within 10 s");
  }

  std::vector<std::uint64_t> tx_done;

 private:
  Transport& t_;
  Bootstrap& boot_;
  int peer_;
  std::vector<std::byte> buf_;
  std::unique_ptr<MemoryRegion> mr_;
  std::chrono::steady_clock::time_point deadline_;
  std::array<Completion, 8> rx_;
};

// Rank 0 sends kStreamWindow checksummed messages, waits for their send completions and the
// receiver's ack, and repeats.
void stream_sender(Transport& t, Bootstrap& boot) {
  StreamRank s(t, boot);
  boot.barrier([&] { t.progress(); });  // the receiver's first recvs are posted
  for (int seq = 0; seq < kStreamMessages; seq += kStreamWindow) {
    s.recv(kStreamWindow, kAckContext);
    for (int i = 0; i < kStreamWindow; ++i) {
      fill_message(s.slot(i), static_cast<std::uint64_t>(seq + i));
      s.send(i, static_cast<std::uint64_t>(seq + i));
    }
    bool acked = false;
    while (!acked || s.tx_done.size() < kStreamWindow) {
      for (const Completion& c : s.poll_rx()) acked |= c.context == kAckContext;
      s.reap_tx();
      s.tick();
    }
    std::sort(s.tx_done.begin(), s.tx_done.end());
    std::vector<std::uint64_t> want(kStreamWindow);
    std::iota(want.begin(), want.end(), static_cast<std::uint64_t>(seq));
    if (s.tx_done != want) throw Error("send completions of a batch were lost or duplicated");
    s.tx_done.clear();
  }
}

// Rank 1 checks every message (length, checksum, payload, seen once), reposts its buffer and
// acks each full batch.
void stream_receiver(Transport& t, Bootstrap& boot, std::vector<int>& seen) {
  StreamRank s(t, boot);
  for (int i = 0; i < kStreamWindow; ++i) s.recv(i, static_cast<std::uint64_t>(i));
  boot.barrier([&] { t.progress(); });
  int got = 0, acks = 0;
  while (got < kStreamMessages || s.tx_done.size() < static_cast<std::size_t>(acks)) {
    for (const Completion& c : s.poll_rx()) {
      int i = static_cast<int>(c.context);
      if (c.kind != CompletionKind::recv || i >= kStreamWindow || c.length != kSlot)
        throw Error("unexpected receive completion");
      std::uint64_t seq = 0, sum = 0;
      std::memcpy(&seq, s.slot(i), 8);
      std::memcpy(&sum, s.slot(i) + 8, 8);
      std::array<std::byte, kSlot> want;
      if (seq < kStreamMessages) fill_message(want.data(), seq);
      if (seq >= kStreamMessages || sum != message_checksum(s.slot(i)) ||
          std::memcmp(want.data(), s.slot(i), kSlot) != 0)
        throw Error("message " + std::to_string(seq) + " arrived damaged");
      ++seen[seq];
      s.recv(i, c.context);
      if (++got % kStreamWindow == 0) {
        s.send(kStreamWindow, kAckContext);
        ++acks;
      }
    }
    s.reap_tx();
    s.tick();
  }
}

TEST(FaultShm, ChecksummedStreamSurvivesAgainsAndReorderedCompletions) {
  static_assert(kStreamMessages % kStreamWindow == 0);
  auto boots = make_thread_bootstraps(2);
  std::vector<int> seen(kStreamMessages, 0);
  std::array<std::string, 2> errors;
  std::array<FaultCounters, 2> counters;
  std::array<std::thread, 2> threads;
  for (int r = 0; r < 2; ++r) {
    threads[static_cast<std::size_t>(r)] = std::thread([&, r] {
      Bootstrap& boot = *boots[static_cast<std::size_t>(r)];
      try {
        auto t =
            make_fault_transport(open_libfabric({.provider = "shm", .ops = {Op::send, Op::write}}),
                                 {.seed = 100u + static_cast<std::uint64_t>(r),
                                  .again_probability = 0.3,
                                  .reorder_window = 4});
        t->connect(boot);
        if (r == 0)
          stream_sender(*t, boot);
        else
          stream_receiver(*t, boot, seen);
        boot.barrier([&] { t->progress(); });
        counters[static_cast<std::size_t>(r)] = *fault_counters(*t);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = "rank " + std::to_string(r) + ": " + e.what();
        boot.abort(e.what());
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  for (int seq = 0; seq < kStreamMessages; ++seq) ASSERT_EQ(seen[seq], 1) << "message " << seq;
  constexpr std::uint64_t kBatches = kStreamMessages / kStreamWindow;
  EXPECT_EQ(counters[0].posts, kStreamMessages + kBatches);  // sends and ack recvs
  EXPECT_EQ(counters[1].posts, kStreamMessages + kStreamWindow + kBatches);
  for (const FaultCounters& c : counters) {
    EXPECT_GT(c.agains, 0u);
    EXPECT_EQ(c.failures + c.corruptions, 0u);
  }
  EXPECT_GT(counters[0].reordered + counters[1].reordered, 0u);
}

}  // namespace
}  // namespace fabflow
