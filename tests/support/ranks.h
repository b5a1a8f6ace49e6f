// Ranks as threads: the in-process tests' way to run a collective over real transports, and
// waiting for one completion.
#pragma once

#include <fabflow/bootstrap.h>
#include <fabflow/transport.h>

#include <functional>
#include <memory>
#include <string>

namespace fabflow::testing {

// What run_ranks may put around each opened transport (a fault wrapper) before it connects.
using WrapTransport = std::function<std::unique_ptr<Transport>(std::unique_ptr<Transport>)>;

// Runs body(rank, transport, boot) on n threads, each with its own transport opened with
// `options` (passed through `wrap` when given) and connected through a thread bootstrap; every
// rank ends in a barrier that drives progress. Returns the failures ("rank R: what", joined by
// "; "), or "" when all succeeded.
std::string run_ranks(int n, const TransportOptions& options,
                      const std::function<void(int, Transport&, Bootstrap&)>& body,
                      const WrapTransport& wrap = {});

// Which completion queue wait_one polls.
enum class Cq { tx, rx };

// Polls `cq` of `t` (poll_tx / poll_rx drive progress) until one completion arrives and returns
// it. Throws Error with the transport's last error when polling fails, or after 5 s without one.
Completion wait_one(Transport& t, Cq cq);

}  // namespace fabflow::testing
