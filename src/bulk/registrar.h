// How the bulk channel registers user buffers: directly (registered for the transfer,
// deregistered after it, pinned first in --mr-pin mode) or through a registration cache
// (leave-pinned, caching-pipeline; fabflow/regcache.h). Counts what it did for Stats.
#pragma once

#include <fabflow/bulk.h>
#include <fabflow/regcache.h>
#include <fabflow/transport.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

namespace fabflow::bulk {

// One registration in use: the region, where the requested bytes start in it, and what holds
// it (the adopted memory, the direct registration or the cache's lease: dropping the holder
// gives it back). Move-only; given back on destruction or when replaced (`reg = {}`).
class Registration {
 public:
  Registration() = default;
  Registration(const MemoryRegion* mr, std::uint64_t offset, std::shared_ptr<void> holder)
      : mr(mr), offset(offset), holder_(std::move(holder)) {}
  Registration(Registration&&) noexcept = default;
  Registration& operator=(Registration&&) noexcept = default;
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

  const MemoryRegion* mr = nullptr;
  std::uint64_t offset = 0;  // of the requested bytes in *mr

 private:
  std::shared_ptr<void> holder_;
};

class Registrations {
 public:
  Registrations(Transport& t, const ChannelOptions& o);
  ~Registrations();
  Registrations(const Registrations&) = delete;
  Registrations& operator=(const Registrations&) = delete;

  // Registers [addr, addr+len) for `access`; `cached` takes it from the registration cache
  // whose ranges are aligned to `align` (one cache per alignment), which registers afresh
  // where caching is off (cache_state() says why). A range inside a memory of adopt() is
  // that memory's registration (nothing registered; the memory is held until the release).
  Registration acquire(void* addr, std::size_t len, unsigned access, bool cached,
                       std::size_t align = 4096);
  // Memories already registered with the transport (Channel::allocate), known by address as
  // long as they live.
  void adopt(const std::shared_ptr<Memory>& m);
  // The live adopted memory holding all of [addr, addr+len), and where it starts in it.
  std::pair<std::shared_ptr<Memory>, std::uint64_t> find(const void* addr, std::size_t len);
  void fill(Stats& s);  // registration and cache counters since reset()
  void reset() noexcept;
  // "on (userfaultfd invalidation)" or "off: <why>" (makes the page-aligned cache to know).
  std::string cache_state();

 private:
  RegistrationCache& cache(std::size_t align);

  Transport& t_;
  ChannelOptions o_;
  RegistrationStats direct_;  // registrations made outside the caches
  std::map<std::size_t, std::unique_ptr<RegistrationCache>> caches_;  // by alignment
  RegistrationStats direct_base_;
  std::map<std::uintptr_t, std::weak_ptr<Memory>> memories_;  // by start address
  std::map<std::size_t, CacheStats> cache_base_;
};

}  // namespace fabflow::bulk
