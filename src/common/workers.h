// A crew of server worker threads (the sequencer's and the key-value store's): each runs
// init(w) then body(w); the first failure raises `stop` for the others and is rethrown once
// all have joined.
#pragma once

#include <atomic>
#include <functional>

namespace fabflow {

// Returns the threads' CPU seconds, summed.
double run_workers(unsigned workers, const std::function<void(unsigned)>& init,
                   std::atomic<bool>& stop, const std::function<void(unsigned)>& body);

}  // namespace fabflow
