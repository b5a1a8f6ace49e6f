#include "common/workers.h"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "common/affinity.h"

namespace fabflow {

double run_workers(unsigned workers, const std::function<void(unsigned)>& init,
                   std::atomic<bool>& stop, const std::function<void(unsigned)>& body) {
  std::mutex m;
  std::exception_ptr first;
  double cpu = 0;
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      try {
        if (init) init(w);
        body(w);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!first) first = std::current_exception();
        stop.store(true);
      }
      std::lock_guard<std::mutex> lock(m);
      cpu += thread_cpu_seconds();
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
  return cpu;
}

}  // namespace fabflow
