// The native shared-memory transport. Setup (sockets, memfds, key blobs) lives in
// local_setup.cc, the receive side of the rings in local_transport.cc; the data path is inline here
// so loops templated on LocalTransport compile to direct loads, stores and atomic instructions.
// Memory ordering: see docs/local-transport.md.
#pragma once

#include <fabflow/local.h>
#include <fabflow/transport.h>
#include <sys/types.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "common/cldemote.h"
#include "common/fd.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace fabflow::local {

using fabflow::Fd;

// An owned MAP_SHARED mapping, unmapped on destruction. Move-only, not thread-safe.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* addr, std::size_t len) noexcept : addr_(static_cast<std::byte*>(addr)), len_(len) {}
  Mapping(Mapping&& o) noexcept : addr_(o.addr_), len_(o.len_) {
    o.addr_ = nullptr;
    o.len_ = 0;
  }
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();
  std::byte* data() const noexcept { return addr_; }
  std::size_t size() const noexcept { return len_; }

 private:
  std::byte* addr_ = nullptr;
  std::size_t len_ = 0;
};

// Creates a sealed (fixed-size) anonymous memfd of `len` bytes and maps it read/write.
struct Segment {
  Fd fd;
  Mapping map;
};
Segment create_segment(std::size_t len, const char* what);

// Posted receives and unreaped local completions kept at least (libfabric providers size their
// queues well above the requested depth too).
inline constexpr std::size_t kMinQueue = 8192;

// Throws Error("local: <call>: <what errno says>").
[[noreturn]] void sys_fail(const char* call);

// A field of a ring slot or a setup message, at any alignment, in host byte order (both ends
// run on one host).
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

// Memory allocated by the local transport: a memfd segment it can pass to peers.
// Owns the mapping and the fd. Move-only, not thread-safe.
class LocalMemoryRegion final : public MemoryRegion {
 public:
  LocalMemoryRegion(Segment seg, std::size_t len, std::uint64_t id, const void* owner)
      : MemoryRegion(seg.map.data(), len, nullptr), seg_(std::move(seg)), id_(id), owner_(owner) {}
  std::uint64_t id() const noexcept { return id_; }
  const void* owner() const noexcept { return owner_; }  // the transport that allocated it
  int fd() const noexcept { return seg_.fd.get(); }
  std::size_t mapped() const noexcept { return seg_.map.size(); }

 private:
  Segment seg_;
  std::uint64_t id_;
  const void* owner_;
};

// Ring geometry (shared by both ends; the segment layout is documented in the .cc file).
inline constexpr std::size_t kChunk = 4096;     // payload bytes per message slot
inline constexpr std::size_t kSlotHeader = 16;  // SlotHeader: a small message shares its line
// Every slot starts on a cache line (the ring header is whole lines too): a message of up to
// 48 bytes touches one line, up to 112 bytes two, wherever it falls in the ring (with a stride
// of kSlotHeader + kChunk, slots started 16 bytes further into a line each time and a 64-byte
// request frame touched three lines in half of them).
inline constexpr std::size_t kSlotStride = (kSlotHeader + kChunk + 63) / 64 * 64;
inline constexpr std::uint64_t kMsgSlots = 512;       // per direction per peer
inline constexpr std::size_t kMaxMsg = 256 * kChunk;  // 1 MiB: at most half the ring
inline constexpr std::uint64_t kNoteSlots = 1024;     // writedata notices per direction
inline constexpr std::size_t kNoteStride = 16;
inline constexpr std::size_t kRingHeader = 256;  // head and tail on their own lines
inline constexpr std::size_t kMsgRingBytes = kRingHeader + kMsgSlots * kSlotStride;
inline constexpr std::size_t kNoteRingBytes = kRingHeader + kNoteSlots * kNoteStride;
inline constexpr std::size_t kChannelBytes = kMsgRingBytes + kNoteRingBytes;
static_assert(std::has_single_bit(kMsgSlots) && std::has_single_bit(kNoteSlots),
              "ring indices wrap with a mask");
static_assert(kSlotStride % 64 == 0 && kRingHeader % 64 == 0, "slots start on a cache line");

// Whether this process demotes the lines it stores into peers' memory
// (Capabilities::stores_demoted): where the CPU has CLDEMOTE, unless FABFLOW_LOCAL_DEMOTE is 0
// (for before/after measurements). Throws UsageError for a value other than 0 or 1.
bool demotes_stores();

// One single-producer single-consumer ring view over shared memory: tail at offset 0 (written
// by the producer, release), head at 128 (written by the consumer, release). Both indices are
// free-running; the other side's index is untrusted and bound-checked on every read.
// Plain view, not thread-safe: one producer thread and one consumer thread per ring.
struct Ring {
  std::byte* base = nullptr;
  std::uint64_t slots = 0;
  std::size_t stride = 0;

  std::uint64_t& tail_word() const noexcept { return *reinterpret_cast<std::uint64_t*>(base); }
  std::uint64_t& head_word() const noexcept {
    return *reinterpret_cast<std::uint64_t*>(base + 128);
  }
  std::uint64_t load_tail() const noexcept {
    return std::atomic_ref<std::uint64_t>(tail_word()).load(std::memory_order_acquire);
  }
  std::uint64_t load_head() const noexcept {
    return std::atomic_ref<std::uint64_t>(head_word()).load(std::memory_order_acquire);
  }
  void store_tail(std::uint64_t v) const noexcept {
    std::atomic_ref<std::uint64_t>(tail_word()).store(v, std::memory_order_release);
  }
  void store_head(std::uint64_t v) const noexcept {
    std::atomic_ref<std::uint64_t>(head_word()).store(v, std::memory_order_release);
  }
  std::byte* slot(std::uint64_t index) const noexcept {
    return base + kRingHeader + (index & (slots - 1)) * stride;  // slots: a power of two
  }
};

// Message slot header, in the first slot of a message: its total length, its chunk count and
// its sequence number (the slot's free-running ring index + 1), stored last with release. The
// consumer waits for the sequence it expects at its head: the slot then holds a complete
// message (its other chunks were written before), with no ring tail to read, one cache line
// fewer per message. A stale slot of an earlier lap carries a sequence number one or more
// laps lower.
struct SlotHeader {
  std::uint32_t total;
  std::uint32_t chunks;
  std::uint64_t seq;
};
static_assert(sizeof(SlotHeader) == kSlotHeader);
inline std::uint64_t load_slot_seq(const std::byte* slot) noexcept {
  return __atomic_load_n(reinterpret_cast<const std::uint64_t*>(slot + 8), __ATOMIC_ACQUIRE);
}
inline void store_slot_seq(std::byte* slot, std::uint64_t seq) noexcept {
  std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(slot + 8))
      .store(seq, std::memory_order_release);
}

// Checks of what the other end of a ring publishes (any value may arrive; fuzz/local_ring.cc).
// The consumer's view: the producer's tail against our head.
constexpr bool tail_valid(std::uint64_t tail, std::uint64_t head, std::uint64_t slots) noexcept {
  return tail >= head && tail - head <= slots;
}
// The producer's view: the consumer's head against our tail and the last head we saw.
constexpr bool head_valid(std::uint64_t head, std::uint64_t tail, std::uint64_t seen,
                          std::uint64_t slots) noexcept {
  return head <= tail && tail - head <= slots && head >= seen;
}
// The slots of the message whose first slot carries `h`, or 0 when this side would never have
// written that header: a length above kMaxMsg or a chunk count that disagrees with the length
// (so at most kMaxMsg / kChunk slots, half the ring).
constexpr std::uint64_t message_chunks(const SlotHeader& h) noexcept {
  const std::uint64_t chunks = h.total == 0 ? 1 : (std::uint64_t{h.total} + kChunk - 1) / kChunk;
  return h.total > kMaxMsg || h.chunks != chunks ? 0 : chunks;
}
static_assert(kMaxMsg / kChunk <= kMsgSlots / 2);

// One peer: the rings it writes to us (inbound) and we write to it (outbound), its socket,
// and the indices this side owns (never re-read from shared memory).
struct PeerChannel {
  Fd sock;
  Mapping in_map;   // our segment: the peer produces, we consume
  Mapping out_map;  // the peer's segment: we produce, it consumes
  Ring in_msg, in_note, out_msg, out_note;
  std::uint64_t in_msg_head = 0, in_note_head = 0;  // our consumer indices
  // Messages handed out by poll_rx_in_place are [in_msg_head, in_msg_next); `held` marks each
  // one's slot (by ring position) until release_rx, and the head advances past what is given
  // back. With posted receives in_msg_next == in_msg_head.
  std::uint64_t in_msg_next = 0;
  std::vector<std::uint8_t> held;
  std::uint64_t out_msg_tail = 0, out_note_tail = 0;            // our producer indices
  std::uint64_t out_msg_head_seen = 0, out_note_head_seen = 0;  // cached consumer indices
  bool dead = false;
  std::string why;  // set with dead
  pid_t pid = 0;    // the peer's process, as the kernel names it (SO_PEERCRED), for copy_peer
};

// What a local memory key names: the owner's region id and its length (the owner is the rank
// that sent it). Throws PeerError naming `peer` when the blob is malformed or out of range.
struct LocalKey {
  std::uint64_t id = 0;
  std::uint64_t length = 0;
};
LocalKey decode_local_key(std::span<const std::byte> blob, int peer);

// A peer's region mapped here.
struct Import {
  Mapping map;
  std::uint64_t length = 0;
  int peer = -1;
};

// Connected to every peer of one bootstrap through memfd rings; one-sided operations are
// direct memory accesses on imported mappings. Not thread-safe (progress() is a no-op and
// therefore safe from a progress thread).
class LocalTransport final : public Transport {
 public:
  explicit LocalTransport(const TransportOptions& options);
  ~LocalTransport() override;

  const Capabilities& caps() const noexcept override { return caps_; }
  std::string_view name() const noexcept override { return "local"; }
  void connect(Bootstrap& boot) override;
  std::unique_ptr<MemoryRegion> register_memory(void* addr, std::size_t len,
                                                unsigned access) override;
  std::unique_ptr<MemoryRegion> allocate(std::size_t len, unsigned access) override;
  std::vector<std::byte> export_key(const MemoryRegion& mr) const override;
  RemoteMemory import_key(int peer, std::span<const std::byte> blob) override;
  const std::string& last_error() const noexcept override { return error_; }

  Status post_send(int peer, const void* buf, std::size_t len, void* /*desc*/,
                   std::uint64_t context, unsigned flags) noexcept override {
    PeerChannel* ch = usable(peer);
    if (!ch) return Status::failed;
    if (len > kMaxMsg) [[unlikely]]
      return too_long(len);
    if ((flags & kSignal) && tx_full()) return Status::again;
    const std::uint64_t chunks = len == 0 ? 1 : (len + kChunk - 1) / kChunk;
    Ring& r = ch->out_msg;
    if (ch->out_msg_tail + chunks - ch->out_msg_head_seen > kMsgSlots) {
      if (!refresh_head(*ch, r, ch->out_msg_tail, ch->out_msg_head_seen)) return Status::failed;
      if (ch->out_msg_tail + chunks - ch->out_msg_head_seen > kMsgSlots) return Status::again;
    }
    const auto* src = static_cast<const std::byte*>(buf);
    std::size_t left = len;
    for (std::uint64_t i = 0; i < chunks; ++i) {
      std::size_t n = left < kChunk ? left : kChunk;
      if (n) std::memcpy(r.slot(ch->out_msg_tail + i) + kSlotHeader, src, n);
      src += n;
      left -= n;
    }
    // Length and chunk count, then the sequence number (release): the message is published.
    std::byte* first = r.slot(ch->out_msg_tail);
    const std::uint32_t lc[2] = {static_cast<std::uint32_t>(len),
                                 static_cast<std::uint32_t>(chunks)};
    std::memcpy(first, lc, sizeof lc);
    store_slot_seq(first, ch->out_msg_tail + 1);
    if (demote_ && chunks == 1) demote_lines(first, kSlotHeader + len);
    ch->out_msg_tail += chunks;
    if (flags & kSignal)
      push_tx({context, 0, static_cast<std::uint32_t>(len), CompletionKind::send, false});
    return Status::ok;
  }

  Status post_recv(int peer, void* buf, std::size_t len, void* /*desc*/,
                   std::uint64_t context) noexcept override {
    if (peer < 0 || peer >= size_)
      return fail("local: post_recv from rank " + std::to_string(peer) + ": no such rank");
    auto& q = recvs_[queue_of(peer)];
    if (q.full()) return Status::again;
    q.push({static_cast<std::byte*>(buf), len, context});
    return Status::ok;
  }

  Status post_write(int peer, const void* buf, std::size_t len, void* /*desc*/,
                    const RemoteMemory& dst, std::uint64_t offset, std::uint64_t context,
                    unsigned flags,
                    std::optional<std::uint64_t> imm = std::nullopt) noexcept override {
    PeerChannel* ch = usable(peer);
    if (!ch) return Status::failed;
    std::byte* target = resolve(peer, dst, offset, len, "write");
    if (!target) return Status::failed;
    if ((flags & kSignal) && tx_full()) return Status::again;
    Ring& r = ch->out_note;
    if (imm && ch->out_note_tail + 1 - ch->out_note_head_seen > kNoteSlots) {
      if (!refresh_head(*ch, r, ch->out_note_tail, ch->out_note_head_seen)) return Status::failed;
      if (ch->out_note_tail + 1 - ch->out_note_head_seen > kNoteSlots) return Status::again;
    }
    store_payload(target, static_cast<const std::byte*>(buf), len);
    if (demote_ && len <= kDemoteMax) demote_lines(target, len);
    if (imm) {
      std::byte* s = r.slot(ch->out_note_tail);
      std::uint64_t l = len;
      std::memcpy(s, &*imm, 8);
      std::memcpy(s + 8, &l, 8);
      r.store_tail(++ch->out_note_tail);
      if (demote_) demote_lines(s, kNoteStride);
    }
    if (flags & kSignal)
      push_tx({context, 0, static_cast<std::uint32_t>(len), CompletionKind::write, false});
    return Status::ok;
  }

  Status post_read(int peer, void* buf, std::size_t len, void* /*desc*/, const RemoteMemory& src,
                   std::uint64_t offset, std::uint64_t context, unsigned flags) noexcept override {
    if (!usable(peer)) return Status::failed;
    const std::byte* from = resolve(peer, src, offset, len, "read");
    if (!from) return Status::failed;
    if ((flags & kSignal) && tx_full()) return Status::again;
    load_payload(buf, from, len);
    if (flags & kSignal)
      push_tx({context, 0, static_cast<std::uint32_t>(len), CompletionKind::read, false});
    return Status::ok;
  }

  // Atomics always complete (the caller needs the fetched value); sequentially consistent.
  Status post_atomic(int peer, AtomicOp op, std::uint64_t operand, std::uint64_t compare,
                     std::uint64_t* res, void* /*res_desc*/, const RemoteMemory& dst,
                     std::uint64_t offset, std::uint64_t context,
                     unsigned /*flags*/) noexcept override {
    if (!usable(peer)) return Status::failed;
    if (offset % 8 != 0)
      return fail("local: atomic at offset " + std::to_string(offset) + " is not 8-byte aligned");
    std::byte* target = resolve(peer, dst, offset, 8, "atomic");
    if (!target) return Status::failed;
    if (tx_full()) return Status::again;
    std::atomic_ref<std::uint64_t> word(*reinterpret_cast<std::uint64_t*>(target));
    std::uint64_t old;
    if (op == AtomicOp::fetch_add) {
      old = word.fetch_add(operand);
    } else {
      old = compare;
      word.compare_exchange_strong(old, operand);
    }
    if (res) *res = old;
    push_tx({context, 0, 8, CompletionKind::atomic, false});
    return Status::ok;
  }

  int poll_tx(std::span<Completion> out) noexcept override {
    int n = 0;
    while (!tx_.empty() && static_cast<std::size_t>(n) < out.size()) {
      out[static_cast<std::size_t>(n++)] = tx_.front();
      tx_.pop();
    }
    if (n == 0) return liveness_tick() ? 0 : -1;
    return n;
  }

  int poll_rx(std::span<Completion> out) noexcept override { return poll_rings<false>(out); }
  // Messages of one slot (kChunk bytes) are read in place in the inbound ring.
  int poll_rx_in_place(std::span<Completion> out) noexcept override {
    return poll_rings<true>(out);
  }
  Status release_rx(const Completion& c) noexcept override;

  // Nothing to drive: data lands with the stores that write it.
  void progress() noexcept override {}

  // Every local transport maps its peers' regions (Capabilities::peer_mapping), known at
  // compile time to the data paths templated over this type (always_maps_peers).
  static constexpr bool kPeerMapping = true;
  // The peer's region as this process maps it: for a user that stores into the peer's memory
  // itself (a flow producer with compact slots, which then needs no write). The stores follow
  // the ordering rules of docs/local-transport.md as a write's do.
  std::byte* map_peer(int peer, const RemoteMemory& m, std::uint64_t offset,
                      std::size_t len) noexcept override {
    return resolve(peer, m, offset, len, "direct access");
  }
  // By process_vm_readv / process_vm_writev to the peer's process (cross_memory.cc).
  Status copy_peer(int peer, PeerCopy dir, void* buf, std::uint64_t addr,
                   std::size_t len) noexcept override;

  // Test hooks: play a peer that scribbles on the rings it produces into: the tail of the
  // notice ring, or the header of the next message slot.
  void test_corrupt_inbound_tail(int peer, std::uint64_t tail) noexcept {
    peers_[static_cast<std::size_t>(peer)].in_note.store_tail(tail);
  }
  void test_corrupt_inbound_message(int peer, std::uint32_t total, std::uint32_t chunks) noexcept {
    PeerChannel& ch = peers_[static_cast<std::size_t>(peer)];
    std::byte* s = ch.in_msg.slot(ch.in_msg_head);
    const std::uint32_t lc[2] = {total, chunks};
    std::memcpy(s, lc, sizeof lc);
    store_slot_seq(s, ch.in_msg_head + 1);
  }

 private:
  static constexpr std::uint32_t kCheckEvery = 256;  // empty polls between clock reads
  static constexpr auto kCheckPeriod = std::chrono::milliseconds(1);
  static constexpr std::size_t kBigCopy = 32 * 1024;        // memcpy may use streaming stores
  static constexpr std::uint8_t kHeld = 1, kGivenBack = 2;  // PeerChannel::held

  struct PostedRecv {
    std::byte* buf = nullptr;
    std::size_t len = 0;
    std::uint64_t context = 0;
  };
  // A queue of at least the capacity asked for, rounded up to a power of two so that the
  // index wraps with a mask: these run once or twice per operation on the data path.
  template <class T>
  class Fifo {
   public:
    void reserve(std::size_t n) {
      items_.assign(std::bit_ceil(std::max<std::size_t>(n, 1)), T{});
      mask_ = items_.size() - 1;
      first_ = count_ = 0;
    }
    bool empty() const noexcept { return count_ == 0; }
    bool full() const noexcept { return count_ == items_.size(); }
    void push(const T& v) noexcept {
      items_[(first_ + count_) & mask_] = v;
      ++count_;
    }
    const T& front() const noexcept { return items_[first_]; }
    void pop() noexcept {
      first_ = (first_ + 1) & mask_;
      --count_;
    }

   private:
    std::vector<T> items_;
    std::size_t mask_ = 0, first_ = 0, count_ = 0;
  };

  // Copies a write's payload so that its last 8 bytes land after the rest, with a release
  // store (an atomic one when they are 8-byte aligned: a flag word the peer polls).
  static void store_payload(std::byte* to, const std::byte* from, std::size_t len) noexcept {
    if (len >= 8) {
      std::memcpy(to, from, len - 8);
#if defined(__x86_64__) || defined(__i386__)
      if (len > kBigCopy) _mm_sfence();
#endif
      std::uint64_t last;
      std::memcpy(&last, from + len - 8, 8);
      std::byte* at = to + len - 8;
      if (reinterpret_cast<std::uintptr_t>(at) % 8 == 0) {
        std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(at))
            .store(last, std::memory_order_release);
      } else {
        std::atomic_thread_fence(std::memory_order_release);
        std::memcpy(at, &last, 8);
      }
    } else if (len) {
      std::atomic_thread_fence(std::memory_order_release);
      std::memcpy(to, from, len);
    }
    std::atomic_thread_fence(std::memory_order_release);
  }
  // Copies a read's source; an aligned 8-byte word is read with one acquire load.
  static void load_payload(void* to, const std::byte* from, std::size_t len) noexcept {
    if (len == 8 && reinterpret_cast<std::uintptr_t>(from) % 8 == 0) {
      std::uint64_t v = std::atomic_ref<std::uint64_t>(
                            *reinterpret_cast<std::uint64_t*>(const_cast<std::byte*>(from)))
                            .load(std::memory_order_acquire);
      std::memcpy(to, &v, 8);
      return;
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (len) std::memcpy(to, from, len);
  }

  std::size_t queue_of(int peer) const noexcept {
    return per_peer_recvs_ ? static_cast<std::size_t>(peer) : 0;
  }
  bool tx_full() const noexcept { return tx_.full(); }
  void push_tx(const Completion& c) noexcept { tx_.push(c); }
  Status fail(std::string msg) noexcept {
    try {
      error_ = std::move(msg);
    } catch (...) {
    }
    return Status::failed;
  }
  // The channel to `peer` when posts to it may proceed, else nullptr with last_error set.
  // The checks run on every post; the messages are built out of line.
  PeerChannel* usable(int peer) noexcept {
    if (peer < 0 || peer >= size_ || peer == rank_ || peers_.empty()) [[unlikely]]
      return not_usable(peer);
    PeerChannel& ch = peers_[static_cast<std::size_t>(peer)];
    if (ch.dead) [[unlikely]]
      return not_usable(peer);
    return &ch;
  }
  [[gnu::cold, gnu::noinline]] PeerChannel* not_usable(int peer) noexcept;
  [[gnu::cold, gnu::noinline]] Status too_long(std::size_t len) noexcept;
  // The mapped address of [offset, offset+len) of `m`, or nullptr (last_error set).
  std::byte* resolve(int peer, const RemoteMemory& m, std::uint64_t offset, std::size_t len,
                     const char* what) noexcept {
    if (m.key < imports_.size()) [[likely]] {
      const Import& imp = imports_[m.key];
      if (imp.peer == peer && m.peer == peer && m.length <= imp.length && m.contains(offset, len))
          [[likely]]
        return imp.map.data() + offset;
    }
    return unresolved(peer, m, offset, len, what);
  }
  [[gnu::cold, gnu::noinline]] std::byte* unresolved(int peer, const RemoteMemory& m,
                                                     std::uint64_t offset, std::size_t len,
                                                     const char* what) noexcept;
  // Re-reads the consumer's index of an outbound ring; false (peer marked broken) when it is
  // impossible (ahead of what we produced or more than a ring behind).
  bool refresh_head(PeerChannel& ch, const Ring& r, std::uint64_t tail,
                    std::uint64_t& seen) noexcept {
    std::uint64_t h = r.load_head();
    if (!head_valid(h, tail, seen, r.slots)) {
      broken(ch, "its ring index");
      return false;
    }
    seen = h;
    return true;
  }
  void broken(PeerChannel& ch, const char* what) noexcept;
  // Checks peer sockets now and then; false when a peer is gone (last_error set).
  bool liveness_tick() noexcept {
    if (++idle_polls_ < kCheckEvery && !any_dead_) return true;
    idle_polls_ = 0;
    auto now = std::chrono::steady_clock::now();
    if (!any_dead_ && now < next_check_) return true;
    next_check_ = now + kCheckPeriod;
    return check_peers();
  }
  bool check_peers() noexcept;
  template <bool InPlace>
  int poll_rings(std::span<Completion> out) noexcept;
  int deliver_notices(PeerChannel& ch, std::span<Completion> out, int n) noexcept;
  int deliver(PeerChannel& ch, int peer, std::span<Completion> out, int n) noexcept;
  int deliver_in_place(PeerChannel& ch, int peer, std::span<Completion> out, int n) noexcept;
  Fd receive_segment(int peer, std::uint64_t id, std::chrono::steady_clock::time_point deadline,
                     Bootstrap* boot);

  TransportOptions options_;
  Capabilities caps_;
  bool demote_ = false;  // caps_.stores_demoted, kept where the data path reads it
  int rank_ = 0;
  int size_ = 1;
  bool per_peer_recvs_ = false;
  std::string error_;
  std::vector<PeerChannel> peers_;
  std::vector<Import> imports_;
  std::vector<Fifo<PostedRecv>> recvs_;
  Fifo<Completion> tx_;
  std::uint64_t next_region_id_ = 1;
  std::uint32_t idle_polls_ = 0;
  std::chrono::steady_clock::time_point next_check_{};
  bool any_dead_ = false;
  int next_peer_ = 0;  // round-robin start for poll_rx
  // Memfds received ahead of their import_key, per peer: (region id, length, fd).
  struct Pending {
    std::uint64_t id;
    std::uint64_t length;
    Fd fd;
  };
  std::vector<std::vector<Pending>> pending_fds_;
  mutable std::vector<std::vector<std::uint64_t>> sent_;  // region ids passed to each peer
};

}  // namespace fabflow::local
