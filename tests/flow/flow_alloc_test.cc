// The enqueue and dequeue paths never allocate: global operator new is replaced in this test
// binary with one that counts, per thread, while a test switches counting on, and counts every
// other thread's allocations (a queue's helper threads) while any rank has counting on. GCC cannot
// see that the replaced operator delete below frees with free(), as the replaced new allocates.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "support/flow_support.h"

namespace {
thread_local bool g_counting = false;
thread_local std::uint64_t g_allocations = 0;
thread_local bool g_rank_thread = false;            // a test's rank (counts for itself)
std::atomic<int> g_windows{0};                      // ranks with counting on
std::atomic<std::uint64_t> g_other_allocations{0};  // other threads, while g_windows > 0
}  // namespace

void* operator new(std::size_t n) {
  if (g_counting)
    ++g_allocations;
  else if (!g_rank_thread && g_windows.load(std::memory_order_relaxed) > 0)
    ++g_other_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// The nothrow forms too (std::stable_sort's buffer uses them): every allocation of the binary
// then pairs malloc with free, which ASan checks.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace fabflow::flow::test {
namespace {

using namespace std::chrono_literals;

class FlowNoAlloc : public ::testing::TestWithParam<Point> {};

void no_alloc(const Point& point, bool helpers);

// Also with both helper threads (data mover and active consumer): their pump rounds run in the
// counted window too.
TEST_P(FlowNoAlloc, EnqueueAndDequeuePathsDoNotAllocate) {
  for (bool helpers : {false, true}) {
    SCOPED_TRACE(helpers ? "data mover and active consumer" : "passive ends");
    no_alloc(GetParam(), helpers);
  }
}

void no_alloc(const Point& point, bool helpers) {
  QueueOptions o;
  o.design = point.design;
  o.active_producer = helpers;
  o.active_consumer = helpers;
  o.capacity = 16;
  o.item_bytes = 64;
  std::uint64_t counted[2] = {~0ull, ~0ull};
  g_other_allocations = 0;
  auto err =
      run_pair(transport_options(point.provider, o), [&](int rank, Transport& t, Bootstrap& boot) {
        g_rank_thread = true;
        std::vector<std::byte> buf(o.item_bytes, std::byte{3});
        std::size_t len = 0;
        bool ok = true;
        if (rank == 0) {
          auto prod = make_producer(t, boot, 1, o);
          g_allocations = 0;
          g_windows++;
          g_counting = true;
          for (int i = 0; i < 500 && ok; ++i)
            ok = prod->enqueue({buf.data(), static_cast<std::size_t>(i % 64)}, 5s) == Status::ok;
          ok = ok && prod->flush(5s) == Status::ok;
          g_counting = false;
          g_windows--;
          counted[0] = g_allocations;
          if (!ok) throw Error("enqueue: " + prod->error());
          if (prod->close(5s) != Status::ok) throw Error("close: " + prod->error());
          boot.barrier([&] { t.progress(); });
        } else {
          auto cons = make_consumer(t, boot, 0, o);
          g_allocations = 0;
          g_windows++;
          g_counting = true;
          for (int i = 0; i < 500 && ok; ++i) ok = cons->dequeue(buf, &len, 5s) == Status::ok;
          g_counting = false;
          g_windows--;
          counted[1] = g_allocations;
          if (!ok) throw Error("dequeue: " + cons->error());
          if (cons->dequeue(buf, &len, 5s) != Status::closed) throw Error("no end of stream");
          boot.barrier([&] { t.progress(); });
        }
      });
  ASSERT_EQ(err, "");
  EXPECT_EQ(counted[0], 0u);
  EXPECT_EQ(counted[1], 0u);
  EXPECT_EQ(g_other_allocations.load(), 0u);
}

INSTANTIATE_TEST_SUITE_P(All, FlowNoAlloc, ::testing::ValuesIn(points({kShm, kLocal})), point_name);

}  // namespace
}  // namespace fabflow::flow::test
