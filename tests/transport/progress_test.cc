// The progress engine: a passive target whose only activity is its progress thread still
// receives one-sided writes and serves reads and atomics.
#include <fabflow/bootstrap.h>
#include <fabflow/progress.h>
#include <fabflow/transport.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <thread>

namespace fabflow {
namespace {

TEST(ProgressPolicy, ThreadOnlyWherePassiveAndManual) {
  Capabilities manual;
  manual.data_progress_manual = true;
  Capabilities hw;
  hw.data_progress_manual = false;
  EXPECT_TRUE(needs_progress_thread(ProgressMode::automatic, manual, true));
  EXPECT_FALSE(needs_progress_thread(ProgressMode::automatic, manual, false));
  EXPECT_FALSE(needs_progress_thread(ProgressMode::automatic, hw, true));
  EXPECT_TRUE(needs_progress_thread(ProgressMode::thread, hw, false));
  EXPECT_FALSE(needs_progress_thread(ProgressMode::inline_only, manual, true));
}

class ProgressEngineTest : public ::testing::TestWithParam<std::pair<const char*, EndpointType>> {};

// Rank 1 registers a buffer and then only sleeps in a plain barrier while its progress thread
// runs; rank 0 writes 1000 numbered blocks into it and reads the last one back.
TEST_P(ProgressEngineTest, PassiveTargetReceivesWrites) {
  auto boots = make_thread_bootstraps(2);
  std::array<std::string, 2> errors;
  double target_progress_cpu = -1;
  std::uint64_t target_iterations = 0;
  constexpr std::size_t kBlock = 256, kBlocks = 1000;
  std::vector<std::byte> target_buf(kBlock * 4);
  auto rank_main = [&](int rank) {
    Bootstrap& boot = *boots[static_cast<std::size_t>(rank)];
    try {
      TransportOptions o;
      o.provider = GetParam().first;
      o.endpoint = GetParam().second;
      o.ops = {Op::write, Op::read};
      o.thread_safe = rank == 1;
      auto t = open_libfabric(o);
      t->connect(boot);
      std::vector<std::byte> local(kBlock * 4);
      auto& buf = rank == 1 ? target_buf : local;
      auto mr = t->register_memory(buf.data(), buf.size(), kAllAccess);
      auto keys = boot.allgather(t->export_key(*mr));
      if (rank == 1) {
        ProgressEngine engine(*t, -1);
        // No polling, no progress calls of our own: only the engine moves data.
        boot.barrier([] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
        target_progress_cpu = engine.stop();
        target_iterations = engine.iterations();
        return;
      }
      RemoteMemory peer = t->import_key(1, keys[1]);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      auto retry = [&](auto post) {
        Status s;
        while ((s = post()) == Status::again) {
          t->progress();
          if (std::chrono::steady_clock::now() > deadline) throw Error("post busy: timed out");
        }
        if (s != Status::ok) throw Error(t->last_error());
      };
      auto wait_tx = [&] {
        Completion c[4];
        for (;;) {
          int n = t->poll_tx(c);
          if (n < 0) throw Error(t->last_error());
          if (n > 0) return;
          if (std::chrono::steady_clock::now() > deadline) throw Error("timed out");
        }
      };
      for (std::uint64_t i = 0; i < kBlocks; ++i) {
        std::memset(local.data(), static_cast<int>(i & 0xff), kBlock);
        std::memcpy(local.data(), &i, sizeof i);
        retry([&] {
          return t->post_write(1, local.data(), kBlock, mr->desc(), peer, 0, i, kSignal);
        });
        wait_tx();
      }
      retry([&] {
        return t->post_read(1, local.data() + kBlock, kBlock, mr->desc(), peer, 0, 1, kSignal);
      });
      wait_tx();
      if (std::memcmp(local.data(), local.data() + kBlock, kBlock) != 0)
        throw Error("read back differs from the last write");
      boot.barrier();
    } catch (const std::exception& e) {
      errors[static_cast<std::size_t>(rank)] = e.what();
      boot.abort(e.what());
    }
  };
  std::thread r0(rank_main, 0), r1(rank_main, 1);
  r0.join();
  r1.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  std::uint64_t last;
  std::memcpy(&last, target_buf.data(), sizeof last);
  EXPECT_EQ(last, kBlocks - 1);
  EXPECT_GT(target_iterations, 0u);
  EXPECT_GE(target_progress_cpu, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Providers, ProgressEngineTest,
                         ::testing::Values(std::pair{"shm", EndpointType::rdm},
                                           std::pair{"tcp", EndpointType::msg},
                                           std::pair{"tcp", EndpointType::rdm}),
                         [](const auto& info) {
                           return std::string(info.param.first == std::string("shm") ? "shm"
                                                                                     : "tcp") +
                                  "_" + std::string(to_string(info.param.second));
                         });

}  // namespace
}  // namespace fabflow
