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

// Owns one fid_* object and closes it (fi_close) on destruction. Move-only; not thread-safe.
template <class T>
class Fid {
 public:
  Fid() = default;
  explicit Fid(T* p) noexcept : p_(p) {}
  Fid(Fid&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Fid& operator=(Fid&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  Fid(const Fid&) = delete;
  Fid& operator=(const Fid&) = delete;
  ~Fid() { reset(); }

  void reset() noexcept {
    if (p_) fi_close(&p_->fid);
    p_ = nullptr;
  }
  T* get() const noexcept { return p_; }
  T** out() noexcept {
    reset();
    return &p_;
  }
  fid_t fid() const noexcept { return &p_->fid; }
  explicit operator bool() const noexcept { return p_ != nullptr; }

 private:
  T* p_ = nullptr;
};

// Owns an fi_info list (fi_freeinfo). Move-only.
class InfoPtr {
 public:
  InfoPtr() = default;
  explicit InfoPtr(fi_info* p) noexcept : p_(p) {}
  InfoPtr(InfoPtr&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  InfoPtr& operator=(InfoPtr&& o) noexcept {
    if (this != &o) {
      if (p_) lib::freeinfo(p_);
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  InfoPtr(const InfoPtr&) = delete;
  InfoPtr& operator=(const InfoPtr&) = delete;
  ~InfoPtr() {
    if (p_) lib::freeinfo(p_);
  }
  fi_info* get() const noexcept { return p_; }
  fi_info* operator->() const noexcept { return p_; }
  fi_info** out() noexcept { return &p_; }
  fi_info* release() noexcept { return std::exchange(p_, nullptr); }
  explicit operator bool() const noexcept { return p_ != nullptr; }

 private:
  fi_info* p_ = nullptr;
};

}  // namespace fabflow::ofi
