// ShmLockWatch against regions laid out as libfabric 1.17's shm provider lays them out: a lock
// held by a live peer is left alone however long it is held, the same lock is released about a
// second after the holder is SIGKILLed (still a zombie), and another libfabric is not watched.
#include "transport/libfabric/shm_lock_watch.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/shm_regions.h"

namespace fabflow::ofi {
namespace {

using namespace std::chrono_literals;

struct Head {  // struct smr_region of libfabric 1.17, up to its lock
  std::uint8_t version;
  std::uint8_t resv;
  std::uint16_t flags;
  int pid;
  std::uint8_t cma_cap_peer, cma_cap_self;
  std::uint32_t max_sar_buf_per_peer;
  void* base_addr;
  pthread_spinlock_t lock;
};

// A region of this process in /dev/shm, as the provider would create it. Unlinked on scope exit.
struct FakeRegion {
  std::string name = shm_region_name();
  Head* head = nullptr;
  FakeRegion() {
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, 4096), 0);
    head = static_cast<Head*>(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ::close(fd);
    head->version = 4;
    head->base_addr = head;
    ::pthread_spin_init(&head->lock, PTHREAD_PROCESS_SHARED);
    head->pid = ::getpid();
  }
  ~FakeRegion() {
    ::munmap(head, 4096);
    ::shm_unlink(name.c_str());
  }
  bool held() {
    if (::pthread_spin_trylock(&head->lock) != 0) return true;
    ::pthread_spin_unlock(&head->lock);
    return false;
  }
};

// A forked peer with a region of its own that takes `own`'s lock and holds it until it is killed.
struct Holder {
  pid_t pid = -1;
  std::string region;
};
Holder hold_lock_in_child(FakeRegion& own) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return {};
  const pid_t child = ::fork();
  if (child == 0) {
    FakeRegion peer;
    ::pthread_spin_lock(&own.head->lock);
    [[maybe_unused]] ssize_t n = ::write(pipe_fds[1], peer.name.c_str(), peer.name.size());
    for (;;) ::pause();
  }
  ::close(pipe_fds[1]);
  char buf[128] = {};
  const bool told = child > 0 && ::read(pipe_fds[0], buf, sizeof buf - 1) > 0;
  ::close(pipe_fds[0]);
  return told ? Holder{child, buf} : Holder{};
}

// Seconds until `own`'s lock is free (at most `within`).
double seconds_until_released(FakeRegion& own, std::chrono::milliseconds within) {
  const auto from = std::chrono::steady_clock::now();
  while (own.held() && std::chrono::steady_clock::now() - from < within)
    std::this_thread::sleep_for(10ms);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
}

TEST(ShmLockWatch, ReleasesTheLockOfAPeerKilledHoldingItAndOnlyThen) {
  FakeRegion own;
  const Holder holder = hold_lock_in_child(own);
  ASSERT_GT(holder.pid, 0);
  const pid_t child = holder.pid;
  const std::string peer_name = holder.region;

  std::string why;
  const ShmLockWatch::Region peers[] = {{1, peer_name}};
  auto watch = ShmLockWatch::start({0, own.name}, peers, "1.17.0", 2000ms, &why);
  ASSERT_NE(watch, nullptr) << why;

  std::this_thread::sleep_for(1500ms);  // the holder lives: its lock stays held
  EXPECT_TRUE(own.held());
  EXPECT_EQ(watch->releases(), 0u);

  ::kill(child, SIGKILL);  // not reaped yet: a zombie is gone too
  const double after = seconds_until_released(own, 5s);
  EXPECT_FALSE(own.held());
  EXPECT_EQ(watch->releases(), 1u);
  EXPECT_GE(after, 0.9);  // held for a whole second first
  EXPECT_LT(after, 3.0);
  watch.reset();
  ::waitpid(child, nullptr, 0);
  ::shm_unlink(peer_name.c_str());
}

// A peer stopped holding the lock keeps it while the stop is shorter than the silence bound
// (it may resume), and loses it once the stop outlasted the bound; with no bound, never.
TEST(ShmLockWatch, ReleasesTheLockOfAPeerStoppedPastTheSilenceBound) {
  for (const auto bound : {2000ms, 0ms}) {
    FakeRegion own;
    const Holder holder = hold_lock_in_child(own);
    ASSERT_GT(holder.pid, 0);
    std::string why;
    const ShmLockWatch::Region peers[] = {{1, holder.region}};
    auto watch = ShmLockWatch::start({0, own.name}, peers, "1.17.0", bound, &why);
    ASSERT_NE(watch, nullptr) << why;
    ::kill(holder.pid, SIGSTOP);
    const double after = seconds_until_released(own, 4s);
    if (bound.count() > 0) {
      EXPECT_FALSE(own.held());
      EXPECT_EQ(watch->releases(), 1u);
      EXPECT_GE(after, 1.9);  // not before the stop outlasted the bound
      EXPECT_LT(after, 3.0);  // the bound + a second
    } else {
      EXPECT_TRUE(own.held());
      EXPECT_EQ(watch->releases(), 0u);
    }
    watch.reset();
    ::kill(holder.pid, SIGKILL);
    ::waitpid(holder.pid, nullptr, 0);
    ::shm_unlink(holder.region.c_str());
  }
}

TEST(ShmLockWatch, WatchesNothingOnAnotherLibfabricOrWithoutPeers) {
  FakeRegion own;
  std::string why;
  const ShmLockWatch::Region none[] = {{1, "not_a_fabflow_region"}};
  EXPECT_EQ(ShmLockWatch::start({0, own.name}, none, "1.18.0", 0ms, &why), nullptr);
  EXPECT_NE(why.find("1.18.0"), std::string::npos) << why;
  EXPECT_EQ(ShmLockWatch::start({0, own.name}, none, "1.17", 0ms, &why), nullptr);
  EXPECT_EQ(why, "no peer region to watch");
}

TEST(ShmLockWatch, RefusesARegionThatIsNotLaidOutAs117) {
  FakeRegion own;
  own.head->version = 5;
  std::string why;
  EXPECT_EQ(ShmLockWatch::start({0, own.name}, {}, "1.17.0", 0ms, &why), nullptr);
  EXPECT_NE(why.find("is not a libfabric 1.17 region"), std::string::npos) << why;
}

}  // namespace
}  // namespace fabflow::ofi
