// Registration of application memory that costs what it costs on hardware, and a registration
// cache that is never wrong. docs/registration-cache.md has the design.
//
// Pinning: register_buffer(..., pin = true) mlock()s the pages of a registration and
// munlock()s them when the region is destroyed, the way verbs pins pages. mlock does not count,
// so fabflow keeps one process-wide page refcount: a page is unlocked only when the last pinned
// registration covering it goes.
//
// RegistrationCache: registered ranges kept after use (leave-pinned), found again by address,
// bounded by count and bytes with LRU eviction, and invalidated by a userfaultfd monitor when
// the mapping under a range changes (munmap, brk, madvise, mremap, fork). Where userfaultfd is
// unavailable the cache does not cache (disabled_reason() says why): it never serves pages that
// may be stale.
#pragma once

#include <fabflow/transport.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace fabflow::bulk {

// What registration cost. Updated by the regions a pinning registrar returns, on registration
// and on destruction: it must outlive them. Not thread-safe (a cache updates it under its lock).
struct RegistrationStats {
  std::uint64_t registrations = 0;
  std::uint64_t deregistrations = 0;
  std::uint64_t registered_bytes = 0;
  std::uint64_t register_ns = 0;    // time in the transport's registration, pinning included
  std::uint64_t deregister_ns = 0;  // the same for deregistration and unpinning
};

// Registers [addr, addr+len) with `access` (kLocalRead...), or throws.
using Registrar =
    std::function<std::unique_ptr<MemoryRegion>(void* addr, std::size_t len, unsigned access)>;

// Registers through transport.register_memory; with `pin`, also mlocks the pages (first checking
// RLIMIT_MEMLOCK: UsageError "--mr-pin: RLIMIT_MEMLOCK is X bytes, this registration needs Y more
// (Z locked): raise it with ulimit -l"). The returned region's registered() is the transport's
// own region; destroying it deregisters and unpins. `stats` (may be null) must outlive it.
std::unique_ptr<MemoryRegion> register_buffer(Transport& transport, void* addr, std::size_t len,
                                              unsigned access, bool pin,
                                              RegistrationStats* stats = nullptr);

// The same around any registrar (tests use a fake one). `inner` is copied into the result.
Registrar pinning_registrar(Registrar inner, bool pin, RegistrationStats* stats = nullptr);
// transport.register_memory through pinning_registrar; `transport` must outlive the result.
Registrar transport_registrar(Transport& transport, bool pin, RegistrationStats* stats = nullptr);

// Bytes this process holds locked through fabflow's pinning (pages counted once).
std::size_t pinned_bytes();
// The soft RLIMIT_MEMLOCK in bytes: SIZE_MAX when unlimited, and when the calling thread has
// CAP_IPC_LOCK (the kernel does not apply the limit to it, nor does verbs registration).
std::size_t memlock_limit();

enum class Invalidation : std::uint8_t {
  userfaultfd,  // the default: a monitor thread sees unmap, remove and remap events
  off,          // no caching: every acquire registers, every release deregisters
  // Caches with nothing watching the mappings: stale registrations are served. It exists only to
  // show that the adversarial tests fail without invalidation. Never use it elsewhere.
  none_unsafe_for_tests,
};

struct CacheOptions {
  std::size_t max_entries = 1024;
  std::size_t max_bytes = std::size_t{1} << 30;
  // Cached ranges are widened outward to this alignment (0: the page size; a power of two, at
  // least the page size). The caching pipeline asks for its fragment size. Where the widened
  // range cannot be registered (it runs past the mapping) the page-aligned range is.
  std::size_t alignment = 0;
  // The registrar pins pages: the byte bound is then min(max_bytes, RLIMIT_MEMLOCK).
  bool pinned = false;
  Invalidation invalidation = Invalidation::userfaultfd;
  // Debug: record each page's frame number (/proc/self/pagemap) at registration and check it on
  // every hit; a mismatch throws Error naming the range (a fabflow bug). See pagemap_check().
  bool verify_pagemap = false;
};

struct CacheStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;         // acquires that registered a new cached entry
  std::uint64_t evictions = 0;      // entries deregistered to keep within the bounds
  std::uint64_t invalidations = 0;  // entries dropped because their mapping changed
  std::uint64_t uncached = 0;       // acquires registered just for that use
  std::uint64_t entries = 0;        // cached now
  std::uint64_t bytes = 0;          // cached now (aligned ranges)
  RegistrationStats registration;   // every registration the cache made, cached or not

  std::string to_json() const;  // one object, stable field names (docs/registration-cache.md)
  std::string to_line() const;  // "hits 3 misses 1 ..." for a human
};

class RegistrationCache;

// The use of one registration: the region covering [addr, addr+len) that acquire() asked for.
// Move-only; releasing (or destroying) it makes the entry evictable again, or deregisters an
// uncached or invalidated registration. Must not outlive its cache.
class Lease {
 public:
  Lease() = default;
  Lease(Lease&& other) noexcept;
  Lease& operator=(Lease&& other) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease();

  explicit operator bool() const noexcept { return region_ != nullptr; }
  // The registration (its range may be wider than asked for).
  const MemoryRegion& region() const noexcept { return *region_; }
  void* desc() const noexcept { return region_->desc(); }
  bool cached() const noexcept { return entry_ != nullptr; }
  void release() noexcept;

 private:
  friend class RegistrationCache;
  RegistrationCache* cache_ = nullptr;
  void* entry_ = nullptr;  // the cache's entry; null for an uncached registration
  const MemoryRegion* region_ = nullptr;
  std::unique_ptr<MemoryRegion> owned_;  // an uncached registration
};

// Thread-safe: acquire() and Lease release may run on any thread.
class RegistrationCache {
 public:
  explicit RegistrationCache(Registrar registrar, CacheOptions options = {});
  // Every lease must have been released.
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // A registration covering [addr, addr+len) with at least `access`: a cached entry when one
  // fully contains the range with that access (a hit), else a new one. Throws what the registrar
  // throws, and Error when verify_pagemap finds a hit whose pages changed.
  Lease acquire(const void* addr, std::size_t len, unsigned access);

  CacheStats stats() const;
  // False when the cache registers every use afresh; disabled_reason() then says why
  // ("userfaultfd: Operation not permitted: caching is off").
  bool caching() const noexcept { return caching_; }
  const std::string& disabled_reason() const noexcept { return disabled_reason_; }
  // Whether verify_pagemap can compare frame numbers (they read as 0 without CAP_SYS_ADMIN);
  // empty when it can, else why not.
  const std::string& pagemap_check() const noexcept { return pagemap_reason_; }
  // Deregisters every entry not in use.
  void flush();

 private:
  friend class Lease;
  struct Entry;
  struct Monitor;
  struct State;

  void release(Entry* entry) noexcept;

  CacheOptions options_;
  bool caching_ = true;
  std::string disabled_reason_;
  std::string pagemap_reason_;
  std::unique_ptr<State> state_;
};

}  // namespace fabflow::bulk
