// The transport interface: everything fabflow sends crosses one of these.
//
// Two tiers. Transport is a runtime interface for setup and backend choice (libfabric today;
// native shared memory and a fault-injecting wrapper implement it too). Implementations are
// `final`, so hot loops written as templates over the concrete type (see bench/) call the
// data path without virtual dispatch; with_concrete() picks the instantiation at run time.
// What a transport can do beyond the common contract (in-place receive, mapping a peer's
// memory, cross-memory attach) is asked of its Capabilities and reached through this interface,
// never by its type or its provider's name; a templated data path asks always_maps_peers<Tr>.
//
// Data-path calls never throw: they return Status::ok, Status::again (resources busy: drive
// progress / reap completions and retry) or Status::failed (details in last_error()).
// Setup calls throw Error / UsageError with one line naming provider, call and reason.
#pragma once

#include <fabflow/names.h>
#include <fabflow/status.h>

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

// msg: connected, reliable; rdm: reliable datagrams; dgram: unreliable datagrams (FI_EP_DGRAM:
// a message may be lost, and no RMA), never picked by "auto".
enum class EndpointType : std::uint8_t { automatic, msg, rdm, dgram };
enum class Op : std::uint8_t { write, read, send, writedata, fadd, cswap };
enum class ProgressMode : std::uint8_t { automatic, thread, inline_only };

inline constexpr NameTable<EndpointType, 4> kEndpointNames{{{{"auto", EndpointType::automatic},
                                                             {"msg", EndpointType::msg},
                                                             {"rdm", EndpointType::rdm},
                                                             {"dgram", EndpointType::dgram}}}};
inline constexpr NameTable<Op, 6> kOpNames{{{{"write", Op::write},
                                             {"read", Op::read},
                                             {"send", Op::send},
                                             {"writedata", Op::writedata},
                                             {"fadd", Op::fadd},
                                             {"cswap", Op::cswap}}}};
inline constexpr NameTable<ProgressMode, 3> kProgressNames{{{{"auto", ProgressMode::automatic},
                                                             {"on", ProgressMode::thread},
                                                             {"off", ProgressMode::inline_only}}}};
constexpr const auto& name_table(EndpointType) noexcept { return kEndpointNames; }
constexpr const auto& name_table(Op) noexcept { return kOpNames; }
constexpr const auto& name_table(ProgressMode) noexcept { return kProgressNames; }

constexpr bool is_atomic(Op op) noexcept { return op == Op::fadd || op == Op::cswap; }

constexpr std::string_view to_string(EndpointType t) noexcept { return kEndpointNames.name(t); }
constexpr std::string_view to_string(Op op) noexcept { return kOpNames.name(op); }
constexpr std::string_view to_string(ProgressMode m) noexcept { return kProgressNames.name(m); }
constexpr std::optional<EndpointType> parse_endpoint_type(std::string_view s) noexcept {
  return kEndpointNames.parse(s);
}
constexpr std::optional<Op> parse_op(std::string_view s) noexcept { return kOpNames.parse(s); }
constexpr std::optional<ProgressMode> parse_progress_mode(std::string_view s) noexcept {
  return kProgressNames.parse(s);
}

// What one provider/endpoint combination can do, as fabflow sees it. Capabilities are data:
// every design decision downstream reads them instead of testing provider names.
struct Capabilities {
  std::string provider;  // as libfabric names it, e.g. "tcp;ofi_rxm"
  std::string fabric;
  std::string domain;
  EndpointType endpoint = EndpointType::msg;
  std::uint32_t api_version = 0;  // FI_VERSION of the provider; 0: not a libfabric provider

  std::size_t inject_size = 0;
  std::size_t max_msg_size = 0;
  std::size_t cq_data_size = 0;  // bytes of remote CQ data carried by writedata
  std::size_t max_rma_size = 0;  // == max_msg_size for libfabric
  // The size of the operations this transport moves a large RMA transfer fastest in: a larger
  // transfer goes faster cut into operations of this many bytes (0: no preference, one
  // operation is as fast). tcp (msg, and rdm over ofi_rxm): 1 MiB; its RMA travels on the
  // connection's byte stream, and an 8 MB WRITE as 8 of 1 MiB ran 1.1-1.7x one of 8 MB in
  // the same run (docs/transfer-engine.md). Users ask this, never the provider's name.
  std::size_t rma_preferred_size = 0;
  bool rma = false;
  // Every message sent is delivered (msg, rdm). False for dgram endpoints: a message may be
  // dropped without an error on either side; only loops that time a lost message out and count
  // it may use them.
  bool reliable = true;
  bool atomics_u64 = false;  // fetch-add and compare-swap on u64
  bool shared_rx = false;    // shared receive context available
  bool multi_recv = false;   // FI_MULTI_RECV: one posted buffer takes many messages (if asked)
  bool rx_cq_data_consumes_recv = false;  // FI_RX_CQ_DATA mode: writedata eats a posted recv
  // poll_rx_in_place: the largest message that can be read where it landed, in the transport's
  // own memory, without a posted receive (0: none can; local: one ring slot), and how many
  // messages of one peer can be held at once (the sender waits for more: local's ring, 512).
  std::size_t rx_in_place_max = 0;
  std::size_t rx_in_place_depth = 0;
  // FI_ORDER_DATA: the bytes of a write land in order. fabflow relies on it as: a target that
  // sees a write's last aligned 8-byte word (acquire load) sees every earlier byte of that write
  // and of the initiator's earlier writes to it; local guarantees it (its writes store their
  // last 8 bytes last, with release). Compact flow slots need it (flow.h, SlotFormat).
  bool in_order_data = false;
  bool write_after_write = false;  // FI_ORDER_WAW (RMA writes complete in order)
  // local: the stores that carry a message, a write or a flow item into a peer's memory are
  // followed by CLDEMOTE of their cache lines (common/cldemote.h), where the CPU has it and
  // FABFLOW_LOCAL_DEMOTE is not 0. A hint: what any reader sees does not change, only how soon.
  bool stores_demoted = false;
  // A received message is placed in its posted buffer only when the receiver polls its
  // completions (local: it copies from the ring on poll), not when it arrives: a receiver that
  // reaps late cannot find the bytes in its buffer before (WRITE-like receives cannot work).
  bool rx_lands_on_poll = false;
  // map_peer() gives a peer's registered region as an address in this process, for a user that
  // stores into it (or loads from it) itself instead of posting writes and reads (local).
  bool peer_mapping = false;
  // copy_peer() moves bytes between this process and any address of a peer process on this
  // host, without registration on either side (local, by cross-memory attach). Whether the
  // kernel allows it between two given processes is found by trying (ptrace rules).
  bool cross_memory_attach = false;
  // Every rank must run on this host in one network namespace: the transport finds its peers
  // through abstract Unix sockets, which reach only their own namespace (local). A launch that
  // gives each rank a namespace of its own (--netns) cannot run it.
  bool one_network_namespace = false;
  bool data_progress_manual = false;             // target must drive progress for data to land
  bool data_progress_advertised_manual = false;  // what the provider itself says
  bool control_progress_manual = false;
  std::uint64_t mr_mode = 0;    // FI_MR_* bits in force
  std::uint64_t msg_order = 0;  // FI_ORDER_* bits
  int threading = 0;            // enum fi_threading

  bool supports(Op op) const noexcept;
  // Empty when supported, else one line saying why not.
  std::string why_not(Op op) const;
};

// The first of `ops` that `caps` does not support, with Capabilities::why_not's line;
// nullopt when it supports them all. Every "can this provider run these operations" check
// goes through here.
struct MissingOp {
  Op op;
  std::string why;
};
std::optional<MissingOp> missing_op(const Capabilities& caps, std::span<const Op> ops);

// The largest RMA operation `caps` takes: the smaller of max_msg_size and max_rma_size, at most
// 1 GiB (1 GiB where the transport states none).
std::size_t largest_rma_operation(const Capabilities& caps) noexcept;
// The one operation-size rule of every path that cuts a large buffer into RMA operations (the
// transfer engine, the bulk channel's rendezvous and pipeline fragments): `asked` where it is
// given, else the transport's preferred size (rma_preferred_size), within its largest
// operation; 0 where neither is given, and the caller keeps its own size (the engine: the
// largest operation; the channel: one operation per buffer, up to 64 MiB).
std::size_t rma_operation_size(const Capabilities& caps, std::size_t asked = 0) noexcept;

// What to ask the fabric for.
struct TransportOptions {
  std::string provider = "auto";  // "local", a libfabric provider name, or "auto"
  EndpointType endpoint = EndpointType::automatic;
  std::vector<Op> ops;       // the operations that will be used (drives the request)
  bool thread_safe = false;  // a progress thread runs beside the data path
  std::string node;          // local address to bind (tcp); empty = provider default
  std::size_t tx_depth = 256;
  std::size_t rx_depth = 256;
  // Open completion queues with wait fds so wait_tx/wait_rx sleep in poll(2) instead of
  // polling with back-off (for passive or low-rate users; providers without FI_WAIT_FD, such
  // as shm, fall back to polling).
  bool blocking_waits = false;
  // Every rank of the run shares this host's memory (ranks_share_this_host() in
  // fabflow/bootstrap.h tells): "auto" then picks the local transport. connect_transport()
  // finds it out itself; open_transport() knows only what is set here.
  bool same_host = false;
  // Ask for FI_MULTI_RECV (post_recv_multi); a provider without it is refused at selection.
  bool multi_recv = false;
  // A provider profile to hold the transport to (fabflow/profile.h): a built-in name ("efa",
  // "verbs", ...) or a profile file. Empty: none, the transport as it is.
  std::string profile;
};

// Access a registration grants.
inline constexpr unsigned kLocalRead = 1u << 0;   // source of sends and writes
inline constexpr unsigned kLocalWrite = 1u << 1;  // target of receives, reads, atomic results
inline constexpr unsigned kRemoteRead = 1u << 2;
inline constexpr unsigned kRemoteWrite = 1u << 3;  // also remote atomics
inline constexpr unsigned kAllAccess = 0xfu;

// A registered local buffer. Move-only; deregisters on destruction. Not thread-safe.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  std::byte* data() const noexcept { return static_cast<std::byte*>(addr_); }
  std::size_t size() const noexcept { return len_; }
  void* desc() const noexcept { return desc_; }  // local descriptor for FI_MR_LOCAL providers
  // The transport's own registration behind this region (itself, unless a wrapper owns it).
  virtual const MemoryRegion& registered() const noexcept { return *this; }

 protected:
  MemoryRegion(void* addr, std::size_t len, void* desc) : addr_(addr), len_(len), desc_(desc) {}
  void* addr_;
  std::size_t len_;
  void* desc_;
};

// A peer's registered region, imported from the key blob it published. Plain value.
struct RemoteMemory {
  std::uint64_t base = 0;  // address that offset 0 maps to (VA, or 0 without FI_MR_VIRT_ADDR)
  std::uint64_t length = 0;
  std::uint64_t key = 0;
  int peer = -1;

  bool contains(std::uint64_t offset, std::uint64_t len) const noexcept {
    return offset <= length && len <= length - offset;
  }
};

// Per-operation flags.
inline constexpr unsigned kSignal = 1u << 0;  // generate a completion (selective completion)
inline constexpr unsigned kInject = 1u << 1;  // copy out at post time (size <= inject_size)
inline constexpr unsigned kMore = 1u << 2;    // more posts follow (FI_MORE batching hint)

enum class CompletionKind : std::uint8_t { send, recv, write, read, atomic, remote_write };

struct Completion {
  std::uint64_t context = 0;  // caller's value given at post time
  std::uint64_t data = 0;     // remote CQ data (recv / remote_write with data)
  std::uint32_t length = 0;   // bytes received
  CompletionKind kind = CompletionKind::send;
  bool has_data = false;
  // Receives into a multi-receive buffer (post_recv_multi): where this message landed, and
  // whether the buffer is used up (released) and must be posted again. A released completion
  // with buf == nullptr carries no message.
  void* buf = nullptr;
  bool released = false;
  // poll_rx_in_place only: the rank the message came from.
  int peer = -1;
};

enum class AtomicOp : std::uint8_t { fetch_add, compare_swap };

// One process' view of the fabric: its endpoint(s), connected to every peer of a bootstrap.
// Not thread-safe, except progress() which may run on a progress thread when the transport
// was opened with thread_safe.
class Transport {
 public:
  virtual ~Transport() = default;

  virtual const Capabilities& caps() const noexcept = 0;
  virtual std::string_view name() const noexcept = 0;  // "libfabric", "local", "fault(...)"

  // ---- setup (throws) ----
  // Exchanges addresses with every rank of `boot` and connects. Collective.
  virtual void connect(Bootstrap& boot) = 0;
  virtual std::unique_ptr<MemoryRegion> register_memory(void* addr, std::size_t len,
                                                        unsigned access) = 0;
  // Allocates `len` bytes (page-aligned, zeroed) of registered memory owned by the returned
  // region. Prefer it to register_memory: a transport that shares memory between processes
  // (local) can only expose memory it allocated itself.
  virtual std::unique_ptr<MemoryRegion> allocate(std::size_t len, unsigned access);
  // The blob a peer needs to reach `mr` remotely; import it there with import_key().
  virtual std::vector<std::byte> export_key(const MemoryRegion& mr) const = 0;
  // Validates the untrusted blob; throws PeerError on malformed input.
  virtual RemoteMemory import_key(int peer, std::span<const std::byte> blob) = 0;

  // ---- data path (never throws) ----
  virtual Status post_send(int peer, const void* buf, std::size_t len, void* desc,
                           std::uint64_t context, unsigned flags) noexcept = 0;
  // Receives from `peer` on connected endpoints; from any peer on RDM endpoints.
  virtual Status post_recv(int peer, void* buf, std::size_t len, void* desc,
                           std::uint64_t context) noexcept = 0;
  // Posts one receive per buffer of `bufs` (each `len` bytes, one descriptor) as one batch:
  // FI_MORE on all but the last, where the provider reads it (seed 002's receives posted as a
  // list). Returns how many were posted (fewer when the receive queue is full: post the rest
  // after progress) or -1 (last_error()). The default posts them one post_recv each.
  virtual int post_recvs(int peer, std::span<void* const> bufs, std::size_t len, void* desc,
                         std::uint64_t context) noexcept;
  // Only where caps().multi_recv (opened with TransportOptions::multi_recv): one buffer that
  // takes messages one after another; each receive completion names where its message landed
  // (Completion::buf), and one says the buffer is released once less than `min_free` bytes
  // remain. The default fails: the transport has no multi-receive buffers.
  virtual Status post_recv_multi(int peer, void* buf, std::size_t len, void* desc,
                                 std::size_t min_free, std::uint64_t context) noexcept;
  // RMA write of [buf, buf+len) to remote offset; `imm` carries remote CQ data (writedata).
  virtual Status post_write(int peer, const void* buf, std::size_t len, void* desc,
                            const RemoteMemory& dst, std::uint64_t offset, std::uint64_t context,
                            unsigned flags,
                            std::optional<std::uint64_t> imm = std::nullopt) noexcept = 0;
  virtual Status post_read(int peer, void* buf, std::size_t len, void* desc,
                           const RemoteMemory& src, std::uint64_t offset, std::uint64_t context,
                           unsigned flags) noexcept = 0;
  // 8-byte atomic on remote offset; the previous value lands in *result.
  virtual Status post_atomic(int peer, AtomicOp op, std::uint64_t operand, std::uint64_t compare,
                             std::uint64_t* result, void* result_desc, const RemoteMemory& dst,
                             std::uint64_t offset, std::uint64_t context,
                             unsigned flags) noexcept = 0;

  // Reap completions; returns how many were written, or -1 on a failed operation
  // (last_error() says which and why).
  virtual int poll_tx(std::span<Completion> out) noexcept = 0;
  virtual int poll_rx(std::span<Completion> out) noexcept = 0;
  // Only where caps().rx_in_place_max > 0: like poll_rx, but a message is not copied into a
  // posted receive; its completion says where it lies in the transport's own memory (buf, at
  // most rx_in_place_max bytes) and who sent it (peer). The bytes stay there, readable, until
  // release_rx gives that completion back; the sender cannot reuse the space before, but it
  // can still scribble on it: read what must be checked once. A larger message fails the call.
  // Write-with-data notices come as from poll_rx. A peer is read either in place or through
  // posted receives, never both (mixing fails). The default fails: nothing is read in place.
  virtual int poll_rx_in_place(std::span<Completion> out) noexcept;
  // Gives back a message handed out by poll_rx_in_place, in any order; its space is reused
  // once every earlier message of that peer is given back too.
  virtual Status release_rx(const Completion& c) noexcept;

  // Drives provider progress without consuming completions (safe from a progress thread).
  virtual void progress() noexcept = 0;

  // Waits up to `timeout` for completions: returns how many (0: timed out) or -1 on failure.
  // Sleeps in the provider's wait object where the transport has one (blocking_waits); the
  // default polls, driving progress and yielding the CPU between empty polls.
  virtual int wait_tx(std::span<Completion> out, std::chrono::milliseconds timeout) noexcept;
  virtual int wait_rx(std::span<Completion> out, std::chrono::milliseconds timeout) noexcept;

  // ---- direct access (where the capabilities say so; the defaults fail) ----
  // Only where caps().peer_mapping: where [offset, offset + len) of a peer's region, imported
  // through `m`, lies in this process, or nullptr (last_error set) for a key or range that is
  // not valid. Stores into it follow the ordering rules a write's do on that transport
  // (docs/local-transport.md). Setup, not data path: map once, then load and store.
  virtual std::byte* map_peer(int peer, const RemoteMemory& m, std::uint64_t offset,
                              std::size_t len) noexcept;
  // Only where caps().cross_memory_attach: copies `len` bytes from the peer's address `addr`
  // into `buf` (PeerCopy::read) or from `buf` to `addr` (write), synchronously; the address is
  // one the peer sent, unregistered. Status::failed (last_error says why) when the kernel
  // refuses or the range is not mapped there.
  enum class PeerCopy { read, write };
  virtual Status copy_peer(int peer, PeerCopy dir, void* buf, std::uint64_t addr,
                           std::size_t len) noexcept;

  virtual const std::string& last_error() const noexcept = 0;
};

// For data paths templated over a concrete transport type (with_concrete): whether every
// transport of type Tr maps its peers' regions (caps().peer_mapping), known at compile time, so
// that the direct-store code is compiled for that type only. A final transport type says so with
// `static constexpr bool kPeerMapping = true;`; the interface type itself never does.
template <class Tr>
inline constexpr bool always_maps_peers = requires {
  requires Tr::kPeerMapping;
};

// Opens the transport `options.provider` names: "local" (native shared memory, all ranks on
// one host) or a libfabric provider. Not yet connected. Throws like open_libfabric.
std::unique_ptr<Transport> open_transport(const TransportOptions& options);

// `options` for the ranks of `boot`: with provider "auto", `same_host` found out from the
// bootstrap (ranks_share_this_host, collective); an empty `node` set to the address the
// bootstrap reaches its peers on. kv and seq setup call it on the options they are given.
TransportOptions for_ranks_of(TransportOptions options, Bootstrap& boot);

// `options` with each of `ops` added to its ops (once) and rx_depth raised to at least
// `rx_depth`: what a pattern opened over a Peer asks of the transport it opens.
TransportOptions with_needs(TransportOptions options, const std::vector<Op>& ops,
                            std::size_t rx_depth = 0);

// Opens the transport for the ranks of `boot` and connects it: collective, like connect().
// Every rank must name the same provider (checked first: one line naming both otherwise).
// With provider "auto" it then asks the bootstrap whether every rank shares this host
// (ranks_share_this_host; `same_host` as given is not used) and opens the local transport when
// they do, libfabric's first fitting provider otherwise. An empty `node` becomes the address the
// bootstrap reaches its peers on. `choice`, when given, receives what was opened and why:
// "auto: local (every rank shares this host)", "auto: tcp msg (the ranks do not all share this
// host)", "shm rdm (as asked)". This is the way to open a transport; the CLI and Python do.
std::unique_ptr<Transport> connect_transport(TransportOptions options, Bootstrap& boot,
                                             std::string* choice = nullptr);

// Capabilities of what open_transport(options) would get, without opening it.
Capabilities probe_transport(const TransportOptions& options);

// Opens a libfabric transport (not yet connected). Throws UsageError for an unknown provider
// (listing the available ones) or an operation the provider lacks.
std::unique_ptr<Transport> open_libfabric(const TransportOptions& options);

// Capabilities of what open_libfabric(options) would get, without opening it.
Capabilities probe_libfabric(const TransportOptions& options);

// One entry per provider/endpoint type found on this machine (for `fabflow info`).
std::vector<Capabilities> discover_libfabric();

// The libfabric library version string, e.g. "1.17.0".
std::string libfabric_version();

}  // namespace fabflow
