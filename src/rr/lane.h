// A lane of the services built on request-response channels (the kv store, the rpc sequencer):
// a transport and the one channel end opened over it, and the blocking close of a client's
// lanes.
#pragma once

#include <fabflow/bootstrap.h>
#include <fabflow/rr.h>
#include <fabflow/status.h>
#include <fabflow/transport.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/bounded_wait.h"

namespace fabflow::rr {

// A transport and the channel end (Requester or Responder) over it, closed before it.
template <class End>
struct Lane {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<End> end;
};

// The lane over `t` whose requester has `slots` requests of channel `o` outstanding among
// `requesters` requesting ranks (collective: make_requester).
inline Lane<Requester> requester_lane(std::unique_ptr<Transport> t, Bootstrap& boot,
                                      const ChannelOptions& o, int requesters, unsigned slots) {
  Lane<Requester> lane{std::move(t), nullptr};
  lane.end = make_requester(*lane.transport, boot, o, requesters, slots);
  return lane;
}

// The lane over `t` whose responder answers channel `o` for `requesters` requesting ranks
// (collective: make_responder).
inline Lane<Responder> responder_lane(std::unique_ptr<Transport> t, Bootstrap& boot,
                                      const ChannelOptions& o, int requesters) {
  Lane<Responder> lane{std::move(t), nullptr};
  lane.end = make_responder(*lane.transport, boot, o, requesters);
  return lane;
}

// Closes the requester of every lane in turn, `watch` started again for each; throws Error
// "<service>: <why>" when one fails, and the watch's error after its timeout without progress.
inline void close_requesters(std::vector<Lane<Requester>>& lanes, BoundedWait& watch,
                             const std::string& service) {
  const std::string who = service + " client";
  for (Lane<Requester>& l : lanes) {
    watch.reset();
    for (;;) {
      Status s = l.end->close();
      if (s == Status::ok) break;
      if (s == Status::failed) throw Error(service + ": " + l.end->error());
      watch.idle(who.c_str(), "closing");
    }
  }
}

}  // namespace fabflow::rr
