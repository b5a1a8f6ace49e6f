// The local (native shared-memory) transport between two threads of one process, each with
// its own transport joined by in-process bootstraps: what only it has. Its message size limit
// (kMaxMsg) and truncation, forged remote lengths and keys, unaligned atomics, its key layout
// (version, owner, region id, segment bounds), memory it did not allocate, corrupted rings and
// peer death. The contract every transport meets is in contract_test.cc. The streaming tests
// run two threads concurrently and are part of the TSan set (suite names start with Local).
#include <fabflow/bootstrap.h>
#include <fabflow/fault.h>
#include <fabflow/local.h>
#include <fabflow/transport.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>

#include "support/launcher_test_util.h"
#include "support/ranks.h"
#include "transport/dispatch.h"
#include "transport/local/local_transport.h"

// A namespace of its own: the test files are compiled together in unity batches.
namespace fabflow::local_transport_test {
namespace {

using namespace std::chrono_literals;
using testing::Cq;
using testing::wait_one;

// Runs `body(rank, transport, boot)` on two threads over local; returns the first failure message.
std::string run_pair(const std::function<void(int, Transport&, Bootstrap&)>& body,
                     TransportOptions opts = {}) {
  opts.provider = "local";
  return testing::run_ranks(2, opts, body);
}

void expect(bool ok, const std::string& what) {
  if (!ok) throw Error(what);
}

// Exchanges keys of one allocated region per rank; returns the peer's.
RemoteMemory exchange(Transport& t, Bootstrap& boot, const MemoryRegion& mr) {
  auto keys = boot.allgather(t.export_key(mr));
  int peer = 1 - boot.rank();
  return t.import_key(peer, keys[static_cast<std::size_t>(peer)]);
}

TEST(LocalTransport, CapabilitiesAndSelection) {
  TransportOptions o;
  o.provider = "local";
  Capabilities c = probe_transport(o);
  EXPECT_EQ(c.provider, "local");
  EXPECT_EQ(c.endpoint, EndpointType::rdm);
  EXPECT_EQ(c.cq_data_size, 8u);
  EXPECT_TRUE(c.rma && c.atomics_u64 && c.in_order_data);
  EXPECT_FALSE(c.data_progress_manual);
  EXPECT_EQ(c.mr_mode, 0u);
  for (Op op : {Op::send, Op::write, Op::read, Op::writedata, Op::fadd, Op::cswap})
    EXPECT_TRUE(c.supports(op));
  EXPECT_EQ(c.rx_in_place_max, local::kChunk);
  auto t = open_transport(o);
  EXPECT_EQ(t->name(), "local");
  // The fault wrapper injects on the receive path, so nothing is read in place through it.
  EXPECT_EQ(make_fault_transport(open_transport(o), {})->caps().rx_in_place_max, 0u);
  bool concrete = with_concrete(*t, [](auto& x) {
    return std::is_same_v<std::remove_reference_t<decltype(x)>, local::LocalTransport>;
  });
  EXPECT_TRUE(concrete);
  // Its powers, as capabilities: the user of the interface asks these, not the provider's name.
  EXPECT_TRUE(c.rx_lands_on_poll && c.peer_mapping && c.cross_memory_attach);
  EXPECT_EQ(c.api_version, 0u);  // not a libfabric provider
  static_assert(always_maps_peers<local::LocalTransport>);
  static_assert(!always_maps_peers<Transport>);
  // Stores through a mapping would pass by the fault wrapper; copies by cross-memory attach do
  // not pass through its data path at all, so it keeps them.
  const Capabilities wrapped = make_fault_transport(open_transport(o), {})->caps();
  EXPECT_FALSE(wrapped.peer_mapping);
  EXPECT_TRUE(wrapped.cross_memory_attach);
  // Regions a peer can reach are allocated by the inner transport, through the wrapper too
  // (the interface's default would register memory local did not allocate: refused).
  EXPECT_NE(make_fault_transport(open_transport(o), {})->allocate(4096, kAllAccess), nullptr);
  // A libfabric provider has none of them.
  o.provider = "tcp";
  const Capabilities tcp = probe_transport(o);
  EXPECT_FALSE(tcp.rx_lands_on_poll || tcp.peer_mapping || tcp.cross_memory_attach);
  EXPECT_NE(tcp.api_version, 0u);
}

// map_peer gives the peer's region as an address here (stores land there, ranges and keys are
// checked); copy_peer moves bytes to and from any address of the peer's process, and a range
// that is not mapped there fails with the kernel's reason.
TEST(LocalTransport, MapPeerAndCopyPeer) {
  auto err = run_pair([&](int rank, Transport& t, Bootstrap& boot) {
    auto mr = t.allocate(4096, kAllAccess);
    RemoteMemory peer = exchange(t, boot, *mr);
    const int other = 1 - rank;
    std::array<std::uint64_t, 4> words{};  // its address travels through the bootstrap
    for (std::size_t i = 0; i < words.size(); ++i) words[i] = 1000 * (rank + 1) + i;
    const auto addrs = allgather_value(boot, reinterpret_cast<std::uint64_t>(words.data()), "addr");
    const std::uint64_t theirs = addrs[static_cast<std::size_t>(other)];
    boot.barrier();
    if (rank == 0) {
      std::byte* at = t.map_peer(1, peer, 256, 64);
      expect(at != nullptr, t.last_error());
      std::memset(at, 0x5a, 64);
      expect(t.map_peer(1, peer, 4090, 64) == nullptr, "a range past the end mapped");
      expect(t.last_error().find("outside") != std::string::npos, t.last_error());
      RemoteMemory forged = peer;
      forged.key = 77;
      expect(t.map_peer(1, forged, 0, 8) == nullptr, "a forged key mapped");
      std::array<std::uint64_t, 4> got{};
      expect(
          t.copy_peer(1, Transport::PeerCopy::read, got.data(), theirs, sizeof got) == Status::ok,
          t.last_error());
      expect(got[0] == 2000 && got[3] == 2003, "words read from the peer");
      const std::uint64_t seven = 7;
      expect(t.copy_peer(1, Transport::PeerCopy::write, const_cast<std::uint64_t*>(&seven),
                         theirs + 8, 8) == Status::ok,
             t.last_error());
      expect(t.copy_peer(1, Transport::PeerCopy::read, got.data(), 8, 8) == Status::failed,
             "a read of the peer's page zero succeeded");
      expect(t.last_error().find("cross-memory attach") != std::string::npos, t.last_error());
      expect(t.copy_peer(5, Transport::PeerCopy::read, got.data(), theirs, 8) == Status::failed,
             "a copy with no such rank succeeded");
      expect(t.copy_peer(1, Transport::PeerCopy::read, got.data(), ~std::uint64_t{0} - 3, 8) ==
                 Status::failed,
             "a wrapping range succeeded");
    }
    boot.barrier();
    if (rank == 1) {
      for (std::size_t i = 0; i < 64; ++i)
        expect(mr->data()[256 + i] == std::byte{0x5a}, "stored through the mapping");
      expect(words[1] == 7 && words[0] == 2000 && words[2] == 2002, "written by the peer");
    }
  });
  EXPECT_EQ(err, "");
}

TEST(LocalTransport, SendsMatchReceivesInOrderWithContexts) {
  const std::array<std::size_t, 4> sizes{64, 0, 10000, local::kMaxMsg};
  auto err = run_pair([&](int rank, Transport& t, Bootstrap& boot) {
    auto mr = t.allocate(local::kMaxMsg, kAllAccess);
    if (rank == 1) {
      for (std::size_t i = 0; i < sizes.size(); ++i)
        expect(t.post_recv(0, mr->data(), mr->size(), nullptr, 100 + i) == Status::ok, "recv");
      boot.barrier();
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        Completion c = wait_one(t, Cq::rx);
        expect(c.kind == CompletionKind::recv && c.context == 100 + i && c.length == sizes[i],
               "completion " + std::to_string(i) + " ctx " + std::to_string(c.context) + " len " +
                   std::to_string(c.length));
        for (std::size_t b = 0; b < c.length; ++b)
          if (mr->data()[b] != static_cast<std::byte>((b + i) & 0xff))
            throw Error("payload byte " + std::to_string(b) + " of message " + std::to_string(i));
      }
    } else {
      boot.barrier();
      std::vector<std::byte> src(local::kMaxMsg);
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        for (std::size_t b = 0; b < sizes[i]; ++b) src[b] = static_cast<std::byte>((b + i) & 0xff);
        Status s;
        while ((s = t.post_send(1, src.data(), sizes[i], nullptr, 7 + i, kSignal)) ==
               Status::again) {
        }
        expect(s == Status::ok, t.last_error());
        Completion c = wait_one(t, Cq::tx);
        expect(c.kind == CompletionKind::send && c.context == 7 + i, "send completion");
      }
      expect(t.post_send(1, src.data(), local::kMaxMsg + 1, nullptr, 0, 0) == Status::failed,
             "oversized send accepted");
    }
  });
  EXPECT_EQ(err, "");
}

TEST(LocalTransport, MessageLargerThanReceiveIsAnErrorCompletion) {
  auto err = run_pair([&](int rank, Transport& t, Bootstrap& boot) {
    std::array<std::byte, 128> buf{};
    if (rank == 0) {
      expect(t.post_send(1, buf.data(), 100, nullptr, 0, 0) == Status::ok, t.last_error());
      expect(t.post_send(1, buf.data(), 10, nullptr, 0, 0) == Status::ok, t.last_error());
      boot.barrier();
    } else {
      boot.barrier();
      Completion c[4];
      expect(t.poll_rx(c) == 0, "delivered without a posted receive");
      expect(t.post_recv(0, buf.data(), 50, nullptr, 1) == Status::ok, "recv");
      expect(t.post_recv(0, buf.data(), 50, nullptr, 2) == Status::ok, "recv");
      expect(t.poll_rx(c) == -1, "truncation not reported");
      expect(t.last_error().find("larger than the posted receive") != std::string::npos,
             t.last_error());
      Completion ok = wait_one(t, Cq::rx);
      expect(ok.context == 2 && ok.length == 10, "next message lost after truncation");
    }
  });
  EXPECT_EQ(err, "");
}

// Messages read where they landed: handed out in order with their sender, held until given
// back (the sender is held off once the ring is full of them), given back in any order; the
// head moves only past what is given back. Wrong give-backs, a message above one slot, and
// mixing posted receives with in-place reads on one peer are refused with an error.
TEST(LocalTransport, InPlaceReceiveHoldsRingSlotsUntilGivenBack) {
  constexpr std::uint64_t kRing = local::kMsgSlots;
  auto err = run_pair([&](int rank, Transport& t, Bootstrap& boot) {
    std::vector<std::byte> big(local::kChunk + 1, std::byte{7});
    if (rank == 0) {
      for (std::uint64_t i = 0; i < kRing; ++i)
        expect(t.post_send(1, &i, 8, nullptr, 0, 0) == Status::ok, t.last_error());
      std::uint64_t more = kRing;
      expect(t.post_send(1, &more, 8, nullptr, 0, 0) == Status::again, "ring overrun");
      boot.barrier();  // A: the receiver holds every message
      boot.barrier();  // B: ... and gave back the second only
      expect(t.post_send(1, &more, 8, nullptr, 0, 0) == Status::again,
             "the head moved past a message still held");
      boot.barrier();  // C
      boot.barrier();  // C2: everything given back
      expect(t.post_send(1, &more, 8, nullptr, 0, 0) == Status::ok, t.last_error());
      expect(t.post_send(1, big.data(), big.size(), nullptr, 0, 0) == Status::ok, t.last_error());
      boot.barrier();  // D
      boot.barrier();  // E: receives posted
      expect(t.post_send(1, &more, 8, nullptr, 0, 0) == Status::ok, t.last_error());
      boot.barrier();  // F
      return;
    }
    boot.barrier();  // A
    std::vector<Completion> held;
    Completion c[16];
    auto end = std::chrono::steady_clock::now() + 5s;
    while (held.size() < kRing && std::chrono::steady_clock::now() < end) {
      int n = t.poll_rx_in_place(c);
      expect(n >= 0, t.last_error());
      held.insert(held.end(), c, c + n);
    }
    expect(held.size() == kRing, "handed out " + std::to_string(held.size()));
    for (std::uint64_t i = 0; i < kRing; ++i) {
      std::uint64_t v;
      expect(held[i].kind == CompletionKind::recv && held[i].peer == 0 && held[i].length == 8,
             "completion " + std::to_string(i));
      std::memcpy(&v, held[i].buf, 8);
      expect(v == i, "message " + std::to_string(i) + " out of order");
    }
    expect(t.poll_rx_in_place(c) == 0, "a message handed out twice");
    expect(t.release_rx(held[1]) == Status::ok, t.last_error());
    expect(t.release_rx(held[1]) == Status::failed &&
               t.last_error().find("not held") != std::string::npos,
           "released twice: " + t.last_error());
    Completion forged = held[2];
    forged.buf = static_cast<std::byte*>(forged.buf) + 8;
    expect(t.release_rx(forged) == Status::failed &&
               t.last_error().find("outside") != std::string::npos,
           "forged buffer: " + t.last_error());
    forged = held[2];
    forged.peer = 5;
    expect(t.release_rx(forged) == Status::failed, "foreign peer given back");
    boot.barrier();  // B
    boot.barrier();  // C: the sender saw the ring still full
    for (std::size_t i = kRing; i-- > 0;)
      if (i != 1) expect(t.release_rx(held[i]) == Status::ok, t.last_error());
    boot.barrier();  // C2
    boot.barrier();  // D: one message of 8 bytes, then one of two slots
    expect(t.poll_rx_in_place(c) == 1 && c[0].length == 8, "the small message first");
    expect(
        t.poll_rx({c + 1, 15}) == -1 && t.last_error().find("held in place") != std::string::npos,
        "poll_rx over a held message: " + t.last_error());
    expect(t.release_rx(c[0]) == Status::ok, t.last_error());
    expect(t.poll_rx_in_place(c) == -1 &&
               t.last_error().find("in-place receive limit") != std::string::npos,
           "a message above one slot: " + t.last_error());
    // Posted receives take it, copied; with receives posted, nothing is read in place.
    std::vector<std::byte> buf(2 * local::kChunk);
    expect(t.post_recv(0, buf.data(), buf.size(), nullptr, 1) == Status::ok, t.last_error());
    expect(t.post_recv(0, buf.data(), buf.size(), nullptr, 2) == Status::ok, t.last_error());
    Completion r = wait_one(t, Cq::rx);
    expect(r.context == 1 && r.length == big.size() && buf[local::kChunk] == std::byte{7},
           "the large message through a posted receive");
    boot.barrier();  // E
    boot.barrier();  // F: one more message
    expect(t.poll_rx_in_place(c) == -1 && t.last_error().find("posted") != std::string::npos,
           "in-place read with receives posted: " + t.last_error());
    r = wait_one(t, Cq::rx);
    expect(r.context == 2 && r.length == 8, "the last message");
  });
  EXPECT_EQ(err, "");
}

TEST(LocalTransport, OneSidedOperations) {
  auto err = run_pair([&](int rank, Transport& t, Bootstrap& boot) {
    auto mr = t.allocate(4096, kAllAccess);
    RemoteMemory peer = exchange(t, boot, *mr);
    expect(peer.length == 4096, "imported length");
    if (rank == 0) {
      std::array<std::byte, 256> src;
      for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i);
      expect(t.post_write(1, src.data(), 256, nullptr, peer, 512, 5, kSignal) == Status::ok,
             t.last_error());
      Completion c = wait_one(t, Cq::tx);
      expect(c.kind == CompletionKind::write && c.context == 5, "write completion");
      expect(t.post_write(1, src.data(), 16, nullptr, peer, 1024, 0, 0, 0xabcdef) == Status::ok,
             t.last_error());
      std::array<std::byte, 256> back{};
      expect(t.post_read(1, back.data(), 256, nullptr, peer, 512, 6, kSignal) == Status::ok,
             t.last_error());
      c = wait_one(t, Cq::tx);
      expect(c.kind == CompletionKind::read && c.context == 6 && back == src, "read back");
      std::uint64_t old = 99;
      expect(t.post_atomic(1, AtomicOp::fetch_add, 5, 0, &old, nullptr, peer, 2048, 8, 0) ==
                 Status::ok,
             t.last_error());
      c = wait_one(t, Cq::tx);
      expect(c.kind == CompletionKind::atomic && c.context == 8 && old == 0, "fetch_add");
      expect(t.post_atomic(1, AtomicOp::compare_swap, 42, 5, &old, nullptr, peer, 2048, 9, 0) ==
                 Status::ok,
             t.last_error());
      wait_one(t, Cq::tx);
      expect(old == 5, "compare_swap result");
      expect(t.post_atomic(1, AtomicOp::compare_swap, 1, 5, &old, nullptr, peer, 2048, 9, 0) ==
                 Status::ok,
             t.last_error());
      wait_one(t, Cq::tx);
      expect(old == 42, "failed compare_swap returns the current value");
      // Refusals: out of range, unaligned atomics, keys not imported from this peer.
      expect(t.post_write(1, src.data(), 2, nullptr, peer, 4095, 0, 0) == Status::failed,
             "write past the end accepted");
      expect(t.last_error().find("outside") != std::string::npos, t.last_error());
      expect(
          t.post_read(1, back.data(), 1, nullptr, peer, ~std::uint64_t{0}, 0, 0) == Status::failed,
          "read at a huge offset accepted");
      expect(t.post_atomic(1, AtomicOp::fetch_add, 1, 0, &old, nullptr, peer, 4, 0, 0) ==
                 Status::failed,
             "unaligned atomic accepted");
      RemoteMemory forged = peer;
      forged.length = 1u << 30;
      expect(t.post_write(1, src.data(), 8, nullptr, forged, 1u << 20, 0, 0) == Status::failed,
             "forged length accepted");
      forged = peer;
      forged.key = 77;
      expect(t.post_write(1, src.data(), 8, nullptr, forged, 0, 0, 0) == Status::failed,
             "forged key accepted");
      boot.barrier();
    } else {
      Completion c = wait_one(t, Cq::rx);
      expect(c.kind == CompletionKind::remote_write && c.has_data && c.data == 0xabcdef &&
                 c.length == 16,
             "writedata notice");
      boot.barrier();
      for (std::size_t i = 0; i < 256; ++i)
        expect(mr->data()[512 + i] == static_cast<std::byte>(i), "written byte");
      std::uint64_t word;
      std::memcpy(&word, mr->data() + 2048, 8);
      expect(word == 42, "atomic result in memory");
    }
  });
  EXPECT_EQ(err, "");
}

constexpr const char* kDemoteVar = "FABFLOW_LOCAL_DEMOTE";

TEST(LocalTransport, DemotionFollowsTheCpuAndTheSwitch) {
  TransportOptions o;
  o.provider = "local";
  const bool cpu = cpu_has_cldemote();
  launcher_test::ScopedEnv env;
  env.unset(kDemoteVar);
  EXPECT_EQ(probe_transport(o).stores_demoted, cpu);
  env.set(kDemoteVar, "1");
  EXPECT_EQ(probe_transport(o).stores_demoted, cpu);
  env.set(kDemoteVar, "0");
  EXPECT_FALSE(probe_transport(o).stores_demoted);
  EXPECT_FALSE(open_transport(o)->caps().stores_demoted);
  for (const char* bad : {"", "yes", "2", "1 "}) {
    env.set(kDemoteVar, bad);
    try {
      open_transport(o);
      ADD_FAILURE() << "FABFLOW_LOCAL_DEMOTE='" << bad << "' accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("FABFLOW_LOCAL_DEMOTE must be 0 or 1"),
                std::string::npos)
          << e.what();
    }
  }
}

// Demotion is a hint: with it on and off, one-slot messages and short writes at every offset
// within a line arrive intact (and the lines it names stay inside the peer's mapping: a write
// that ends at the region's last byte, a message in the ring's last slot).
class LocalDemotion : public ::testing::TestWithParam<const char*> {};

TEST_P(LocalDemotion, MessagesAndWritesArriveIntact) {
  launcher_test::ScopedEnv env;
  env.set(kDemoteVar, GetParam());
  constexpr std::size_t kRegion = 4096;
  const std::array<std::size_t, 7> sizes{1, 8, 63, 64, 65, 200, local::kChunk};
  auto err = run_pair([&](int rank, Transport& t, Bootstrap& boot) {
    expect(t.caps().stores_demoted == (GetParam()[0] == '1' && cpu_has_cldemote()), "capability");
    auto mr = t.allocate(std::max(kRegion, local::kChunk), kAllAccess);
    RemoteMemory peer = exchange(t, boot, *mr);
    auto byte_of = [](std::size_t i, std::size_t salt) {
      return static_cast<std::byte>((i * 7 + salt) & 0xff);
    };
    // Writes: every size at offsets 0..8 and at the region's end, checked after a barrier.
    if (rank == 0) {
      std::vector<std::byte> src(kRegion);
      for (std::size_t i = 0; i < src.size(); ++i) src[i] = byte_of(i, 3);
      for (std::size_t len : {std::size_t{8}, std::size_t{64}, std::size_t{100}, kDemoteMax})
        for (std::size_t off : {std::size_t{0}, std::size_t{4}, std::size_t{8}, kRegion - len})
          expect(t.post_write(1, src.data() + off, len, nullptr, peer, off, 0, 0) == Status::ok,
                 t.last_error());
      // ... and one with data: its notice slot is demoted too.
      expect(
          t.post_write(1, src.data() + 1024, 64, nullptr, peer, 1024, 0, 0, 0x5eed) == Status::ok,
          t.last_error());
    }
    boot.barrier();
    if (rank == 1) {
      for (std::size_t i = 0; i < kRegion; ++i)
        if (i < kDemoteMax + 8 || i >= kRegion - kDemoteMax || (i >= 1024 && i < 1088))
          expect(mr->data()[i] == byte_of(i, 3), "written byte " + std::to_string(i));
      Completion c = wait_one(t, Cq::rx);
      expect(c.kind == CompletionKind::remote_write && c.has_data && c.data == 0x5eed &&
                 c.length == 64,
             "writedata notice");
    }
    // Messages: enough to wrap the ring, so that some land in its last slot.
    const std::size_t rounds = local::kMsgSlots / sizes.size() + 2;
    if (rank == 0) {
      std::vector<std::byte> src(local::kChunk);
      for (std::size_t k = 0; k < rounds * sizes.size(); ++k) {
        for (std::size_t i = 0; i < sizes[k % sizes.size()]; ++i) src[i] = byte_of(i, k);
        Status s;
        while ((s = t.post_send(1, src.data(), sizes[k % sizes.size()], nullptr, k, 0)) ==
               Status::again) {
        }
        expect(s == Status::ok, t.last_error());
        boot.barrier();  // one at a time: the receive buffer is reused
      }
    } else {
      for (std::size_t k = 0; k < rounds * sizes.size(); ++k) {
        expect(t.post_recv(0, mr->data(), local::kChunk, nullptr, k) == Status::ok, t.last_error());
        Completion c = wait_one(t, Cq::rx);
        expect(c.context == k && c.length == sizes[k % sizes.size()],
               "message " + std::to_string(k));
        for (std::size_t i = 0; i < c.length; ++i)
          expect(mr->data()[i] == byte_of(i, k),
                 "message " + std::to_string(k) + " byte " + std::to_string(i));
        boot.barrier();
      }
    }
  });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Switch, LocalDemotion, ::testing::Values("0", "1"),
                         [](const auto& info) { return std::string("demote") + info.param; });

TEST(LocalTransport, MalformedKeysAreRejected) {
  auto err = run_pair([&](int rank, Transport& t, Bootstrap& boot) {
    auto mr = t.allocate(100, kAllAccess);
    auto keys = boot.allgather(t.export_key(*mr));
    const int peer = 1 - rank;
    const auto& good = keys[static_cast<std::size_t>(peer)];
    auto rejects = [&](std::vector<std::byte> blob, int from, const char* what) {
      try {
        t.import_key(from, blob);
      } catch (const PeerError&) {
        return;
      }
      throw Error(std::string("accepted a key with ") + what);
    };
    rejects({}, peer, "no bytes");
    rejects(std::vector<std::byte>(good.begin(), good.end() - 1), peer, "a short blob");
    auto longer = good;
    longer.push_back(std::byte{0});
    rejects(longer, peer, "a long blob");
    auto m = good;
    m[0] = std::byte{0};
    rejects(m, peer, "a bad magic");
    m = good;
    m[4] = std::byte{9};
    rejects(m, peer, "a bad version");
    rejects(good, rank, "the importer's own rank");
    rejects(good, 5, "a rank out of range");
    m = good;
    m[8] = static_cast<std::byte>(rank);
    rejects(m, peer, "another owner");
    m = good;
    std::memset(m.data() + 16, 0, 8);
    rejects(m, peer, "region id 0");
    m = good;
    std::memset(m.data() + 24, 0xff, 8);
    rejects(m, peer, "a huge length");
    m = good;
    std::uint64_t bigger = 8192;  // beyond the 4096-byte segment that backs 100 bytes
    std::memcpy(m.data() + 24, &bigger, 8);
    rejects(m, peer, "a length beyond its segment");
    RemoteMemory r = t.import_key(peer, good);
    expect(r.length == 100, "good key after bad ones");
    TransportOptions o;
    o.provider = "local";
    auto other = open_transport(o);
    auto foreign = other->allocate(64, kAllAccess);
    std::array<std::byte, 8> plain{};
    auto local_only = t.register_memory(plain.data(), plain.size(), kLocalRead | kLocalWrite);
    for (const MemoryRegion* m : {foreign.get(), local_only.get()}) {
      try {
        t.export_key(*m);
        throw Error("exported memory this transport did not allocate");
      } catch (const UsageError&) {
      }
    }
    try {
      std::array<std::byte, 8> plain{};
      t.register_memory(plain.data(), plain.size(), kRemoteWrite);
      throw Error("register_memory of remote-accessible user memory accepted");
    } catch (const UsageError& e) {
      expect(std::string(e.what()).find("allocate") != std::string::npos, e.what());
    }
  });
  EXPECT_EQ(err, "");
}

TEST(LocalTransport, CorruptedRingIndexFailsThePeer) {
  auto err = run_pair([&](int rank, Transport& t, Bootstrap& boot) {
    auto& lt = static_cast<local::LocalTransport&>(t);
    boot.barrier();
    if (rank == 1) {
      // Scribble on the tail of the notice ring rank 0 produces into (we own the segment).
      lt.test_corrupt_inbound_tail(0, ~std::uint64_t{0} / 2);
      Completion c[1];
      expect(t.poll_rx(c) == -1, "corrupt ring index accepted");
      expect(t.last_error().find("corrupted") != std::string::npos, t.last_error());
      std::byte b{};
      expect(t.post_send(0, &b, 1, nullptr, 0, 0) == Status::failed, "post to broken peer");
    }
    boot.barrier();
  });
  EXPECT_EQ(err, "");
}

TEST(LocalTransport, CorruptedMessageHeaderFailsThePeer) {
  for (const auto& [total, chunks] : std::vector<std::pair<std::uint32_t, std::uint32_t>>{
           {100, 7}, {(1u << 20) + 1, 257}, {0, 0}, {5000, 1}}) {
    auto err = run_pair([&](int rank, Transport& t, Bootstrap& boot) {
      auto& lt = static_cast<local::LocalTransport&>(t);
      std::vector<std::byte> buf(2 << 20);
      if (rank == 1) expect(t.post_recv(0, buf.data(), buf.size(), nullptr, 1) == Status::ok, "");
      boot.barrier();
      if (rank == 1) {
        // A published header whose chunk count does not fit its length (or is out of range).
        lt.test_corrupt_inbound_message(0, total, chunks);
        Completion c[1];
        expect(t.poll_rx(c) == -1, "corrupt message header accepted");
        expect(t.last_error().find("corrupted its message ring") != std::string::npos,
               t.last_error());
      }
      boot.barrier();
    });
    EXPECT_EQ(err, "") << total << " " << chunks;
  }
}

TEST(LocalTransport, PeerExitIsReportedWithinTwoSeconds) {
  auto boots = make_thread_bootstraps(2);
  TransportOptions o;
  o.provider = "local";
  std::string error;
  double seconds = -1;
  std::thread survivor([&] {
    try {
      auto t = open_transport(o);
      t->connect(*boots[0]);
      boots[0]->barrier();
      boots[0]->barrier();  // the peer has closed its transport
      auto start = std::chrono::steady_clock::now();
      Completion c[1];
      while (std::chrono::steady_clock::now() - start < 5s) {
        if (t->poll_rx(c) < 0) break;
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      error = t->last_error();
      std::byte b{};
      if (t->post_send(1, &b, 1, nullptr, 0, 0) != Status::failed) error += " (post accepted)";
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  std::thread leaver([&] {
    try {
      auto t = open_transport(o);
      t->connect(*boots[1]);
      boots[1]->barrier();
      t.reset();
      boots[1]->barrier();
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  survivor.join();
  leaver.join();
  EXPECT_EQ(error, "local: rank 1 vanished");
  EXPECT_GE(seconds, 0);
  EXPECT_LT(seconds, 2.0);
}

// Concurrent: a stream of sends and write-with-data notices, ring wrap-around and back-pressure.
TEST(LocalConcurrent, StreamOfSendsAndNotices) {
  constexpr std::uint64_t kCount = 20000;
  auto err = run_pair([&](int rank, Transport& t, Bootstrap& boot) {
    auto mr = t.allocate(8192, kAllAccess);
    RemoteMemory peer = exchange(t, boot, *mr);
    Completion c[16];
    if (rank == 0) {
      std::uint64_t posted = 0;
      std::array<std::byte, 200> msg{};
      while (posted < 2 * kCount) {
        Status s;
        if (posted % 2 == 0) {
          std::uint64_t v = posted / 2;
          std::memcpy(msg.data(), &v, 8);
          std::memcpy(msg.data() + 192, &v, 8);
          s = t.post_send(1, msg.data(), 200, nullptr, 0, kInject);
        } else {
          s = t.post_write(1, msg.data(), 64, nullptr, peer, 0, 0, 0, posted / 2);
        }
        if (s == Status::ok) ++posted;
        expect(s != Status::failed, t.last_error());
        expect(t.poll_tx(c) >= 0, t.last_error());
      }
    } else {
      std::uint64_t sends = 0, notices = 0, posted = 0;
      std::array<std::byte, 64 * 200> bufs{};
      auto deadline = std::chrono::steady_clock::now() + 20s;
      while (sends < kCount || notices < kCount) {
        while (posted < kCount && posted - sends < 64) {
          std::byte* b = bufs.data() + (posted % 64) * 200;
          expect(t.post_recv(0, b, 200, nullptr, posted) == Status::ok, "post_recv");
          ++posted;
        }
        int n = t.poll_rx(c);
        expect(n >= 0, t.last_error());
        for (int i = 0; i < n; ++i) {
          if (c[i].kind == CompletionKind::recv) {
            std::uint64_t head, tail;
            const std::byte* b = bufs.data() + (c[i].context % 64) * 200;
            std::memcpy(&head, b, 8);
            std::memcpy(&tail, b + 192, 8);
            expect(c[i].context == sends && head == sends && tail == sends,
                   "send " + std::to_string(sends) + " out of order");
            ++sends;
          } else {
            expect(c[i].has_data && c[i].data == notices, "notice out of order");
            ++notices;
          }
        }
        expect(std::chrono::steady_clock::now() < deadline, "stream stalled");
      }
    }
  });
  EXPECT_EQ(err, "");
}

// Concurrent: payload written with post_write, then a flag word; the reader acquires the flag
// with an atomic load and must then see the payload (the documented release/acquire pairing).
TEST(LocalConcurrent, FlagAfterPayloadIsOrdered) {
  constexpr std::uint64_t kRounds = 500;
  auto err = run_pair([&](int rank, Transport& t, Bootstrap& boot) {
    auto mr = t.allocate(4096, kAllAccess);
    RemoteMemory peer = exchange(t, boot, *mr);
    if (rank == 0) {
      std::array<std::uint64_t, 32> payload;
      std::uint64_t old;
      for (std::uint64_t r = 1; r <= kRounds; ++r) {
        payload.fill(r);
        expect(
            t.post_write(1, payload.data(), sizeof payload, nullptr, peer, 64, 0, 0) == Status::ok,
            t.last_error());
        expect(
            t.post_atomic(1, AtomicOp::fetch_add, 1, 0, &old, nullptr, peer, 0, 0, 0) == Status::ok,
            t.last_error());
        wait_one(t, Cq::tx);
        // Wait until the reader acknowledged round r (it bumps word 8 of our region).
        std::atomic_ref<std::uint64_t> ack(*reinterpret_cast<std::uint64_t*>(mr->data() + 8));
        auto deadline = std::chrono::steady_clock::now() + 5s;
        while (ack.load(std::memory_order_acquire) < r) {
          expect(std::chrono::steady_clock::now() < deadline, "no acknowledgement");
          std::this_thread::yield();
        }
      }
    } else {
      std::atomic_ref<std::uint64_t> flag(*reinterpret_cast<std::uint64_t*>(mr->data()));
      std::uint64_t old;
      for (std::uint64_t r = 1; r <= kRounds; ++r) {
        auto deadline = std::chrono::steady_clock::now() + 5s;
        while (flag.load(std::memory_order_acquire) < r) {
          expect(std::chrono::steady_clock::now() < deadline, "no flag");
          std::this_thread::yield();
        }
        std::array<std::uint64_t, 32> seen;
        std::memcpy(seen.data(), mr->data() + 64, sizeof seen);
        for (std::uint64_t v : seen) expect(v == r, "payload not visible after the flag");
        expect(
            t.post_atomic(0, AtomicOp::fetch_add, 1, 0, &old, nullptr, peer, 8, 0, 0) == Status::ok,
            t.last_error());
        wait_one(t, Cq::tx);
      }
    }
  });
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace fabflow::local_transport_test
