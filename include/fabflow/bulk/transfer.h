// The transfer engine: memory registered once and described to peers, batches of one-sided
// READs and WRITEs between this rank's memory and a peer's, tracked by handles, and a
// notification delivered to the peer once a batch has landed (the model of Mooncake's transfer
// engine, NIXL and UCX's rkey/put/get, on fabflow's transports). docs/transfer-engine.md.
//
// Nothing a peer sends is trusted: a descriptor is checked (its format, that it was made by
// that peer for this rank, that its key and length agree) before anything is written through
// it, every transfer's ranges are checked against both memories before anything is posted, and
// a notification's fields are range-checked.
//
// One engine per connected transport, used by one thread: the engine posts the transport's
// receives and reaps all its completions. The software providers place a peer's WRITE and
// answer its READ only while this rank drives progress: a rank that is the target of transfers
// calls progress(), poll_notification() or a wait while they run.
#pragma once

#include <fabflow/names.h>
#include <fabflow/status.h>
#include <fabflow/transport.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace fabflow {
class Bootstrap;
class BoundedWait;
}  // namespace fabflow

namespace fabflow::bulk {

class Engine;
namespace detail {
class ChannelImpl;
}

// Memory registered with the engine's transport(s): allocated by it (on `local`, a segment the
// peer maps, so a transfer is one copy in user space) or the caller's, registered once on every
// endpoint that can reach it. Shared ownership: a transfer keeps its local memory alive until
// it completes. A bulk channel allocates it too (Channel::allocate): its messages then need no
// registration.
class Memory {
 public:
  ~Memory();
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  std::byte* data() const noexcept { return mrs_[0]->data(); }
  std::size_t size() const noexcept { return mrs_[0]->size(); }
  std::uint32_t id() const noexcept { return id_; }  // unique among this engine's memories
  const MemoryRegion& region() const noexcept { return *mrs_[0]; }  // the first endpoint's
  // Its registration on endpoint `e`, or nullptr where that endpoint cannot reach it (a
  // transport that shares only memory it allocated itself: local).
  const MemoryRegion* region_on(std::size_t e) const noexcept {
    return e < mrs_.size() ? mrs_[e].get() : nullptr;
  }

 private:
  friend class Engine;
  friend class detail::ChannelImpl;
  Memory(std::vector<std::unique_ptr<MemoryRegion>> mrs, std::uint32_t id)
      : mrs_(std::move(mrs)), id_(id) {}
  Memory(std::unique_ptr<MemoryRegion> mr, std::uint32_t id) : id_(id) {
    mrs_.push_back(std::move(mr));
  }
  std::vector<std::unique_ptr<MemoryRegion>> mrs_;  // [0] owns the bytes when allocated
  std::uint32_t id_;
  std::function<void()> on_release_;  // tells the engine, which tells the peers described to
};

// A peer's memory, imported from the descriptor it made for this rank.
struct RemoteRegion {
  int peer = -1;
  std::uint32_t id = 0;  // the peer's Memory::id
  std::uint64_t length = 0;
  // One per endpoint of the engine; a length of 0 where that endpoint cannot reach it.
  std::vector<RemoteMemory> endpoints;
  std::uint64_t size() const noexcept { return length; }
};

enum class Direction : std::uint8_t { write, read };  // local -> remote, remote -> local
inline constexpr NameTable<Direction, 2> kDirectionNames{
    {{{"write", Direction::write}, {"read", Direction::read}}}};
constexpr const auto& name_table(Direction) noexcept { return kDirectionNames; }

struct TransferRequest {
  std::shared_ptr<Memory> local;
  std::uint64_t local_offset = 0;
  const RemoteRegion* remote = nullptr;  // read at submit; need not outlive it
  std::uint64_t remote_offset = 0;
  std::size_t length = 0;
  Direction direction = Direction::write;
};

// What a batch with a notification tells its peer once every transfer of it has completed.
struct Notification {
  int peer = -1;
  std::uint64_t tag = 0;
};

struct EngineOptions {
  // A wait without progress for this long fails (a vanished peer is reported sooner, by the
  // bootstrap).
  std::chrono::milliseconds peer_timeout{2000};
  // Operations posted and not yet completed per endpoint, at most (keep it within the
  // transport's tx_depth).
  std::size_t max_outstanding = 64;
  // With several endpoints, a transfer of at least this many bytes is cut into one part per
  // endpoint that reaches both memories; smaller ones go to those endpoints in turn.
  std::size_t stripe_min = 256 * 1024;
  // Transfers in one batch, at most: a larger batch is refused whole (UsageError).
  std::size_t max_batch = 65536;
  // The largest operation posted; a larger transfer is split into operations of this size
  // (within the transports' largest operation). 0: the transports' preferred size
  // (Capabilities::rma_preferred_size, the smallest of the endpoints' that have one: tcp's
  // 1 MiB), else their largest, at most 1 GiB: rma_operation_size() in fabflow/transport.h,
  // the rule the bulk channel's RMA follows too.
  std::size_t max_operation = 0;
  // Consecutive transfers of a batch that are contiguous on both sides (local and remote
  // ranges adjacent, the same local memory, the same registration of the peer's, the same
  // direction) go as one transfer, cut into operations of at most max_operation like any
  // other: fewer operations for the same bytes. false: every transfer is posted on its own.
  bool merge_contiguous = true;
  // Notifications from one peer that may arrive before this rank polls for them (receives
  // kept posted per peer: open the transport with rx_depth of at least this, times the peers
  // on endpoints with one receive queue).
  std::size_t notification_slots = 64;
};

using Handle = std::uint64_t;

class Engine {
 public:
  // `transport` is connected over `boot` and opened with required_ops(); from now on the
  // engine owns its receives and completions. Posts the notification receives.
  Engine(Transport& transport, Bootstrap& boot, EngineOptions options = {});
  // Striping: several endpoints to every peer (each a transport like the one above, all
  // connected over `boot`, 1..16 of them, the same count on every rank). Memory is registered
  // on each endpoint that can reach it, a batch's transfers are spread over the endpoints that
  // reach both memories, and notifications travel on the first.
  Engine(std::vector<Transport*> endpoints, Bootstrap& boot, EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  static std::vector<Op> required_ops();  // send, write, read

  std::shared_ptr<Memory> allocate(std::size_t len);
  std::shared_ptr<Memory> register_memory(void* addr, std::size_t len);

  // The descriptor of `m` for `peer` alone: bytes to hand over by any means (the bootstrap, a
  // message, a file). docs/transfer-engine.md gives its format.
  std::vector<std::byte> describe(const Memory& m, int peer) const;
  // Imports a descriptor `peer` made for this rank. Throws PeerError for one that is truncated,
  // forged, made by another rank or for another, or whose key and length disagree.
  RemoteRegion import(int peer, std::span<const std::byte> descriptor);

  // Starts a batch. With `notify_tag`, every transfer must go to one peer, which receives
  // {this rank, tag} after all of them have completed. Throws UsageError, naming the entry,
  // for an empty batch, one of more than max_batch transfers, or an entry with no memory, a
  // length of 0 or a range outside either memory: then nothing of the batch is posted.
  // Consecutive entries contiguous on both sides are merged (EngineOptions::merge_contiguous);
  // transfers (and merged runs) larger than max_operation() are split.
  Handle submit(std::span<const TransferRequest> batch,
                std::optional<std::uint64_t> notify_tag = std::nullopt);
  // ok: every transfer (and the notification) completed; again: still running; failed: see
  // error(); closed: cancelled.
  Status test(Handle h);
  // test() until it is not again; a wait without progress for peer_timeout, or a peer the
  // bootstrap reports gone, fails the handle (and the engine: nothing more can be trusted).
  Status wait(Handle h);
  // Drops what of the batch has not been posted yet; what was posted completes. test() then
  // says closed once nothing is in flight.
  void cancel(Handle h);
  const std::string& error(Handle h) const;
  // Forgets a handle that test() no longer says again for.
  void release(Handle h);

  // Whether the peer released the memory behind `r` (it says so when its last holder lets
  // go; drives progress). A batch that reaches such memory is refused at submit, and one whose
  // operations are still queued when the word comes fails with it; what was posted before
  // lands as the transport places it.
  bool released(const RemoteRegion& r);

  // One notification that arrived, if any (drives progress).
  bool poll_notification(Notification* out);
  // Waits for one, bounded like wait().
  Notification wait_notification();
  // Drives the transport: posts queued operations, reaps completions, re-posts receives.
  void progress();

  std::size_t endpoints() const noexcept { return eps_.size(); }
  // Bytes of transfers posted on each endpoint since the engine started.
  const std::vector<std::uint64_t>& endpoint_bytes() const noexcept { return posted_bytes_; }
  // Operations (WRITEs and READs, fences not counted) taken for each endpoint since the engine
  // started.
  const std::vector<std::uint64_t>& endpoint_operations() const noexcept { return posted_ops_; }

  // The largest operation batches submitted from now on are split into, and setting it as
  // EngineOptions::max_operation does (0: the transports' preferred size).
  std::size_t max_operation() const noexcept { return max_op_; }
  void set_max_operation(std::size_t bytes);

  bool failed() const noexcept { return !failure_.empty(); }
  const std::string& failure() const noexcept { return failure_; }

 private:
  struct Posting {
    Handle handle;
    int peer;
    std::uint32_t remote_id;  // the peer's Memory::id
    std::size_t ep;           // the endpoint it goes on
    std::byte* local;
    void* desc;
    RemoteMemory remote;
    std::uint64_t remote_offset;
    std::size_t length;
    Direction direction;
  };
  struct Batch {
    std::vector<std::shared_ptr<Memory>> keep;  // the local memories, alive until done
    std::size_t queued = 0;                     // operations not yet posted
    std::size_t in_flight = 0;                  // posted, not completed
    std::optional<std::uint64_t> notify_tag;
    int notify_peer = -1;
    // Before the notification (on the first endpoint): a 1-byte READ on every other endpoint
    // that carried a WRITE of the batch, answered only once that endpoint's writes are placed.
    std::vector<Posting> fences;
    bool notify_sent = false;  // the notification is posted (or there is none)
    bool notify_done = false;  // ... and completed
    bool cancelled = false;
    std::string error;
  };
  struct Endpoint {
    Transport* t;
    std::deque<Posting> queue;
    std::size_t outstanding = 0;
    std::unique_ptr<MemoryRegion> fence;  // where fence READs land
  };

  Batch& batch(Handle h);
  const Batch& batch(Handle h) const;
  // The endpoints that reach both `local` and `remote`.
  std::vector<std::size_t> reaching(const Memory& local, const RemoteRegion& remote) const;
  void post_queued(Endpoint& ep);
  // Ends batch `h` with `error`: its postings still queued are dropped, on every endpoint.
  void abandon(Handle h, std::string error);
  void reap_tx(std::size_t e);
  void reap_rx(std::size_t e);
  bool post_receive(std::size_t slot);
  void post_notify(Handle h, Batch& b);
  // Tells the peers that memories of this rank were released (those it was described to).
  void announce_releases();
  void fail(const std::string& why);
  // One idle spin of a wait: the error that ends it, if it ended.
  std::optional<PeerError> spin(BoundedWait& watch, const char* what);
  bool finished(const Batch& b) const noexcept;
  std::size_t pending() const noexcept;  // operations queued or in flight on every endpoint

  std::vector<Endpoint> eps_;
  Transport& t_;  // the first endpoint: notifications
  Bootstrap& boot_;
  EngineOptions o_;
  std::size_t max_op_ = 0;  // the largest operation every endpoint takes
  std::uint32_t next_memory_ = 1;
  Handle next_handle_ = 1;
  std::size_t next_ep_ = 0;  // where the next transfer below stripe_min goes
  std::unordered_map<Handle, Batch> batches_;
  std::vector<std::uint64_t> posted_bytes_;
  std::vector<std::uint64_t> posted_ops_;
  std::size_t rx_slots_ = 0;          // notification_slots per rank
  std::unique_ptr<MemoryRegion> rx_;  // notification receive slots, rank by rank
  std::unique_ptr<MemoryRegion> tx_;  // notification send slots, one per possible batch
  std::vector<std::uint32_t> free_tx_;
  std::deque<Notification> arrived_;
  // Memories of this rank released by their users (filled by ~Memory), the peers each was
  // described to, the word still to send, and the peers' memories they said are released.
  std::shared_ptr<std::vector<std::uint32_t>> released_here_ =
      std::make_shared<std::vector<std::uint32_t>>();
  mutable std::unordered_map<std::uint32_t, std::vector<int>> described_;
  std::deque<std::pair<int, std::uint32_t>> to_announce_;
  std::set<std::pair<int, std::uint32_t>> released_there_;
  std::string failure_;
};

}  // namespace fabflow::bulk
