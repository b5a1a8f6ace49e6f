#include "transport/libfabric/shm_lock_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string_view>

#include "common/errno_text.h"
#include "common/shm_regions.h"

namespace fabflow::ofi {

// The head of struct smr_region in libfabric 1.17 (include/ofi_shm.h), up to the lock.
struct ShmRegionHead117 {
  std::uint8_t version;
  std::uint8_t resv;
  std::uint16_t flags;
  int pid;  // written last by the owner once the region is ready
  std::uint8_t cma_cap_peer;
  std::uint8_t cma_cap_self;
  std::uint32_t max_sar_buf_per_peer;
  void* base_addr;
  pthread_spinlock_t lock;
};
static_assert(offsetof(ShmRegionHead117, lock) == 24, "libfabric 1.17's smr_region layout");
namespace {

constexpr std::uint8_t kShmRegionVersion117 = 4;

constexpr auto kWatchSample = std::chrono::milliseconds(100);
constexpr auto kWatchHeldBound = std::chrono::seconds(1);
constexpr auto kWatchStoppedSample = std::chrono::milliseconds(250);

// Whether process `pid` is stopped (by a signal or a tracer), from /proc/<pid>/stat.
bool process_stopped(pid_t pid) {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  const std::string_view stat(buf, static_cast<std::size_t>(n));
  const std::size_t paren = stat.rfind(')');  // the command name may hold anything but ')' last
  if (paren == std::string_view::npos || paren + 2 >= stat.size()) return false;
  return stat[paren + 2] == 'T' || stat[paren + 2] == 't';
}

using WatchClock = std::chrono::steady_clock;

std::string_view shm_name_without_scheme(std::string_view name) {
  const std::size_t at = name.find("://");
  return at == std::string_view::npos ? name : name.substr(at + 3);
}

}  // namespace

struct ShmLockWatch::Mapped {
  int rank = -1;
  pid_t pid = 0;
  int pidfd = -1;  // -1 for our own region, and once the peer is gone
  bool gone = false;
  ShmRegionHead117* head = nullptr;
  std::size_t length = 0;
  std::optional<WatchClock::time_point> held_since;
  std::optional<WatchClock::time_point> stopped_since;  // first seen stopped (SIGSTOP, a tracer)

  ~Mapped() {
    if (pidfd >= 0) ::close(pidfd);
    if (head) ::munmap(head, length);
  }

  // Whether some process holds the lock now (taking and dropping it when it is free).
  bool held() noexcept {
    if (::pthread_spin_trylock(&head->lock) != 0) return true;
    ::pthread_spin_unlock(&head->lock);
    return false;
  }
};

namespace {

// Maps the head of /dev/shm/<name> and checks it is a 1.17 region owned by `pid`; the error
// otherwise.
std::string map_shm_region(std::string_view name, pid_t pid, ShmLockWatch::Mapped& m) {
  const std::string path = "/dev/shm/" + std::string(name);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return errno_text("open " + path);
  m.length = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* at = ::mmap(nullptr, m.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (at == MAP_FAILED) return errno_text("mmap " + path, err);
  m.head = static_cast<ShmRegionHead117*>(at);
  const int owner = __atomic_load_n(&m.head->pid, __ATOMIC_ACQUIRE);
  if (m.head->version != kShmRegionVersion117 || owner != pid)
    return path + " is not a libfabric 1.17 region of pid " + std::to_string(pid);
  m.pid = pid;
  return {};
}

}  // namespace

std::unique_ptr<ShmLockWatch> ShmLockWatch::start(const Region& own, std::span<const Region> peers,
                                                  const std::string& libfabric,
                                                  std::chrono::milliseconds stopped_bound,
                                                  std::string* why) {
  auto say = [why](std::string text) -> std::unique_ptr<ShmLockWatch> {
    if (why) *why = std::move(text);
    return nullptr;
  };
  if (libfabric != "1.17" && !libfabric.starts_with("1.17."))
    return say("libfabric " + libfabric + " lays its shm regions out differently from 1.17");
  std::unique_ptr<ShmLockWatch> w(new ShmLockWatch);
  w->stopped_bound_ = stopped_bound;
  auto self = std::make_unique<Mapped>();
  self->rank = own.rank;
  if (std::string e = map_shm_region(shm_name_without_scheme(own.name), ::getpid(), *self);
      !e.empty())
    return say(e);
  w->regions_.push_back(std::move(self));
  for (const Region& p : peers) {
    const std::string_view name = shm_name_without_scheme(p.name);
    const std::optional<pid_t> owner = shm_region_owner(name);
    if (!owner || *owner == ::getpid()) continue;  // not fabflow's naming, or ourselves
    auto m = std::make_unique<Mapped>();
    m->rank = p.rank;
    if (!map_shm_region(name, *owner, *m).empty()) continue;  // gone already, or not a 1.17 region
    m->pidfd = static_cast<int>(::syscall(SYS_pidfd_open, *owner, 0));
    if (m->pidfd < 0) continue;
    w->regions_.push_back(std::move(m));
  }
  if (w->regions_.size() == 1) return say("no peer region to watch");
  w->stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->stop_fd_ < 0) return say(errno_text("eventfd"));
  w->thread_ = std::thread([p = w.get()] { p->run(); });
  return w;
}

ShmLockWatch::~ShmLockWatch() {
  if (thread_.joinable()) {
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

void ShmLockWatch::run() {
  std::vector<pollfd> fds;
  std::vector<Mapped*> of;  // the region behind fds[i + 1]
  bool any_gone = false;
  const bool watch_stops = stopped_bound_.count() > 0;
  for (;;) {
    fds.assign(1, pollfd{stop_fd_, POLLIN, 0});
    of.clear();
    for (auto& r : regions_)
      if (r->pidfd >= 0) {
        fds.push_back(pollfd{r->pidfd, POLLIN, 0});
        of.push_back(r.get());
      }
    const auto sample = any_gone ? kWatchSample : kWatchStoppedSample;
    const int timeout = any_gone || watch_stops ? static_cast<int>(sample.count()) : -1;
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return;
    if (fds[0].revents) return;
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      Mapped* r = of[i - 1];
      ::close(r->pidfd);
      r->pidfd = -1;
      r->gone = any_gone = true;
    }
    const WatchClock::time_point now = WatchClock::now();
    // A stopped peer may hold a lock: it is watched from the first sight of the stop, and its
    // lock released only once the stop outlasted the bootstrap's silence bound (the peer has
    // been declared failed by then, so nothing runs on with it).
    bool any_stopped = false, stop_outlasted = false;
    for (std::size_t i = 1; watch_stops && i < regions_.size(); ++i) {
      Mapped& r = *regions_[i];
      if (r.gone || !process_stopped(r.pid)) {
        r.stopped_since.reset();
        continue;
      }
      if (!r.stopped_since) r.stopped_since = now;
      any_stopped = true;
      stop_outlasted = stop_outlasted || now - *r.stopped_since >= stopped_bound_;
    }
    if (!any_gone && !any_stopped) {
      for (auto& r : regions_) r->held_since.reset();
      continue;
    }
    // Our own region (a dead or stopped peer may hold it) and each dead or stopped peer's own.
    for (auto& r : regions_) {
      const bool own = r.get() == regions_[0].get();
      if (!own && !r->gone && !r->stopped_since) {
        r->held_since.reset();
        continue;
      }
      if (!r->held()) {
        r->held_since.reset();
        continue;
      }
      if (!r->held_since) r->held_since = now;
      const bool may_release =
          own ? any_gone || stop_outlasted : r->gone || now - *r->stopped_since >= stopped_bound_;
      if (!may_release || now - *r->held_since < kWatchHeldBound) continue;
      ::pthread_spin_unlock(&r->head->lock);
      r->held_since.reset();
      releases_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace fabflow::ofi
