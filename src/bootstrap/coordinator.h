// Rank 0's coordinator: authenticates every rank, relays all-gathers and barriers, turns a
// rank's hang-up, abort or silence into an ABORT for everyone else, and tells every rank how
// long each rank has been silent (protocol in docs/bootstrap.md).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "bootstrap/net.h"

namespace fabflow::bootstrap_detail {

struct CoordinatorConfig {
  int size = 0;
  std::string secret;
  std::chrono::milliseconds timeout{0};  // join bound, handshake bound, shutdown linger bound
  std::chrono::milliseconds silence{0};  // a joined rank not heard from for this long is stuck
  std::string label;                     // "host:port" for messages
};

// How often a rank's heartbeat thread beats, and the coordinator reports liveness, for a
// silence bound: a bound of 8 beats or more (10 to 250 ms).
std::chrono::milliseconds heartbeat_interval(std::chrono::milliseconds silence);

// Serves the protocol on one background thread that owns the listener and every connection.
// Move-less; constructed and destroyed by one thread, which shares only the stop request.
class Coordinator {
 public:
  Coordinator(Fd listener, CoordinatorConfig config);
  // Lingers until every rank that joined said BYE or hung up, at most config.timeout; after a
  // failure, only until every rank still answering has been told.
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

 private:
  class Relay;

  Fd wake_;  // eventfd that interrupts the worker's poll
  std::chrono::milliseconds linger_;
  SteadyClock::time_point stop_deadline_{};  // written before stop_ is set, read after
  std::atomic<bool> stop_{false};
  std::unique_ptr<Relay> relay_;
  std::thread worker_;
};

}  // namespace fabflow::bootstrap_detail
