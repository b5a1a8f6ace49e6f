// The transport contract, one suite over every transport: shm rdm, tcp msg, tcp;ofi_rxm rdm,
// local, and the fault wrapper as a pass-through (over shm). Two threads of one process, each
// with its own transport joined by in-process bootstraps. What every transport must do: sends
// matched to receives in order with their contexts and payloads; write, read and write with
// remote data; atomics, or a clear refusal at open; malformed keys refused; access outside an
// imported region refused locally; waits that time out and wake; a peer killed mid-run never
// hangs or crashes the survivor (two forked processes). What only one transport does (the local
// transport's corrupted rings, libfabric's key layout and provider selection) is tested beside
// it.
#include <fabflow/bootstrap.h>
#include <fabflow/fault.h>
#include <fabflow/transport.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "support/forked.h"
#include "support/ranks.h"

// A namespace of its own: the test files are compiled together in unity batches.
namespace fabflow::contract_test {
namespace {

using namespace std::chrono_literals;
using testing::Cq;
using testing::wait_one;

struct Target {
  const char* name;  // the test name's suffix
  const char* provider;
  EndpointType endpoint;
  bool fault_wrapper;  // wrapped in make_fault_transport with an empty plan
  // Whether the survivor of a killed peer is told within 3 s (an error completion or a refused
  // post naming the failure). libfabric 1.17's shm keeps no liveness for its peers, and
  // tcp;ofi_rxm holds a send to a vanished peer while it tries to reconnect: neither reports
  // anything, so above the transport the bootstrap and the launcher notice a dead rank.
  bool notices_peer_exit;
};

std::string label(const ::testing::TestParamInfo<Target>& info) { return info.param.name; }

// Runs `body(rank, transport, boot)` on two threads over `target`; returns the failures.
std::string run_pair(const Target& target, TransportOptions o,
                     const std::function<void(int, Transport&, Bootstrap&)>& body) {
  o.provider = target.provider;
  o.endpoint = target.endpoint;
  testing::WrapTransport wrap;
  if (target.fault_wrapper)
    wrap = [](std::unique_ptr<Transport> t) {
      return make_fault_transport(std::move(t), FaultPlan{});
    };
  return testing::run_ranks(2, o, body, wrap);
}

void expect(bool ok, const std::string& what) {
  if (!ok) throw Error(what);
}

// Posts until the transport takes it: `again` (an rdm endpoint still connecting, a full queue)
// is retried while driving progress, for at most 5 s.
template <class Post>
void post_ok(Transport& t, Post post) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  Status s;
  while ((s = post()) == Status::again) {
    t.progress();
    if (std::chrono::steady_clock::now() > deadline) throw Error("post still busy after 5 s");
  }
  if (s != Status::ok) throw Error(t.last_error());
}

// Registers `bytes` of fresh memory and exchanges keys; returns the region and the peer's.
struct Exchanged {
  std::unique_ptr<MemoryRegion> mr;
  RemoteMemory peer;
};
Exchanged exchange(Transport& t, Bootstrap& boot, std::size_t bytes) {
  Exchanged x;
  x.mr = t.allocate(bytes, kAllAccess);
  auto keys = boot.allgather(t.export_key(*x.mr));
  const int peer = 1 - boot.rank();
  x.peer = t.import_key(peer, keys[static_cast<std::size_t>(peer)]);
  expect(x.peer.length >= bytes, "imported a region shorter than the peer's");
  return x;
}

TransportOptions with_ops(std::vector<Op> ops) {
  TransportOptions o;
  o.ops = std::move(ops);
  return o;
}

class TransportContract : public ::testing::TestWithParam<Target> {};

TEST_P(TransportContract, SendsMatchReceivesInOrderWithContextsAndPayloads) {
  EXPECT_EQ(
      run_pair(GetParam(), with_ops({Op::send}),
               [](int rank, Transport& t, Bootstrap& boot) {
                 auto mr = t.allocate(4096, kAllAccess);
                 std::byte* buf = mr->data();
                 if (rank == 1) {
                   for (int i = 0; i < 3; ++i)
                     post_ok(t, [&] {
                       return t.post_recv(0, buf + i * 1024, 1024, mr->desc(), 100 + i);
                     });
                 }
                 boot.barrier([&] { t.progress(); });
                 if (rank == 0) {
                   for (int i = 0; i < 3; ++i) {
                     std::memset(buf, 'a' + i, 1000);
                     post_ok(t, [&] { return t.post_send(1, buf, 1000, mr->desc(), 7, kSignal); });
                     const Completion c = wait_one(t, Cq::tx);
                     expect(c.context == 7 && c.kind == CompletionKind::send,
                            "bad send completion");
                   }
                   return;
                 }
                 for (int i = 0; i < 3; ++i) {
                   const Completion c = wait_one(t, Cq::rx);
                   expect(c.kind == CompletionKind::recv && c.length == 1000 &&
                              c.context == static_cast<std::uint64_t>(100 + i),
                          "receive completions out of order or malformed");
                   for (int k = 0; k < 1000; ++k)
                     expect(buf[i * 1024 + k] == std::byte('a' + i), "payload corrupted");
                 }
               }),
      "");
}

// A list of receives posted in one call (FI_MORE on all but the last) takes the messages in
// order, each into its own buffer.
TEST_P(TransportContract, AListOfReceivesTakesTheMessagesInOrder) {
  EXPECT_EQ(
      run_pair(GetParam(), with_ops({Op::send}),
               [](int rank, Transport& t, Bootstrap& boot) {
                 auto mr = t.allocate(8 * 256, kAllAccess);
                 std::byte* buf = mr->data();
                 if (rank == 1) {
                   std::array<void*, 8> bufs;
                   for (std::size_t i = 0; i < bufs.size(); ++i) bufs[i] = buf + i * 256;
                   std::size_t posted = 0;
                   const auto deadline = std::chrono::steady_clock::now() + 5s;
                   while (posted < bufs.size()) {
                     const int n =
                         t.post_recvs(0, std::span(bufs).subspan(posted), 256, mr->desc(), 40);
                     expect(n >= 0, t.last_error());
                     posted += static_cast<std::size_t>(n);
                     t.progress();
                     expect(std::chrono::steady_clock::now() < deadline,
                            "receive list not taken in 5 s");
                   }
                 }
                 boot.barrier([&] { t.progress(); });
                 if (rank == 0) {
                   for (int i = 0; i < 8; ++i) {
                     std::memset(buf, 'a' + i, 200);
                     post_ok(t, [&] { return t.post_send(1, buf, 200, mr->desc(), 7, kSignal); });
                     wait_one(t, Cq::tx);
                   }
                   return;
                 }
                 for (int i = 0; i < 8; ++i) {
                   const Completion c = wait_one(t, Cq::rx);
                   expect(c.kind == CompletionKind::recv && c.length == 200 && c.context == 40,
                          "list receive completion malformed");
                   for (int k = 0; k < 200; ++k)
                     expect(buf[i * 256 + k] == std::byte('a' + i), "list payload out of order");
                 }
               }),
      "");
}

// Multi-receive buffers where the transport has them: messages land one after another, each
// completion names where, and the buffer is released once less than min_free bytes remain.
// Elsewhere the capability is off and the post fails.
TEST_P(TransportContract, MultiReceiveBuffersOrTheCapabilityIsOff) {
  TransportOptions o = with_ops({Op::send});
  o.multi_recv = true;
  bool has_multi = false;
  try {
    TransportOptions p = o;
    p.provider = GetParam().provider;
    p.endpoint = GetParam().endpoint;
    has_multi = probe_transport(p).multi_recv;
  } catch (const UsageError&) {
    has_multi = false;
  }
  if (!has_multi) {
    o.multi_recv = false;
    EXPECT_EQ(run_pair(GetParam(), o,
                       [](int, Transport& t, Bootstrap&) {
                         auto mr = t.allocate(4096, kAllAccess);
                         expect(!t.caps().multi_recv, "multi_recv set without asking");
                         expect(t.post_recv_multi(0, mr->data(), 4096, mr->desc(), 100, 1) ==
                                    Status::failed,
                                "a multi-receive post accepted without the capability");
                       }),
              "");
    return;
  }
  EXPECT_EQ(
      run_pair(GetParam(), o,
               [](int rank, Transport& t, Bootstrap& boot) {
                 expect(t.caps().multi_recv, "multi_recv asked for and not reported");
                 auto mr = t.allocate(4096, kAllAccess);
                 std::byte* buf = mr->data();
                 // Room for exactly 5 messages of 100 bytes: the 5th releases it.
                 if (rank == 1)
                   post_ok(t, [&] { return t.post_recv_multi(0, buf, 500, mr->desc(), 100, 9); });
                 boot.barrier([&] { t.progress(); });
                 if (rank == 0) {
                   for (int i = 0; i < 5; ++i) {
                     std::memset(buf, 'k' + i, 100);
                     post_ok(t, [&] { return t.post_send(1, buf, 100, mr->desc(), 7, kSignal); });
                     wait_one(t, Cq::tx);
                   }
                   return;
                 }
                 int messages = 0;
                 bool released = false;
                 std::byte* last = nullptr;
                 while (!released || messages < 5) {
                   const Completion c = wait_one(t, Cq::rx);
                   expect(c.kind == CompletionKind::recv && c.context == 9,
                          "multi-receive completion malformed");
                   released = released || c.released;
                   if (c.buf == nullptr) continue;  // a release alone
                   auto* at = static_cast<std::byte*>(c.buf);
                   expect(c.length == 100 && at >= buf && at + 100 <= buf + 500 &&
                              (last == nullptr || at > last),
                          "a message outside its multi-receive buffer");
                   for (int k = 0; k < 100; ++k)
                     expect(at[k] == std::byte('k' + messages), "multi-receive payload wrong");
                   last = at;
                   ++messages;
                 }
                 expect(messages == 5, "multi-receive buffer took the wrong number of messages");
               }),
      "");
}

TEST_P(TransportContract, WriteReadAndWriteWithData) {
  EXPECT_EQ(
      run_pair(GetParam(), with_ops({Op::write, Op::read, Op::writedata}),
               [](int rank, Transport& t, Bootstrap& boot) {
                 auto [mr, peer] = exchange(t, boot, 8192);
                 std::byte* buf = mr->data();
                 if (t.caps().rx_cq_data_consumes_recv && rank == 1)
                   post_ok(t, [&] { return t.post_recv(0, buf, 0, mr->desc(), 1); });
                 boot.barrier([&] { t.progress(); });
                 if (rank == 0) {
                   for (std::size_t i = 0; i < 4096; ++i) buf[i] = std::byte(i * 7);
                   post_ok(t, [&] {
                     return t.post_write(1, buf, 4096, mr->desc(), peer, 4096, 1, kSignal);
                   });
                   expect(wait_one(t, Cq::tx).kind == CompletionKind::write, "write completion");
                   // Read it back into our upper half and compare.
                   post_ok(t, [&] {
                     return t.post_read(1, buf + 4096, 4096, mr->desc(), peer, 4096, 2, kSignal);
                   });
                   const Completion c = wait_one(t, Cq::tx);
                   expect(c.kind == CompletionKind::read && c.context == 2, "read completion");
                   expect(std::memcmp(buf, buf + 4096, 4096) == 0, "read back differs");
                   post_ok(t, [&] {
                     return t.post_write(1, buf, 64, mr->desc(), peer, 0, 4, kSignal, 0xabcdu);
                   });
                   wait_one(t, Cq::tx);
                   return;
                 }
                 const Completion c = wait_one(t, Cq::rx);
                 expect(c.has_data && c.data == 0xabcdu, "write with data lost its data");
                 expect(std::memcmp(buf, buf + 4096, 64) == 0, "write with data: payload differs");
               }),
      "");
}

TEST_P(TransportContract, AtomicsOrAClearRefusal) {
  TransportOptions o = with_ops({Op::fadd, Op::cswap});
  o.provider = GetParam().provider;
  o.endpoint = GetParam().endpoint;
  try {
    (void)probe_transport(o);
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("atomic"), std::string::npos) << e.what();
    return;
  }
  EXPECT_EQ(run_pair(GetParam(), o,
                     [](int rank, Transport& t, Bootstrap& boot) {
                       auto [mr, peer] = exchange(t, boot, 4096);
                       auto* words = reinterpret_cast<std::uint64_t*>(mr->data());
                       boot.barrier([&] { t.progress(); });
                       if (rank == 0) {
                         for (std::uint64_t i = 0; i < 10; ++i) {
                           post_ok(t, [&] {
                             return t.post_atomic(1, AtomicOp::fetch_add, 5, 0, &words[8],
                                                  mr->desc(), peer, 0, 1, kSignal);
                           });
                           wait_one(t, Cq::tx);
                           expect(words[8] == 5 * i,
                                  "fetch-add returned " + std::to_string(words[8]));
                         }
                         post_ok(t, [&] {
                           return t.post_atomic(1, AtomicOp::compare_swap, 99, 50, &words[8],
                                                mr->desc(), peer, 0, 2, kSignal);
                         });
                         wait_one(t, Cq::tx);
                         expect(words[8] == 50, "compare-swap returned the wrong old value");
                       }
                       boot.barrier([&] { t.progress(); });
                       if (rank == 1) expect(words[0] == 99, "compare-swap did not store");
                     }),
            "");
}

TEST_P(TransportContract, MalformedKeysAreRefused) {
  EXPECT_EQ(run_pair(GetParam(), with_ops({Op::write}),
                     [](int rank, Transport& t, Bootstrap&) {
                       if (rank != 0) return;
                       auto mr = t.allocate(64, kAllAccess);
                       const auto good = t.export_key(*mr);
                       auto refused = [&](int from, std::vector<std::byte> blob, const char* what) {
                         try {
                           t.import_key(from, blob);
                         } catch (const PeerError&) {
                           return;
                         }
                         throw Error(std::string("accepted a key with ") + what);
                       };
                       refused(1, {}, "no bytes");
                       refused(1, {good.begin(), good.begin() + good.size() / 2}, "half its bytes");
                       auto bad_magic = good;
                       bad_magic[0] ^= std::byte{0xff};
                       refused(1, bad_magic, "a bad magic");
                       auto longer = good;
                       longer.push_back(std::byte{1});
                       refused(1, longer, "trailing bytes");
                       refused(5, good, "a rank that does not exist");
                       refused(-1, good, "a negative rank");
                     }),
            "");
}

TEST_P(TransportContract, AccessOutsideTheImportedRegionIsRefusedLocally) {
  EXPECT_EQ(run_pair(GetParam(), with_ops({Op::write, Op::read}),
                     [](int rank, Transport& t, Bootstrap& boot) {
                       auto [mr, peer] = exchange(t, boot, 4096);
                       if (rank == 0) {
                         std::byte* buf = mr->data();
                         const std::uint64_t end = peer.length;
                         expect(t.post_write(1, buf, 16, mr->desc(), peer, end - 2, 3, kSignal) ==
                                    Status::failed,
                                "a write past the end was not refused");
                         expect(t.post_read(1, buf, 1, mr->desc(), peer, ~std::uint64_t{0}, 4,
                                            kSignal) == Status::failed,
                                "a read at an offset that wraps was not refused");
                         expect(!t.last_error().empty(), "a refusal without a reason");
                         // The transport is still usable after a refusal.
                         post_ok(t, [&] {
                           return t.post_write(1, buf, 16, mr->desc(), peer, end - 16, 5, kSignal);
                         });
                         expect(wait_one(t, Cq::tx).context == 5, "write after a refusal");
                       }
                     }),
            "");
}

TEST_P(TransportContract, WaitsTimeOutAndWake) {
  for (bool blocking : {false, true}) {
    TransportOptions o = with_ops({Op::send});
    o.blocking_waits = blocking;
    EXPECT_EQ(run_pair(GetParam(), o,
                       [](int rank, Transport& t, Bootstrap& boot) {
                         auto mr = t.allocate(256, kAllAccess);
                         Completion c[4];
                         if (rank == 1) {
                           post_ok(t,
                                   [&] { return t.post_recv(0, mr->data(), 256, mr->desc(), 9); });
                           const auto t0 = std::chrono::steady_clock::now();
                           const int n = t.wait_rx(c, 50ms);
                           expect(n == 0, "a wait returned a completion nobody sent");
                           expect(std::chrono::steady_clock::now() - t0 >= 45ms,
                                  "a wait returned before its timeout");
                         }
                         boot.barrier([&] { t.progress(); });
                         if (rank == 0) {
                           post_ok(t, [&] {
                             return t.post_send(1, mr->data(), 100, mr->desc(), 1, kSignal);
                           });
                           expect(t.wait_tx(c, 5s) == 1, "the send did not complete");
                           return;
                         }
                         const int n = t.wait_rx(c, 5s);
                         expect(n == 1 && c[0].context == 9 && c[0].length == 100,
                                "the wait missed the message");
                       }),
              "")
        << (blocking ? "blocking" : "polling");
  }
}

// Rank 1 is killed with SIGKILL (no goodbye) once both have exchanged a message. The survivor
// then sends to it and waits 3 s for completions: nothing may arrive that nobody sent, the
// process must neither crash nor hang, closing the transport must return, and a transport that
// notices the exit must say so (an error from a post or a poll).
TEST_P(TransportContract, PeerKilledMidRunNeverHangsTheSurvivor) {
  const Target target = GetParam();
  auto children = test::spawn_ranks(
      2, test::loopback(), [&](int rank, const test::ChildIo& io, const BootstrapConfig& config) {
        auto boot = make_tcp_bootstrap(config);
        TransportOptions o;
        o.provider = target.provider;
        o.endpoint = target.endpoint;
        o.same_host = true;
        auto t = open_transport(o);
        if (target.fault_wrapper) t = make_fault_transport(std::move(t), FaultPlan{});
        t->connect(*boot);
        auto mr = t->allocate(4096, kAllAccess);
        const int peer = 1 - rank;
        // One message each way: both endpoints know each other (rdm connects lazily).
        post_ok(*t, [&] { return t->post_recv(peer, mr->data(), 64, mr->desc(), 1); });
        boot->barrier([&] { t->progress(); });
        post_ok(*t, [&] { return t->post_send(peer, mr->data(), 64, mr->desc(), 2, kSignal); });
        wait_one(*t, Cq::tx);
        wait_one(*t, Cq::rx);
        boot->barrier([&] { t->progress(); });
        io.say("connected");
        if (rank == 1) {
          for (;;) t->progress();  // until killed
        }
        if (!io.wait_go(20s)) return 3;
        const auto start = std::chrono::steady_clock::now();
        std::string noticed;
        post_ok(*t, [&] { return t->post_recv(peer, mr->data(), 64, mr->desc(), 3); });
        auto* out = static_cast<std::byte*>(mr->data()) + 1024;
        Status s;
        while ((s = t->post_send(peer, out, 64, mr->desc(), 4, kSignal)) == Status::again &&
               std::chrono::steady_clock::now() - start < 3s)
          t->progress();
        if (s == Status::failed) noticed = "post: " + t->last_error();
        Completion c[4];
        while (std::chrono::steady_clock::now() - start < 3s) {
          const int tx = t->poll_tx(c);
          if (tx < 0 && noticed.empty()) noticed = "poll_tx: " + t->last_error();
          const int rx = t->poll_rx(c);
          if (rx < 0 && noticed.empty()) noticed = "poll_rx: " + t->last_error();
          if (rx > 0) io.say("received a message nobody sent");
        }
        io.say(noticed.empty() ? "not noticed" : "noticed " + noticed);
        mr.reset();
        t.reset();
        io.say("closed");
        return 0;
      });
  for (auto& child : children)
    ASSERT_EQ(child.next_line(30s), "connected") << child.finish() << child.output();
  children[1].kill(SIGKILL);
  EXPECT_EQ(children[1].finish(), 128 + SIGKILL);
  children[0].go();
  ASSERT_EQ(children[0].finish(30s), 0) << children[0].output();
  const std::string& out = children[0].output();
  EXPECT_EQ(out.find("nobody sent"), std::string::npos) << out;
  EXPECT_NE(out.find("closed\n"), std::string::npos) << out;
  if (target.notices_peer_exit)
    EXPECT_NE(out.find("noticed "), std::string::npos) << out;
  else
    EXPECT_NE(out.find("not noticed"), std::string::npos)
        << "this transport now notices a dead peer; mark it so: " << out;
}

INSTANTIATE_TEST_SUITE_P(
    Transports, TransportContract,
    ::testing::Values(Target{"shm_rdm", "shm", EndpointType::rdm, false, false},
                      Target{"tcp_msg", "tcp", EndpointType::msg, false, true},
                      Target{"tcp_rxm_rdm", "tcp;ofi_rxm", EndpointType::rdm, false, false},
                      Target{"local", "local", EndpointType::rdm, false, true},
                      Target{"fault_over_shm", "shm", EndpointType::rdm, true, false}),
    label);

}  // namespace
}  // namespace fabflow::contract_test
