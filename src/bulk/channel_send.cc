// The bulk channel's transmit side (receive buffers, control and data messages, transmit
// buffers) and the sender's protocol steps: the match header, the copy pieces, the ACK and NACK.
#include <algorithm>
#include <cstring>

#include "bulk/channel_impl.h"

namespace fabflow::bulk::detail {

// Posts receive buffer `i`; where the transport says again, it is posted by a later
// repost_rx() (again is a normal state of the data path, not an error).
void ChannelImpl::post_rx(std::size_t i) {
  rx_retry_.push_back(i);
  repost_rx();
}

void ChannelImpl::repost_rx() {
  while (!rx_retry_.empty()) {
    const std::size_t i = rx_retry_.front();
    Status s = t_.post_recv(rx_peer_[i], rx_slot(i), slot_, rx_mr_->desc(), kCtxRx | i);
    if (s == Status::again) return;
    if (s != Status::ok) throw Error("bulk: posting a receive buffer: " + t_.last_error());
    rx_retry_.pop_front();
  }
}

Header ChannelImpl::header(Type type, const Request& r) const {
  Header h;
  h.type = type;
  h.protocol = r.protocol;
  h.src = static_cast<std::uint32_t>(rank_);
  h.tag = r.tag;
  h.size = r.size;
  h.sreq = r.send ? r.id : r.peer_req;
  h.rreq = r.send ? r.peer_req : r.id;
  return h;
}

void ChannelImpl::queue(Request& r, Header h, const std::byte* data, std::size_t len,
                        std::vector<std::byte> owned) {
  Out out;
  out.h = h;
  out.data = data;
  if (data) out.h.length = len;
  out.owned = std::move(owned);
  out.req = r.id;
  out.peer = r.peer;
  ++r.sends;
  outq_.push_back(std::move(out));
  stats_.control_messages += h.type != Type::data;
}

// Moves queued messages into transmit buffers while buffers and the send queue last.
void ChannelImpl::flush() {
  while (!outq_.empty() && !tx_free_.empty()) {
    Out& out = outq_.front();
    const unsigned b = tx_free_.back();
    std::byte* slot = tx_slot(b);
    std::size_t len = kHeader;
    if (out.data) {
      std::memcpy(slot + kHeader, out.data, out.h.length);
      len += out.h.length;
    }
    if (!out.owned.empty()) {
      std::memcpy(slot + len, out.owned.data(), out.owned.size());
      len += out.owned.size();
    }
    std::memcpy(slot, &out.h, kHeader);
    const int dest = out.peer;
    Status s = t_.post_send(dest, slot, len, tx_mr_->desc(), kCtxTx | b, kSignal);
    if (s == Status::again) return;
    if (s != Status::ok) throw Error("bulk: send to " + rank_str(dest) + ": " + t_.last_error());
    tx_free_.pop_back();
    tx_req_[b] = out.req;
    outq_.pop_front();
  }
}

void ChannelImpl::on_tx(const Completion& c) {
  const std::uint64_t kind = c.context & ~kCtxMask;
  const std::uint64_t idx = c.context & kCtxMask;
  if (kind == kCtxTx) {
    if (idx >= kTxBuffers) throw Error("bulk: a send completion with a bad context");
    tx_free_.push_back(static_cast<unsigned>(idx));
    if (RequestPtr r = find(tx_req_[idx])) {
      --r->sends;
      pump(*r);
    }
    return;
  }
  if (kind == kCtxRma) {
    auto it = rma_.find(idx);
    if (it == rma_.end()) throw Error("bulk: an RMA completion with a bad context");
    RmaOp op = it->second;
    rma_.erase(it);
    if (RequestPtr r = find(op.req)) on_rma_done(*r, op.frag);
  }
}

void ChannelImpl::start_send(Request& r) {
  Header h = header(Type::rts, r);
  h.seq = peers_[static_cast<std::size_t>(r.peer)].seq_out++;
  const std::size_t inline_len = r.cma ? 0 : head_bytes(r.protocol, r.size, o_);
  std::vector<std::byte> key;
  if (whole_buffer(r) && read_based(r.protocol)) {  // the receiver reads it: where it lies
    if (r.cma && !in_memory(r.src, r.size)) {
      h.base = reinterpret_cast<std::uint64_t>(r.src);
    } else {
      r.mapped = r.cma;
      r.reg = rendezvous_registration(r, const_cast<std::byte*>(r.src), r.size, kRemoteRead,
                                      uses_cache(r.protocol));
      key = t_.export_key(*r.reg.mr);
      h.base = r.reg.offset;
      h.key_len = static_cast<std::uint16_t>(key.size());
    }
  } else if (r.cma && o_.split_copy_min > 0 && r.size >= o_.split_copy_min &&
             in_memory(r.src, r.size)) {
    // A write rendezvous on local from a Memory offers it: the receiver may ask for a split
    // copy and read a share of it.
    r.reg = rendezvous_registration(r, const_cast<std::byte*>(r.src), r.size, kRemoteRead, false);
    key = t_.export_key(*r.reg.mr);
    h.base = r.reg.offset;
    h.key_len = static_cast<std::uint16_t>(key.size());
  }
  r.offered = r.cma && !key.empty();
  queue(r, h, inline_len ? r.src : nullptr, inline_len, std::move(key));
  stats_.bytes_sent += r.size;
  flush();
  pump(r);
}

// Posts whatever the request may post now, then checks whether it is complete.
void ChannelImpl::pump(Request& r) {
  if (r.state != Request::State::active) return;
  if (r.send)
    pump_send(r);
  else
    pump_recv(r);
}

void ChannelImpl::pump_all() {
  // Requests may have more to post now that buffers were freed.
  pumping_.clear();
  for (const auto& [id, r] : requests_) pumping_.push_back(r);
  for (const RequestPtr& r : pumping_) pump(*r);
  pumping_.clear();
}

void ChannelImpl::pump_send(Request& r) {
  // Copy fragments, while transmit buffers last (at most depth + 1 queued at once).
  if (r.matched) {
    while (r.data_next < r.data_end && outq_.size() < kTxBuffers) {
      const std::uint64_t len = std::min<std::uint64_t>(o_.bounce_size, r.data_end - r.data_next);
      Header h = header(Type::data, r);
      h.offset = r.data_next;
      queue(r, h, r.src + r.data_next, len);
      r.data_next += len;
    }
    flush();
  }
  // pipeline-read: source fragments registered and advertised, depth at a time.
  if (pipelined(r.protocol) && read_based(r.protocol) && r.matched && !r.cma)
    advertise_fragments(r, const_cast<std::byte*>(r.src), kRemoteRead, traits(r.protocol).cached);
  // Complete? A whole-buffer transfer at its FIN; else once the header carried it all, or the
  // receiver took the rest: every data piece sent and every fragment finished.
  bool done = r.sends == 0 && r.rma == 0;
  if (whole_buffer(r))
    done = done && r.fin;
  else
    done = done && (r.size <= head_bytes(r.protocol, r.size, o_) ||
                    (r.matched && r.data_next == r.data_end && r.frags_finished == r.frags.size()));
  if (done) complete(r);
}

void ChannelImpl::complete(Request& r) {
  r.reg = {};
  r.frags.clear();
  r.state = Request::State::done;
  requests_.erase(r.id);  // the caller's RequestPtr keeps it
}

// Registers the request's next fragments of `buf` and advertises each in a READY, until
// `depth` are active: the pipeline-read sender's sources, the pipeline receiver's targets.
void ChannelImpl::advertise_fragments(Request& r, std::byte* buf, unsigned access, bool cached) {
  while (r.next_frag < r.frags.size() && r.frags_active < o_.depth) {
    Request::Frag& f = r.frags[r.next_frag];
    f.reg = registrar_.acquire(buf + f.off, f.len, access, cached, frag_align());
    Header h = header(Type::ready, r);
    h.seq = r.next_frag;
    h.base = f.reg.offset;
    std::vector<std::byte> key = t_.export_key(*f.reg.mr);
    h.key_len = static_cast<std::uint16_t>(key.size());
    queue(r, h, nullptr, 0, std::move(key));
    f.advertised = true;
    ++r.frags_active;
    ++r.next_frag;
  }
  flush();
}

void ChannelImpl::on_ack(Request& r, const wire::Message& m) {
  if (r.matched) throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " sent a second ACK");
  r.matched = true;
  r.peer_req = m.h.rreq;
  const ProtocolTraits& p = traits(r.protocol);
  const std::uint64_t head = head_bytes(r.protocol, r.size, o_);
  if (p.mover == Mover::messages) {  // copy: the rest follows in data messages
    if (r.size <= head) throw PeerError(r.peer, "bulk: an ACK for a message sent whole");
    set_data_range(r, head, r.size);
    return;
  }
  if (read_based(r.protocol) && whole_buffer(r) && !r.cma)
    throw PeerError(r.peer, "bulk: an ACK for a read rendezvous");
  if (r.cma && m.key.empty()) {  // write by cross-memory attach into the buffer the ACK names
    if (read_based(r.protocol))
      throw PeerError(r.peer, "bulk: an ACK for a read by cross-memory attach");
    cma(true, r.peer, const_cast<std::byte*>(r.src), m.h.base, r.size);
    r.fin = true;
    queue(r, header(Type::fin, r), nullptr, 0);
    return;
  }
  if (!p.pipelined || r.cma) {
    // Write the whole buffer into the one the ACK advertises, or on local, where the receiver
    // asks for a split copy (offset above 0; a read rendezvous's ACK asks for nothing else),
    // this rank's share of it.
    const bool split = m.h.offset != 0 || read_based(r.protocol);
    const std::uint64_t len = split ? split_share(r, m) : r.size;
    RemoteMemory rm = import_rendezvous_key(r, m.key);
    if (!rm.contains(m.h.base, len))
      throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " advertised a region shorter than " +
                                  (split ? "this rank's share of the copy" : "the message"));
    r.mapped = r.cma;  // local: the receiver's Memory, written through this rank's mapping
    r.reg = rendezvous_registration(r, const_cast<std::byte*>(r.src), r.size, kLocalRead, p.cached);
    post_rma(r, SIZE_MAX, true, const_cast<std::byte*>(r.src), *r.reg.mr, rm, m.h.base, len);
    return;
  }
  // Pipelines: the receiver asks for the fragments after the header's part and the copy-ahead
  // (sent in data messages meanwhile).
  const std::uint64_t expect = std::min<std::uint64_t>(r.size, head + o_.copy_ahead);
  if (m.h.offset != expect)
    throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " asked for the fragments from " +
                                std::to_string(m.h.offset) + ", not " + std::to_string(expect));
  r.rdma_offset = expect;
  set_data_range(r, head, expect);
  r.frags = frags_of(fragments(o_, expect, r.size));
}

void ChannelImpl::on_nack(Request& r, const wire::Message& m) {
  r.state = Request::State::failed;
  r.error = "bulk: " + rank_str(r.peer) + "'s receive buffer (tag " + std::to_string(r.tag) +
            ") holds " + std::to_string(m.h.length) + " bytes, the message is " +
            std::to_string(r.size);
  r.reg = {};
  requests_.erase(r.id);
}

}  // namespace fabflow::bulk::detail
