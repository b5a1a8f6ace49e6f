#include "bulk/registrar.h"

#include <chrono>

namespace fabflow::bulk {
namespace {
std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}
}  // namespace

struct Registrar::Impl {
  Transport& t;
  ChannelOptions o;
  std::uint64_t registrations = 0, deregistrations = 0, reg_ns = 0, dereg_ns = 0;
};

Registrar::Registrar(Transport& t, const ChannelOptions& o) : impl_(new Impl{t, o}) {}
Registrar::~Registrar() = default;

Registration Registrar::acquire(void* addr, std::size_t len, unsigned access, bool /*cached*/,
                                std::size_t /*align*/) {
  Impl& i = *impl_;
  const std::uint64_t t0 = now_ns();
  std::shared_ptr<MemoryRegion> mr = i.t.register_memory(addr, len, access);
  i.reg_ns += now_ns() - t0;
  ++i.registrations;
  const MemoryRegion* raw = mr.get();
  return Registration(raw, 0, [&i, mr]() mutable {
    const std::uint64_t t1 = now_ns();
    mr.reset();
    i.dereg_ns += now_ns() - t1;
    ++i.deregistrations;
  });
}

void Registrar::fill(Stats& s) const {
  s.registrations = impl_->registrations;
  s.deregistrations = impl_->deregistrations;
  s.registration_ns = impl_->reg_ns;
  s.deregistration_ns = impl_->dereg_ns;
  s.cache_state = "not yet";
}

void Registrar::reset() noexcept {
  impl_->registrations = impl_->deregistrations = impl_->reg_ns = impl_->dereg_ns = 0;
}

}  // namespace fabflow::bulk
