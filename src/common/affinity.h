// CPU pinning and CPU-time helpers.
#pragma once

#include <string>
#include <vector>

namespace fabflow {

// CPUs this process may run on, in ascending order.
std::vector<int> allowed_cpus();

// Pins the calling thread to `cpu`; returns false (and leaves it unpinned) on failure.
bool pin_current_thread(int cpu);

// The CPU the rank with `local_rank` pins to: the local_rank-th allowed CPU, wrapping.
int cpu_for_local_rank(int local_rank);

// CPU seconds consumed so far by the calling thread / the whole process.
double thread_cpu_seconds();
double process_cpu_seconds();

}  // namespace fabflow
