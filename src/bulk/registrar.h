// How the bulk channel registers user buffers: directly (registered for the transfer,
// deregistered after it, pinned first in --mr-pin mode) or through the registration cache
// (leave-pinned, caching-pipeline). Counts what it did for the channel's Stats.
#pragma once

#include <fabflow/bulk.h>
#include <fabflow/transport.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace fabflow::bulk {

// One registration in use: the region, where the requested bytes start in it, and how to give
// it back (deregister, or release the cache's lease). Move-only; released on destruction.
class Registration {
 public:
  Registration() = default;
  Registration(const MemoryRegion* mr, std::uint64_t offset, std::function<void()> release)
      : mr(mr), offset(offset), release_(std::move(release)) {}
  Registration(Registration&& o) noexcept { *this = std::move(o); }
  Registration& operator=(Registration&& o) noexcept {
    if (this != &o) {
      reset();
      mr = o.mr;
      offset = o.offset;
      release_ = std::move(o.release_);
      o.mr = nullptr;
      o.release_ = nullptr;
    }
    return *this;
  }
  ~Registration() { reset(); }
  void reset() noexcept {
    if (release_) release_();
    release_ = nullptr;
    mr = nullptr;
  }

  const MemoryRegion* mr = nullptr;
  std::uint64_t offset = 0;  // of the requested bytes in *mr

 private:
  std::function<void()> release_;
};

class Registrar {
 public:
  Registrar(Transport& t, const ChannelOptions& o);
  ~Registrar();
  Registrar(const Registrar&) = delete;
  Registrar& operator=(const Registrar&) = delete;

  // Registers [addr, addr+len) for `access`; `cached` takes it from the registration cache
  // (aligned outward to `align`), which falls back to a plain registration where it is off.
  Registration acquire(void* addr, std::size_t len, unsigned access, bool cached,
                       std::size_t align = 4096);
  void fill(Stats& s) const;  // registration and cache counters
  void reset() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fabflow::bulk
