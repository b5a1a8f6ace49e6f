// A key-value store on the fabric (seed 001, section 4.3): server ranks each own a partition of
// a hash table in registered memory; clients in other processes GET, PUT and DELETE 16-byte
// keys with fixed-size values, in one of three designs:
//   herd    every operation is an RPC: the request is written into the server's mailboxes, a
//           worker round takes at most one request per client (opportunistically), prefetches
//           the buckets of the batch, and posts the answers back to back (batch 1: one by one);
//   read    a GET bypasses the server's CPU: one READ of the key's index bucket, one READ of
//           the item (Pilaf's two READs); PUT and DELETE are RPCs as in herd;
//   atomic  the seed's emulated DrTM-KV: a GET is one READ of the item (the client caches the
//           index); a PUT takes the item's lock word with compare-and-swap, writes the item
//           and releases the lock with a second compare-and-swap; inserting a new key is an RPC.
//           PutEmulation::two_atomics makes a PUT the seed's own emulation, the lock and the
//           unlock with no WRITE between them: a cost emulation that stores no value.
// Every item carries a version word and a checksum over version, key and value: a one-sided
// READ that overlaps a write is detected and retried, never accepted (retries are counted).
// Design, table layout, lock leases and recovery: docs/kv.md.
//
// Ranks: clients are ranks [0, clients) of one bootstrap, the servers the `servers` ranks
// after them. A key lives on server hash % servers. Each server runs `workers` threads; client
// c talks to worker c % workers of every server. Setup is collective.
#pragma once

#include <fabflow/kv_workload.h>
#include <fabflow/names.h>
#include <fabflow/status.h>
#include <fabflow/transport.h>

#include <chrono>
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

namespace fabflow::kv {

enum class Design : std::uint8_t { herd, read, atomic };

inline constexpr NameTable<Design, 3> kDesignNames{
    {{{"herd", Design::herd}, {"read", Design::read}, {"atomic", Design::atomic}}}};
constexpr const auto& name_table(Design) noexcept { return kDesignNames; }
constexpr std::string_view to_string(Design d) noexcept { return kDesignNames.name(d); }
constexpr std::optional<Design> parse_design(std::string_view s) noexcept {
  return kDesignNames.parse(s);
}
inline constexpr Design kAllDesigns[] = {Design::herd, Design::read, Design::atomic};

// What a PUT of an existing key does in the atomic design (docs/kv.md):
//   lock_write_unlock  compare-and-swap the lock word, WRITE the item, compare-and-swap the new
//                      version in (a working store; the default);
//   two_atomics        the seed's emulation of DrTM-KV (section 4.3, "PUTs with 2 atomics"):
//                      the same two compare-and-swaps, the second putting the old word back, and
//                      no WRITE. The item keeps its value and version: a PUT stores nothing. It
//                      reproduces the cost of a PUT (two dependent atomics on the item's lock
//                      word, serialised by the NIC's locking), not its effect; nothing that reads
//                      a PUT's value back can be checked against it.
enum class PutEmulation : std::uint8_t { lock_write_unlock, two_atomics };
inline constexpr NameTable<PutEmulation, 2> kPutEmulationNames{
    {{{"lock-write-unlock", PutEmulation::lock_write_unlock},
      {"two-atomics", PutEmulation::two_atomics}}}};
constexpr const auto& name_table(PutEmulation) noexcept { return kPutEmulationNames; }
constexpr std::string_view to_string(PutEmulation p) noexcept { return kPutEmulationNames.name(p); }

inline constexpr std::size_t kMaxValueBytes = 4096;
inline constexpr unsigned kMaxServers = 16;
inline constexpr unsigned kMaxWorkers = 64;
inline constexpr unsigned kMaxOutstanding = 256;
inline constexpr unsigned kMaxBatch = 4096;
inline constexpr std::uint64_t kMaxCapacity = std::uint64_t{1} << 31;  // items per server
inline constexpr unsigned kMaxClients = (1u << 14) - 1;                // lock owner ids

struct Options {
  Design design = Design::herd;
  unsigned workers = 1;           // threads per server
  std::size_t value_bytes = 32;   // every value of the store has this size
  std::uint64_t capacity = 1024;  // distinct keys each server can hold
  unsigned outstanding = 1;       // operations each client keeps in flight
  unsigned batch = 16;            // most requests one worker round takes; 1: answer one by one
  std::chrono::milliseconds peer_timeout{2000};
  // atomic: a lock word unchanged for this long is presumed abandoned by a dead client and is
  // recovered by whoever waits on it (docs/kv.md).
  std::chrono::milliseconds lock_lease{250};
  // atomic only (validate refuses it elsewhere): PutEmulation::two_atomics stores no value.
  PutEmulation put_emulation = PutEmulation::lock_write_unlock;
  bool yield_when_idle = false;  // idle waits yield the CPU (more spinning threads than CPUs)
  // Called first on each worker thread with its index (pinning).
  std::function<void(unsigned worker)> worker_init;
  // auto: make_server / make_client choose the design themselves (choose_design) and `design`
  // is not read; why() on the end says which and why.
  bool automatic = false;
  std::string objective = "throughput";  // auto: what the choice is for: throughput, p50, p99
  std::string profile;                   // auto: the advise profile (empty: the cache folder's)
};

// auto: the design `o` opens on the transport `to` describes: the best design of the kv advise
// profile (fabflow/advice.h) for that provider and o.objective that the provider runs, when
// the profile measured the bench's default workload (32-byte values, no other flags), else
// the rule: herd (seed 001: RPCs over RDMA are the best design for a networked key-value
// store), else the first of kAllDesigns the provider runs. `name` is empty when none can run;
// `why` says what was chosen and from what, or why nothing could be. Probes the provider
// (probe_transport) for each design it weighs.
struct AutoDesign {
  std::string name;
  std::string why;
};
AutoDesign choose_design(const TransportOptions& to, const Options& o);

// The fabric operations a design needs on the table's transport.
std::vector<Op> required_ops(Design d);
// Empty when `caps` can run `o`, else one line saying why not.
std::string why_unsupported(const Capabilities& caps, const Options& o);
// Throws UsageError naming the first option out of range.
void validate(const Options& o, int clients, int servers);

// What an operation came to.
enum class Code : std::uint8_t {
  ok,
  not_found,  // GET / DELETE of a key the store does not hold
  full,       // PUT of a new key: its server has no room (capacity, or its buckets are full)
};
inline constexpr NameTable<Code, 3> kCodeNames{
    {{{"ok", Code::ok}, {"not_found", Code::not_found}, {"full", Code::full}}}};
constexpr const auto& name_table(Code) noexcept { return kCodeNames; }
constexpr std::string_view to_string(Code c) noexcept { return kCodeNames.name(c); }

struct ServerStats {
  std::uint64_t served = 0;  // RPCs answered
  std::uint64_t rounds = 0;  // worker rounds that answered at least one
  std::uint64_t items = 0;   // keys held at the end (deleted ones excluded)
  double cpu_s = 0;          // CPU time of the worker threads
};

namespace detail {
struct AutoNote;
}

class Server {
 public:
  virtual ~Server() = default;
  // Before run(): stores `value` (value_bytes long) under `key` in this server's partition
  // without the fabric (bulk loading). A key of another server is a UsageError.
  virtual Code load(const Key& key, std::span<const std::byte> value) = 0;
  // Serves until every client closed. Throws Error naming the cause when a worker fails.
  virtual ServerStats run() = 0;
  // The server this key lives on.
  virtual int server_of(const Key& key) const noexcept = 0;
  // auto: the design this end opened and why ("auto on shm: read (profile P ...)"); empty
  // when the options named the design.
  const std::string& why() const noexcept { return why_; }

 private:
  friend struct detail::AutoNote;
  std::string why_;
};

struct ClientStats {
  std::uint64_t gets = 0, puts = 0, dels = 0;
  std::uint64_t reads = 0;         // one-sided READs posted (GETs of read and atomic, recovery)
  std::uint64_t retries = 0;       // one-sided reads that saw a locked or torn item and retried
  std::uint64_t atomics = 0;       // compare-and-swaps posted
  std::uint64_t writes = 0;        // one-sided WRITEs posted (atomic: item bodies)
  std::uint64_t lock_waits = 0;    // compare-and-swaps that found the item locked
  std::uint64_t recovered = 0;     // abandoned locks this client recovered
  std::uint64_t rpcs = 0;          // requests sent to a server
  std::uint64_t cache_misses = 0;  // atomic: keys not in the cached index
};

// One finished operation.
struct Result {
  std::uint64_t tag = 0;  // the caller's, from submit()
  OpKind kind = OpKind::get;
  Code code = Code::ok;
  std::span<const std::byte> value;  // GET ok: the value; valid until the next poll()
};

// The client side. Not thread-safe.
class Client {
 public:
  virtual ~Client() = default;
  // Starts one operation (value: PUT only, value_bytes long; copied). ok; again when
  // `outstanding` are in flight; failed (error()). A key or value of the wrong size fails.
  virtual Status submit(OpKind kind, const Key& key, std::span<const std::byte> value,
                        std::uint64_t tag) noexcept = 0;
  // ok: *out is a finished operation; empty: none yet; failed (error()).
  virtual Status poll(Result* out) noexcept = 0;
  virtual unsigned in_flight() const noexcept = 0;
  // Tells every server this client is done; waits for what is in flight first.
  virtual void close(Bootstrap& boot) = 0;
  // atomic: reads every server's whole index once, so that GETs and PUTs of the keys it holds
  // go straight to their items (the seed assumes every client caches the index). Needs the
  // servers running (they drive progress); other designs: nothing.
  virtual void cache_index(Bootstrap& boot) { (void)boot; }
  virtual const ClientStats& stats() const noexcept = 0;
  virtual const std::string& error() const noexcept = 0;

  // Blocking helpers (one operation in flight): throw Error / PeerError after the peer
  // timeout without progress. get() copies the value into *value when found.
  Code get(Bootstrap& boot, const Key& key, std::vector<std::byte>* value);
  Code put(Bootstrap& boot, const Key& key, std::span<const std::byte> value);
  Code del(Bootstrap& boot, const Key& key);
  // auto: as Server::why().
  const std::string& why() const noexcept { return why_; }

 private:
  friend struct detail::AutoNote;
  std::string why_;
};

// Collective over every rank of `boot` (clients first, then `servers` servers). Throws
// UsageError for bad options or an unsupported design, PeerError when a peer disagrees (every
// rank must open the same design: the first step compares them) or publishes a table layout
// that does not fit its region.
std::unique_ptr<Server> make_server(const TransportOptions& to, Bootstrap& boot, int servers,
                                    const Options& o);
std::unique_ptr<Client> make_client(const TransportOptions& to, Bootstrap& boot, int servers,
                                    const Options& o);

// The verifying mode's history check. Each entry is one operation as a client saw it; PUTs
// write fill_value(key, writer, version) and GETs report the tag check_value() found.
struct HistoryEntry {
  OpKind kind = OpKind::get;
  Code code = Code::ok;
  std::uint64_t key = 0;
  std::uint32_t writer = 0;    // PUT: who wrote; GET ok: the tag's writer
  std::uint64_t version = 0;   // PUT: what was written; GET ok: the tag's version
  std::uint64_t start_ns = 0;  // a clock shared by every process (steady_clock on one host)
  std::uint64_t end_ns = 0;    // kNeverReturned: the client died before the answer came
};
// The end of an operation whose outcome is unknown (its client died with it in flight): it may
// or may not have taken effect, at any time after it started.
inline constexpr std::uint64_t kNeverReturned = ~std::uint64_t{0};
// The value loaded before the run counts as a PUT by `loader` at version 0 that completed
// before every operation. Returns "" when every GET returned the value of the last PUT that
// completed before it started or of a PUT overlapping it, else a description of the first
// GETs that did not (at most a few).
std::string check_history(std::span<const HistoryEntry> history, std::uint32_t loader);
// Stricter: "" when one order of all the operations exists that keeps each one's real-time
// place (one precedes another only when it ends strictly before the other starts) and that a
// map replays, each key a register holding a value or nothing: the load (as above), PUT ok
// writes, PUT full had no effect, DELETE ok removed a present key, DELETE and GET not_found saw
// it absent, GET ok read. Exact in O(n log n) for keys whose written values are distinct and
// that no DELETE removed (Gibbons & Korach's zones); the others by a search of the orders
// under a budget of steps. Else a description of the first keys in violation (at most 3, then a
// count), naming their operations; a malformed entry (start after end, an outcome the store
// never gives) and a key the search did not decide within its budget count as violations.
std::string check_linearizable(std::span<const HistoryEntry> history, std::uint32_t loader);

}  // namespace fabflow::kv
