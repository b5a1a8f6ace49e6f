// Flow queues: FIFO producer -> consumer queues between two processes (seed 003, Sharma).
//
// A producer on one rank enqueues items, a consumer on another rank dequeues them in order,
// exactly once. How the bytes and the two notifications travel is the design point:
//   data flow            push1 (producer WRITEs), push2 (producer SENDs, consumer RECVs),
//                        pull (consumer READs from the producer's ring);
//   transfer notify      watermark (consumer checks slot header+trailer sequence numbers),
//                        push (producer WRITEs its tail counter), pull (consumer READs it),
//                        event (push2 only: the receive completion), imm (push1 only: write
//                        with remote CQ data);
//   space notify         push (consumer WRITEs its head counter), pull (producer READs it),
//                        push2 (consumer SENDs it).
// 33 valid combinations, named "<data>-<transfer>-<space>", e.g. "push1-watermark-pull".
// The socket baseline ("socket") offers the same API over a TCP stream.
//
// Each design point is a separate template instantiation chosen at run time by
// make_producer / make_consumer, so being configurable costs nothing on the data path.
// Producer and Consumer are not thread-safe: one thread each (plus, when asked for, the
// queue's own data-mover thread).
#pragma once

#include <fabflow/node.h>
#include <fabflow/status.h>
#include <fabflow/transport.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fabflow {
class Bootstrap;
}

namespace fabflow::flow {

enum class DataFlow : std::uint8_t { push1, push2, pull };
enum class TransferNotify : std::uint8_t { watermark, push, pull, event, imm };
enum class SpaceNotify : std::uint8_t { push, pull, push2 };

struct Design {
  DataFlow data = DataFlow::push1;
  TransferNotify transfer = TransferNotify::watermark;
  SpaceNotify space = SpaceNotify::pull;

  bool valid() const noexcept;  // one of the 33
  std::string name() const;     // "push1-watermark-pull"
  static std::optional<Design> parse(std::string_view name) noexcept;
  static std::vector<Design> all();  // the 33, in a fixed order
  friend bool operator==(const Design&, const Design&) = default;
};

// How a slot carries its item (docs/flow-queues.md, "Slot formats").
//   framed   a 16-byte header (sequence number, length, flags) before the payload and the same
//            16 bytes again after it: the consumer accepts the slot only when both agree, so a
//            write whose bytes land in any order is never taken half-written;
//   compact  the payload, then one 8-byte word (sequence number, length, flags) stored last,
//            slots on their own cache lines (a 56-byte item and its word fill one line); a
//            producer that stores slots into the consumer's ring itself (local, no batching,
//            no data mover, no writedata) puts the word first, so an item's first 56 bytes
//            share its line (the producer's hello says which). Needs a
//            transport whose writes become visible in order, the last aligned word last
//            (Capabilities::in_order_data: local, or a provider advertising FI_ORDER_DATA), and
//            data the producer writes (push1): the consumer polls that one word;
//   automatic  compact where it is allowed and the producer does not coalesce writes polled by
//            the consumer (watermark transfer with batching or a data mover: a coalesced write
//            publishes only its last slot in order, so compact would cost a write per item
//            there), else framed.
enum class SlotFormat : std::uint8_t { automatic, framed, compact };
std::string_view to_string(SlotFormat f) noexcept;

struct QueueOptions {
  Design design;
  bool socket = false;          // the TCP socket baseline instead of a design point
  std::size_t capacity = 1024;  // S: items the ring holds
  std::size_t item_bytes = 64;  // maximum item size; items may be shorter
  // Orthogonal options (thesis chapter 4 / section 6.4).
  bool batching = false;         // at most one data transfer in flight, coalescing
  bool active_producer = false;  // a data-mover thread moves items for the producer
  bool active_consumer = false;  // a thread on the consumer side drives notifications
  unsigned signal_every = 1;     // request a completion every n-th data operation
  bool inline_small = true;      // inject items up to the provider's inject size
  double lazy_refresh = 0.5;     // refresh the peer's counter only when the cached
                                 // free space (or items) falls below this fraction
  std::size_t recv_pool = 0;     // push2: receives kept posted (0: capacity)
  // At most one notification counter push in flight per end (thesis section 6.1, L591; 6.3,
  // L683): the producer's tail writes (push transfer) and the consumer's head writes or sends
  // (push / push2 space) are signalled, and one is posted only once the previous one has
  // completed; meanwhile the counter moves on and the latest value goes out next. Off (the
  // default): a notification is injected whenever one is due, untracked. The paper's space
  // cadence (a push after every dequeue unless one is in flight) is this with lazy_refresh 0.
  bool one_notification_in_flight = false;
  // Notifications (counter writes, reads and sends) on a second transport, so they never queue
  // behind data operations (thesis section 6.1). Needs the two-transport make_producer /
  // make_consumer; the data transport then carries only the data.
  bool separate_notify_endpoint = false;
  std::chrono::milliseconds peer_timeout{2000};    // a vanished peer is reported within this
  SlotFormat slot_format = SlotFormat::automatic;  // both ends must resolve to the same one
  // auto: make_producer / make_consumer choose the design themselves (choose_design) and
  // `design` and `socket` are not read; each end's why() then says what it chose and from what.
  // Open the transport with required_ops and required_rx_depth of these options: they cover
  // every design auto may choose.
  bool automatic = false;
  std::string objective = "throughput";  // auto: what the choice is for: throughput, p50, p99
  std::string profile;                   // auto: the advise profile (empty: the cache folder's)

  // "basic", "batching", "datamover": the thesis' three queues (section 6.4), with `design`.
  static QueueOptions preset(std::string_view name, Design design);
};

namespace detail {
struct AutoNote;
}

// Operation counts by purpose: the notification ratios of the thesis.
struct QueueStats {
  std::uint64_t items = 0;
  std::uint64_t data_ops = 0;      // fabric operations that moved item bytes
  std::uint64_t transfer_ops = 0;  // operations that told the consumer about new items
  std::uint64_t space_ops = 0;     // operations that told the producer about free space
  std::uint64_t full = 0;          // try_enqueue returned full
  std::uint64_t empty = 0;         // try_dequeue returned empty
};

// Producer endpoint. Enqueue-side calls never allocate.
class Producer {
 public:
  virtual ~Producer() = default;
  // Status::ok, Status::full (no room now), Status::failed (peer gone or protocol violation:
  // error() says which), Status::closed (after close()).
  virtual Status try_enqueue(std::span<const std::byte> item) noexcept = 0;
  virtual Status enqueue(std::span<const std::byte> item,
                         std::chrono::milliseconds timeout) noexcept = 0;
  // Zero-copy: reserve room for `len` bytes, fill `*slot`, then commit.
  virtual Status reserve(std::size_t len, std::span<std::byte>* slot) noexcept = 0;
  virtual Status commit() noexcept = 0;
  // Batched zero-copy: reserves up to slots.size() consecutive slots of `len` bytes each and
  // sets slots[0, *granted) to their payloads (Status::ok, *granted >= 1; otherwise as reserve,
  // *granted 0). Fill them, then commit_many(n) publishes the first n of them in order, each
  // carrying `len` bytes (n <= *granted; 0 gives them all back). The queue's per-call work
  // (checks, room, the pump round that moves and notifies) is paid once per batch, not per item.
  // The socket baseline grants one slot per call.
  virtual Status reserve_many(std::size_t len, std::span<std::span<std::byte>> slots,
                              std::size_t* granted) noexcept = 0;
  virtual Status commit_many(std::size_t n) noexcept = 0;
  // Pushes out anything batched and waits until the consumer can see every enqueued item.
  virtual Status flush(std::chrono::milliseconds timeout) noexcept = 0;
  // Orderly end of stream: the consumer gets Status::closed after the last item. Returns ok
  // once the consumer has every item; the consumer owes nothing after it has seen closed (it
  // may drop its end or stop driving progress). Where this end reads the consumer's head
  // (space pull) the consumer sees closed one round trip later, once this end has read it.
  virtual Status close(std::chrono::milliseconds timeout) noexcept = 0;
  virtual const QueueStats& stats() const noexcept = 0;
  virtual const std::string& error() const noexcept = 0;
  // auto: the design this end opened and why ("push1-push-push: profile P (date): median ...");
  // empty when the options named the design.
  const std::string& why() const noexcept { return why_; }

 private:
  friend struct detail::AutoNote;
  std::string why_;
};

// Consumer endpoint. Dequeue-side calls never allocate.
class Consumer {
 public:
  virtual ~Consumer() = default;
  // Copies the next item into `out` (which must hold item_bytes) and sets *len.
  // Status::ok, Status::empty, Status::closed (end of stream), Status::failed.
  virtual Status try_dequeue(std::span<std::byte> out, std::size_t* len) noexcept = 0;
  virtual Status dequeue(std::span<std::byte> out, std::size_t* len,
                         std::chrono::milliseconds timeout) noexcept = 0;
  // Zero-copy: view the next item in place, then release it.
  virtual Status peek(std::span<const std::byte>* item) noexcept = 0;
  virtual Status release() noexcept = 0;
  // Batched zero-copy: views of up to items.size() consecutive items in place, in
  // items[0, *n) (Status::ok, *n >= 1; otherwise as peek, *n 0). release_many(k) releases the
  // first k of them (k <= *n; 0 keeps them all for the next peek). An end of stream or a slot
  // that fails its checks behind the batch's items is reported by the next call. How far a call
  // looks ahead is the design point's: as far as the slots in this end's memory are valid (and
  // within the tail counter the consumer knows, where the transfer notification is one), with
  // an active consumer as far as its helper validated; the socket baseline gives one per call.
  virtual Status peek_many(std::span<std::span<const std::byte>> items,
                           std::size_t* n) noexcept = 0;
  virtual Status release_many(std::size_t k) noexcept = 0;
  virtual const QueueStats& stats() const noexcept = 0;
  virtual const std::string& error() const noexcept = 0;
  // auto: as Producer::why().
  const std::string& why() const noexcept { return why_; }

 private:
  friend struct detail::AutoNote;
  std::string why_;
};

// Collective over `boot`: the producer rank calls make_producer, the consumer rank
// make_consumer, with the same options, and every other rank of `boot` must take part in the
// one all-gather they run (contributing any blob). Throws UsageError for a design point the
// transport cannot support (the message says why, e.g. no remote CQ data) and Error/PeerError
// for setup failures.
std::unique_ptr<Producer> make_producer(Transport& transport, Bootstrap& boot, int consumer_rank,
                                        const QueueOptions& options);
std::unique_ptr<Consumer> make_consumer(Transport& transport, Bootstrap& boot, int producer_rank,
                                        const QueueOptions& options);

// Over a connected Peer (fabflow/node.h): this side produces into the other side's consumer, which
// calls open_consumer with the same options. The transport is opened with `transport` (provider
// "auto" by default) plus the ops and receives `options` needs. Both sides must open the same
// patterns over a Peer in the same order. separate_notify_endpoint is refused (one transport).
Opened<Producer> open_producer(Peer& peer, const QueueOptions& options,
                               const TransportOptions& transport = {});
Opened<Consumer> open_consumer(Peer& peer, const QueueOptions& options,
                               const TransportOptions& transport = {});

// separate_notify_endpoint: notifications travel over `notify`, a second transport of the same
// kind (same concrete type; UsageError otherwise), opened with required_notify_ops(options) and
// connected over `boot` like `data`. Counter cells live in a small region registered on it.
// The one-transport overloads refuse separate_notify_endpoint with a UsageError.
std::unique_ptr<Producer> make_producer(Transport& data, Transport& notify, Bootstrap& boot,
                                        int consumer_rank, const QueueOptions& options);
std::unique_ptr<Consumer> make_consumer(Transport& data, Transport& notify, Bootstrap& boot,
                                        int producer_rank, const QueueOptions& options);

// The transport operations `options` needs: open the transport with them (TransportOptions::ops).
// With separate_notify_endpoint only those of the data flow; the notifications' are in
// required_notify_ops (empty without the option).
std::vector<Op> required_ops(const QueueOptions& options);
std::vector<Op> required_notify_ops(const QueueOptions& options);
// The receives an end of `options` keeps posted (push2 items: one per ring slot; remote CQ data
// and pushed counters: pools of 64). Open the transport with TransportOptions::rx_depth at least
// this, or make_producer / make_consumer refuse the design point (UsageError saying so).
std::size_t required_rx_depth(const QueueOptions& options);

// Empty when `transport` can run `options`, else one line saying why not. The one-capability
// form asks whether a transport of this kind can carry both data and notifications.
std::string why_unsupported(const Capabilities& caps, const QueueOptions& options);
std::string why_unsupported(const Capabilities& data, const Capabilities& notify,
                            const QueueOptions& options);

// auto: the design `options` opens on a data transport with `data` and a notify transport with
// `notify` (the same without separate_notify_endpoint): the best design of the advise profile
// (fabflow/advice.h) for caps.provider, options.item_bytes and options.objective that the
// transports can run ("socket", the baseline, where the profile ranks it first), else the
// rule: push1-watermark-pull (the thesis' Design #1) where they can run it, else the first of
// Design::all() they can. `name` is empty when none can run; `why` says what was chosen and
// from what, or why nothing could be.
struct AutoDesign {
  std::string name;  // a design point's name, or "socket"
  std::string why;
};
AutoDesign choose_design(const Capabilities& data, const Capabilities& notify,
                         const QueueOptions& options);

// The slot format a queue with `options` uses on a data transport with `caps`: options'
// slot_format, or for automatic, compact where it is allowed. Call why_unsupported first (a
// compact slot_format that is not allowed is refused there).
SlotFormat slot_format(const Capabilities& caps, const QueueOptions& options) noexcept;

}  // namespace fabflow::flow
