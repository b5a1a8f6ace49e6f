#include "bulk/registrar.h"

#include <fabflow/bulk/transfer.h>

namespace fabflow::bulk {

Registrations::Registrations(Transport& t, const ChannelOptions& o) : t_(t), o_(o) {}
Registrations::~Registrations() = default;

RegistrationCache& Registrations::cache(std::size_t align) {
  auto& c = caches_[align];
  if (!c) {
    CacheOptions co;
    co.max_entries = o_.cache_entries;
    co.max_bytes = o_.cache_bytes;
    co.alignment = align;
    co.pinned = o_.pin;
    co.verify_pagemap = o_.cache_verify;
    c = std::make_unique<RegistrationCache>(transport_registrar(t_, o_.pin), co);
  }
  return *c;
}

void Registrations::adopt(const std::shared_ptr<Memory>& m) {
  memories_[reinterpret_cast<std::uintptr_t>(m->data())] = m;
}

std::pair<std::shared_ptr<Memory>, std::uint64_t> Registrations::find(const void* addr,
                                                                      std::size_t len) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  auto it = memories_.upper_bound(a);
  if (it == memories_.begin()) return {};
  --it;
  std::shared_ptr<Memory> m = it->second.lock();
  if (!m) {  // freed: its address may come back in another memory
    memories_.erase(it);
    return {};
  }
  const std::uint64_t off = a - it->first;
  if (off > m->size() || len > m->size() - off) return {};
  return {std::move(m), off};
}

Registration Registrations::acquire(void* addr, std::size_t len, unsigned access, bool cached,
                                    std::size_t align) {
  if (auto [m, off] = find(addr, len); m) {
    const MemoryRegion* region = &m->region();
    return Registration(region, off, m);
  }
  if (!cached) {
    std::shared_ptr<MemoryRegion> mr = register_buffer(t_, addr, len, access, o_.pin, &direct_);
    const MemoryRegion* raw = mr.get();
    return Registration(raw, 0, mr);
  }
  // Cached entries serve every later use of their range: registered for every access.
  auto lease = std::make_shared<Lease>(cache(align).acquire(addr, len, kAllAccess));
  const MemoryRegion& region = lease->region();
  const auto offset =
      static_cast<std::uint64_t>(static_cast<const std::byte*>(addr) - region.data());
  return Registration(&region, offset, lease);
}

void Registrations::fill(Stats& s) {
  RegistrationStats r = direct_;
  r.registrations -= direct_base_.registrations;
  r.deregistrations -= direct_base_.deregistrations;
  r.register_ns -= direct_base_.register_ns;
  r.deregister_ns -= direct_base_.deregister_ns;
  s.cache_hits = s.cache_misses = s.cache_evictions = s.cache_invalidations = s.cache_uncached = 0;
  for (const auto& [align, c] : caches_) {
    CacheStats now = c->stats();
    CacheStats base;
    if (auto it = cache_base_.find(align); it != cache_base_.end()) base = it->second;
    r.registrations += now.registration.registrations - base.registration.registrations;
    r.deregistrations += now.registration.deregistrations - base.registration.deregistrations;
    r.register_ns += now.registration.register_ns - base.registration.register_ns;
    r.deregister_ns += now.registration.deregister_ns - base.registration.deregister_ns;
    s.cache_hits += now.hits - base.hits;
    s.cache_misses += now.misses - base.misses;
    s.cache_evictions += now.evictions - base.evictions;
    s.cache_invalidations += now.invalidations - base.invalidations;
    s.cache_uncached += now.uncached - base.uncached;
  }
  s.registrations = r.registrations;
  s.deregistrations = r.deregistrations;
  s.registration_ns = r.register_ns;
  s.deregistration_ns = r.deregister_ns;
  s.cache_state = cache_state();
}

void Registrations::reset() noexcept {
  direct_base_ = direct_;
  for (const auto& [align, c] : caches_) cache_base_[align] = c->stats();
}

std::string Registrations::cache_state() {
  // Every cache of the channel is alike: the first one tells.
  const RegistrationCache& c = caches_.empty() ? cache(4096) : *caches_.begin()->second;
  if (!c.caching()) return "off: " + c.disabled_reason();
  return "on (userfaultfd invalidation)";
}

}  // namespace fabflow::bulk
