// Setup of the local transport: the abstract Unix socket mesh (random names, token and
// uid checked), memfd segments (sealed, unnamed), ring channels, key blobs, and the receive
// side of the rings (poll_rx) with peer liveness checks.
//
// Channel segment (one per ordered pair, created by the consumer and passed to the producer):
//   [0, kMsgRingBytes)        message ring: tail @0, head @128, kMsgSlots slots of
//                             kSlotStride bytes (SlotHeader, payload at kSlotHeader)
//   [kMsgRingBytes, +kNote..) notice ring: tail @0, head @128, kNoteSlots x {u64 data, u64 len}
#include "transport/local/local_transport.h"

#include <fabflow/bootstrap.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/errno_text.h"

namespace fabflow::local {
namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr std::size_t kPage = 4096;
constexpr std::uint64_t kMaxRegion = std::uint64_t{1} << 40;
constexpr std::size_t kNameLen = 48;  // "\0fabflow-local-" + 32 hex digits, zero padded
constexpr std::size_t kTokenLen = 16;
constexpr std::size_t kWhereLen = 44;  // kernel boot id (36 characters) + network namespace inode
constexpr std::uint32_t kHelloMagic = 0x4c4c4646;        // "FFLL"
constexpr std::uint64_t kSegMagic = 0x47455343304c4646;  // "FFL0CSEG"
constexpr std::uint32_t kKeyMagic = 0x4b4c4646;          // "FFLK"
constexpr std::uint16_t kKeyVersion = 1;
constexpr std::size_t kKeyBytes = 32;
constexpr std::size_t kMaxPending = 4096;
// Posted receives and unreaped local completions kept at least (libfabric providers size their
// queues well above the requested depth too).
constexpr std::size_t kMinQueue = 8192;

[[noreturn]] void sys_fail(const char* call) { throw Error("local: " + errno_text(call)); }

template <class T>
void put(std::byte* out, T v) {
  std::memcpy(out, &v, sizeof v);
}
template <class T>
T get(const std::byte* in) {
  T v;
  std::memcpy(&v, in, sizeof v);
  return v;
}

// Where this process runs: the kernel's boot id and its network namespace. Abstract Unix
// sockets reach only peers in the same namespace of the same kernel, so ranks that differ in
// either (other hosts, or --netns on one host) cannot use this transport.
std::array<std::byte, kWhereLen> where_am_i() {
  std::array<std::byte, kWhereLen> out{};
  if (Fd f(::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC)); f) {
    if (::read(f.get(), out.data(), 36) < 0) out.fill(std::byte{0});
  }
  struct stat ns {};
  if (::stat("/proc/self/ns/net", &ns) == 0) put<std::uint64_t>(out.data() + 36, ns.st_ino);
  return out;
}

void random_bytes(unsigned char* p, std::size_t n) {
  while (n > 0) {
    ssize_t got = ::getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      sys_fail("getrandom");
    }
    p += got;
    n -= static_cast<std::size_t>(got);
  }
}

// Local-only memory (sources and receive buffers): nothing to share, nothing to release.
class PlainRegion final : public MemoryRegion {
 public:
  PlainRegion(void* addr, std::size_t len) : MemoryRegion(addr, len, nullptr) {}
};

void send_segment(int sock, int fd, std::uint64_t id, std::uint64_t length) {
  std::byte body[24];
  put(body, kSegMagic);
  put(body + 8, id);
  put(body + 16, length);
  iovec iov{body, sizeof body};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  for (;;) {
    if (::sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof body)) return;
    if (errno == EINTR) continue;
    sys_fail("sendmsg(segment)");
  }
}

// Maps a received segment after checking that it cannot shrink under us (no SIGBUS).
Mapping map_received(int fd, std::uint64_t want, int peer) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) sys_fail("fstat(segment)");
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK) || static_cast<std::uint64_t>(st.st_size) < want)
    throw PeerError(peer, "rank " + std::to_string(peer) +
                              " sent a segment that is unsealed or shorter than announced");
  // Populated up front, as registering memory with a NIC pins it: a one-sided access never
  // pays a page fault (on a large table nearly every first touch would, ~1 us each).
  void* p = ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) sys_fail("mmap(peer segment)");
  return Mapping(p, want);
}

}  // namespace

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

void LocalTransport::connect(Bootstrap& boot) {
  if (!peers_.empty()) throw UsageError("local: connect called twice");
  rank_ = boot.rank();
  size_ = boot.size();
  const auto n = static_cast<std::size_t>(size_);
  recvs_.resize(per_peer_recvs_ ? n : 1);
  for (auto& q : recvs_) q.reserve(std::max<std::size_t>(options_.rx_depth, kMinQueue));
  std::vector<PeerChannel> peers(n);
  pending_fds_.clear();
  pending_fds_.resize(n);

  // A listening socket under a random abstract name (nothing on any filesystem), and a token
  // that connecting peers must present; both travel through the authenticated bootstrap.
  unsigned char rnd[16], token[kTokenLen];
  random_bytes(rnd, sizeof rnd);
  random_bytes(token, sizeof token);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name = "fabflow-local-";
  for (unsigned char b : rnd) {
    name += kHex[b >> 4];
    name += kHex[b & 15];
  }
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const auto addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  Fd listener(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!listener) sys_fail("socket");
  if (size_ > 1) {
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), addr_len) != 0)
      sys_fail("bind(abstract socket)");
    if (::listen(listener.get(), size_) != 0) sys_fail("listen");
  }

  const auto where = where_am_i();
  std::vector<std::byte> mine(kNameLen + kTokenLen + kWhereLen);
  std::memcpy(mine.data(), addr.sun_path, std::min<std::size_t>(kNameLen, 1 + name.size()));
  std::memcpy(mine.data() + kNameLen, token, kTokenLen);
  std::memcpy(mine.data() + kNameLen + kTokenLen, where.data(), kWhereLen);
  auto all = boot.allgather(mine);
  for (int r = 0; r < size_; ++r) {
    const auto& theirs = all[static_cast<std::size_t>(r)];
    if (theirs.size() != mine.size())
      throw PeerError(r, "rank " + std::to_string(r) + " sent a malformed local address");
    if (std::memcmp(theirs.data() + kNameLen + kTokenLen, where.data(), kWhereLen) != 0)
      throw UsageError("local: rank " + std::to_string(r) +
                       " runs on another host or in another network namespace; the local "
                       "transport needs every rank on one host in one namespace (use shm or tcp)");
  }

  auto deadline = std::chrono::steady_clock::now() + kConnectTimeout;
  auto time_left = [&] {
    if (boot.peer_failed()) throw PeerError(-1, "local connect: a peer vanished");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) throw Error("local connect: peers did not connect within 10 s");
    return static_cast<int>(std::min<std::int64_t>(left.count(), 100));
  };

  // Higher ranks connect to lower ones and present (magic, rank, the listener's token).
  for (int p = 0; p < rank_; ++p) {
    const auto& b = all[static_cast<std::size_t>(p)];
    sockaddr_un to{};
    to.sun_family = AF_UNIX;
    std::memcpy(to.sun_path, b.data(), kNameLen);
    if (to.sun_path[0] != '\0')
      throw PeerError(p, "rank " + std::to_string(p) + " sent a malformed local address");
    std::size_t len = 1;
    while (len < kNameLen && to.sun_path[len] != '\0') ++len;
    Fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (!s) sys_fail("socket");
    if (::connect(s.get(), reinterpret_cast<sockaddr*>(&to),
                  static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len)) != 0)
      throw PeerError(p, errno_text("local connect to rank " + std::to_string(p)));
    std::byte hello[8 + kTokenLen];
    put(hello, kHelloMagic);
    put<std::int32_t>(hello + 4, rank_);
    std::memcpy(hello + 8, b.data() + kNameLen, kTokenLen);
    if (::send(s.get(), hello, sizeof hello, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof hello))
      throw PeerError(p, errno_text("local connect to rank " + std::to_string(p)));
    peers[static_cast<std::size_t>(p)].sock = std::move(s);
  }

  // Lower ranks accept; anything without the token, from another uid, or a duplicate is closed.
  int expected = size_ - 1 - rank_;
  while (expected > 0) {
    pollfd pfd{listener.get(), POLLIN, 0};
    if (::poll(&pfd, 1, time_left()) <= 0) continue;
    Fd s(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!s) continue;
    ucred cred{};
    socklen_t cl = sizeof cred;
    if (::getsockopt(s.get(), SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != ::getuid())
      continue;
    pollfd in{s.get(), POLLIN, 0};
    if (::poll(&in, 1, 1000) <= 0) continue;
    std::byte hello[8 + kTokenLen + 1];
    ssize_t got = ::recv(s.get(), hello, sizeof hello, 0);
    if (got != static_cast<ssize_t>(8 + kTokenLen)) continue;
    auto from = get<std::int32_t>(hello + 4);
    if (get<std::uint32_t>(hello) != kHelloMagic || from <= rank_ || from >= size_ ||
        std::memcmp(hello + 8, token, kTokenLen) != 0 || peers[static_cast<std::size_t>(from)].sock)
      continue;
    peers[static_cast<std::size_t>(from)].sock = std::move(s);
    --expected;
  }
  listener = Fd();  // the abstract name disappears with the socket

  // Each side creates the segment it consumes from and passes it to the producer.
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    PeerChannel& ch = peers[static_cast<std::size_t>(p)];
    ucred cred{};
    socklen_t cl = sizeof cred;
    if (::getsockopt(ch.sock.get(), SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0)
      sys_fail("getsockopt(SO_PEERCRED)");
    ch.pid = cred.pid;
    Segment seg = create_segment(kChannelBytes, "fabflow-local-ring");
    send_segment(ch.sock.get(), seg.fd.get(), 0, kChannelBytes);
    ch.in_map = std::move(seg.map);
  }
  peers_ = std::move(peers);
  try {
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      PeerChannel& ch = peers_[static_cast<std::size_t>(p)];
      Fd fd = receive_segment(p, 0, deadline, &boot);
      ch.out_map = map_received(fd.get(), kChannelBytes, p);
      ch.in_msg = {ch.in_map.data(), kMsgSlots, kSlotStride};
      ch.held.assign(kMsgSlots, 0);
      ch.in_note = {ch.in_map.data() + kMsgRingBytes, kNoteSlots, kNoteStride};
      ch.out_msg = {ch.out_map.data(), kMsgSlots, kSlotStride};
      ch.out_note = {ch.out_map.data() + kMsgRingBytes, kNoteSlots, kNoteStride};
    }
  } catch (...) {
    peers_.clear();
    throw;
  }
  sent_.assign(n, {});
}

// Waits for the segment `id` from `peer` (keeping others that arrive first); throws on
// hang-up, malformed messages and timeout.
Fd LocalTransport::receive_segment(int peer, std::uint64_t id,
                                   std::chrono::steady_clock::time_point deadline,
                                   Bootstrap* boot) {
  auto& pend = pending_fds_[static_cast<std::size_t>(peer)];
  const std::string who = "rank " + std::to_string(peer);
  for (;;) {
    for (auto it = pend.begin(); it != pend.end(); ++it)
      if (it->id == id) {
        if (id == 0) {
          Fd fd = std::move(it->fd);
          pend.erase(it);
          return fd;
        }
        int d = ::fcntl(it->fd.get(), F_DUPFD_CLOEXEC, 0);
        if (d < 0) sys_fail("fcntl(F_DUPFD_CLOEXEC)");
        return Fd(d);
      }
    PeerChannel& ch = peers_[static_cast<std::size_t>(peer)];
    if (boot && boot->peer_failed()) throw PeerError(peer, "local: a peer vanished");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      throw PeerError(
          peer, "local: " + who + " did not send segment " + std::to_string(id) + " within 10 s");
    pollfd pfd{ch.sock.get(), POLLIN, 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 50)));
    if (rc <= 0) continue;
    std::byte body[25];
    iovec iov{body, sizeof body};
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t got = ::recvmsg(ch.sock.get(), &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (got <= 0) throw PeerError(peer, "local: " + who + " vanished");
    std::vector<Fd> fds;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
        fds.emplace_back(f);
      }
    }
    if (got != 24 || (msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) || fds.size() != 1 ||
        get<std::uint64_t>(body) != kSegMagic || pend.size() >= kMaxPending)
      throw PeerError(peer, "local: " + who + " sent a malformed segment message");
    pend.push_back(
        {get<std::uint64_t>(body + 8), get<std::uint64_t>(body + 16), std::move(fds[0])});
  }
}

std::unique_ptr<MemoryRegion> LocalTransport::register_memory(void* addr, std::size_t len,
                                                              unsigned access) {
  if (access & (kRemoteRead | kRemoteWrite))
    throw UsageError(
        "local: register_memory cannot share memory it did not allocate; use "
        "Transport::allocate() for remotely accessible regions");
  return std::make_unique<PlainRegion>(addr, len);
}

std::unique_ptr<MemoryRegion> LocalTransport::allocate(std::size_t len, unsigned /*access*/) {
  if (len > kMaxRegion)
    throw UsageError("local: allocate of " + std::to_string(len) + " bytes is above 1 TiB");
  std::size_t rounded = (std::max<std::size_t>(len, 1) + kPage - 1) / kPage * kPage;
  return std::make_unique<LocalMemoryRegion>(create_segment(rounded, "fabflow-local"), len,
                                             next_region_id_++, this);
}

std::vector<std::byte> LocalTransport::export_key(const MemoryRegion& region) const {
  const auto* mr = dynamic_cast<const LocalMemoryRegion*>(&region.registered());
  if (!mr || mr->owner() != this)
    throw UsageError("local: export_key of memory not from this transport's allocate()");
  if (peers_.empty()) throw UsageError("local: export_key before connect");
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    auto& sent = sent_[static_cast<std::size_t>(p)];
    if (std::find(sent.begin(), sent.end(), mr->id()) != sent.end()) continue;
    const PeerChannel& ch = peers_[static_cast<std::size_t>(p)];
    if (ch.dead) throw PeerError(p, ch.why);
    send_segment(ch.sock.get(), mr->fd(), mr->id(), mr->mapped());
    sent.push_back(mr->id());
  }
  std::vector<std::byte> out(kKeyBytes);
  put(out.data(), kKeyMagic);
  put(out.data() + 4, kKeyVersion);
  put<std::uint16_t>(out.data() + 6, 0);
  put<std::int32_t>(out.data() + 8, rank_);
  put<std::uint32_t>(out.data() + 12, 0);
  put<std::uint64_t>(out.data() + 16, mr->id());
  put<std::uint64_t>(out.data() + 24, region.size());
  return out;
}

LocalKey decode_local_key(std::span<const std::byte> blob, int peer) {
  auto bad = [&](const char* what) {
    return PeerError(
        peer, "rank " + std::to_string(peer) + " sent a malformed memory key (" + what + ")");
  };
  if (blob.size() != kKeyBytes) throw bad("bad length");
  const std::byte* b = blob.data();
  if (get<std::uint32_t>(b) != kKeyMagic) throw bad("bad magic");
  if (get<std::uint16_t>(b + 4) != kKeyVersion) throw bad("unknown version");
  if (get<std::int32_t>(b + 8) != peer) throw bad("owned by another rank");
  LocalKey k{get<std::uint64_t>(b + 16), get<std::uint64_t>(b + 24)};
  if (k.id == 0) throw bad("bad region id");
  if (k.length > kMaxRegion) throw bad("length out of range");
  return k;
}

RemoteMemory LocalTransport::import_key(int peer, std::span<const std::byte> blob) {
  if (peers_.empty()) throw UsageError("local: import_key before connect");
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw PeerError(peer,
                    "rank " + std::to_string(peer) + " sent a malformed memory key (no such peer)");
  const auto [id, length] = decode_local_key(blob, peer);
  auto bad = [&](const char* what) {
    return PeerError(
        peer, "rank " + std::to_string(peer) + " sent a malformed memory key (" + what + ")");
  };
  const PeerChannel& ch = peers_[static_cast<std::size_t>(peer)];
  if (ch.dead) throw PeerError(peer, ch.why);
  Fd fd = receive_segment(peer, id, std::chrono::steady_clock::now() + kConnectTimeout, nullptr);
  std::uint64_t announced = 0;
  for (const auto& p : pending_fds_[static_cast<std::size_t>(peer)])
    if (p.id == id) announced = p.length;
  if (announced < length || announced > kMaxRegion) throw bad("length beyond its segment");
  Import imp;
  imp.map = map_received(fd.get(), std::max<std::uint64_t>(announced, 1), peer);
  imp.length = length;
  imp.peer = peer;
  imports_.push_back(std::move(imp));
  RemoteMemory m;
  m.base = 0;
  m.length = length;
  m.key = imports_.size() - 1;
  m.peer = peer;
  return m;
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
  c.data_progress_manual = false;
  c.mr_mode = 0;
  return c;
}

}  // namespace fabflow
