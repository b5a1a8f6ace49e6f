// The bulk channel's receive side: every message from a peer checked and dispatched, match
// headers in order and matched to receives, and the receiver's protocol steps.
#include <algorithm>
#include <cstring>

#include "bulk/channel_impl.h"

namespace fabflow::bulk::detail {

void ChannelImpl::on_rx(const Completion& c) {
  const std::uint64_t kind = c.context & ~kCtxMask;
  const std::uint64_t idx = c.context & kCtxMask;
  if (kind != kCtxRx || idx >= rx_peer_.size()) {
    if (c.kind == CompletionKind::remote_write) return;
    throw Error("bulk: a receive completion with a bad context");
  }
  const std::byte* at = rx_slot(idx);
  if (c.length > slot_) throw Error("bulk: a receive completion longer than its buffer");
  wire::Message m;
  try {
    m = wire::parse({at, c.length}, ranks_, rank_);
  } catch (const PeerError& e) {
    // parse names no rank when the header's own is unusable; the buffer names its sender on
    // connected endpoints, and a pair has one peer.
    const int from = t_.caps().endpoint == EndpointType::msg ? rx_peer_[idx]
                     : ranks_ == 2                           ? 1 - rank_
                                                             : -1;
    if (e.rank() >= 0 || from < 0) throw;
    std::string what = e.what();
    if (what.rfind("bulk: ", 0) == 0) what.erase(0, 6);
    throw PeerError(from, "bulk: " + rank_str(from) + " sent " + what);
  }
  // On connected endpoints the buffer names the peer; a header claiming another is forged.
  if (t_.caps().endpoint == EndpointType::msg && rx_peer_[idx] != static_cast<int>(m.h.src))
    throw PeerError(rx_peer_[idx], "bulk: " + rank_str(rx_peer_[idx]) +
                                       " sent a message claiming to be from " +
                                       rank_str(static_cast<int>(m.h.src)));
  dispatch(m);
  post_rx(idx);
}

void ChannelImpl::dispatch(const wire::Message& m) {
  const int src = static_cast<int>(m.h.src);
  if (m.h.type == Type::rts) return on_rts(src, m);
  // Every other message names a request of ours.
  const bool to_sender = m.h.type == Type::ack || m.h.type == Type::nack ||
                         (m.h.type == Type::ready && !read_based(m.h.protocol)) ||
                         (m.h.type == Type::fin && (m.h.flags == wire::kFinFromReceiver ||
                                                    (m.h.flags == 0 && read_based(m.h.protocol))));
  RequestPtr r = find(to_sender ? m.h.sreq : m.h.rreq);
  if (!r || r->peer != src || r->send != to_sender || r->state != Request::State::active ||
      (!to_sender && !r->matched))
    throw PeerError(src, "bulk: " + rank_str(src) + " sent a " + type_name(m.h.type) +
                             " for a request it has no part in");
  if (r->protocol != m.h.protocol)
    throw PeerError(src, "bulk: " + rank_str(src) + " sent a " + type_name(m.h.type) +
                             " of another protocol than its request's");
  if (m.h.type == Type::ready && r->send && !r->matched) {
    // The receiver advertises fragments right after its ACK; a transport that reorders may
    // deliver them first. Held until the ACK, at most depth of them.
    if (r->early_ready.size() >= o_.depth)
      throw PeerError(src, "bulk: " + rank_str(src) + " sent more READYs than the depth (" +
                               std::to_string(o_.depth) + ") before its ACK");
    r->early_ready.emplace_back(m.h, std::vector<std::byte>(m.key.begin(), m.key.end()));
    return;
  }
  switch (m.h.type) {
    case Type::ack:
      on_ack(*r, m);
      for (auto& [h, key] : std::exchange(r->early_ready, {})) on_ready(*r, {h, {}, key});
      break;
    case Type::nack: on_nack(*r, m); break;
    case Type::data: on_data(*r, m); break;
    case Type::ready: on_ready(*r, m); break;
    case Type::fin: on_fin(*r, m); break;
    default: break;
  }
  pump(*r);
}

std::string ChannelImpl::type_name(Type t) {
  switch (t) {
    case Type::rts: return "match header";
    case Type::ack: return "ACK";
    case Type::data: return "data fragment";
    case Type::ready: return "READY";
    case Type::fin: return "FIN";
    case Type::nack: return "NACK";
  }
  return "message";
}

void ChannelImpl::on_rts(int src, const wire::Message& m) {
  Peer& p = peers_[static_cast<std::size_t>(src)];
  if (m.h.seq < p.seq_in)
    throw PeerError(
        src, "bulk: " + rank_str(src) + " repeated message number " + std::to_string(m.h.seq));
  check_rts(src, m.h, m.inline_bytes.size());
  if (m.h.seq > p.seq_in) {
    Early e{m.h, {m.inline_bytes.begin(), m.inline_bytes.end()}, {m.key.begin(), m.key.end()}};
    if (p.early.size() >= kMaxEarly || !p.early.emplace(m.h.seq, std::move(e)).second)
      throw PeerError(src, "bulk: " + rank_str(src) + " sent message number " +
                               std::to_string(m.h.seq) + " twice or far out of order");
    return;
  }
  take_rts(src, m.h, m.inline_bytes, m.key);
  // Headers that waited for this one.
  for (auto it = p.early.begin(); it != p.early.end() && it->first == p.seq_in;
       it = p.early.begin()) {
    Early next = std::move(it->second);
    p.early.erase(it);
    take_rts(src, next.h, next.inline_bytes, next.key);
  }
}

void ChannelImpl::take_rts(int src, const Header& h, std::span<const std::byte> inline_bytes,
                           std::span<const std::byte> key) {
  Peer& p = peers_[static_cast<std::size_t>(src)];
  ++p.seq_in;
  auto& posted = p.posted[h.tag];
  if (posted.empty()) {
    ++stats_.unexpected;
    p.unexpected[h.tag].push_back(
        Early{h, {inline_bytes.begin(), inline_bytes.end()}, {key.begin(), key.end()}});
    return;
  }
  RequestPtr r = posted.front();
  posted.pop_front();
  match(*r, h, inline_bytes, key);
}

// A match header's fields agree with its protocol (before it waits anywhere).
void ChannelImpl::check_rts(int src, const Header& h, std::uint64_t len) const {
  const auto proto = static_cast<std::uint8_t>(h.protocol);
  bool ok = proto >= static_cast<std::uint8_t>(Protocol::copy) &&
            proto <= static_cast<std::uint8_t>(Protocol::caching_pipeline) && h.size <= kMaxMessage;
  if (ok) {
    // The payload it carries is its protocol's head (a pipeline by cross-memory attach: none);
    // eager carries the whole message, which the eager limit bounds.
    ok = len == head_bytes(h.protocol, h.size, o_) || (pipelined(h.protocol) && len == 0);
    if (traits(h.protocol).head == Head::whole) ok = ok && h.size <= o_.eager_limit;
  }
  if (!ok) throw PeerError(src, "bulk: " + rank_str(src) + " sent a malformed match header");
}

void ChannelImpl::match(Request& r, const Header& h, std::span<const std::byte> inline_bytes,
                        std::span<const std::byte> key) {
  const int src = r.peer;
  r.matched = true;
  r.protocol = h.protocol;
  r.size = h.size;
  r.peer_req = h.sreq;
  ++stats_.messages_received;
  if (h.size > r.capacity) {
    r.state = Request::State::failed;
    r.error = "bulk: " + rank_str(src) + " sent " + std::to_string(h.size) + " bytes with tag " +
              std::to_string(h.tag) + ", the receive buffer holds " + std::to_string(r.capacity);
    // The sender learns it too, unless the whole message already came.
    if (inline_bytes.size() < h.size) {
      Out out;
      out.h = header(Type::nack, r);
      out.h.length = r.capacity;
      out.peer = src;
      outq_.push_back(std::move(out));
      ++stats_.control_messages;
      flush();
    }
    requests_.erase(r.id);
    return;
  }
  stats_.bytes_received += h.size;
  if (!inline_bytes.empty()) std::memcpy(r.dst, inline_bytes.data(), inline_bytes.size());
  // On local every rendezvous is one copy of the whole buffer (all ranks agreed at open that
  // cross-memory attach works; without it senders turn rendezvous into copy): by cross-memory
  // attach, or through the mapping of a Memory when the advertising side's buffer is one (a
  // read rendezvous then carries the sender's key).
  r.cma = cma_capable_ && rendezvous(h.protocol);
  // (A write rendezvous may carry the sender's key too: the offer of a split copy.)
  if (r.cma &&
      (!cma_ok_ || !inline_bytes.empty() || (read_based(h.protocol) && key.empty() && h.base == 0)))
    throw PeerError(src, "bulk: " + rank_str(src) + " sent a malformed local rendezvous");
  if (!r.cma && whole_buffer(r) && read_based(h.protocol) && key.empty())
    throw PeerError(src, "bulk: " + rank_str(src) + " sent a read rendezvous without a key");
  const std::uint64_t got = inline_bytes.size();
  if (whole_buffer(r)) {  // read it now, or advertise where the sender writes it
    if (read_based(h.protocol))
      start_read(r, h, key);
    else
      start_target(r, h, key);
  } else if (h.size > got && pipelined(h.protocol)) {
    // The copy-ahead in data messages, then the fragments (READY for each: this side's write
    // targets, or the sender's read sources).
    r.rdma_offset = std::min<std::uint64_t>(h.size, got + o_.copy_ahead);
    set_data_range(r, got, r.rdma_offset);
    r.frags = frags_of(fragments(o_, r.rdma_offset, h.size));
    Header a = header(Type::ack, r);
    a.offset = r.rdma_offset;
    queue(r, a, nullptr, 0);
  } else if (h.size > got) {  // copy: the rest in data messages after the ACK
    set_data_range(r, got, h.size);
    queue(r, header(Type::ack, r), nullptr, 0);
  }
  flush();
  pump(r);
}

std::vector<Request::Frag> ChannelImpl::frags_of(
    const std::vector<std::pair<std::uint64_t, std::uint64_t>>& f) {
  std::vector<Request::Frag> out(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    out[i].off = f[i].first;
    out[i].len = f[i].second;
  }
  return out;
}

void ChannelImpl::set_data_range(Request& r, std::uint64_t begin, std::uint64_t end) {
  r.data_begin = r.data_next = begin;
  r.data_end = end;
  r.data_got = 0;
  if (!r.send) r.data_seen.assign((end - begin + o_.bounce_size - 1) / o_.bounce_size, false);
}

void ChannelImpl::on_data(Request& r, const wire::Message& m) {
  const std::uint64_t off = m.h.offset, len = m.inline_bytes.size();
  const std::uint64_t piece = o_.bounce_size;
  if (off < r.data_begin || off >= r.data_end || (off - r.data_begin) % piece != 0 ||
      len != std::min<std::uint64_t>(piece, r.data_end - off) ||
      r.data_seen[(off - r.data_begin) / piece])
    throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " sent a data fragment at offset " +
                                std::to_string(off) + " of " + std::to_string(len) +
                                " bytes outside what is expected");
  r.data_seen[(off - r.data_begin) / piece] = true;
  std::memcpy(r.dst + off, m.inline_bytes.data(), len);
  r.data_got += len;
}

void ChannelImpl::on_fin(Request& r, const wire::Message& m) {
  if (!pipelined(r.protocol) || r.cma) {
    if (r.fin) throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " sent a second FIN");
    // A split copy's FIN says whose share is done; any other carries no flag.
    const std::uint64_t want = !r.split ? 0
                               : r.send ? wire::kFinFromReceiver
                                        : wire::kFinFromSender;
    if (m.h.flags != want)
      throw PeerError(r.peer,
                      "bulk: " + rank_str(r.peer) + " sent a FIN for a copy it was not given");
    r.fin = true;
    if (!r.split) r.reg = {};  // a split copy keeps its Memory until it completes
    return;
  }
  const std::uint64_t i = m.h.seq;
  if (i >= r.frags.size() || !r.frags[i].advertised || r.frags[i].finished)
    throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " sent a FIN for fragment " +
                                std::to_string(i) + " it was not given");
  Request::Frag& f = r.frags[i];
  f.reg = {};  // deregistered as soon as the fragment completes
  f.finished = true;
  ++r.frags_finished;
  --r.frags_active;
}

void ChannelImpl::pump_recv(Request& r) {
  if (!r.matched) return;
  // pipeline (write): target fragments registered and advertised, depth at a time.
  if (pipelined(r.protocol) && !read_based(r.protocol) && !r.cma)
    advertise_fragments(r, r.dst, kRemoteWrite | kLocalWrite, traits(r.protocol).cached);
  bool done = r.sends == 0 && r.rma == 0 && r.data_got == r.data_end - r.data_begin;
  if (whole_buffer(r))
    done = done && (r.fin || r.size == 0);
  else if (pipelined(r.protocol))
    done = done && r.frags_finished == r.frags.size();
  if (done) complete(r);
}

}  // namespace fabflow::bulk::detail
