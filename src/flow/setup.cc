// Setup of one queue end: registered region, receives posted before the key exchange, hello
// all-gather, import of the peer's region.
#include <fabflow/bootstrap.h>

#include "flow/queue.h"

namespace fabflow::flow::detail {

std::size_t effective_capacity(const QueueOptions& o) noexcept {
  if (o.design.data != DataFlow::push2 || o.recv_pool == 0) return o.capacity;
  return std::min(o.capacity, o.recv_pool);
}

Shared setup_end(Transport& t, Bootstrap& boot, int peer, const QueueOptions& o, int role,
                 std::size_t pool, const std::function<void(Shared&)>& before_exchange) {
  Shared s{t, boot, peer, o, Layout::make(effective_capacity(o), o.item_bytes, pool), {}, {}};
  s.mr = t.allocate(s.layout.region_bytes, kAllAccess);
  // A refusal found while preparing (too many receives to keep posted) still takes part in
  // the all-gather, so both ends refuse together instead of one waiting for the other.
  std::string refusal;
  if (before_exchange) {
    try {
      before_exchange(s);
    } catch (const UsageError& e) {
      refusal = e.what();
    }
  }
  Hello h;
  h.role = static_cast<std::uint8_t>(role);
  h.data = static_cast<std::uint8_t>(o.design.data);
  h.transfer = static_cast<std::uint8_t>(o.design.transfer);
  h.space = static_cast<std::uint8_t>(o.design.space);
  h.capacity = o.capacity;
  h.item_bytes = o.item_bytes;
  h.region_bytes = s.layout.region_bytes;
  h.refused = refusal.empty() ? 0 : 1;
  std::vector<std::byte> key;
  if (refusal.empty()) {
    key = t.export_key(*s.mr);
  } else {
    const auto* p = reinterpret_cast<const std::byte*>(refusal.data());
    key.assign(p, p + refusal.size());
  }
  auto all = boot.allgather(encode_hello(h, key));
  if (!refusal.empty()) throw UsageError(refusal);
  if (all.size() <= static_cast<std::size_t>(peer))
    throw PeerError(peer, "flow: the bootstrap all-gather returned no blob for rank " + std::to_string(peer));
  auto peer_key = decode_hello(all[static_cast<std::size_t>(peer)], peer, h);
  s.remote = t.import_key(peer, peer_key);
  if (s.remote.length < s.layout.cell(kCells))
    throw PeerError(peer, "flow: rank " + std::to_string(peer) + " registered a region of " +
                              std::to_string(s.remote.length) + " bytes, the queue needs " +
                              std::to_string(s.layout.cell(kCells)));
  return s;
}

void post_setup_recv(Shared& s, std::size_t offset, std::size_t len, std::uint64_t ctx) {
  Status st = s.transport.post_recv(s.peer, s.mr->data() + offset, len, s.mr->desc(), ctx);
  if (st == Status::again)
    throw UsageError("flow: " + s.options.design.name() + " keeps receives posted beyond the "
                     "transport's receive queue; lower capacity or recv_pool, or raise rx_depth");
  if (st != Status::ok) throw Error("flow: posting a receive: " + s.transport.last_error());
}

}  // namespace fabflow::flow::detail
