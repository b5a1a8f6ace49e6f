// The local transport's receive side: the rings polled (poll_rx), messages and writedata
// notices delivered, receive slots given back, peers' liveness checked; memfd segments; the
// transport's capabilities. Setup (the socket mesh, segment passing, keys): local_setup.cc.
//
// Channel segment (one per ordered pair, created by the consumer and passed to the producer):
//   [0, kMsgRingBytes)        message ring: tail @0, head @128, kMsgSlots slots of
//                             kSlotStride bytes (SlotHeader, payload at kSlotHeader)
//   [kMsgRingBytes, +kNote..) notice ring: tail @0, head @128, kNoteSlots x {u64 data, u64 len}
#include "transport/local/local_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/errno_text.h"

namespace fabflow::local {

[[noreturn]] void sys_fail(const char* call) { throw Error("local: " + errno_text(call)); }

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    if (addr_) ::munmap(addr_, len_);
    addr_ = o.addr_;
    len_ = o.len_;
    o.addr_ = nullptr;
    o.len_ = 0;
  }
  return *this;
}

Mapping::~Mapping() {
  if (addr_) ::munmap(addr_, len_);
}

Segment create_segment(std::size_t len, const char* what) {
  Segment s;
  s.fd = Fd(::memfd_create(what, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!s.fd) sys_fail("memfd_create");
  if (::fchmod(s.fd.get(), 0600) != 0) sys_fail("fchmod(memfd)");
  if (::ftruncate(s.fd.get(), static_cast<off_t>(len)) != 0) sys_fail("ftruncate(memfd)");
  if (::fcntl(s.fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    sys_fail("fcntl(F_ADD_SEALS)");
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd.get(), 0);
  if (p == MAP_FAILED) sys_fail("mmap(memfd)");
  s.map = Mapping(p, len);
  return s;
}

LocalTransport::LocalTransport(const TransportOptions& options)
    : options_(options), caps_(local_capabilities(options)), demote_(caps_.stores_demoted) {
  per_peer_recvs_ = caps_.endpoint == EndpointType::msg;
  tx_.reserve(std::max<std::size_t>(options.tx_depth * 2, kMinQueue));
}

LocalTransport::~LocalTransport() = default;

PeerChannel* LocalTransport::not_usable(int peer) noexcept {
  if (peer < 0 || peer >= size_ || peer == rank_ || peers_.empty())
    fail("local: no connected rank " + std::to_string(peer));
  else
    fail(peers_[static_cast<std::size_t>(peer)].why);
  return nullptr;
}

Status LocalTransport::too_long(std::size_t len) noexcept {
  return fail("local: send of " + std::to_string(len) + " bytes is above max_msg_size " +
              std::to_string(kMaxMsg));
}

std::byte* LocalTransport::unresolved(int peer, const RemoteMemory& m, std::uint64_t offset,
                                      std::size_t len, const char* what) noexcept {
  if (m.key >= imports_.size() || imports_[m.key].peer != peer || m.peer != peer ||
      m.length > imports_[m.key].length) {
    fail(std::string("local: ") + what + " to rank " + std::to_string(peer) +
         " through a key not imported from it");
    return nullptr;
  }
  fail(std::string("local: ") + what + " of " + std::to_string(len) + " bytes at offset " +
       std::to_string(offset) + " is outside rank " + std::to_string(peer) + "'s region of " +
       std::to_string(m.length) + " bytes");
  return nullptr;
}

void LocalTransport::broken(PeerChannel& ch, const char* what) noexcept {
  const auto peer = &ch - peers_.data();
  fail("local: rank " + std::to_string(peer) + " corrupted " + what);
  ch.dead = true;
  ch.why = error_;
  any_dead_ = true;
}

bool LocalTransport::check_peers() noexcept {
  for (std::size_t p = 0; p < peers_.size(); ++p) {
    PeerChannel& ch = peers_[p];
    if (!ch.sock || ch.dead) continue;
    pollfd pfd{ch.sock.get(), POLLRDHUP, 0};
    if (::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))) {
      ch.dead = true;
      try {
        ch.why = "local: rank " + std::to_string(p) + " vanished";
      } catch (...) {
      }
      any_dead_ = true;
    }
  }
  if (!any_dead_) return true;
  for (auto& ch : peers_)
    if (ch.dead) {
      fail(ch.why);
      break;
    }
  return false;
}

template <bool InPlace>
int LocalTransport::poll_rings(std::span<Completion> out) noexcept {
  int n = 0;
  if (!peers_.empty()) {
    // Round robin from next_peer_ (no division on this path: it runs on every poll).
    int p = next_peer_;
    for (int k = 0; k < size_ && static_cast<std::size_t>(n) < out.size(); ++k) {
      if (p != rank_) {
        PeerChannel& ch = peers_[static_cast<std::size_t>(p)];
        int r = InPlace ? deliver_in_place(ch, p, out, n) : deliver(ch, p, out, n);
        if (r < 0) return n > 0 ? n : -1;
        n = r;
      }
      if (++p == size_) p = 0;
    }
    if (++next_peer_ == size_) next_peer_ = 0;
  }
  if (n == 0) return liveness_tick() ? 0 : -1;
  return n;
}
template int LocalTransport::poll_rings<false>(std::span<Completion>) noexcept;
template int LocalTransport::poll_rings<true>(std::span<Completion>) noexcept;

// Write-with-data notices from `peer` into `out` from index n: the acquire load of the tail
// makes the payload stores visible. Returns the new count, or -1 (last_error set).
int LocalTransport::deliver_notices(PeerChannel& ch, std::span<Completion> out, int n) noexcept {
  const std::uint64_t tail = ch.in_note.load_tail();
  if (tail == ch.in_note_head) return n;
  if (!tail_valid(tail, ch.in_note_head, kNoteSlots)) {
    broken(ch, "its notice ring");
    return -1;
  }
  std::uint64_t head = ch.in_note_head;
  while (head < tail && static_cast<std::size_t>(n) < out.size()) {
    const std::byte* s = ch.in_note.slot(head++);
    Completion& c = out[static_cast<std::size_t>(n++)];
    c = {};
    c.data = get<std::uint64_t>(s);
    c.length =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(get<std::uint64_t>(s + 8), UINT32_MAX));
    c.kind = CompletionKind::remote_write;
    c.has_data = true;
  }
  ch.in_note_head = head;
  ch.in_note.store_head(head);
  return n;
}

// Moves what `peer` produced into `out` from index n; returns the new count, or -1 on an
// error (last_error set; reported only when nothing was delivered in this call).
int LocalTransport::deliver(PeerChannel& ch, int peer, std::span<Completion> out, int n) noexcept {
  const std::size_t cap = out.size();
  n = deliver_notices(ch, out, n);
  if (n < 0) return -1;

  // Messages: the slot at our head holds one once it carries the sequence number we expect
  // (acquire: its chunks are visible). Anything else is not there yet, or stale.
  std::uint64_t head = ch.in_msg_head;
  if (load_slot_seq(ch.in_msg.slot(head)) != head + 1) return n;
  if (ch.in_msg_next != head) {
    fail("local: messages from rank " + std::to_string(peer) +
         " are held in place (poll_rx_in_place); poll_rx cannot take them");
    return -1;
  }
  auto& q = recvs_[queue_of(peer)];
  int result = n;
  while (static_cast<std::size_t>(n) < cap && !q.empty()) {
    const std::byte* first = ch.in_msg.slot(head);
    if (load_slot_seq(first) != head + 1) break;
    SlotHeader h;
    std::memcpy(&h, first, sizeof h);
    const std::uint64_t chunks = message_chunks(h);
    if (chunks == 0) {
      broken(ch, "its message ring");
      result = -1;
      break;
    }
    PostedRecv rv = q.front();
    if (h.total > rv.len) {
      if (n > 0) break;  // report it on the next call, after what was delivered
      fail("local: message of " + std::to_string(h.total) + " bytes from rank " +
           std::to_string(peer) + " is larger than the posted receive of " +
           std::to_string(rv.len) + " bytes");
      result = -1;
    } else {
      std::size_t left = h.total;
      std::byte* dst = rv.buf;
      for (std::uint64_t i = 0; i < chunks && left > 0; ++i) {
        std::size_t take = std::min(left, kChunk);
        std::memcpy(dst, ch.in_msg.slot(head + i) + kSlotHeader, take);
        dst += take;
        left -= take;
      }
      Completion& c = out[static_cast<std::size_t>(n++)];
      c = {};
      c.context = rv.context;
      c.length = h.total;
      c.kind = CompletionKind::recv;
      result = n;
    }
    q.pop();
    head += chunks;
    if (result < 0) break;
  }
  if (head != ch.in_msg_head) {
    ch.in_msg_head = ch.in_msg_next = head;
    ch.in_msg.store_head(head);
  }
  return result < 0 ? -1 : n;
}

// Hands out what `peer` produced where it lies: each message of one slot becomes a completion
// naming its bytes in the ring; the head stays until release_rx. Returns as deliver does.
int LocalTransport::deliver_in_place(PeerChannel& ch, int peer, std::span<Completion> out,
                                     int n) noexcept {
  n = deliver_notices(ch, out, n);
  if (n < 0) return -1;
  std::uint64_t next = ch.in_msg_next;
  if (load_slot_seq(ch.in_msg.slot(next)) != next + 1) return n;
  if (!recvs_[queue_of(peer)].empty()) {
    fail("local: receives are posted for rank " + std::to_string(peer) +
         "; poll_rx_in_place cannot take its messages");
    return -1;
  }
  int result = n;
  while (static_cast<std::size_t>(n) < out.size()) {
    std::byte* first = ch.in_msg.slot(next);
    if (load_slot_seq(first) != next + 1) break;
    SlotHeader h;
    std::memcpy(&h, first, sizeof h);  // read once: the peer may still write the slot
    const std::uint64_t chunks = message_chunks(h);
    if (chunks == 0) {
      broken(ch, "its message ring");
      result = -1;
      break;
    }
    if (chunks != 1) {
      if (n == 0)
        fail("local: message of " + std::to_string(h.total) + " bytes from rank " +
             std::to_string(peer) + " is above the in-place receive limit of " +
             std::to_string(kChunk) + " bytes");
      result = n > 0 ? n : -1;  // reported on the next call, after what was handed out
      break;
    }
    Completion& c = out[static_cast<std::size_t>(n++)];
    c = {};
    c.length = h.total;
    c.kind = CompletionKind::recv;
    c.buf = first + kSlotHeader;
    c.peer = peer;
    ch.held[next & (kMsgSlots - 1)] = kHeld;
    ++next;
    result = n;
  }
  ch.in_msg_next = next;
  return result < 0 ? -1 : n;
}

Status LocalTransport::release_rx(const Completion& c) noexcept {
  const int peer = c.peer;
  if (peer < 0 || peer >= size_ || peer == rank_ || peers_.empty() ||
      c.kind != CompletionKind::recv)
    return fail("local: release_rx of a completion that poll_rx_in_place did not hand out");
  PeerChannel& ch = peers_[static_cast<std::size_t>(peer)];
  const auto at = reinterpret_cast<std::uintptr_t>(c.buf);
  const auto first = reinterpret_cast<std::uintptr_t>(ch.in_msg.base + kRingHeader + kSlotHeader);
  const std::uintptr_t off = at - first;  // wraps to a huge value below the ring
  if (at < first || off % kSlotStride != 0 || off / kSlotStride >= kMsgSlots)
    return fail("local: release_rx of a buffer outside rank " + std::to_string(peer) + "'s ring");
  const std::uint64_t pos = off / kSlotStride;
  // Its free-running index: what is out spans less than a ring from the head.
  const std::uint64_t index = ch.in_msg_head + ((pos - ch.in_msg_head) & (kMsgSlots - 1));
  if (index >= ch.in_msg_next || ch.held[pos] != kHeld)
    return fail("local: release_rx of a message from rank " + std::to_string(peer) +
                " that is not held (released twice?)");
  ch.held[pos] = kGivenBack;
  std::uint64_t head = ch.in_msg_head;
  while (head < ch.in_msg_next && ch.held[head & (kMsgSlots - 1)] == kGivenBack)
    ch.held[head++ & (kMsgSlots - 1)] = 0;
  if (head != ch.in_msg_head) {
    ch.in_msg_head = head;
    ch.in_msg.store_head(head);
  }
  return Status::ok;
}

bool demotes_stores() {
  const char* v = std::getenv("FABFLOW_LOCAL_DEMOTE");
  if (v && std::strcmp(v, "0") != 0 && std::strcmp(v, "1") != 0)
    throw UsageError(std::string("local: FABFLOW_LOCAL_DEMOTE must be 0 or 1, not '") + v + "'");
  return cpu_has_cldemote() && !(v && std::strcmp(v, "0") == 0);
}

}  // namespace fabflow::local

namespace fabflow {

std::unique_ptr<Transport> open_local(const TransportOptions& options) {
  return std::make_unique<local::LocalTransport>(options);
}

Capabilities local_capabilities(const TransportOptions& options) {
  if (options.endpoint == EndpointType::dgram)
    throw UsageError(
        "provider 'local' offers no dgram endpoints: the local transport has no unreliable "
        "(dgram) endpoint, its messages are never lost (libfabric's udp has one: -p udp)");
  Capabilities c;
  c.provider = "local";
  c.fabric = "local";
  c.domain = "memfd";
  c.endpoint = options.endpoint == EndpointType::msg ? EndpointType::msg : EndpointType::rdm;
  c.inject_size = local::kChunk;
  c.rx_in_place_max = local::kChunk;
  c.rx_in_place_depth = local::kMsgSlots;
  c.max_msg_size = local::kMaxMsg;
  c.cq_data_size = 8;
  c.max_rma_size = local::kMaxMsg;
  c.rma = true;
  c.atomics_u64 = true;
  c.in_order_data = true;
  c.write_after_write = true;
  c.stores_demoted = local::demotes_stores();
  c.rx_lands_on_poll = true;  // a message is copied from the ring when its receiver polls
  c.peer_mapping = true;
  c.cross_memory_attach = true;
  c.one_network_namespace = true;  // peers meet through abstract Unix sockets
  c.data_progress_manual = false;
  c.mr_mode = 0;
  return c;
}

}  // namespace fabflow
