// A networked sequencer (seed 001, section 4.2): one server hands out an 8-byte counter to
// many clients over the fabric, every value exactly once, in one of four designs:
//   rpc        one request, one response, over a request-response channel (rr.h);
//   rpc-batch  each worker round takes at most one already-arrived request per client, adds
//              the batch to the counter once and posts the responses back to back (FI_MORE);
//   spec       header-only messages (the seed's Spec-S0): the client speculates the counter's
//              high half and sends the guess as CQ data; a right guess is answered with the
//              low 32 bits as CQ data, a wrong one with a full 8-byte message;
//   atomic     clients fetch-add the server's counter with fabric atomics (CPU atomics on
//              local); the server only drives progress.
// Design, wire formats and the checks: docs/sequencer.md.
//
// Ranks: clients are ranks [0, clients) of one bootstrap, the server the rank after them. The
// server runs `workers` threads, each driving `queues` endpoints (lanes); client c talks on
// lane c % (workers x queues). Setup is collective. The server and the clients open their own
// transports from the TransportOptions given (provider, endpoint type, ...).
#pragma once

#include <fabflow/names.h>
#include <fabflow/status.h>
#include <fabflow/transport.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fabflow {
class Bootstrap;
}

namespace fabflow::seq {

enum class Design : std::uint8_t { rpc, rpc_batch, spec, atomic };

inline constexpr NameTable<Design, 4> kDesignNames{{{{"rpc", Design::rpc},
                                                     {"rpc-batch", Design::rpc_batch},
                                                     {"spec", Design::spec},
                                                     {"atomic", Design::atomic}}}};
constexpr const auto& name_table(Design) noexcept { return kDesignNames; }
constexpr std::string_view to_string(Design d) noexcept { return kDesignNames.name(d); }
constexpr std::optional<Design> parse_design(std::string_view s) noexcept {
  return kDesignNames.parse(s);
}
inline constexpr Design kAllDesigns[] = {Design::rpc, Design::rpc_batch, Design::spec,
                                         Design::atomic};

inline constexpr unsigned kMaxClients = 1u << 15;  // spec's request carries a 15-bit client id
inline constexpr unsigned kMaxWorkers = 64;
inline constexpr unsigned kMaxQueues = 16;
inline constexpr unsigned kMaxOutstanding = 1024;
inline constexpr unsigned kMaxBatch = 4096;

struct Options {
  Design design = Design::rpc;
  unsigned workers = 1;           // server threads
  unsigned queues = 1;            // endpoints (lanes) per worker: multi-queue
  unsigned outstanding = 1;       // requests each client keeps in flight
  unsigned batch = 16;            // most requests one worker round takes (rpc-batch, spec)
  bool batch_responses = true;    // spec: post a round's responses with FI_MORE (else one by one)
  std::uint64_t first_value = 0;  // the counter's initial value
  std::chrono::milliseconds peer_timeout{2000};
  bool yield_when_idle = false;  // idle waits yield the CPU (more spinning threads than CPUs)
  // Called first on each worker thread with its index (pinning).
  std::function<void(unsigned worker)> worker_init;
};

// The fabric operations a design needs (open the transports with them).
std::vector<Op> required_ops(Design d);
// Empty when `caps` can run `o`, else one line saying why not.
std::string why_unsupported(const Capabilities& caps, const Options& o);
// Throws UsageError naming the first option out of range (clients: the client count).
void validate(const Options& o, int clients);

// Spec-S0's 32-bit messages. A request carries [bye:1 | client:15 | guess:16], the guess being
// bits 32..47 of the counter; a header-only response carries the value's low 32 bits. A value
// at or above 2^48 never matches a guess: its response is always the full 8 bytes.
namespace spec {
inline constexpr std::uint32_t kByeBit = 1u << 31;
constexpr std::uint32_t request(std::uint32_t client, std::uint16_t guess) noexcept {
  return (client & 0x7fffu) << 16 | guess;
}
constexpr std::uint32_t bye(std::uint32_t client) noexcept { return kByeBit | request(client, 0); }
constexpr std::uint32_t client_of(std::uint32_t word) noexcept { return word >> 16 & 0x7fffu; }
constexpr std::uint16_t guess_of(std::uint32_t word) noexcept {
  return static_cast<std::uint16_t>(word & 0xffffu);
}
constexpr bool is_bye(std::uint32_t word) noexcept { return (word & kByeBit) != 0; }
// The guess a client holding `value` sends next.
constexpr std::uint16_t guess_for(std::uint64_t value) noexcept {
  return static_cast<std::uint16_t>(value >> 32);
}
// Whether `value` can be answered header-only to `guess`.
constexpr bool confirms(std::uint64_t value, std::uint16_t guess) noexcept {
  return value >> 32 == guess;
}
// The value a header-only response `low` to `guess` stands for.
constexpr std::uint64_t value_of(std::uint16_t guess, std::uint32_t low) noexcept {
  return std::uint64_t{guess} << 32 | low;
}
}  // namespace spec

struct ServerStats {
  std::uint64_t served = 0;          // requests answered (atomic: fetch-adds, from the counter)
  std::uint64_t rounds = 0;          // worker rounds that answered at least one request
  std::uint64_t full_responses = 0;  // spec: wrong guesses answered with all 8 bytes
  std::uint64_t rejected = 0;        // spec: requests dropped as malformed
  std::string first_rejection;       // ... the first one's reason
  std::uint64_t counter = 0;         // the counter's final value
  double cpu_s = 0;                  // CPU time of the worker threads
};

// The server side: owns its transports, lanes and the counter.
class Server {
 public:
  virtual ~Server() = default;
  // Serves until every client closed. Throws Error naming the cause when a worker fails (a
  // client that vanished, a channel that broke); the other workers stop too.
  virtual ServerStats run() = 0;
  virtual std::uint64_t counter() const noexcept = 0;
};

struct ClientStats {
  std::uint64_t received = 0;        // values received
  std::uint64_t full_responses = 0;  // spec: full 8-byte answers (wrong guesses)
  // Responses not above the largest value this client had seen when it issued its oldest
  // request still in flight: a sequencer must hand out values in real-time order.
  std::uint64_t order_violations = 0;
  // Multiset fingerprint of every value received: two sums of independent 64-bit mixes.
  std::uint64_t fingerprint[2] = {0, 0};
};

// The client side. Not thread-safe.
class Client {
 public:
  virtual ~Client() = default;
  // Sends one more request: ok; again when `outstanding` are in flight; failed (error()).
  virtual Status issue() noexcept = 0;
  // ok: *value is a value; empty: none yet; failed (error()).
  virtual Status poll(std::uint64_t* value) noexcept = 0;
  virtual unsigned in_flight() const noexcept = 0;
  // Blocking: one value. Throws Error / PeerError after the peer timeout without progress.
  std::uint64_t next(Bootstrap& boot);
  // Tells the server this client is done; waits for what is in flight first.
  virtual void close(Bootstrap& boot) = 0;
  virtual const ClientStats& stats() const noexcept = 0;
  virtual const std::string& error() const noexcept = 0;
};

// Collective over every rank of `boot` (clients first, then the server). Throws UsageError
// for bad options or an unsupported design (why_unsupported's line), PeerError when a peer
// disagrees or publishes an unusable region.
std::unique_ptr<Server> make_server(const TransportOptions& to, Bootstrap& boot, const Options& o);
std::unique_ptr<Client> make_client(const TransportOptions& to, Bootstrap& boot, const Options& o);

// The fingerprint a set of exactly the values [first, last) has (compare with the sum of the
// clients' ClientStats::fingerprint).
void fingerprint_range(std::uint64_t first, std::uint64_t last, std::uint64_t out[2]);
void fingerprint_add(std::uint64_t value, std::uint64_t fp[2]) noexcept;

}  // namespace fabflow::seq
