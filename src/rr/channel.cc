// Request-response channels: the names and checks of rr.h and the setup steps both sides share
// (endpoint.h). The requester is in requester.cc, the responder in responder.cc. Wire format
// and layouts: frame.h and docs/request-response.md.
#include <fabflow/bootstrap.h>
#include <fabflow/rr.h>

#include <cstring>

#include "rr/endpoint.h"

namespace fabflow::rr {

using namespace detail;

// ---- names ----

bool request_by_write(Pattern p) noexcept {
  return p == Pattern::write_write || p == Pattern::write_send;
}
bool response_by_write(Pattern p) noexcept {
  return p == Pattern::write_write || p == Pattern::send_write;
}

std::vector<Op> required_ops(const ChannelOptions& o) {
  if (o.automatic) return {Op::write, Op::send};  // every pattern's
  std::vector<Op> ops;
  if (request_by_write(o.pattern) || response_by_write(o.pattern)) ops.push_back(Op::write);
  if (!request_by_write(o.pattern) || !response_by_write(o.pattern)) ops.push_back(Op::send);
  return ops;
}

std::string why_unsupported(const Capabilities& caps, const ChannelOptions& o) {
  if (o.automatic) {
    if (o.objective != "throughput" && o.objective != "p50" && o.objective != "p99")
      return "auto: objective '" + o.objective + "' is not throughput, p50 or p99";
    const AutoPattern c = choose_pattern(caps, o);
    return c.name.empty() ? "auto: " + c.why : "";
  }
  if (auto m = missing_op(caps, required_ops(o)))
    return std::string(to_string(o.pattern)) + " needs " + std::string(to_string(m->op)) + ": " +
           m->why;
  for (std::size_t payload : {o.request_bytes, o.response_bytes})
    if (frame_bytes(payload) > caps.max_msg_size)
      return "a " + std::to_string(frame_bytes(payload)) + "-byte message is above " +
             caps.provider + "'s max_msg_size " + std::to_string(caps.max_msg_size);
  if (o.mailbox == Mailbox::dense && !request_by_write(o.pattern))
    return "dense mailboxes need WRITE requests (" + std::string(to_string(o.pattern)) +
           " sends them)";
  return {};
}

std::string_view receive_queue_kind(const Capabilities& caps) noexcept {
  return caps.endpoint == EndpointType::msg ? "per-endpoint" : "shared";
}

namespace detail {

Peers gather_slots(Bootstrap& boot, int requesters, unsigned mine) {
  if (requesters < 1 || requesters >= boot.size())
    throw UsageError("rr: " + std::to_string(requesters) + " requesters among " +
                     std::to_string(boot.size()) + " ranks leaves no responder");
  const auto all = allgather_value(boot, std::uint32_t{mine}, "rr: slot count");
  Peers p;
  p.requesters = requesters;
  p.responders = boot.size() - requesters;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const std::uint32_t v = all[r];
    const bool requester = static_cast<int>(r) < requesters;
    if (requester ? (v == 0 || v > kMaxSlots) : v != 0)
      throw PeerError(static_cast<int>(r),
                      "rr: rank " + std::to_string(r) + " announced an impossible slot count");
    if (!requester) continue;
    p.slots.push_back(v);
    p.base.push_back(p.total_slots);
    p.total_slots += v;
  }
  return p;
}

void exchange(Transport& t, Bootstrap& boot, const ChannelOptions& o, Peers& p, Hello mine,
              const MemoryRegion& mr) {
  auto key = t.export_key(mr);
  mine.key_len = static_cast<std::uint32_t>(key.size());
  std::vector<std::byte> blob(sizeof(Hello) + key.size());
  std::memcpy(blob.data(), &mine, sizeof mine);
  std::memcpy(blob.data() + sizeof mine, key.data(), key.size());
  auto all = boot.allgather(blob);
  p.remote.assign(all.size(), RemoteMemory{});
  p.remote_bytes.assign(all.size(), 0);
  const Capabilities& caps = t.caps();
  for (std::size_t r = 0; r < all.size(); ++r) {
    const int rank = static_cast<int>(r);
    auto bad = [&](const std::string& why) {
      return PeerError(rank, "rr: rank " + std::to_string(rank) + " " + why);
    };
    if (all[r].size() < sizeof(Hello)) throw bad("sent a malformed hello");
    Hello h;
    std::memcpy(&h, all[r].data(), sizeof h);
    if (h.magic != mine.magic || all[r].size() != sizeof(Hello) + h.key_len)
      throw bad("sent a malformed hello");
    const bool requester = rank < p.requesters;
    if (h.role != (requester ? 0 : 1)) throw bad("plays the wrong role");
    if (h.pattern != mine.pattern && h.pattern < std::size(kAllPatterns))
      throw bad("opened " + std::string(to_string(Pattern{h.pattern})) + ", this rank " +
                std::string(to_string(Pattern{mine.pattern})) +
                " (every rank must open the same pattern; with auto each rank chooses from its "
                "own profile and transport)");
    if (h.pattern != mine.pattern || h.mailbox != mine.mailbox ||
        h.request_bytes != mine.request_bytes || h.response_bytes != mine.response_bytes ||
        h.empty_mailboxes != mine.empty_mailboxes || (requester && h.slots != p.slots[r]))
      throw bad("disagrees on the channel options");
    if (rank == boot.rank() || h.role == mine.role) continue;
    p.remote[r] = t.import_key(rank, {all[r].data() + sizeof(Hello), h.key_len});
    std::size_t need =
        requester
            ? RequesterLayout(o, p.slots[r], response_rx_buffers(o, caps, p.slots[r], p.responders))
                  .bytes
            : ResponderLayout(o, request_rx_buffers(o, p.total_slots), p.total_slots).bytes;
    if (h.region_bytes != need || !p.remote[r].contains(0, need))
      throw bad("published a region that does not hold its layout");
    p.remote_bytes[r] = need;
  }
}

}  // namespace detail

// Over a Peer the requester is rank 0 of the session and the responder rank 1, whichever side
// accepted.
Opened<Requester> open_requester(Peer& peer, const ChannelOptions& o, unsigned slots,
                                 const TransportOptions& transport) {
  Opened<Requester> r;
  static_cast<Connected&>(r) = connect_transport(with_needs(transport, required_ops(o)), peer, 0);
  r.end = make_requester(*r.transport, *r.session, o, 1, slots);
  return r;
}

Opened<Responder> open_responder(Peer& peer, const ChannelOptions& o,
                                 const TransportOptions& transport) {
  Opened<Responder> r;
  static_cast<Connected&>(r) = connect_transport(with_needs(transport, required_ops(o)), peer, 1);
  r.end = make_responder(*r.transport, *r.session, o, 1);
  return r;
}

}  // namespace fabflow::rr
