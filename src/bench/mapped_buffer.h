// A page-aligned buffer in a mapping of its own, touched: what the bulk benchmarks send from
// and receive into. Replacing one unmaps it, which is what a registration cache must notice.
// Also the memcpy reference the bulk and queue benchmarks print beside their bandwidths.
#pragma once

#include <fabflow/status.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
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

// memcpy of `size` bytes between two touched buffers on the calling thread's CPU: MB/s over
// about `bytes` moved (at least 4 copies).
inline double memcpy_mb_s(std::size_t size, std::uint64_t bytes) {
  MappedBuffer a(size, 1), b(size, 2);
  const std::uint64_t n = std::max<std::uint64_t>(4, bytes / std::max<std::size_t>(size, 1));
  std::memcpy(b.span().data(), a.span().data(), size);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < n; ++i) {
    std::memcpy(b.span().data(), a.span().data(), size);
    asm volatile("" ::: "memory");
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(size) * static_cast<double>(n) / s / 1e6;
}

}  // namespace fabflow::bench
