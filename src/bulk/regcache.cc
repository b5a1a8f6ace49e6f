// The registration cache: entries keyed by start address, an intrusive LRU list of the unused
// ones, and a userfaultfd monitor whose events are applied under the cache lock before every
// lookup. docs/registration-cache.md has the design and the race argument.
#include "fabflow/regcache.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#include "bulk/sys.h"
#include "bulk/uffd_monitor.h"
#include "common/errno_text.h"

namespace fabflow::bulk {
namespace {

// Forks seen by this process (counted in the parent). A fork shares every private page
// copy-on-write: the parent's next write to a cached page moves it to a new frame.
// A child counts its birth in g_births: a cache made before the fork is not its own.
std::atomic<std::uint64_t> g_forks{0};
std::atomic<std::uint64_t> g_births{0};
void count_fork() noexcept { g_forks.fetch_add(1); }
void count_birth() noexcept { g_births.fetch_add(1); }
void install_fork_handler() {
  static std::once_flag once;
  std::call_once(once, [] { ::pthread_atfork(nullptr, count_fork, count_birth); });
}

constexpr std::uint64_t kPfnMask = (std::uint64_t{1} << 55) - 1;
constexpr std::uint64_t kPresent = std::uint64_t{1} << 63;
constexpr std::uint64_t kSwapped = std::uint64_t{1} << 62;

// /proc/self/pagemap entries of the pages [a, b); empty on failure.
std::vector<std::uint64_t> read_pagemap(std::uintptr_t a, std::uintptr_t b) {
  std::vector<std::uint64_t> out((b - a) / page_size());
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const auto bytes = static_cast<ssize_t>(out.size() * sizeof(std::uint64_t));
  const ssize_t got = ::pread(fd, out.data(), static_cast<std::size_t>(bytes),
                              static_cast<off_t>(a / page_size() * sizeof(std::uint64_t)));
  ::close(fd);
  if (got != bytes) return {};
  return out;
}

}  // namespace

struct RegistrationCache::Entry {
  std::uintptr_t start = 0, end = 0;  // the registered (aligned) range
  unsigned access = 0;
  std::unique_ptr<MemoryRegion> mr;
  std::vector<std::uint64_t> pagemap;  // verify_pagemap: entries at registration
  int leases = 0;
  bool dead = false;       // invalidated: never served again, deregistered at its last release
  Entry* newer = nullptr;  // LRU list of unused live entries
  Entry* older = nullptr;
  bool in_lru = false;
};

struct RegistrationCache::State {
  Registrar registrar;
  std::size_t alignment = 0;
  std::size_t byte_bound = 0;
  std::uint64_t births = 0;  // g_births when made: another value means a forked child
  std::uint64_t forks_seen = 0;
  std::uint64_t zero_pfn = 0;  // the shared zero page: a frame an untouched page borrows

  mutable std::mutex mu;
  std::multimap<std::uintptr_t, std::unique_ptr<Entry>> by_start;
  std::uintptr_t max_len = 0;  // the longest entry ever: bounds the backward search
  Entry* mru = nullptr;
  Entry* lru = nullptr;
  std::size_t bytes = 0;
  CacheStats counters;
  std::unique_ptr<UffdMonitor> monitor;
  std::vector<ChangedRange> changed;  // scratch

  // ---- everything below runs with mu held ----
  void lru_remove(Entry* e) {
    if (!e->in_lru) return;
    (e->newer != nullptr ? e->newer->older : mru) = e->older;
    (e->older != nullptr ? e->older->newer : lru) = e->newer;
    e->newer = e->older = nullptr;
    e->in_lru = false;
  }
  void lru_push(Entry* e) {
    e->older = mru;
    e->newer = nullptr;
    if (mru != nullptr) mru->newer = e;
    mru = e;
    if (lru == nullptr) lru = e;
    e->in_lru = true;
  }

  template <typename F>
  void for_overlapping(std::uintptr_t a, std::uintptr_t b, F&& f) {
    auto it = by_start.lower_bound(a > max_len ? a - max_len : 0);
    while (it != by_start.end() && it->first < b) {
      Entry* e = (it++)->second.get();  // f may erase the entry
      if (e->end > a) f(e);
    }
  }

  Entry* find(std::uintptr_t a, std::uintptr_t b, unsigned access) {
    Entry* found = nullptr;
    auto it = by_start.upper_bound(a);
    while (it != by_start.begin()) {
      --it;
      Entry* e = it->second.get();
      if (a - e->start >= max_len) break;
      if (!e->dead && e->end >= b && (e->access & access) == access) {
        found = e;
        break;
      }
    }
    return found;
  }

  void destroy(std::unique_ptr<MemoryRegion> mr) {
    const auto start = std::chrono::steady_clock::now();
    mr.reset();
    ++counters.registration.deregistrations;
    counters.registration.deregister_ns += ns_since(start);
  }

  void remove(Entry* e) {
    lru_remove(e);
    bytes -= e->end - e->start;
    auto it = by_start.lower_bound(e->start);
    while (it->second.get() != e) ++it;
    std::unique_ptr<Entry> owned = std::move(it->second);
    by_start.erase(it);
    unwatch_uncovered(e->start, e->end);
    destroy(std::move(owned->mr));
  }

  // Stops watching the pages of [a, b) that no entry covers (the others stay watched).
  void unwatch_uncovered(std::uintptr_t a, std::uintptr_t b) {
    if (monitor == nullptr) return;
    std::uintptr_t at = a;
    for_overlapping(a, b, [&](Entry* other) {
      if (other->start > at) monitor->unwatch(at, other->start);
      at = std::max(at, other->end);
    });
    if (at < b) monitor->unwatch(at, b);
  }

  void invalidate(Entry* e) {
    if (e->dead) return;
    e->dead = true;
    ++counters.invalidations;
    if (e->leases == 0) remove(e);
  }

  void invalidate_all() {
    std::vector<Entry*> all;
    for (auto& [start, e] : by_start) all.push_back(e.get());
    for (Entry* e : all) invalidate(e);
  }

  // Applies what changed since the last call: mapping events and forks.
  void apply_changes() {
    const std::uint64_t forks = g_forks.load();
    bool everything = forks != forks_seen;
    forks_seen = forks;
    changed.clear();
    if (!monitor->take(changed)) everything = true;
    if (everything) {
      invalidate_all();
      return;
    }
    for (const ChangedRange& r : changed) {
      for_overlapping(r.start, r.end, [&](Entry* e) { invalidate(e); });
    }
  }

  // Evicts unused entries, oldest first, until one more of `need` bytes fits; false when the
  // entries in use leave no room.
  bool make_room(std::size_t need, std::size_t max_entries) {
    if (need > byte_bound || max_entries == 0) return false;
    while (by_start.size() + 1 > max_entries || bytes + need > byte_bound) {
      if (lru == nullptr) return false;
      ++counters.evictions;
      remove(lru);
    }
    return true;
  }

  void verify(const Entry& e, std::uintptr_t a, std::uintptr_t b) const {
    if (e.pagemap.empty()) return;
    const std::uintptr_t pa = a & ~(page_size() - 1);
    const std::uintptr_t pb = (b + page_size() - 1) & ~(page_size() - 1);
    const auto now = read_pagemap(pa, pb);
    if (now.empty()) return;
    for (std::size_t i = 0; i < now.size(); ++i) {
      const std::uint64_t then = e.pagemap[(pa - e.start) / page_size() + i];
      if ((then & kPresent) == 0 || (then & kPfnMask) == zero_pfn) continue;
      if ((now[i] & kSwapped) != 0) continue;  // unpinned and swapped: no frame to compare
      if ((now[i] & kPresent) == 0 || (now[i] & kPfnMask) != (then & kPfnMask)) {
        char line[256];
        std::snprintf(line, sizeof line,
                      "regcache: the cached registration [%#lx, %#lx) no longer maps page %#lx "
                      "(frame %#llx, now %#llx): a missed invalidation, a fabflow bug",
                      static_cast<unsigned long>(e.start), static_cast<unsigned long>(e.end),
                      static_cast<unsigned long>(pa + i * page_size()),
                      static_cast<unsigned long long>(then & kPfnMask),
                      static_cast<unsigned long long>(now[i] & kPfnMask));
        throw Error(line);
      }
    }
  }
};

RegistrationCache::RegistrationCache(Registrar registrar, CacheOptions options)
    : options_(options), state_(std::make_unique<State>()) {
  State& s = *state_;
  s.registrar = std::move(registrar);
  s.alignment = std::max<std::size_t>(options_.alignment, page_size());
  if ((s.alignment & (s.alignment - 1)) != 0) {
    throw UsageError("regcache: alignment " + std::to_string(options_.alignment) +
                     " is not a power of two");
  }
  s.byte_bound =
      options_.pinned ? std::min(options_.max_bytes, memlock_limit()) : options_.max_bytes;
  install_fork_handler();
  s.births = g_births.load();
  switch (options_.invalidation) {
    case Invalidation::userfaultfd:
      s.monitor = UffdMonitor::open(&disabled_reason_);
      if (s.monitor == nullptr) {
        caching_ = false;
        disabled_reason_ += ": caching is off";
      }
      s.forks_seen = g_forks.load();
      break;
    case Invalidation::off:
      caching_ = false;
      disabled_reason_ = "regcache: invalidation off: caching is off";
      break;
    case Invalidation::none_unsafe_for_tests: break;
  }
  if (options_.verify_pagemap) {
    // A page only read maps the zero page; one written has a frame of its own.
    const std::uintptr_t probe = reinterpret_cast<std::uintptr_t>(&s) & ~(page_size() - 1);
    const auto self = read_pagemap(probe, probe + page_size());
    if (self.empty() || (self[0] & kPfnMask) == 0) {
      pagemap_reason_ =
          "regcache: /proc/self/pagemap shows no frame numbers (they need CAP_SYS_ADMIN): the "
          "pagemap check cannot run";
    } else {
      void* page = ::mmap(nullptr, page_size(), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (page != MAP_FAILED) {
        [[maybe_unused]] const char touch = *static_cast<volatile const char*>(page);
        const auto z = reinterpret_cast<std::uintptr_t>(page);
        const auto zp = read_pagemap(z, z + page_size());
        if (!zp.empty()) s.zero_pfn = zp[0] & kPfnMask;
        ::munmap(page, page_size());
      }
    }
  }
}

RegistrationCache::~RegistrationCache() {
  State& s = *state_;
  if (g_births.load() != s.births) {
    // A forked child: the monitor thread does not exist here, and the registrations are the
    // parent's. Leave both alone.
    (void)s.monitor.release();
    for (auto& [start, e] : s.by_start) (void)e->mr.release();
    return;
  }
  std::lock_guard lock(s.mu);
  while (!s.by_start.empty()) s.remove(s.by_start.begin()->second.get());
  s.monitor.reset();
}

Lease RegistrationCache::acquire(const void* addr, std::size_t len, unsigned access) {
  State& s = *state_;
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  const std::uintptr_t b = a + std::max<std::size_t>(len, 1);
  const std::uintptr_t pa = a & ~(page_size() - 1);
  const std::uintptr_t pb = (b + page_size() - 1) & ~(page_size() - 1);
  Lease lease;
  lease.cache_ = this;
  std::lock_guard lock(s.mu);

  auto uncached = [&] {
    ++s.counters.uncached;
    const auto start = std::chrono::steady_clock::now();
    lease.owned_ = s.registrar(reinterpret_cast<void*>(pa), pb - pa, access);
    ++s.counters.registration.registrations;
    s.counters.registration.registered_bytes += pb - pa;
    s.counters.registration.register_ns += ns_since(start);
    lease.region_ = lease.owned_.get();
    return std::move(lease);
  };
  // A forked child shares the parent's userfaultfd but none of its watches: it must not cache.
  if (!caching_ || g_births.load() != s.births) return uncached();
  if (s.monitor != nullptr) s.apply_changes();

  if (Entry* e = s.find(a, b, access)) {
    if (options_.verify_pagemap) s.verify(*e, a, b);
    ++s.counters.hits;
    if (e->leases++ == 0) s.lru_remove(e);
    lease.entry_ = e;
    lease.region_ = e->mr.get();
    return lease;
  }

  // A miss: register the range widened to the alignment, or where that fails the pages.
  const std::uintptr_t aa = a & ~(s.alignment - 1);
  const std::uintptr_t ab = (b + s.alignment - 1) & ~(s.alignment - 1);
  std::unique_ptr<MemoryRegion> mr;
  std::uintptr_t ra = aa, rb = ab;
  for (int attempt = 0; attempt < 2 && mr == nullptr; ++attempt) {
    if (attempt == 1) {
      if (aa == pa && ab == pb) break;
      ra = pa;
      rb = pb;
    }
    if (!s.make_room(rb - ra, options_.max_entries)) continue;
    // Watch before registering: a change between the two is then seen, never missed.
    if (s.monitor != nullptr && !s.monitor->watch(ra, rb)) continue;
    const auto start = std::chrono::steady_clock::now();
    try {
      mr = s.registrar(reinterpret_cast<void*>(ra), rb - ra, access);
    } catch (...) {
      s.unwatch_uncovered(ra, rb);
      if (attempt == 1 || (aa == pa && ab == pb)) throw;
      continue;
    }
    ++s.counters.registration.registrations;
    s.counters.registration.registered_bytes += rb - ra;
    s.counters.registration.register_ns += ns_since(start);
  }
  if (mr == nullptr) return uncached();  // no room, or a range the monitor cannot watch

  auto owned = std::make_unique<Entry>();
  Entry* e = owned.get();
  e->start = ra;
  e->end = rb;
  e->access = access;
  e->mr = std::move(mr);
  e->leases = 1;
  if (options_.verify_pagemap && pagemap_reason_.empty()) e->pagemap = read_pagemap(ra, rb);
  s.by_start.emplace(ra, std::move(owned));
  s.max_len = std::max<std::uintptr_t>(s.max_len, rb - ra);
  s.bytes += rb - ra;
  ++s.counters.misses;
  lease.entry_ = e;
  lease.region_ = e->mr.get();
  return lease;
}

void RegistrationCache::release(Entry* e) noexcept {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  if (--e->leases > 0) return;
  if (e->dead) {
    s.remove(e);
  } else {
    s.lru_push(e);
  }
}

void RegistrationCache::flush() {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  while (s.lru != nullptr) s.remove(s.lru);
}

CacheStats RegistrationCache::stats() const {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  if (s.monitor != nullptr && g_births.load() == s.births) s.apply_changes();
  CacheStats out = s.counters;
  out.entries = s.by_start.size();
  out.bytes = s.bytes;
  return out;
}

std::string CacheStats::to_json() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"hits\": %llu, \"misses\": %llu, \"evictions\": %llu, \"invalidations\": %llu, "
                "\"uncached\": %llu, \"entries\": %llu, \"bytes\": %llu, \"registrations\": %llu, "
                "\"deregistrations\": %llu, \"registered_bytes\": %llu, \"register_ns\": %llu, "
                "\"deregister_ns\": %llu}",
                static_cast<unsigned long long>(hits), static_cast<unsigned long long>(misses),
                static_cast<unsigned long long>(evictions),
                static_cast<unsigned long long>(invalidations),
                static_cast<unsigned long long>(uncached), static_cast<unsigned long long>(entries),
                static_cast<unsigned long long>(bytes),
                static_cast<unsigned long long>(registration.registrations),
                static_cast<unsigned long long>(registration.deregistrations),
                static_cast<unsigned long long>(registration.registered_bytes),
                static_cast<unsigned long long>(registration.register_ns),
                static_cast<unsigned long long>(registration.deregister_ns));
  return buf;
}

std::string CacheStats::to_line() const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "hits %llu misses %llu evictions %llu invalidations %llu uncached %llu "
                "registrations %llu (%.3f ms) deregistrations %llu (%.3f ms)",
                static_cast<unsigned long long>(hits), static_cast<unsigned long long>(misses),
                static_cast<unsigned long long>(evictions),
                static_cast<unsigned long long>(invalidations),
                static_cast<unsigned long long>(uncached),
                static_cast<unsigned long long>(registration.registrations),
                static_cast<double>(registration.register_ns) / 1e6,
                static_cast<unsigned long long>(registration.deregistrations),
                static_cast<double>(registration.deregister_ns) / 1e6);
  return buf;
}

// ---- Lease ----

Lease::Lease(Lease&& other) noexcept
    : cache_(other.cache_),
      entry_(other.entry_),
      region_(other.region_),
      owned_(std::move(other.owned_)) {
  other.entry_ = nullptr;
  other.region_ = nullptr;
}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    cache_ = other.cache_;
    entry_ = other.entry_;
    region_ = other.region_;
    owned_ = std::move(other.owned_);
    other.entry_ = nullptr;
    other.region_ = nullptr;
  }
  return *this;
}

Lease::~Lease() { release(); }

void Lease::release() noexcept {
  if (entry_ != nullptr) {
    cache_->release(static_cast<RegistrationCache::Entry*>(entry_));
  } else if (owned_ != nullptr) {
    std::lock_guard lock(cache_->state_->mu);
    cache_->state_->destroy(std::move(owned_));
  }
  entry_ = nullptr;
  region_ = nullptr;
}

}  // namespace fabflow::bulk
