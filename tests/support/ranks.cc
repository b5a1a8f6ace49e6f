#include "support/ranks.h"

#include <fabflow/status.h>

#include <chrono>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

namespace fabflow::testing {

std::string run_ranks(int n, const TransportOptions& options,
                      const std::function<void(int, Transport&, Bootstrap&)>& body,
                      const WrapTransport& wrap) {
  auto boots = make_thread_bootstraps(n);
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  // The transports outlive every rank's thread: shm maps a peer endpoint of the same process
  // by pointer, so a rank that fails and closes its transport at once would pull the region
  // from under a peer still reading it (a crash in libfabric instead of the failure's message).
  std::vector<std::unique_ptr<Transport>> transports(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto& boot = *boots[static_cast<std::size_t>(r)];
      auto& t = transports[static_cast<std::size_t>(r)];
      try {
        t = open_transport(options);
        if (wrap) t = wrap(std::move(t));
        t->connect(boot);
        body(r, *t, boot);
        boot.barrier([&] { t->progress(); });
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = "rank " + std::to_string(r) + ": " + e.what();
        boot.abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  transports.clear();
  // Every rank's error: the first to fail is often not the one that reports first.
  std::string all;
  for (const auto& e : errors)
    if (!e.empty()) all += (all.empty() ? "" : "; ") + e;
  return all;
}

Completion wait_one(Transport& t, Cq cq) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  Completion c[1];
  for (;;) {
    const int n = cq == Cq::rx ? t.poll_rx(c) : t.poll_tx(c);
    if (n < 0) throw Error(t.last_error());
    if (n == 1) return c[0];
    if (std::chrono::steady_clock::now() > deadline) throw Error("no completion within 5 s");
  }
}

}  // namespace fabflow::testing
