// Move-only RAII owners for libfabric objects, and the one-line error formatting every
// libfabric call site uses.
#pragma once

#include <fabflow/status.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "transport/libfabric/loader.h"

#include <string>
#include <utility>

namespace fabflow::ofi {

// "fi_endpoint on shm: Function not implemented (-38)"
std::string call_error(const char* call, const std::string& provider, long rc);

// Throws Error when rc is negative.
inline void check(long rc, const char* call, const std::string& provider) {
  if (rc < 0) throw Error(call_error(call, provider, rc));
}

// Owns a pointer that Free{}(p) releases on destruction. Move-only; not thread-safe.
template <class T, class Free>
class Owner {
 public:
  Owner() = default;
  explicit Owner(T* p) noexcept : p_(p) {}
  Owner(Owner&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Owner& operator=(Owner&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;
  ~Owner() { reset(); }

  void reset() noexcept {
    if (p_) Free{}(p_);
    p_ = nullptr;
  }
  T* get() const noexcept { return p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }

 protected:
  T* p_ = nullptr;
};

struct CloseFid {
  template <class T>
  void operator()(T* p) const noexcept {
    fi_close(&p->fid);
  }
};

// Owns one fid_* object and closes it (fi_close) on destruction.
template <class T>
class Fid : public Owner<T, CloseFid> {
 public:
  using Owner<T, CloseFid>::Owner;

  // Where a call writes a new object, the one held closed first.
  T** out() noexcept {
    this->reset();
    return &this->p_;
  }
  fid_t fid() const noexcept { return &this->p_->fid; }
};

struct FreeInfo {
  void operator()(fi_info* p) const noexcept { lib::freeinfo(p); }
};

// Owns an fi_info list (fi_freeinfo).
class InfoPtr : public Owner<fi_info, FreeInfo> {
 public:
  using Owner::Owner;

  fi_info* operator->() const noexcept { return p_; }
  fi_info** out() noexcept { return &p_; }
  fi_info* release() noexcept { return std::exchange(p_, nullptr); }
};

}  // namespace fabflow::ofi
