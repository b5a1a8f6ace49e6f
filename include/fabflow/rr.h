// Request-response channels (seed 000): a requester sends a request to one of M responders and
// gets that responder's answer back; a responder serves requests with an optional handler.
// Design and wire format: docs/request-response.md.
//
// Each direction travels by WRITE into a mailbox or by SEND into a receive queue, giving the
// patterns WriteWrite, SendSend, WriteSend and SendWrite. Requests carry (requester, slot)
// ids, so responses match their requests with several outstanding, whatever order receives
// complete in. Nothing received is trusted: ids, lengths and sequence numbers are range-checked
// and a malformed message fails the channel with an error naming the peer.
//
// Setup is collective over one Bootstrap whose ranks [0, requesters) are requesters and
// [requesters, requesters + responders) responders, each with one connected Transport.
#pragma once

#include <fabflow/names.h>
#include <fabflow/node.h>
#include <fabflow/transport.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fabflow {
class Bootstrap;
}

namespace fabflow::rr {

enum class Pattern : std::uint8_t { write_write, send_send, write_send, send_write };
// sparse: one mailbox (header + payload + trailer) per requester slot, scanned by the
// responder. dense: the same message area plus a 1-byte flag per slot in one dense array
// written by a second WRITE; only the flag array is scanned (L5's layout).
enum class Mailbox : std::uint8_t { sparse, dense };
// private: each requester thread owns a transport (its own endpoints) to every responder.
// dispatcher: one communication thread per requester process; its workers hand requests over
// through local mailboxes in the channel's registered memory.
enum class Model : std::uint8_t { private_connections, dispatcher };
enum class Topology : std::uint8_t { one_to_one, n_to_one, n_to_m };

inline constexpr NameTable<Pattern, 4> kPatternNames{{{{"WriteWrite", Pattern::write_write},
                                                       {"SendSend", Pattern::send_send},
                                                       {"WriteSend", Pattern::write_send},
                                                       {"SendWrite", Pattern::send_write}}},
                                                     /*case_insensitive=*/true};
inline constexpr NameTable<Mailbox, 2> kMailboxNames{
    {{{"sparse", Mailbox::sparse}, {"dense", Mailbox::dense}}}};
inline constexpr NameTable<Model, 2> kModelNames{
    {{{"private", Model::private_connections}, {"dispatcher", Model::dispatcher}}}};
inline constexpr NameTable<Topology, 5> kTopologyNames{{{{"1:1", Topology::one_to_one},
                                                         {"N:1", Topology::n_to_one},
                                                         {"N:M", Topology::n_to_m},
                                                         {"n:1", Topology::n_to_one},
                                                         {"n:m", Topology::n_to_m}}}};
constexpr const auto& name_table(Pattern) noexcept { return kPatternNames; }
constexpr const auto& name_table(Mailbox) noexcept { return kMailboxNames; }
constexpr const auto& name_table(Model) noexcept { return kModelNames; }
constexpr const auto& name_table(Topology) noexcept { return kTopologyNames; }

constexpr std::string_view to_string(Pattern p) noexcept { return kPatternNames.name(p); }
constexpr std::string_view to_string(Mailbox m) noexcept { return kMailboxNames.name(m); }
constexpr std::string_view to_string(Model m) noexcept { return kModelNames.name(m); }
constexpr std::string_view to_string(Topology t) noexcept { return kTopologyNames.name(t); }
constexpr std::optional<Pattern> parse_pattern(std::string_view s) noexcept {
  return kPatternNames.parse(s);  // case-insensitive
}
constexpr std::optional<Mailbox> parse_mailbox(std::string_view s) noexcept {
  return kMailboxNames.parse(s);
}
constexpr std::optional<Model> parse_model(std::string_view s) noexcept {
  return kModelNames.parse(s);
}
constexpr std::optional<Topology> parse_topology(std::string_view s) noexcept {
  return kTopologyNames.parse(s);
}
inline constexpr Pattern kAllPatterns[] = {Pattern::write_write, Pattern::send_send,
                                           Pattern::write_send, Pattern::send_write};

bool request_by_write(Pattern p) noexcept;
bool response_by_write(Pattern p) noexcept;

inline constexpr std::size_t kMaxPayload = std::size_t{4} << 20;  // requests and responses
inline constexpr std::size_t kFrameOverhead = 24;                 // 16-byte header + 8-byte trailer

struct ChannelOptions {
  Pattern pattern = Pattern::write_write;
  Mailbox mailbox = Mailbox::sparse;
  std::size_t request_bytes = 64;   // largest request payload
  std::size_t response_bytes = 64;  // largest response payload
  bool inject = true;               // inject messages up to the provider's inject size
  unsigned signal_every = 16;       // request a completion every n-th non-inject post
  // Extra request mailboxes per responder that no requester writes to: the scan cost of
  // empty mailboxes (seed 000 Fig 9b). Only WRITE requests have mailboxes to scan.
  std::size_t empty_mailboxes = 0;
  // How long a blocking call waits without progress before it fails (a vanished peer is
  // usually reported sooner, by the bootstrap).
  std::chrono::milliseconds peer_timeout{2000};
  // auto: make_requester / make_responder choose the pattern themselves (choose_pattern) and
  // `pattern` is not read; why() on the end says which and why. Open the transport with
  // required_ops of these options: they cover every pattern.
  bool automatic = false;
  std::string objective = "throughput";  // auto: what the choice is for: throughput, p50, p99
  std::string profile;                   // auto: the advise profile (empty: the cache folder's)
};

// auto: the pattern `o` opens on a transport with `caps`: the best pattern of the private
// connections model in the advise profile (fabflow/advice.h) for caps.provider,
// o.response_bytes (requests of 64 bytes, as `bench rr` sends) and o.objective that the
// transport runs, else the rule: WriteWrite (seed 000: WRITE responses beat SEND ones), else
// the first of kAllPatterns it runs. `name` is empty when none can run; `why` says what was
// chosen and from what, or why nothing could be.
struct AutoPattern {
  std::string name;
  std::string why;
};
AutoPattern choose_pattern(const Capabilities& caps, const ChannelOptions& o);

// The fabric operations a pattern needs (open the transport with them).
std::vector<Op> required_ops(const ChannelOptions& o);
// Empty when `caps` can run `o`, else one line saying why not.
std::string why_unsupported(const Capabilities& caps, const ChannelOptions& o);
// How SEND messages are received on `caps`: "shared" (one receive queue for every peer, as
// on RDM endpoints) or "per-endpoint" (connected endpoints: receives posted per peer).
std::string_view receive_queue_kind(const Capabilities& caps) noexcept;

namespace detail {
struct AutoNote;
}

struct ChannelStats {
  std::uint64_t requests = 0;           // requests sent (requester) / served (responder)
  std::uint64_t posts = 0;              // fabric operations posted (flag writes included)
  std::uint64_t direct_frames = 0;      // WRITE frames stored into a peer's mapped region (local)
  std::uint64_t in_place_receives = 0;  // SEND frames read where they landed (local's ring)
  std::uint64_t empty_polls = 0;        // polls or scans that found nothing
  // Responder: rounds of looking for requests (a scan of every mailbox, or a receive poll),
  // and for WRITE requests the mailboxes read in those scans and those that held a new one.
  std::uint64_t scans = 0;
  std::uint64_t mailboxes_read = 0;
  std::uint64_t mailboxes_with_request = 0;
};

// A response as it lies in the channel's registered memory; valid until release().
struct Response {
  std::uint32_t slot = 0;
  int responder = 0;  // index in [0, responders)
  std::span<const std::byte> data;
  std::uint32_t buffer = 0;  // internal: the receive buffer to hand back
};

// One requester endpoint group. Not thread-safe: one thread uses it (the dispatcher shares it
// with its workers through DispatcherRequester).
class Requester {
 public:
  virtual ~Requester() = default;
  virtual unsigned slots() const noexcept = 0;
  virtual int responders() const noexcept = 0;
  // Registered memory for the payload of the next request on `slot` (request_bytes long):
  // write the request here, then submit() it. No copy happens between here and the fabric.
  virtual std::span<std::byte> request_buffer(unsigned slot) noexcept = 0;
  // Sends the first `len` bytes of request_buffer(slot) to responder `responder`. full: the
  // slot still waits for its response. failed: the channel failed (a bad argument fails it
  // too; error() says why).
  virtual Status submit(unsigned slot, int responder, std::size_t len) noexcept = 0;
  // ok: *out holds a response (release it when done); empty: none yet; failed: see error().
  virtual Status poll(Response* out) noexcept = 0;
  virtual void release(const Response& r) noexcept = 0;
  // Tells every responder this requester is done (no request may be outstanding).
  virtual Status close() noexcept = 0;
  virtual Transport& transport() noexcept = 0;
  virtual const ChannelOptions& options() const noexcept = 0;
  virtual const ChannelStats& stats() const noexcept = 0;
  virtual const std::string& error() const noexcept = 0;
  // auto: the pattern this end opened and why ("auto on shm: SendWrite (profile P ...)");
  // empty when the options named the pattern.
  const std::string& why() const noexcept { return why_; }

  // Blocking helper for one outstanding request: submits and waits for its answer. Fails
  // after peer_timeout without progress, at once when `boot` reports a vanished peer, and on
  // a response to any other slot. Release *out after use.
  // Throws PeerError / Error like the other bounded waits.
  void call(unsigned slot, int responder, std::size_t len, Response* out, Bootstrap& boot);

 private:
  friend struct detail::AutoNote;
  std::string why_;
};

// Fills `response` for `request` from `requester`; returns the response length (at most
// response.size()). Runs on the serving thread; must not block.
using Handler = std::function<std::size_t(int requester, std::span<const std::byte> request,
                                          std::span<std::byte> response)>;

// One request of a batched round (Responder::serve_batch): the handler writes the response
// payload into `response` and its length into `response_len` (preset to response_bytes).
struct BatchRequest {
  int requester = 0;
  std::span<const std::byte> request;
  std::span<std::byte> response;
  std::size_t response_len = 0;
};
using BatchHandler = std::function<void(std::span<BatchRequest> batch)>;

// One responder endpoint group. Not thread-safe.
class Responder {
 public:
  virtual ~Responder() = default;
  // Serves what has arrived: ok when it took something (*served: the requests answered; a
  // requester's close is taken but not counted), empty when nothing, failed (error()).
  // Without a handler every response is response_bytes long and its contents unspecified.
  virtual Status serve(const Handler* handler, unsigned* served) noexcept = 0;
  // One round with response batching (seed 001): takes what has already arrived, at most one
  // request per requester and max_batch in all (never waiting for more), hands them to
  // `handler` together, then posts the responses back to back with FI_MORE on all but the
  // last. ok: *served is the batch's size (closes are taken, not counted); empty; failed.
  virtual Status serve_batch(const BatchHandler& handler, unsigned max_batch,
                             unsigned* served) noexcept = 0;
  // True once every requester has closed.
  virtual bool done() const noexcept = 0;
  virtual Transport& transport() noexcept = 0;
  virtual const ChannelStats& stats() const noexcept = 0;
  virtual const std::string& error() const noexcept = 0;
  // auto: as Requester::why().
  const std::string& why() const noexcept { return why_; }

 private:
  friend struct detail::AutoNote;
  std::string why_;
};

// Collective over every rank of `boot` (requesters first). `slots`: requests this requester
// may have outstanding at once. With auto every rank chooses the pattern (choose_pattern) and
// the hellos must agree. Throws UsageError for an unsupported combination, PeerError
// when a peer disagrees on the options or publishes an unusable region.
std::unique_ptr<Requester> make_requester(Transport& t, Bootstrap& boot, const ChannelOptions& o,
                                          int requesters, unsigned slots);
std::unique_ptr<Responder> make_responder(Transport& t, Bootstrap& boot, const ChannelOptions& o,
                                          int requesters);

// Over a connected Peer (fabflow/node.h): this side sends requests to the other side's responder,
// which calls open_responder with the same options; responder 0 is the only one. A server that
// serves many clients opens one responder per Peer. The transport is opened with `transport`
// ("auto" by default) plus required_ops(o). Both sides open the patterns over a Peer in the same
// order.
Opened<Requester> open_requester(Peer& peer, const ChannelOptions& o, unsigned slots,
                                 const TransportOptions& transport = {});
Opened<Responder> open_responder(Peer& peer, const ChannelOptions& o,
                                 const TransportOptions& transport = {});

// The dispatcher model: worker threads hand requests to the one thread that drives `inner`.
// Each worker owns a fixed range of the inner requester's slots (its local mailboxes: the
// request buffer in registered memory plus a state word). Thread-safe as described per call.
class DispatcherRequester {
 public:
  DispatcherRequester(Requester& inner, unsigned workers);
  ~DispatcherRequester();
  DispatcherRequester(const DispatcherRequester&) = delete;
  DispatcherRequester& operator=(const DispatcherRequester&) = delete;

  unsigned slots_per_worker() const noexcept { return per_worker_; }
  // Worker side (worker w, its slot k < slots_per_worker()).
  std::span<std::byte> request_buffer(unsigned w, unsigned k) noexcept;
  // again: the slot's previous response is not recycled yet (retry shortly).
  Status hand_over(unsigned w, unsigned k, int responder, std::size_t len) noexcept;
  // Non-blocking: the response once the dispatcher delivered it; release it after use.
  std::optional<std::span<const std::byte>> response(unsigned w, unsigned k) noexcept;
  // A worker that would rather sleep than spin (more threads than CPUs): read doorbell(w),
  // check its responses, and if none is there wait_doorbell(w, value read). The dispatcher
  // rings a worker's bell after delivering to it, and every bell on abort() or failure.
  std::uint32_t doorbell(unsigned w) const noexcept;
  void wait_doorbell(unsigned w, std::uint32_t seen) const noexcept;
  void release(unsigned w, unsigned k) noexcept;

  // Dispatcher side: one round of posting handed-over requests, delivering responses and
  // recycling released ones. ok when something moved, empty when idle, failed (error()).
  Status run_once() noexcept;
  // True once the channel failed or abort() was called: workers stop waiting.
  bool failed() const noexcept;
  void abort() noexcept;
  const std::string& error() const noexcept { return inner_.error(); }

 private:
  struct Slot;
  Slot& slot(unsigned w, unsigned k) noexcept;
  Requester& inner_;
  unsigned per_worker_;
  void ring(unsigned w) noexcept;
  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<std::atomic<std::uint32_t>[]> bells_;  // one per worker
  unsigned workers_;
  std::atomic<bool> failed_{false};
};

}  // namespace fabflow::rr
