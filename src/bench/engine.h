// What the families' run() loops share: the result a run starts from, the probe that turns a
// design point the provider cannot run into a refused row, rank 0's hand-over of each finished
// row, and the transport and channel the bulk families (bulk, beff) measure over.
#pragma once

#include <fabflow/bench/common.h>
#include <fabflow/bootstrap.h>
#include <fabflow/bulk.h>
#include <fabflow/transport.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <utility>

namespace fabflow::bench {

// A family's result before its first point: this machine's environment with `clock`'s name,
// `params`, and every rank's pinning (collective over `boot`).
template <class Result, class Params>
Result start_result(const Params& params, Bootstrap& boot, const Clock& clock) {
  Result result;
  result.env = machine_environment();
  result.env.clock = clock.name();
  result.params = params;
  gather_pinning(result.env, boot, params.target.cpu);
  return result;
}

// Queues for `in_flight` operations outstanding at once: twice that, at least 256 entries.
inline void size_queues(TransportOptions& to, std::size_t in_flight) {
  to.rx_depth = std::max<std::size_t>(256, 2 * in_flight);
  to.tx_depth = std::max<std::size_t>(256, 2 * in_flight);
}

// probe_point, and `env` takes the capabilities when it has none yet (note_caps).
template <class Why>
ProbedPoint probe_row(RunEnvironment& env, const TransportOptions& to, Why&& why) {
  ProbedPoint probed = probe_point(to, std::forward<Why>(why));
  note_caps(env, probed.caps);
  return probed;
}

// On rank 0, `result` keeps `row` and `on_row` (when set) sees it; other ranks do nothing.
template <class Result, class Row, class OnRow>
void publish_row(const Bootstrap& boot, Result& result, Row row, const OnRow& on_row) {
  if (boot.rank() != 0) return;
  result.rows.push_back(std::move(row));
  if (on_row) on_row(result, result.rows.back());
}

// One transport (send, write, read) of `target` and the bulk channel over it.
struct BulkEnds {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<bulk::Channel> channel;
};

// Opens and connects both (collective over `boot`), the channel with `co` and the target's
// timeout; `result` takes the capabilities, the channel's options, rendezvous path and cache
// state.
template <class Result>
BulkEnds open_bulk(const Target& target, Bootstrap& boot, bulk::ChannelOptions co, Result& result) {
  BulkEnds e;
  e.transport =
      open_transport(target.transport({Op::send, Op::write, Op::read}, boot.local_address()));
  if (target.wrap) e.transport = target.wrap(std::move(e.transport));
  e.transport->connect(boot);
  result.env.caps = e.transport->caps();
  co.peer_timeout = std::chrono::milliseconds(target.timeout_ms);
  e.channel = bulk::open_channel(*e.transport, boot, co);
  result.options = e.channel->options();
  const bulk::Stats& st = e.channel->stats();
  result.rendezvous_path = st.rendezvous_path;
  result.cache_state = st.cache_state;
  return e;
}

}  // namespace fabflow::bench
