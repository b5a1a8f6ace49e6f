// Registration pinning (--mr-pin): mlock at registration, munlock at deregistration, with one
// process-wide page refcount because mlock does not count.
#include <sys/mman.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "bulk/page_counts.h"
#include "bulk/sys.h"
#include "common/errno_text.h"
#include "fabflow/regcache.h"

namespace fabflow::bulk {
namespace {

// The system calls themselves: sanitizers turn the libc wrappers into no-ops, and a sanitizer
// tree must pin (and cost) what a release tree does.
int lock_pages(std::uintptr_t a, std::size_t len) {
  return static_cast<int>(::syscall(SYS_mlock, a, len));
}
int unlock_pages(std::uintptr_t a, std::size_t len) {
  return static_cast<int>(::syscall(SYS_munlock, a, len));
}

// The pages fabflow holds locked. Thread-safe.
class PinTable {
 public:
  static PinTable& instance() {
    static PinTable* table = new PinTable;  // never destroyed: regions may outlive main
    return *table;
  }

  void pin(std::uintptr_t a, std::uintptr_t b) {
    std::lock_guard lock(mu_);
    const std::size_t need = counts_.uncovered(a, b);
    const std::size_t limit = memlock_limit();
    const std::size_t locked = counts_.covered();
    if (need > 0 && (locked > limit || need > limit - locked)) {
      throw UsageError("--mr-pin: RLIMIT_MEMLOCK is " + std::to_string(limit) +
                       " bytes, this registration needs " + std::to_string(need) + " more (" +
                       std::to_string(locked) + " locked): raise it with ulimit -l");
    }
    const auto fresh = counts_.add(a, b);
    for (std::size_t i = 0; i < fresh.size(); ++i) {
      const auto [x, y] = fresh[i];
      if (lock_pages(x, y - x) != 0) {
        const int err = errno;
        for (std::size_t j = 0; j < i; ++j) {
          unlock_pages(fresh[j].first, fresh[j].second - fresh[j].first);
        }
        counts_.remove(a, b);
        throw Error(errno_text("--mr-pin: mlock of " + std::to_string(y - x) + " bytes", err));
      }
    }
  }

  void unpin(std::uintptr_t a, std::uintptr_t b) noexcept {
    std::lock_guard lock(mu_);
    try {
      for (const auto& [x, y] : counts_.remove(a, b)) {
        unlock_pages(x, y - x);  // fails harmlessly if already unmapped
      }
    } catch (...) {  // allocation failure: the pages stay locked until unmapped
    }
  }

  std::size_t locked() {
    std::lock_guard lock(mu_);
    return counts_.covered();
  }

 private:
  std::mutex mu_;
  PageCounts counts_;
};

// A transport registration with its pages pinned; destroying it deregisters, then unpins.
class PinnedRegion final : public MemoryRegion {
 public:
  PinnedRegion(std::unique_ptr<MemoryRegion> inner, std::uintptr_t pin_a, std::uintptr_t pin_b,
               RegistrationStats* stats)
      : MemoryRegion(inner->data(), inner->size(), inner->desc()),
        inner_(std::move(inner)),
        pin_a_(pin_a),
        pin_b_(pin_b),
        stats_(stats) {}
  ~PinnedRegion() override {
    const auto start = std::chrono::steady_clock::now();
    inner_.reset();
    if (pin_b_ > pin_a_) PinTable::instance().unpin(pin_a_, pin_b_);
    if (stats_ != nullptr) {
      ++stats_->deregistrations;
      stats_->deregister_ns += ns_since(start);
    }
  }
  const MemoryRegion& registered() const noexcept override { return inner_->registered(); }

 private:
  std::unique_ptr<MemoryRegion> inner_;
  std::uintptr_t pin_a_, pin_b_;  // the pinned pages; empty when not pinning
  RegistrationStats* stats_;
};

}  // namespace

bool may_lock_without_limit() {
  // CAP_IPC_LOCK in the calling thread's effective set: the kernel lets it lock past the limit,
  // and verbs registration does not check the limit for it either.
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective & CAP_TO_MASK(CAP_IPC_LOCK)) != 0;
}

std::size_t memlock_limit() {
  if (may_lock_without_limit()) return SIZE_MAX;
  rlimit rl{};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  return static_cast<std::size_t>(rl.rlim_cur);
}

std::size_t pinned_bytes() { return PinTable::instance().locked(); }

Registrar pinning_registrar(Registrar inner, bool pin, RegistrationStats* stats) {
  return [inner = std::move(inner), pin, stats](void* addr, std::size_t len,
                                                unsigned access) -> std::unique_ptr<MemoryRegion> {
    const auto start = std::chrono::steady_clock::now();
    std::uintptr_t a = 0, b = 0;
    if (pin && len > 0) {
      a = reinterpret_cast<std::uintptr_t>(addr) & ~(page_size() - 1);
      b = (reinterpret_cast<std::uintptr_t>(addr) + len + page_size() - 1) & ~(page_size() - 1);
      PinTable::instance().pin(a, b);
    }
    std::unique_ptr<MemoryRegion> mr;
    try {
      mr = inner(addr, len, access);
    } catch (...) {
      if (b > a) PinTable::instance().unpin(a, b);
      throw;
    }
    auto region = std::make_unique<PinnedRegion>(std::move(mr), a, b, stats);
    if (stats != nullptr) {
      ++stats->registrations;
      stats->registered_bytes += len;
      stats->register_ns += ns_since(start);
    }
    return region;
  };
}

Registrar transport_registrar(Transport& transport, bool pin, RegistrationStats* stats) {
  return pinning_registrar(
      [&transport](void* addr, std::size_t len, unsigned access) {
        return transport.register_memory(addr, len, access);
      },
      pin, stats);
}

std::unique_ptr<MemoryRegion> register_buffer(Transport& transport, void* addr, std::size_t len,
                                              unsigned access, bool pin, RegistrationStats* stats) {
  return transport_registrar(transport, pin, stats)(addr, len, access);
}

}  // namespace fabflow::bulk
