#include "common/idle_poll.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>

#include "common/errno_text.h"

namespace fabflow {
namespace {

constexpr const char* kDevice = "/dev/cpu_dma_latency";

std::mutex state_mutex;
std::string state = "default";
std::string reason;

void record(bool held, const std::string& why) {
  std::lock_guard<std::mutex> lock(state_mutex);
  state = held ? "poll" : "default";
  reason = why;
}

}  // namespace

IdlePolling::IdlePolling() {
  try {
    Fd fd(::open(kDevice, O_WRONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      why_not_ = errno_text(kDevice, errno);
    } else {
      const std::int32_t us = 0;
      if (::write(fd.get(), &us, sizeof us) == static_cast<ssize_t>(sizeof us))
        fd_ = std::move(fd);
      else
        why_not_ = errno_text(std::string(kDevice) + ": write", errno);
    }
    record(held(), why_not_);
  } catch (...) {  // a string that could not be allocated: nothing held, nothing recorded
    fd_ = Fd();
  }
}

IdlePolling::~IdlePolling() {
  if (!held()) return;
  fd_ = Fd();  // closing the file drops the request
  try {
    record(false, "the request was released");
  } catch (...) {
  }
}

std::string cpu_idle_state() {
  std::lock_guard<std::mutex> lock(state_mutex);
  return state;
}

std::string cpu_idle_why_not() {
  std::lock_guard<std::mutex> lock(state_mutex);
  return reason;
}

}  // namespace fabflow
