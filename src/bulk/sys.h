// Two small facts the registration code measures and rounds by, shared by the pinning and
// the registration cache: nanoseconds since a steady-clock instant, and the page size.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>

namespace fabflow::bulk {

inline std::uint64_t ns_since(std::chrono::steady_clock::time_point start) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
}

inline std::uintptr_t page_size() {
  static const auto size = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace fabflow::bulk
