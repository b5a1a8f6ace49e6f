#include "common/perf.h"

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace fabflow {
namespace {

int open_counter(std::uint64_t config) {
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_HARDWARE;
  attr.config = config;
  // Kernel work would need perf_event_paranoid <= 1; user-space work is what the data path is.
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  return static_cast<int>(syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
}

std::optional<std::uint64_t> read_counter(int fd) {
  std::uint64_t v = 0;
  if (fd < 0 || ::read(fd, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) return std::nullopt;
  return v;
}

}  // namespace

ThreadCounters::ThreadCounters() {
  instructions_fd_ = open_counter(PERF_COUNT_HW_INSTRUCTIONS);
  cycles_fd_ = open_counter(PERF_COUNT_HW_CPU_CYCLES);
}

ThreadCounters::~ThreadCounters() {
  if (instructions_fd_ >= 0) ::close(instructions_fd_);
  if (cycles_fd_ >= 0) ::close(cycles_fd_);
}

std::optional<CounterValues> ThreadCounters::read() const noexcept {
  auto i = read_counter(instructions_fd_);
  auto c = read_counter(cycles_fd_);
  if (!i || !c) return std::nullopt;
  return CounterValues{*i, *c};
}

}  // namespace fabflow
