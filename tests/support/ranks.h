// Ranks as threads: the in-process tests' way to run a collective over real transports.
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

}  // namespace fabflow::testing
