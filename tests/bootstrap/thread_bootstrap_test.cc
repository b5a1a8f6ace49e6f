// make_thread_bootstraps: the TCP bootstrap's semantics for n threads of one process.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

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

TEST(BootstrapThread, SingleRank) {
  auto ranks = make_thread_bootstraps(1);
  const auto all = ranks[0]->allgather(blob_of(0, 3));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], blob_of(0, 3));
  ranks[0]->barrier();
}

}  // namespace
}  // namespace fabflow
