#include "bulk/uffd_monitor.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/errno_text.h"

namespace fabflow::bulk {
namespace {

constexpr std::uint64_t kFeatures =
    UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;

// The userfaultfd system call, user-mode faults only (all this needs: it works with
// vm.unprivileged_userfaultfd=0 for anyone), then without that flag (kernels before 5.11), then
// /dev/userfaultfd (its permissions may allow what the system call does not).
int open_uffd(std::string* reason) {
  const int flags = O_CLOEXEC | O_NONBLOCK;
  int fd = static_cast<int>(::syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY));
  if (fd < 0 && errno == EINVAL) fd = static_cast<int>(::syscall(SYS_userfaultfd, flags));
  if (fd >= 0) return fd;
  const int syscall_err = errno;
  const int dev = ::open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (dev >= 0) {
    fd = ::ioctl(dev, USERFAULTFD_IOC_NEW, flags);
    const int dev_err = errno;
    ::close(dev);
    if (fd >= 0) return fd;
    *reason = errno_text("userfaultfd: /dev/userfaultfd USERFAULTFD_IOC_NEW", dev_err);
    return -1;
  }
  *reason = errno_text("userfaultfd", syscall_err);
  return -1;
}

}  // namespace

std::unique_ptr<UffdMonitor> UffdMonitor::open(std::string* reason) {
  const char* deny = std::getenv("FABFLOW_NO_USERFAULTFD");
  if (deny != nullptr && std::strcmp(deny, "1") == 0) {
    *reason = "userfaultfd: FABFLOW_NO_USERFAULTFD=1 says to behave as if it were denied";
    return nullptr;
  }
  const int fd = open_uffd(reason);
  if (fd < 0) return nullptr;
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = kFeatures;
  if (::ioctl(fd, UFFDIO_API, &api) != 0 || (api.features & kFeatures) != kFeatures) {
    *reason = errno_text("userfaultfd: UFFDIO_API (unmap, remove and remap events)", errno);
    ::close(fd);
    return nullptr;
  }
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    *reason = errno_text("userfaultfd: eventfd", errno);
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<UffdMonitor>(new UffdMonitor(fd, wake));
}

UffdMonitor::UffdMonitor(int uffd, int wake) : uffd_(uffd), wake_(wake) {
  thread_ = std::thread([this] { run(); });
}

UffdMonitor::~UffdMonitor() {
  stop_.store(true);
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wake_, &one, sizeof one);
  thread_.join();
  ::close(uffd_);  // drops every registration and wakes anyone still waiting on an event
  ::close(wake_);
}

bool UffdMonitor::watch(std::uintptr_t a, std::uintptr_t b) noexcept {
  uffdio_register reg{};
  reg.range.start = a;
  reg.range.len = b - a;
  // Write-protect mode with nothing ever write-protected: faults go on as usual. Missing mode
  // would stop every first touch of a page (after madvise DONTNEED too) until handled.
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  return ::ioctl(uffd_, UFFDIO_REGISTER, &reg) == 0;
}

void UffdMonitor::unwatch(std::uintptr_t a, std::uintptr_t b) noexcept {
  uffdio_range range{};
  range.start = a;
  range.len = b - a;
  ::ioctl(uffd_, UFFDIO_UNREGISTER, &range);
}

bool UffdMonitor::take(std::vector<ChangedRange>& out) {
  std::array<ChangedRange, kRing> copy;
  std::size_t n = 0;
  bool lost = false;
  {
    std::lock_guard lock(ring_mu_);
    // Events the thread has not read yet belong to munmaps that have not returned: reading
    // them here is not needed for correctness, but it makes a lookup see them sooner.
    read_events();
    n = count_;
    lost = overflow_;
    std::copy(ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(n), copy.begin());
    count_ = 0;
    overflow_ = false;
  }
  out.insert(out.end(), copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(n));
  return !lost;
}

void UffdMonitor::read_events() noexcept {
  uffd_msg msgs[16];
  for (;;) {
    const ssize_t got = ::read(uffd_, msgs, sizeof msgs);
    if (got <= 0) return;  // EAGAIN: nothing more
    for (std::size_t i = 0; i < static_cast<std::size_t>(got) / sizeof(uffd_msg); ++i) {
      const uffd_msg& m = msgs[i];
      ChangedRange r[2];
      int k = 0;
      switch (m.event) {
        case UFFD_EVENT_UNMAP:
        case UFFD_EVENT_REMOVE: r[k++] = {m.arg.remove.start, m.arg.remove.end}; break;
        case UFFD_EVENT_REMAP:
          r[k++] = {m.arg.remap.from, m.arg.remap.from + m.arg.remap.len};
          r[k++] = {m.arg.remap.to, m.arg.remap.to + m.arg.remap.len};
          break;
        default: break;  // no page is ever write-protected: no fault can come
      }
      for (int j = 0; j < k; ++j) {
        if (count_ < kRing) {
          ring_[count_++] = r[j];
        } else {
          overflow_ = true;
        }
      }
    }
  }
}

void UffdMonitor::run() noexcept {
  pollfd fds[2] = {{uffd_, POLLIN, 0}, {wake_, POLLIN, 0}};
  while (!stop_.load()) {
    if (::poll(fds, 2, -1) < 0) continue;  // EINTR
    if ((fds[0].revents & POLLIN) != 0) {
      std::lock_guard lock(ring_mu_);
      read_events();
    }
    if ((fds[0].revents & (POLLERR | POLLHUP)) != 0) return;
  }
}

}  // namespace fabflow::bulk
