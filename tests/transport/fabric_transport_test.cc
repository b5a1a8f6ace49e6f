// The libfabric transport between two threads of one process (each with its own domain and
// endpoints, joined by in-process bootstraps): every operation on shm, tcp msg and tcp rdm.
#include <fabflow/bootstrap.h>
#include <fabflow/transport.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>

#include "support/ranks.h"

namespace fabflow {
namespace {

using testing::Cq;
using testing::wait_one;

struct Target {
  const char* provider;
  EndpointType endpoint;
};

std::string label(const Target& t) {
  std::string s = std::string(t.provider) + "_" + std::string(to_string(t.endpoint));
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

// Runs `body(rank, transport, boot)` on two threads; returns the first failure message.
std::string run_pair(const TransportOptions& opts,
                     const std::function<void(int, Transport&, Bootstrap&)>& body) {
  auto boots = make_thread_bootstraps(2);
  std::array<std::string, 2> errors;
  std::array<std::thread, 2> threads;
  for (int r = 0; r < 2; ++r) {
    threads[static_cast<std::size_t>(r)] = std::thread([&, r] {
      try {
        auto t = open_libfabric(opts);
        t->connect(*boots[static_cast<std::size_t>(r)]);
        body(r, *t, *boots[static_cast<std::size_t>(r)]);
        boots[static_cast<std::size_t>(r)]->barrier([&] { t->progress(); });
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = "rank " + std::to_string(r) + ": " + e.what();
        boots[static_cast<std::size_t>(r)]->abort(e.what());
      }
    });
  }
  for (auto& th : threads) th.join();
  return errors[0].empty() ? errors[1] : errors[0];
}

// Posts until the transport takes it: `again` (e.g. an rdm endpoint still connecting) is
// retried while driving progress, for at most 5 s.
template <class Post>
void expect_ok(Post post, Transport& t) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  Status s;
  while ((s = post()) == Status::again) {
    t.progress();
    if (std::chrono::steady_clock::now() > deadline) throw Error("post still busy after 5 s");
  }
  if (s != Status::ok) throw Error(t.last_error());
}

class FabricTransportTest : public ::testing::TestWithParam<Target> {
 protected:
  TransportOptions options(std::vector<Op> ops) const {
    TransportOptions o;
    o.provider = GetParam().provider;
    o.endpoint = GetParam().endpoint;
    o.ops = std::move(ops);
    return o;
  }
};

TEST_P(FabricTransportTest, SendRecvCarriesPayloadAndData) {
  std::string err = run_pair(options({Op::send}), [](int rank, Transport& t, Bootstrap& boot) {
    std::vector<std::byte> buf(4096);
    auto mr = t.register_memory(buf.data(), buf.size(), kAllAccess);
    if (rank == 1) {
      for (int i = 0; i < 3; ++i)
        expect_ok([&] { return t.post_recv(0, buf.data() + i * 1024, 1024, mr->desc(), 100 + i); },
                  t);
    }
    boot.barrier([&] { t.progress(); });
    if (rank == 0) {
      for (int i = 0; i < 3; ++i) {
        std::memset(buf.data(), 'a' + i, 1000);
        expect_ok([&] { return t.post_send(1, buf.data(), 1000, mr->desc(), 7, kSignal); }, t);
        Completion c = wait_one(t, Cq::tx);
        if (c.context != 7 || c.kind != CompletionKind::send) throw Error("bad send completion");
      }
    } else {
      for (int i = 0; i < 3; ++i) {
        Completion c = wait_one(t, Cq::rx);
        if (c.kind != CompletionKind::recv || c.length != 1000 ||
            c.context != static_cast<std::uint64_t>(100 + i))
          throw Error("bad recv completion");
        for (int k = 0; k < 1000; ++k)
          if (buf[static_cast<std::size_t>(i * 1024 + k)] != std::byte('a' + i))
            throw Error("payload corrupted");
      }
    }
  });
  EXPECT_EQ(err, "");
}

TEST_P(FabricTransportTest, WriteReadAndWritedata) {
  std::string err = run_pair(options({Op::write, Op::read, Op::writedata}), [](int rank,
                                                                               Transport& t,
                                                                               Bootstrap& boot) {
    std::vector<std::byte> buf(8192);
    auto mr = t.register_memory(buf.data(), buf.size(), kAllAccess);
    auto keys = boot.allgather(t.export_key(*mr));
    RemoteMemory peer = t.import_key(1 - rank, keys[static_cast<std::size_t>(1 - rank)]);
    if (t.caps().rx_cq_data_consumes_recv && rank == 1)
      expect_ok([&] { return t.post_recv(0, buf.data(), 0, mr->desc(), 1); }, t);
    boot.barrier([&] { t.progress(); });
    if (rank == 0) {
      for (std::size_t i = 0; i < 4096; ++i) buf[i] = std::byte(i * 7);
      expect_ok(
          [&] { return t.post_write(1, buf.data(), 4096, mr->desc(), peer, 4096, 1, kSignal); }, t);
      wait_one(t, Cq::tx);
      // Read it back into our upper half and compare.
      expect_ok(
          [&] {
            return t.post_read(1, buf.data() + 4096, 4096, mr->desc(), peer, 4096, 2, kSignal);
          },
          t);
      Completion c = wait_one(t, Cq::tx);
      if (c.kind != CompletionKind::read) throw Error("expected a read completion");
      if (std::memcmp(buf.data(), buf.data() + 4096, 4096) != 0)
        throw Error("read back differs from what was written");
      // An out-of-range write is refused locally, nothing is sent.
      if (t.post_write(1, buf.data(), 16, mr->desc(), peer, 8190, 3, kSignal) != Status::failed)
        throw Error("out-of-range write was not refused");
      expect_ok(
          [&] { return t.post_write(1, buf.data(), 64, mr->desc(), peer, 0, 4, kSignal, 0xabcdu); },
          t);
      wait_one(t, Cq::tx);
    } else {
      Completion c = wait_one(t, Cq::rx);
      if (!c.has_data || c.data != 0xabcdu) throw Error("writedata lost its data");
      if (std::memcmp(buf.data(), buf.data() + 4096, 64) != 0)
        throw Error("writedata payload differs");
    }
  });
  EXPECT_EQ(err, "");
}

TEST_P(FabricTransportTest, AtomicsOrClearRefusal) {
  TransportOptions o = options({Op::fadd, Op::cswap});
  Capabilities caps;
  try {
    caps = probe_libfabric(o);
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("atomics"), std::string::npos) << e.what();
    return;
  }
  std::string err = run_pair(o, [](int rank, Transport& t, Bootstrap& boot) {
    alignas(64) std::array<std::uint64_t, 8> words{};
    auto mr = t.register_memory(words.data(), sizeof words, kAllAccess);
    auto keys = boot.allgather(t.export_key(*mr));
    RemoteMemory peer = t.import_key(1 - rank, keys[static_cast<std::size_t>(1 - rank)]);
    boot.barrier([&] { t.progress(); });
    if (rank == 0) {
      for (std::uint64_t i = 0; i < 10; ++i) {
        expect_ok(
            [&] {
              return t.post_atomic(1, AtomicOp::fetch_add, 5, 0, &words[1], mr->desc(), peer, 0, 1,
                                   kSignal);
            },
            t);
        wait_one(t, Cq::tx);
        if (words[1] != 5 * i) throw Error("fetch-add returned " + std::to_string(words[1]));
      }
      expect_ok(
          [&] {
            return t.post_atomic(1, AtomicOp::compare_swap, 99, 50, &words[1], mr->desc(), peer, 0,
                                 2, kSignal);
          },
          t);
      wait_one(t, Cq::tx);
      if (words[1] != 50) throw Error("compare-swap returned the wrong old value");
    }
    boot.barrier([&] { t.progress(); });
    if (rank == 1 && words[0] != 99) throw Error("compare-swap did not store");
  });
  EXPECT_EQ(err, "");
}

TEST_P(FabricTransportTest, MalformedKeysAreRejected) {
  std::string err = run_pair(options({Op::write}), [](int rank, Transport& t, Bootstrap&) {
    if (rank != 0) return;
    std::vector<std::byte> buf(64);
    auto mr = t.register_memory(buf.data(), buf.size(), kAllAccess);
    auto good = t.export_key(*mr);
    auto expect_reject = [&](std::vector<std::byte> blob, const char* what) {
      try {
        t.import_key(1, blob);
      } catch (const PeerError&) {
        return;
      }
      throw Error(std::string("accepted a key with ") + what);
    };
    expect_reject({}, "no bytes");
    expect_reject(std::vector<std::byte>(good.begin(), good.begin() + 10), "a short blob");
    auto bad_magic = good;
    bad_magic[0] = std::byte{0};
    expect_reject(bad_magic, "a bad magic");
    auto huge = good;
    std::uint64_t len = ~0ull;
    std::memcpy(huge.data() + 16, &len, 8);
    expect_reject(huge, "a huge length");
    auto longer = good;
    longer.push_back(std::byte{1});
    expect_reject(longer, "trailing bytes");
    try {
      t.import_key(5, good);
      throw Error("accepted a key for a rank that does not exist");
    } catch (const PeerError&) {
    }
  });
  EXPECT_EQ(err, "");
}

TEST_P(FabricTransportTest, WaitsTimeOutAndWake) {
  for (bool blocking : {false, true}) {
    TransportOptions o = options({Op::send});
    o.blocking_waits = blocking;
    std::string err = run_pair(o, [](int rank, Transport& t, Bootstrap& boot) {
      std::vector<std::byte> buf(256);
      auto mr = t.register_memory(buf.data(), buf.size(), kAllAccess);
      Completion c[4];
      if (rank == 1) {
        expect_ok([&] { return t.post_recv(0, buf.data(), buf.size(), mr->desc(), 9); }, t);
        auto t0 = std::chrono::steady_clock::now();
        int n = t.wait_rx(c, std::chrono::milliseconds(50));
        auto waited = std::chrono::steady_clock::now() - t0;
        if (n != 0) throw Error("wait returned a completion nobody sent");
        if (waited < std::chrono::milliseconds(45)) throw Error("wait returned before its timeout");
      }
      boot.barrier([&] { t.progress(); });
      if (rank == 0) {
        expect_ok([&] { return t.post_send(1, buf.data(), 100, mr->desc(), 1, kSignal); }, t);
        if (t.wait_tx(c, std::chrono::seconds(5)) != 1) throw Error("send did not complete");
      } else {
        int n = t.wait_rx(c, std::chrono::seconds(5));
        if (n != 1 || c[0].context != 9 || c[0].length != 100)
          throw Error("wait missed the message");
      }
    });
    EXPECT_EQ(err, "") << (blocking ? "blocking" : "polling");
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, FabricTransportTest,
                         ::testing::Values(Target{"shm", EndpointType::rdm},
                                           Target{"tcp", EndpointType::msg},
                                           Target{"tcp", EndpointType::rdm}),
                         [](const auto& info) { return label(info.param); });

TEST(FabricSelect, UnknownProviderListsAvailable) {
  TransportOptions o;
  o.provider = "nosuchfabric";
  try {
    probe_libfabric(o);
    FAIL() << "unknown provider accepted";
  } catch (const UsageError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("unknown provider 'nosuchfabric'"), std::string::npos) << m;
    EXPECT_NE(m.find("shm"), std::string::npos) << m;
    EXPECT_NE(m.find("tcp"), std::string::npos) << m;
  }
}

TEST(FabricSelect, AtomicsOnTcpMsgRefusedWithReason) {
  TransportOptions o;
  o.provider = "tcp";
  o.endpoint = EndpointType::msg;
  o.ops = {Op::fadd};
  try {
    probe_libfabric(o);
    FAIL() << "atomics on tcp msg accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("tcp"), std::string::npos) << e.what();
  }
}

TEST(FabricSelect, ShmReportsInjectSizeAndManualProgress) {
  TransportOptions o;
  o.provider = "shm";
  o.ops = {Op::send, Op::write};
  Capabilities c = probe_libfabric(o);
  EXPECT_EQ(c.provider, "shm");
  EXPECT_EQ(c.endpoint, EndpointType::rdm);
  EXPECT_GT(c.inject_size, 0u);
  EXPECT_TRUE(c.data_progress_manual);
  EXPECT_TRUE(c.rma);
}

TEST(FabricSelect, DiscoverListsTcpAndShm) {
  auto all = discover_libfabric();
  bool tcp = false, shm = false;
  for (const auto& c : all) {
    tcp |= c.provider == "tcp";
    shm |= c.provider == "shm";
  }
  EXPECT_TRUE(tcp);
  EXPECT_TRUE(shm);
}

}  // namespace
}  // namespace fabflow
