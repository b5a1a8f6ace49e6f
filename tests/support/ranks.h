// Ranks as threads: the in-process tests' way to run a collective over real transports, and
// waiting for one completion.
#pragma once

#include <fabflow/bootstrap.h>
#include <fabflow/transport.h>

#include <functional>
#include <string>

namespace fabflow::testing {

// Runs body(rank, transport, boot) on n threads, each with its own transport opened with
// `options` and connected through a thread bootstrap; every rank ends in a barrier that
// drives progress. Returns the first failure ("rank R: what"), or "" when all succeeded.
std::string run_ranks(int n, const TransportOptions& options,
                      const std::function<void(int, Transport&, Bootstrap&)>& body);

// Which completion queue wait_one polls.
enum class Cq { tx, rx };

// Polls `cq` of `t` (poll_tx / poll_rx drive progress) until one completion arrives and returns
// it. Throws Error with the transport's last error when polling fails, or after 5 s without one.
Completion wait_one(Transport& t, Cq cq);

}  // namespace fabflow::testing
