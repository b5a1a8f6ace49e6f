// Setup of the local transport: the abstract Unix socket mesh (random names, a token and the
// peer's uid checked), memfd segments (sealed, unnamed) passed over it, registration and key
// blobs. The rings' layout and receive side: local_transport.cc.
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

}  // namespace fabflow::local
