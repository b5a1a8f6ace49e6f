// make_thread_bootstraps: the TCP bootstrap's semantics for n threads of one process.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "fabflow/bootstrap.h"
#include "fabflow/status.h"

namespace fabflow {
namespace {

using Blob = std::vector<std::byte>;

Blob blob_of(int rank, int round) {
  Blob b(static_cast<std::size_t>(rank * 10 + round));
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<std::byte>(rank ^ round ^ static_cast<int>(i));
  return b;
}

// Runs body(rank, bootstrap) on one thread per rank and joins them.
template <typename Body>
void run_threads(std::vector<std::unique_ptr<Bootstrap>>& ranks, Body body) {
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < ranks.size(); ++r)
    threads.emplace_back([&, r] { body(static_cast<int>(r), *ranks[r]); });
  for (auto& t : threads) t.join();
}

TEST(BootstrapThread, AllgatherAndBarrier) {
  auto ranks = make_thread_bootstraps(5);
  std::atomic<int> bad{0};
  run_threads(ranks, [&](int rank, Bootstrap& b) {
    if (b.rank() != rank || b.size() != 5 || b.local_address() != "127.0.0.1") ++bad;
    for (int round = 0; round < 20; ++round) {
      const auto all = b.allgather(blob_of(rank, round));
      for (int r = 0; r < 5; ++r) {
        if (all[r] != blob_of(r, round)) ++bad;
      }
      b.barrier();
      b.barrier([] {});
    }
    if (b.peer_failed()) ++bad;
  });
  EXPECT_EQ(bad.load(), 0);
}

TEST(BootstrapThread, AbortIsSeenByTheOthers) {
  auto ranks = make_thread_bootstraps(3);
  std::atomic<int> bad{0};
  run_threads(ranks, [&](int rank, Bootstrap& b) {
    b.barrier();
    if (rank == 1) {
      b.abort("out of memory");
      if (b.peer_failed()) ++bad;
      return;
    }
    try {
      b.barrier();
      ++bad;
    } catch (const PeerError& e) {
      if (e.rank() != 1 || std::string(e.what()) != "bootstrap: rank 1 aborted: out of memory")
        ++bad;
    }
    if (!b.peer_failed()) ++bad;
  });
  EXPECT_EQ(bad.load(), 0);
}

TEST(BootstrapThread, CallbackRunsWhileWaiting) {
  auto ranks = make_thread_bootstraps(2);
  std::atomic<bool> waiting{false};
  int calls = 0;
  run_threads(ranks, [&](int rank, Bootstrap& b) {
    if (rank == 0) {
      b.barrier([&] {
        ++calls;
        waiting = true;
      });
    } else {
      while (!waiting) std::this_thread::yield();
      b.barrier();
    }
  });
  EXPECT_GT(calls, 0);
}

TEST(BootstrapThread, DestroyedRankFailsTheWaiters) {
  auto ranks = make_thread_bootstraps(2);
  std::thread waiter([&] {
    try {
      ranks[0]->barrier();
      ADD_FAILURE() << "barrier completed without rank 1";
    } catch (const PeerError& e) {
      EXPECT_EQ(e.rank(), 1);
      EXPECT_EQ(std::string(e.what()), "bootstrap: rank 1 exited without entering the barrier");
    }
  });
  ranks[1].reset();
  waiter.join();
}

TEST(BootstrapThread, MismatchedCollectivesFail) {
  auto ranks = make_thread_bootstraps(2);
  std::atomic<int> failures{0};
  run_threads(ranks, [&](int rank, Bootstrap& b) {
    try {
      if (rank == 0) {
        b.barrier();
      } else {
        b.allgather(blob_of(rank, 0));
      }
    } catch (const PeerError&) {
      ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 2);
}

// allgather_value / allgather_values: typed gathers over allgather, indexed by rank.
TEST(BootstrapThread, TypedGathers) {
  struct Report {
    double seconds;
    std::uint64_t items;
  };
  auto ranks = make_thread_bootstraps(3);
  std::atomic<int> bad{0};
  run_threads(ranks, [&](int rank, Bootstrap& b) {
    const auto all = allgather_value(b, Report{rank * 1.5, 100u + rank}, "test: report");
    if (all.size() != 3) ++bad;
    for (int r = 0; r < 3 && all.size() == 3; ++r)
      if (all[r].seconds != r * 1.5 || all[r].items != 100u + r) ++bad;
    std::vector<std::uint32_t> mine(static_cast<std::size_t>(rank), 7u + rank);  // rank 0: none
    const auto arrays = allgather_values(b, std::span<const std::uint32_t>(mine), "test: array");
    for (int r = 0; r < 3; ++r)
      if (arrays[r] != std::vector<std::uint32_t>(static_cast<std::size_t>(r), 7u + r)) ++bad;
  });
  EXPECT_EQ(bad.load(), 0);
}

// A peer's blob of the wrong length is a PeerError naming what was gathered and the rank,
// never a value read out of bounds.
TEST(BootstrapThread, TypedGatherRefusesAMalformedPeer) {
  // Forwards to a thread bootstrap, but rank 1 contributes its blob cut short by `cut` bytes.
  class Cutting final : public Bootstrap {
   public:
    Cutting(Bootstrap& inner, std::size_t cut) : inner_(inner), cut_(cut) {}
    int rank() const override { return inner_.rank(); }
    int size() const override { return inner_.size(); }
    int local_rank() const override { return inner_.local_rank(); }
    std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> mine) override {
      return inner_.allgather(rank() == 1 ? mine.first(mine.size() - cut_) : mine);
    }
    void barrier(const std::function<void()>& w) override { inner_.barrier(w); }
    bool peer_failed() override { return inner_.peer_failed(); }
    void abort(const std::string& why) override { inner_.abort(why); }
    std::string local_address() const override { return inner_.local_address(); }

   private:
    Bootstrap& inner_;
    std::size_t cut_;
  };
  for (std::size_t cut : {1, 8}) {
    auto ranks = make_thread_bootstraps(2);
    std::vector<std::string> errors(2);
    std::vector<int> blamed(2, -1);
    run_threads(ranks, [&](int rank, Bootstrap& inner) {
      Cutting b(inner, cut);
      try {
        if (cut == 1)
          allgather_values(b, std::span<const std::uint64_t>(std::vector<std::uint64_t>{1, 2}),
                           "test: counters");
        else
          allgather_value(b, std::uint64_t{42}, "test: counter");
      } catch (const PeerError& e) {
        errors[rank] = e.what();
        blamed[rank] = e.rank();
      }
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(blamed[r], 1) << errors[r];
      EXPECT_NE(errors[r].find(cut == 1 ? "test: counters from rank 1 is malformed"
                                        : "test: counter from rank 1 is malformed"),
                std::string::npos)
          << errors[r];
    }
  }
}

TEST(BootstrapThread, SingleRank) {
  auto ranks = make_thread_bootstraps(1);
  const auto all = ranks[0]->allgather(blob_of(0, 3));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], blob_of(0, 3));
  ranks[0]->barrier();
}

}  // namespace
}  // namespace fabflow
