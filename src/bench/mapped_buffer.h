// A page-aligned buffer in a mapping of its own, touched: what the bulk benchmarks send from
// and receive into. Replacing one unmaps it, which is what a registration cache must notice.
#pragma once

#include <fabflow/status.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <utility>

namespace fabflow::bench {

class MappedBuffer {
 public:
  MappedBuffer() = default;
  // `n` bytes (at least one page mapped), every byte set to `fill`.
  MappedBuffer(std::size_t n, int fill) : n_(n) {
    constexpr std::size_t kPage = 4096;
    len_ = std::max<std::size_t>((n + kPage - 1) / kPage * kPage, kPage);
    void* p = ::mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw Error("bench: cannot map " + std::to_string(len_) + " bytes");
    p_ = static_cast<std::byte*>(p);
    std::memset(p_, fill, len_);
  }
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;
  MappedBuffer(MappedBuffer&& o) noexcept { *this = std::move(o); }
  MappedBuffer& operator=(MappedBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    std::swap(len_, o.len_);
    return *this;
  }
  ~MappedBuffer() {
    if (p_) ::munmap(p_, len_);
  }
  std::span<std::byte> span() const { return {p_, n_}; }

 private:
  std::byte* p_ = nullptr;
  std::size_t n_ = 0, len_ = 0;
};

}  // namespace fabflow::bench
