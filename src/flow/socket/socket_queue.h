// The socket baseline of the flow queues (seed 003, section 6.4): the Producer / Consumer API
// over one TCP stream. Items travel as frames [u32 length][bytes]; a frame with length
// 0xffffffff is the end-of-stream marker that close() sends before shutdown(SHUT_WR), so an
// EOF without it means the producer vanished. The consumer listens on an ephemeral port at
// boot.local_address() and contributes "<numeric ip> <port>" to one bootstrap all-gather (the
// producer contributes an empty blob); the producer connects to it.
#pragma once

#include <fabflow/flow.h>

#include <cstdint>
#include <memory>

namespace fabflow::flow {

inline constexpr std::uint32_t kSocketEndOfStream = 0xffffffffu;

// Collective over the two ranks like make_producer / make_consumer; `transport` is unused.
// Throws UsageError for bad options (capacity or item_bytes 0, item_bytes >= 4 GiB) and
// Error / PeerError when the connection cannot be set up.
std::unique_ptr<Producer> make_socket_producer(Transport& transport, Bootstrap& boot,
                                               int consumer_rank, const QueueOptions& options);
std::unique_ptr<Consumer> make_socket_consumer(Transport& transport, Bootstrap& boot,
                                               int producer_rank, const QueueOptions& options);

}  // namespace fabflow::flow
