#include "common/affinity.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

namespace fabflow {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return {0};
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus.empty() ? std::vector<int>{0} : cpus;
}

bool pin_current_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

int cpu_for_local_rank(int local_rank) {
  auto cpus = allowed_cpus();
  return cpus[static_cast<std::size_t>(local_rank < 0 ? 0 : local_rank) % cpus.size()];
}

static double seconds(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double thread_cpu_seconds() { return seconds(CLOCK_THREAD_CPUTIME_ID); }
double process_cpu_seconds() { return seconds(CLOCK_PROCESS_CPUTIME_ID); }

}  // namespace fabflow
