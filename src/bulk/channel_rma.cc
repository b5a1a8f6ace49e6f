// The bulk channel's data movement outside messages: the rendezvous by RMA write or read
// (whole buffers and pipeline fragments, READY and FIN), and on local by cross-memory attach
// or, where the advertised buffer is a Memory, by the transport's copy through the peer's
// mapping (a write or read of that memory, as the transfer engine's).
#include <algorithm>

#include "bulk/channel_impl.h"

namespace fabflow::bulk::detail {

// rndv-write / leave-pinned receiver (and the local write path): advertise the buffer. On
// local, where the sender offered its Memory (`key`) and this buffer is one, a split copy.
void ChannelImpl::start_target(Request& r, const Header& h, std::span<const std::byte> key) {
  if (!key.empty() && may_split(r)) {
    RemoteMemory rm = import_rendezvous_key(r, key);
    if (!rm.contains(h.base, r.size))
      throw PeerError(
          r.peer, "bulk: " + rank_str(r.peer) + " advertised a region shorter than its message");
    return start_split(r, rm, h.base);
  }
  Header a = header(Type::ack, r);
  std::vector<std::byte> mine;
  if (r.cma && !in_memory(r.dst, r.size)) {
    a.base = reinterpret_cast<std::uint64_t>(r.dst);
  } else if (r.size > 0) {
    r.mapped = r.cma;
    r.reg = rendezvous_registration(r, r.dst, r.size, kRemoteWrite | kLocalWrite,
                                    uses_cache(r.protocol));
    mine = t_.export_key(*r.reg.mr);
    a.base = r.reg.offset;
    a.key_len = static_cast<std::uint16_t>(mine.size());
  }
  queue(r, a, nullptr, 0, std::move(mine));
}

// rndv-read receiver: read the whole message, then FIN; on local between two Memories, a
// split copy.
void ChannelImpl::start_read(Request& r, const Header& h, std::span<const std::byte> key) {
  if (r.cma && key.empty()) {
    cma(false, r.peer, r.dst, h.base, r.size);
    r.fin = true;
    queue(r, header(Type::fin, r), nullptr, 0);
    return;
  }
  RemoteMemory rm = import_rendezvous_key(r, key);
  if (!rm.contains(h.base, r.size))
    throw PeerError(r.peer,
                    "bulk: " + rank_str(r.peer) + " advertised a region shorter than its message");
  if (may_split(r)) return start_split(r, rm, h.base);
  r.mapped = r.cma;  // local: the sender's Memory, read through this rank's mapping of it
  r.reg = rendezvous_registration(r, r.dst, r.size, kLocalWrite, uses_cache(r.protocol));
  post_rma(r, SIZE_MAX, false, r.dst, *r.reg.mr, rm, h.base, r.size);
}

// A split copy's conditions at the receiver, which decides: local, this buffer a Memory (the
// sender's is one: its key came), at least split_copy_min bytes and two pages.
bool ChannelImpl::may_split(const Request& r) {
  return r.cma && o_.split_copy_min > 0 && r.size >= o_.split_copy_min && r.size >= 2 * kPage &&
         in_memory(r.dst, r.size);
}

// The receiver's side of a split copy: an ACK with this rank's Memory asks the sender to write
// the first half, [0, from), while this rank reads the rest from the sender's Memory (`source`,
// the message at `base`).
void ChannelImpl::start_split(Request& r, const RemoteMemory& source, std::uint64_t base) {
  const std::uint64_t from = r.size / 2 / kPage * kPage;
  r.mapped = true;
  r.split = true;
  r.share = r.size - from;
  r.reg = rendezvous_registration(r, r.dst, r.size, kRemoteWrite | kLocalWrite, false);
  Header a = header(Type::ack, r);
  a.offset = from;
  a.base = r.reg.offset;
  std::vector<std::byte> mine = t_.export_key(*r.reg.mr);
  a.key_len = static_cast<std::uint16_t>(mine.size());
  queue(r, a, nullptr, 0, std::move(mine));
  flush();  // before this rank's copy, so that both copy at once
  post_rma(r, SIZE_MAX, false, r.dst + from, *r.reg.mr, source, base + from, r.size - from);
}

// The sender's share of a split copy its receiver asks for in `ack` (offset: the bytes to
// write from the start), checked: only where this rank offered its Memory, whole pages, less
// than the message.
std::uint64_t ChannelImpl::split_share(Request& r, const wire::Message& ack) {
  const std::uint64_t share = ack.h.offset;
  if (!r.cma || !r.offered || ack.key.empty() || share == 0 || share >= r.size ||
      share % kPage != 0)
    throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " asked this rank to copy " +
                                std::to_string(share) + " bytes of a " + std::to_string(r.size) +
                                "-byte message");
  r.split = true;
  r.share = share;
  return share;
}

RemoteMemory ChannelImpl::import_rendezvous_key(const Request& r, std::span<const std::byte> key) {
  if (!r.cma) return t_.import_key(r.peer, key);
  // A local key names one segment of the peer for the life of its process.
  constexpr std::size_t kMaxImports = 4096;
  auto k = std::make_pair(r.peer, std::vector<std::byte>(key.begin(), key.end()));
  if (auto it = mapped_keys_.find(k); it != mapped_keys_.end()) return it->second;
  RemoteMemory rm = t_.import_key(r.peer, key);
  if (mapped_keys_.size() >= kMaxImports) mapped_keys_.clear();
  mapped_keys_.emplace(std::move(k), rm);
  return rm;
}

// Queues reads or writes of [buf, buf+len) in pieces of at most rma_op_, counted as in
// flight from now on, and posts what the transmit queue takes.
void ChannelImpl::post_rma(Request& r, std::size_t frag, bool write, std::byte* buf,
                           const MemoryRegion& mr, const RemoteMemory& rm, std::uint64_t roff,
                           std::uint64_t len) {
  for (std::uint64_t done = 0; done < len;) {
    const std::uint64_t n = std::min<std::uint64_t>(rma_op_, len - done);
    rmaq_.push_back(
        PendingRma{RmaOp{r.id, frag}, write, buf + done, mr.desc(), rm, roff + done, n});
    if (frag == SIZE_MAX)
      ++r.rma;
    else
      ++r.frags[frag].ops;
    done += n;
  }
  drain_rma();
}

void ChannelImpl::drain_rma() {
  while (!rmaq_.empty()) {
    PendingRma& p = rmaq_.front();
    const std::uint64_t op = next_op_;
    const int peer = peer_of_request(p.op.req);
    if (peer < 0) {  // its request failed meanwhile
      rmaq_.pop_front();
      continue;
    }
    Status s = p.write
                   ? t_.post_write(peer, p.buf, p.len, p.desc, p.rm, p.roff, kCtxRma | op, kSignal)
                   : t_.post_read(peer, p.buf, p.len, p.desc, p.rm, p.roff, kCtxRma | op, kSignal);
    if (s == Status::again) return;
    if (s != Status::ok)
      throw Error("bulk: RMA " + std::string(p.write ? "write" : "read") + " with " +
                  rank_str(peer) + ": " + t_.last_error());
    ++next_op_;
    ++stats_.rma_operations;
    rma_[op] = p.op;
    rmaq_.pop_front();
  }
}

void ChannelImpl::on_rma_done(Request& r, std::size_t frag) {
  if (frag == SIZE_MAX) {
    if (--r.rma == 0) {
      if (r.mapped) stats_.mapped_bytes += r.split ? r.share : r.size;
      // rndv-write sender: FIN after the write; rndv-read receiver: FIN after the read; a split
      // copy's sides each after their share, keeping their Memory until the other's FIN.
      Header fin = header(Type::fin, r);
      if (r.split) fin.flags = r.send ? wire::kFinFromSender : wire::kFinFromReceiver;
      if (!r.split) {
        r.reg = {};  // released as soon as the data moved
        r.fin = true;
      }
      queue(r, fin, nullptr, 0);
      flush();
    }
  } else if (frag < r.frags.size()) {
    Request::Frag& f = r.frags[frag];
    if (--f.ops == 0) {
      f.reg = {};
      f.finished = true;
      ++r.frags_finished;
      --r.frags_active;
      Header h = header(Type::fin, r);
      h.seq = frag;
      queue(r, h, nullptr, 0);
      flush();
    }
  }
  pump(r);
}

void ChannelImpl::on_ready(Request& r, const wire::Message& m) {
  const std::uint64_t i = m.h.seq;
  if (r.cma || i >= r.frags.size() || r.frags[i].advertised || r.frags[i].finished ||
      (!r.send && !r.matched) || (r.send && !r.matched))
    throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " sent a READY for fragment " +
                                std::to_string(i) + " it may not");
  Request::Frag& f = r.frags[i];
  RemoteMemory rm = t_.import_key(r.peer, m.key);
  if (!rm.contains(m.h.base, f.len))
    throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " advertised fragment " +
                                std::to_string(i) + " in a region too short for it");
  f.advertised = true;
  ++r.frags_active;
  if (r.send) {  // pipeline: write our fragment into the advertised one
    f.reg = registrar_.acquire(const_cast<std::byte*>(r.src) + f.off, f.len, kLocalRead,
                               traits(r.protocol).cached, frag_align());
    post_rma(r, i, true, const_cast<std::byte*>(r.src) + f.off, *f.reg.mr, rm, m.h.base, f.len);
  } else {  // pipeline-read receiver: read the advertised source fragment
    f.reg = registrar_.acquire(r.dst + f.off, f.len, kLocalWrite, false);
    post_rma(r, i, false, r.dst + f.off, *f.reg.mr, rm, m.h.base, f.len);
  }
}

// Moves `len` bytes between our `buf` and `addr` in the peer's address space.
void ChannelImpl::cma(bool write, int peer, std::byte* buf, std::uint64_t addr, std::uint64_t len) {
  if (t_.copy_peer(peer, write ? Transport::PeerCopy::write : Transport::PeerCopy::read, buf, addr,
                   static_cast<std::size_t>(len)) != Status::ok)
    throw PeerError(peer, "bulk: " + t_.last_error() + " (the peer's buffer is not where it said)");
  stats_.cma_bytes += len;
}

}  // namespace fabflow::bulk::detail
