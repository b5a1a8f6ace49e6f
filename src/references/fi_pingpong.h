// A timed reference, built apart from the library and linked by the CLI only (CMakeLists.txt,
// fabflow_references). The external reference for raw provider latency: libfabric's own
// fi_pingpong, run on the same provider, size, iteration count and CPUs as fabflow's ping-pong,
// right after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace fabflow::references {

struct ReferenceRun {
  double usec_per_xfer = 0;  // fi_pingpong's one-way time (half the round trip)
  std::string command;       // the client command line, for the report
};

// Runs an fi_pingpong server pinned to cpu_server and a client pinned to cpu_client on
// loopback; nullopt (with *why set) when fi_pingpong is missing or fails.
std::optional<ReferenceRun> run_fi_pingpong(const std::string& provider,
                                            const std::string& endpoint, std::size_t size,
                                            std::uint64_t iterations, int cpu_server,
                                            int cpu_client, std::string* why);

}  // namespace fabflow::references
