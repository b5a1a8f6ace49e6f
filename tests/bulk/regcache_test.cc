// The registration cache and registration pinning (include/fabflow/regcache.h).
//
// RegCacheAdversarial: the mapping under a cached range changes behind the cache's back; the
// oracle is that the next acquire of the range is a miss (a new registration) and that the
// pagemap check (every hit compared with the frames recorded at registration) passes. Each of
// these tests fails when invalidation is disabled:
//   FABFLOW_REGCACHE_NO_INVALIDATION=1 fabflow_tests --gtest_filter='RegCacheAdversarial*'
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "bulk/page_counts.h"
#include "fabflow/regcache.h"

namespace fabflow::bulk {
namespace {

const std::size_t kPage = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

bool invalidation_disabled() {
  const char* v = std::getenv("FABFLOW_REGCACHE_NO_INVALIDATION");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// A registrar that registers nothing and counts.
struct FakeRegistrar {
  int registrations = 0;
  int deregistrations = 0;

  class Region final : public MemoryRegion {
   public:
    Region(void* addr, std::size_t len, int* deregistrations)
        : MemoryRegion(addr, len, nullptr), deregistrations_(deregistrations) {}
    ~Region() override { ++*deregistrations_; }

   private:
    int* deregistrations_;
  };

  Registrar fn() {
    return [this](void* addr, std::size_t len, unsigned) -> std::unique_ptr<MemoryRegion> {
      ++registrations;
      return std::make_unique<Region>(addr, len, &deregistrations);
    };
  }
};

// An address where a hole left by munmap is not taken by another mapping before the test maps
// it again. Under ASan: far below where the kernel places mappings of its own choosing (top-down
// from below the stack) and above ASan's shadow (its allocator mmaps at any time). TSan keeps
// that range for its own metadata, and its allocator has a heap range of its own: there the
// addresses come from the bottom of a 64 GiB range the kernel chose, reserved and released once
// (the kernel fills such a gap from its top).
char* far_address() {
#if defined(__SANITIZE_THREAD__)
  static std::uintptr_t next = [] {
    constexpr std::size_t reserve = std::size_t{64} << 30;
    void* p =
        ::mmap(nullptr, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return std::uintptr_t{0};
    ::munmap(p, reserve);
    return reinterpret_cast<std::uintptr_t>(p);
  }();
#else
  static std::uintptr_t next = 0x300000000000;
#endif
  next += 64u << 20;
  return reinterpret_cast<char*>(next);
}

// An anonymous mapping, unmapped at the end unless already gone.
struct Mapping {
  explicit Mapping(std::size_t len, void* at = nullptr, int extra = 0) : len(len) {
    void* p = ::mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra, -1, 0);
    addr = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  ~Mapping() {
    if (addr != nullptr) ::munmap(addr, len);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  char* addr;
  std::size_t len;
};

CacheOptions adversarial_options() {
  CacheOptions o;
  o.verify_pagemap = true;
  o.invalidation =
      invalidation_disabled() ? Invalidation::none_unsafe_for_tests : Invalidation::userfaultfd;
  return o;
}

class RegCacheAdversarial : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = std::make_unique<RegistrationCache>(fake_.fn(), adversarial_options());
    if (!cache_->caching()) GTEST_SKIP() << cache_->disabled_reason();
    if (!cache_->pagemap_check().empty())
      std::printf("note: %s\n", cache_->pagemap_check().c_str());
  }

  // Caches [p, p+len) and leaves it unused.
  void cache(const void* p, std::size_t len) {
    const auto before = cache_->stats().misses;
    cache_->acquire(p, len, kAllAccess).release();
    ASSERT_EQ(cache_->stats().misses, before + 1);
  }

  // The oracle: the range changed under the cache, so acquire must register it afresh (and the
  // pagemap check of a hit would throw). Returns the lease.
  Lease expect_fresh(const void* p, std::size_t len) {
    const CacheStats before = cache_->stats();
    Lease lease;
    EXPECT_NO_THROW(lease = cache_->acquire(p, len, kAllAccess));
    const CacheStats after = cache_->stats();
    EXPECT_EQ(after.hits, before.hits) << "a stale registration was served";
    EXPECT_EQ(after.misses, before.misses + 1) << "no new registration";
    return lease;
  }

  FakeRegistrar fake_;
  std::unique_ptr<RegistrationCache> cache_;
};

TEST_F(RegCacheAdversarial, MunmapThenMmapAtTheSameAddress) {
  const std::size_t len = 16 * kPage;
  auto* m = new Mapping(len, far_address(), MAP_FIXED_NOREPLACE);
  char* p = m->addr;
  ASSERT_NE(p, nullptr);
  std::memset(p, 'a', len);
  cache(p, len);
  delete m;
  Mapping again(len, p, MAP_FIXED_NOREPLACE);
  ASSERT_EQ(again.addr, p) << "the address was not free again";
  std::memset(p, 'b', len);
  expect_fresh(p, len);
}

TEST_F(RegCacheAdversarial, MmapFixedOverTheRange) {
  Mapping m(16 * kPage);
  std::memset(m.addr, 'a', m.len);
  cache(m.addr, m.len);
  ASSERT_EQ(
      ::mmap(m.addr, m.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
      m.addr);
  std::memset(m.addr, 'b', m.len);
  expect_fresh(m.addr, m.len);
}

TEST_F(RegCacheAdversarial, BrkShrinkThenGrow) {
  const std::size_t len = 16 * kPage;
  // Start the range at a page boundary so that it owns its pages.
  const auto cur = reinterpret_cast<std::uintptr_t>(::sbrk(0));
  ASSERT_NE(::sbrk(static_cast<intptr_t>(((cur + kPage - 1) & ~(kPage - 1)) - cur)),
            reinterpret_cast<void*>(-1));
  auto* base = static_cast<char*>(::sbrk(static_cast<intptr_t>(len)));
  ASSERT_NE(base, reinterpret_cast<char*>(-1));
  std::memset(base, 'a', len);
  cache(base, len);
  if (::sbrk(0) != base + len) GTEST_SKIP() << "malloc moved the break meanwhile";
  ASSERT_NE(::sbrk(-static_cast<intptr_t>(len)), reinterpret_cast<void*>(-1));
  ASSERT_EQ(::sbrk(static_cast<intptr_t>(len)), base);
  std::memset(base, 'b', len);
  { Lease lease = expect_fresh(base, len); }
  cache_->flush();
  if (::sbrk(0) == base + len) ::sbrk(-static_cast<intptr_t>(len));
}

TEST_F(RegCacheAdversarial, MadviseDontneed) {
  Mapping m(16 * kPage);
  std::memset(m.addr, 'a', m.len);
  cache(m.addr, m.len);
  ASSERT_EQ(::madvise(m.addr, m.len, MADV_DONTNEED), 0);
  // Watched memory keeps behaving: the dropped pages read as zeros, with no fault intercepted.
  EXPECT_EQ(m.addr[0], 0);
  EXPECT_EQ(m.addr[m.len - 1], 0);
  std::memset(m.addr, 'b', m.len);
  expect_fresh(m.addr, m.len);
}

TEST_F(RegCacheAdversarial, MremapAwayThenNewMappingAtTheOldAddress) {
  const std::size_t len = 16 * kPage;
  Mapping m(len, far_address(), MAP_FIXED_NOREPLACE);
  Mapping target(len, far_address(), MAP_FIXED_NOREPLACE);
  ASSERT_NE(m.addr, nullptr);
  ASSERT_NE(target.addr, nullptr);
  std::memset(m.addr, 'a', len);
  cache(m.addr, len);
  char* old = m.addr;
  void* moved = ::mremap(old, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, target.addr);
  ASSERT_EQ(moved, target.addr);
  m.addr = nullptr;  // gone from there
  EXPECT_EQ(target.addr[0], 'a');
  Mapping again(len, old, MAP_FIXED_NOREPLACE);
  ASSERT_EQ(again.addr, old);
  std::memset(old, 'b', len);
  expect_fresh(old, len);
}

TEST_F(RegCacheAdversarial, FreeThenMallocAtTheSameAddress) {
  // Above glibc's largest dynamic mmap threshold (32 MiB): always its own mapping.
  const std::size_t size = 33u << 20;
  const std::size_t len = 64 * kPage;
  auto* a = static_cast<char*>(std::malloc(size));
  ASSERT_NE(a, nullptr);
  std::memset(a, 'a', len);
  cache(a, len);
  std::free(a);
  auto* b = static_cast<char*>(std::malloc(size));
  ASSERT_NE(b, nullptr);
  if (b != a) {
    std::free(b);
    GTEST_SKIP() << "the allocator did not hand the same address back"
                 << (kAsan ? " (ASan quarantines freed memory)" : "");
  }
  std::memset(b, 'b', len);
  { Lease lease = expect_fresh(b, len); }
  std::free(b);
}

// On verbs, a registration made before fork() covers frames the child then shares
// copy-on-write; the parent's next write moves its page to a new frame and the registration no
// longer sees what the parent writes (unless the pages were MADV_DONTFORK or the kernel copies
// pinned pages for the child). The cache therefore drops every entry at fork.
TEST_F(RegCacheAdversarial, ForkThenParentWrites) {
  Mapping m(16 * kPage);
  std::memset(m.addr, 'a', m.len);
  cache(m.addr, m.len);
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c;
    ::close(go[1]);
    [[maybe_unused]] auto n = ::read(go[0], &c, 1);  // keep the pages shared until told
    ::_exit(0);
  }
  ::close(go[0]);
  std::memset(m.addr, 'b', m.len);  // copy-on-write: new frames for the parent
  expect_fresh(m.addr, m.len);
  ::close(go[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_F(RegCacheAdversarial, SecondThreadUnmapsWhileInUse) {
  const std::size_t len = 16 * kPage;
  auto* m = new Mapping(len, far_address(), MAP_FIXED_NOREPLACE);
  char* p = m->addr;
  ASSERT_NE(p, nullptr);
  std::memset(p, 'a', len);
  Lease in_flight = cache_->acquire(p, len, kAllAccess);
  std::thread other([&] {
    delete m;
    Mapping again(len, p, MAP_FIXED_NOREPLACE);
    if (again.addr == p) {
      std::memset(p, 'b', len);
      again.addr = nullptr;  // keep it: the main thread unmaps it
    }
  });
  other.join();
  Lease fresh = expect_fresh(p, len);
  EXPECT_NE(&fresh.region(), &in_flight.region());
  const int before = fake_.deregistrations;
  in_flight.release();  // the invalidated entry goes with its last lease
  if (!invalidation_disabled()) {
    EXPECT_EQ(fake_.deregistrations, before + 1);
  }
  fresh.release();
  cache_->flush();
  ::munmap(p, len);
}

// ---- bounds, LRU, leases, alignment ----

struct RegCacheBounds : ::testing::Test {
  RegCacheBounds() : m(64 * kPage) { std::memset(m.addr, 1, m.len); }
  char* page(std::size_t i) const { return m.addr + i * kPage; }
  bool hit(RegistrationCache& c, std::size_t i, std::size_t pages = 1) {
    const auto before = c.stats().hits;
    c.acquire(page(i), pages * kPage, kLocalRead).release();
    return c.stats().hits == before + 1;
  }
  FakeRegistrar fake;
  Mapping m;
};

TEST_F(RegCacheBounds, CountBoundEvictsTheLeastRecentlyUsed) {
  CacheOptions o;
  o.max_entries = 2;
  RegistrationCache c(fake.fn(), o);
  if (!c.caching()) GTEST_SKIP() << c.disabled_reason();
  EXPECT_FALSE(hit(c, 0));
  EXPECT_FALSE(hit(c, 2));
  EXPECT_TRUE(hit(c, 0));   // 0 is now the most recent
  EXPECT_FALSE(hit(c, 4));  // evicts 2
  const CacheStats s = c.stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_TRUE(hit(c, 0));
  EXPECT_TRUE(hit(c, 4));
  EXPECT_FALSE(hit(c, 2));
  EXPECT_EQ(fake.registrations - fake.deregistrations, 2);
}

TEST_F(RegCacheBounds, ByteBound) {
  CacheOptions o;
  o.max_bytes = 4 * kPage;
  RegistrationCache c(fake.fn(), o);
  if (!c.caching()) GTEST_SKIP() << c.disabled_reason();
  EXPECT_FALSE(hit(c, 0, 2));
  EXPECT_FALSE(hit(c, 4, 2));
  EXPECT_FALSE(hit(c, 8, 1));  // 5 pages: evicts the oldest
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(c.stats().bytes, 3 * kPage);
  EXPECT_FALSE(hit(c, 16, 5));  // larger than the bound: registered for that use only
  EXPECT_EQ(c.stats().uncached, 1u);
  EXPECT_EQ(c.stats().bytes, 3 * kPage);
}

TEST_F(RegCacheBounds, LeasesPreventEviction) {
  CacheOptions o;
  o.max_entries = 1;
  RegistrationCache c(fake.fn(), o);
  if (!c.caching()) GTEST_SKIP() << c.disabled_reason();
  Lease held = c.acquire(page(0), kPage, kLocalRead);
  EXPECT_TRUE(held.cached());
  Lease other = c.acquire(page(2), kPage, kLocalRead);
  EXPECT_FALSE(other.cached());
  EXPECT_EQ(c.stats().uncached, 1u);
  EXPECT_EQ(c.stats().evictions, 0u);
  other.release();
  EXPECT_EQ(fake.deregistrations, 1);  // the uncached registration went at release
  held.release();
  EXPECT_TRUE(hit(c, 0));
}

TEST_F(RegCacheBounds, HitNeedsOneEntryWithTheAccess) {
  RegistrationCache c(fake.fn(), {});
  if (!c.caching()) GTEST_SKIP() << c.disabled_reason();
  EXPECT_FALSE(hit(c, 0, 2));
  EXPECT_FALSE(hit(c, 2, 2));
  EXPECT_FALSE(hit(c, 1, 2));  // spans two entries, contained in neither
  EXPECT_TRUE(hit(c, 0, 1));
  c.acquire(page(0), kPage, kLocalRead | kRemoteWrite).release();
  EXPECT_EQ(c.stats().misses, 4u);  // cached for local read only
}

TEST_F(RegCacheBounds, AlignmentRoundsOutward) {
  const std::size_t align = 16 * kPage;
  Mapping big(4 * align);
  const auto base = (reinterpret_cast<std::uintptr_t>(big.addr) + align - 1) & ~(align - 1);
  auto* p = reinterpret_cast<char*>(base);
  std::memset(big.addr, 1, big.len);
  CacheOptions o;
  o.alignment = align;
  RegistrationCache c(fake.fn(), o);
  if (!c.caching()) GTEST_SKIP() << c.disabled_reason();
  {
    Lease l = c.acquire(p + 100, 10, kLocalRead);
    EXPECT_EQ(l.region().data(), reinterpret_cast<std::byte*>(p));
    EXPECT_EQ(l.region().size(), align);
  }
  EXPECT_EQ(c.stats().hits, 0u);
  c.acquire(p + align - kPage, kPage, kLocalRead).release();
  EXPECT_EQ(c.stats().hits, 1u);
  {
    Lease l = c.acquire(p + align - 1, 2, kLocalRead);  // crosses the boundary
    EXPECT_EQ(l.region().data(), reinterpret_cast<std::byte*>(p));
    EXPECT_EQ(l.region().size(), 2 * align);
  }
  EXPECT_EQ(c.stats().misses, 2u);
  EXPECT_THROW(RegistrationCache(fake.fn(), CacheOptions{.alignment = 3 * kPage}), UsageError);
}

TEST_F(RegCacheBounds, UncachedWhenInvalidationIsOff) {
  CacheOptions o;
  o.invalidation = Invalidation::off;
  RegistrationCache c(fake.fn(), o);
  EXPECT_FALSE(c.caching());
  EXPECT_NE(c.disabled_reason().find("caching is off"), std::string::npos);
  EXPECT_FALSE(hit(c, 0));
  EXPECT_FALSE(hit(c, 0));
  EXPECT_EQ(fake.registrations, 2);
  EXPECT_EQ(fake.deregistrations, 2);
  EXPECT_EQ(c.stats().uncached, 2u);
}

TEST_F(RegCacheBounds, UncachedWhenUserfaultfdIsDenied) {
  ::setenv("FABFLOW_NO_USERFAULTFD", "1", 1);
  RegistrationCache c(fake.fn(), {});
  ::unsetenv("FABFLOW_NO_USERFAULTFD");
  EXPECT_FALSE(c.caching());
  EXPECT_NE(c.disabled_reason().find("userfaultfd"), std::string::npos) << c.disabled_reason();
  EXPECT_FALSE(hit(c, 0));
  EXPECT_FALSE(hit(c, 0));
  EXPECT_EQ(c.stats().uncached, 2u);
  EXPECT_EQ(fake.deregistrations, 2);
}

TEST_F(RegCacheBounds, StatsAsJson) {
  RegistrationCache c(fake.fn(), {});
  hit(c, 0);
  const std::string json = c.stats().to_json();
  for (const char* field : {"\"hits\"", "\"misses\": 1", "\"evictions\"", "\"invalidations\"",
                            "\"uncached\"", "\"register_ns\""}) {
    EXPECT_NE(json.find(field), std::string::npos) << field << " in " << json;
  }
}

// ---- pinning ----

TEST(RegCachePageCounts, OverlapsCountPerPage) {
  PageCounts pc;
  using R = PageCounts::Range;
  EXPECT_EQ(pc.add(0, 8), (std::vector<R>{{0, 8}}));
  EXPECT_EQ(pc.add(4, 12), (std::vector<R>{{8, 12}}));
  EXPECT_EQ(pc.uncovered(0, 16), 4u);
  EXPECT_EQ(pc.covered(), 12u);
  EXPECT_EQ(pc.remove(0, 8), (std::vector<R>{{0, 4}}));
  EXPECT_EQ(pc.remove(4, 12), (std::vector<R>{{4, 12}}));
  EXPECT_EQ(pc.covered(), 0u);
  EXPECT_EQ(pc.intervals(), 0u);
}

std::size_t vm_locked_kb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmLck:", 0) == 0) return std::stoul(line.substr(6));
  }
  return 0;
}

TEST(RegCachePin, OverlappingRegistrationsKeepSharedPagesLocked) {
  const std::size_t page_kb = kPage / 1024;
  Mapping m(16 * kPage);
  FakeRegistrar fake;
  RegistrationStats stats;
  Registrar pinned = pinning_registrar(fake.fn(), true, &stats);
  const std::size_t base = vm_locked_kb();
  const std::size_t pinned_before = pinned_bytes();
  auto a = pinned(m.addr, 8 * kPage, kLocalRead);
  auto b = pinned(m.addr + 4 * kPage, 8 * kPage, kLocalRead);
  EXPECT_EQ(vm_locked_kb() - base, 12 * page_kb);
  EXPECT_EQ(pinned_bytes() - pinned_before, 12 * kPage);
  EXPECT_EQ(&a->registered() == a.get(), false);  // the wrapper hands out the inner region
  a.reset();
  EXPECT_EQ(vm_locked_kb() - base, 8 * page_kb) << "b's pages must stay locked";
  b.reset();
  EXPECT_EQ(vm_locked_kb(), base);
  EXPECT_EQ(stats.registrations, 2u);
  EXPECT_EQ(stats.deregistrations, 2u);
  EXPECT_EQ(fake.deregistrations, 2);
}

// Drops CAP_IPC_LOCK from this thread's effective set while it lives (root has it, and with it
// the kernel and verbs ignore RLIMIT_MEMLOCK); restores it after.
class WithoutIpcLock {
 public:
  WithoutIpcLock() {
    if (::syscall(SYS_capget, &header_, saved_) != 0) return;
    __user_cap_data_struct less[2] = {saved_[0], saved_[1]};
    less[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
    dropped_ = ::syscall(SYS_capset, &header_, less) == 0;
  }
  ~WithoutIpcLock() {
    if (dropped_) ::syscall(SYS_capset, &header_, saved_);
  }
  WithoutIpcLock(const WithoutIpcLock&) = delete;
  WithoutIpcLock& operator=(const WithoutIpcLock&) = delete;

 private:
  __user_cap_header_struct header_{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct saved_[2] = {};
  bool dropped_ = false;
};

TEST(RegCachePin, MemlockLimitTooSmall) {
  WithoutIpcLock plain_user;
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 16 * kPage;
  ASSERT_EQ(::setrlimit(RLIMIT_MEMLOCK, &low), 0);
  Mapping m(64 * kPage);
  FakeRegistrar fake;
  Registrar pinned = pinning_registrar(fake.fn(), true);
  std::string what;
  try {
    pinned(m.addr, 64 * kPage, kLocalRead);
  } catch (const UsageError& e) {
    what = e.what();
  }
  ::setrlimit(RLIMIT_MEMLOCK, &saved);
  EXPECT_EQ(what, "--mr-pin: RLIMIT_MEMLOCK is " + std::to_string(16 * kPage) +
                      " bytes, this registration needs " + std::to_string(64 * kPage) + " more (" +
                      std::to_string(pinned_bytes()) + " locked): raise it with ulimit -l");
  EXPECT_EQ(fake.registrations, 0);
  EXPECT_EQ(pinned_bytes(), 0u);
}

TEST(RegCachePin, CapIpcLockLiftsTheLimitAsTheKernelDoes) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[2] = {};
  ASSERT_EQ(::syscall(SYS_capget, &header, caps), 0);
  if (!(caps[CAP_TO_INDEX(CAP_IPC_LOCK)].effective & CAP_TO_MASK(CAP_IPC_LOCK)))
    GTEST_SKIP() << "this process has no CAP_IPC_LOCK";
  EXPECT_EQ(memlock_limit(), SIZE_MAX);
  WithoutIpcLock plain_user;
  rlimit rl{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &rl), 0);
  EXPECT_EQ(memlock_limit(), rl.rlim_cur == RLIM_INFINITY ? SIZE_MAX : rl.rlim_cur);
}

TEST(RegCachePin, CacheBoundsBytesByTheMemlockLimit) {
  WithoutIpcLock plain_user;
  Mapping m(64 * kPage);
  FakeRegistrar fake;
  CacheOptions o;
  o.pinned = true;
  o.max_bytes = std::size_t{1} << 40;
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 8 * kPage;
  ASSERT_EQ(::setrlimit(RLIMIT_MEMLOCK, &low), 0);
  RegistrationCache c(pinning_registrar(fake.fn(), true), o);
  ::setrlimit(RLIMIT_MEMLOCK, &saved);
  if (!c.caching()) GTEST_SKIP() << c.disabled_reason();
  c.acquire(m.addr, 6 * kPage, kLocalRead).release();
  c.acquire(m.addr + 16 * kPage, 6 * kPage, kLocalRead).release();  // evicts the first
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(c.stats().bytes, 6 * kPage);
  c.flush();
  EXPECT_EQ(pinned_bytes(), 0u);
}

}  // namespace
}  // namespace fabflow::bulk
