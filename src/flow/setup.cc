// Setup of one queue end: registered region, receives posted before the key exchange, hello
// all-gather, import of the peer's region.
#include <fabflow/bootstrap.h>

#include <algorithm>
#include <string>

#include "flow/end_base.h"

namespace fabflow::flow::detail {

bool stores_directly(Transport& t, const QueueOptions& o, const Layout& l) noexcept {
  return l.compact && o.design.data == DataFlow::push1 &&
         o.design.transfer != TransferNotify::imm && !o.batching && !o.active_producer &&
         t.caps().peer_mapping;
}

std::size_t effective_capacity(const QueueOptions& o) noexcept {
  if (o.design.data != DataFlow::push2 || o.recv_pool == 0) return o.capacity;
  return std::min(o.capacity, o.recv_pool);
}

Shared setup_end(Transport& t, Transport& n, Bootstrap& boot, int peer, const QueueOptions& o,
                 EndRole role, RecvPool pool, const std::function<void(Shared&)>& before_exchange) {
  const bool separate = o.separate_notify_endpoint;
  const SlotFormat format = slot_format(t.caps(), o);
  Layout layout = Layout::make(effective_capacity(o), o.item_bytes, pool.cells, separate,
                               pool.on == RecvOn::notify, format);
  layout.sum = !layout.compact &&
               needs_sum(o.design.data, o.design.transfer, t.caps().in_order_data,
                         coalesces_writes(o.design.transfer, o.batching, o.active_producer));
  layout.word_first = role == EndRole::producer && stores_directly(t, o, layout);
  Shared s{t, n, boot, peer, o, layout, {}, {}, {}, {}};
  s.mr = t.allocate(s.layout.region_bytes, kAllAccess);
  if (separate) s.nmr = n.allocate(s.layout.notify_bytes, kAllAccess);
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
  h.separate = separate ? 1 : 0;
  h.format = static_cast<std::uint8_t>(format);
  h.sum = layout.sum ? 1 : 0;
  h.word_first = layout.word_first ? 1 : 0;
  h.capacity = s.layout.capacity;  // push2: bounded by recv_pool, which must agree as well
  h.item_bytes = o.item_bytes;
  h.region_bytes = s.layout.region_bytes;
  h.refused = refusal.empty() ? 0 : 1;
  h.rank = boot.rank();
  h.peer = peer;
  std::vector<std::byte> key, nkey;
  if (refusal.empty()) {
    key = t.export_key(*s.mr);
    if (separate) nkey = n.export_key(*s.nmr);
  } else {
    const auto* p = reinterpret_cast<const std::byte*>(refusal.data());
    key.assign(p, p + refusal.size());
  }
  auto all = boot.allgather(encode_hello(h, key, nkey));
  if (!refusal.empty()) throw UsageError(refusal);
  if (all.size() <= static_cast<std::size_t>(peer))
    throw PeerError(
        peer, "flow: the bootstrap all-gather returned no blob for rank " + std::to_string(peer));
  std::span<const std::byte> peer_nkey;
  Hello peer_hello;
  auto peer_key =
      decode_hello(all[static_cast<std::size_t>(peer)], peer, h, &peer_nkey, &peer_hello);
  // Where the producer's slots carry their word is the producer's choice (its options).
  if (role == EndRole::consumer) s.layout.word_first = peer_hello.word_first != 0;
  auto too_small = [&](const char* which, std::uint64_t got, std::size_t need) {
    return PeerError(peer, "flow: rank " + std::to_string(peer) + " registered a" + which +
                               " region of " + std::to_string(got) + " bytes, the queue needs " +
                               std::to_string(need));
  };
  s.remote = t.import_key(peer, peer_key);
  if (s.remote.length < s.layout.peer_data_bytes())
    throw too_small("", s.remote.length, s.layout.peer_data_bytes());
  if (separate) {
    s.nremote = n.import_key(peer, peer_nkey);
    if (s.nremote.length < s.layout.peer_notify_bytes())
      throw too_small(" notify", s.nremote.length, s.layout.peer_notify_bytes());
  } else {
    s.nremote = s.remote;
  }
  return s;
}

void post_setup_recv(Shared& s, RecvOn on, std::size_t offset, std::size_t len, std::uint64_t ctx) {
  const bool notify = on == RecvOn::notify;
  Transport& t = notify ? s.notify : s.transport;
  MemoryRegion& mr = notify && s.nmr ? *s.nmr : *s.mr;
  Status st = t.post_recv(s.peer, mr.data() + offset, len, mr.desc(), ctx);
  if (st == Status::again)
    throw UsageError("flow: " + s.options.design.name() + " keeps " +
                     std::to_string(required_rx_depth(s.options)) +
                     " receives posted, beyond the transport's receive queue: open the "
                     "transport with TransportOptions::rx_depth = flow::required_rx_depth(options) "
                     "(or lower capacity or recv_pool)");
  if (st != Status::ok) throw Error("flow: posting a receive: " + t.last_error());
}

}  // namespace fabflow::flow::detail

namespace fabflow::flow {

std::size_t required_rx_depth(const QueueOptions& o) {
  using detail::kCounterPool;
  if (o.automatic) {  // enough for any design auto may choose
    std::size_t most = 0;
    for (const Design& d : Design::all()) {
      QueueOptions one = o;
      one.automatic = false;
      one.design = d;
      most = std::max(most, required_rx_depth(one));
    }
    return most;
  }
  // The consumer: one receive per ring slot for push2 items, and a pool for the remote CQ data
  // that some providers deliver into receives (imm). The producer: a pool for pushed heads.
  std::size_t consumer = 0;
  if (o.design.data == DataFlow::push2) consumer += detail::effective_capacity(o);
  if (o.design.transfer == TransferNotify::imm) consumer += kCounterPool;
  const std::size_t producer = o.design.space == SpaceNotify::push2
                                   ? std::min(detail::effective_capacity(o), kCounterPool)
                                   : 0;
  return std::max(consumer, producer);
}

}  // namespace fabflow::flow
