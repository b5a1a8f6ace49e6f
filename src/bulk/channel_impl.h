// The bulk channel's implementation: one class, declared here once and implemented in files
// by concern, as eRPC splits its Rpc class. channel.cc holds the public calls, waiting and
// failure; channel_setup.cc the agreement on parameters, the cross-memory-attach probe and
// auto's cost measurement; channel_send.cc the transmit side and the sender's protocol steps;
// channel_receive.cc matching and the receiver's steps; channel_rma.cc the data moved by RMA or
// cross-memory attach; plan.cc the options' defaults, the fragments and the cost model.
// docs/bulk.md.
#pragma once

#include <fabflow/bootstrap.h>
#include <fabflow/bulk.h>
#include <fabflow/bulk/transfer.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bulk/protocols.h"
#include "bulk/registrar.h"
#include "bulk/wire.h"

namespace fabflow::bulk {

using wire::Header;
using wire::kHeader;
using wire::Type;

// The pipeline's fragments of [begin, size): the first frag_size long, each next one
// frag_growth times the one before (rounded down to pages, at most max_frag), the last cut.
std::vector<std::pair<std::uint64_t, std::uint64_t>> fragments(const ChannelOptions& o,
                                                               std::uint64_t begin,
                                                               std::uint64_t size);

class Request {
 public:
  enum class State : std::uint8_t { active, done, failed };
  struct Frag {
    std::uint64_t off = 0, len = 0;
    Registration reg;
    unsigned ops = 0;  // RMA operations of this fragment in flight
    bool advertised = false, finished = false;
  };

  std::uint64_t id = 0;
  bool send = false;
  int peer = 0;
  std::uint32_t tag = 0;
  Protocol protocol = Protocol::eager;
  bool cma = false;                // local rendezvous over the whole buffer, one copy ...
  bool mapped = false;             // ... through the peer's mapping of a Memory, not by CMA
  const std::byte* src = nullptr;  // send buffer
  std::byte* dst = nullptr;        // receive buffer
  std::size_t capacity = 0;        // receive buffer size
  std::uint64_t size = 0;          // message size
  State state = State::active;
  std::string error;
  std::uint64_t peer_req = 0;

  bool matched = false;  // receiver: its RTS arrived; sender: its ACK arrived
  unsigned sends = 0;    // control / data sends queued or in flight
  unsigned rma = 0;      // RMA operations in flight (whole-buffer protocols)
  // The send/recv range [data_begin, data_end) in bounce-size pieces.
  std::uint64_t data_begin = 0, data_end = 0, data_next = 0, data_got = 0;
  std::vector<bool> data_seen;
  // Rendezvous over the whole buffer.
  Registration reg;
  bool fin = false;  // the FIN was received (or, for the side that sends it, posted)
  // A split copy (local, a rendezvous between two Memories, docs/bulk.md): the sender writes
  // [0, the ACK's offset) into the receiver's Memory while the receiver reads the rest from
  // the sender's; each sends a FIN when its share is done and completes at the other's (`fin`
  // is then the one received).
  bool offered = false;  // sender: its match header carried its Memory's key
  bool split = false;
  std::uint64_t share = 0;  // split: the bytes this side copies
  // Pipelines.
  std::uint64_t rdma_offset = 0;
  std::vector<Frag> frags;
  std::size_t next_frag = 0;  // next fragment this side registers and advertises
  std::size_t frags_active = 0, frags_finished = 0;
  // Sender: READYs that overtook the ACK (header, key), taken once it came.
  std::vector<std::pair<wire::Header, std::vector<std::byte>>> early_ready;
};

namespace detail {

inline constexpr std::size_t kPage = 4096;
inline constexpr std::size_t kMaxOp = std::size_t{64}
                                      << 20;  // one RMA / CMA call moves at most this
inline constexpr unsigned kTxBuffers = 64;
inline constexpr std::size_t kMaxEarly = 1 << 16;  // out-of-order match headers kept per peer
inline constexpr std::uint32_t kMeasureTag = 0xffffffff;  // open_channel's cost measurement

// Completion contexts: the kind in the top byte, an index below.
inline constexpr std::uint64_t kCtxTx = 1ull << 56;
inline constexpr std::uint64_t kCtxRx = 2ull << 56;
inline constexpr std::uint64_t kCtxRma = 3ull << 56;
inline constexpr std::uint64_t kCtxMask = (1ull << 56) - 1;

inline std::string rank_str(int r) { return "rank " + std::to_string(r); }

struct Early {  // a match header that arrived before its turn, or before its receive
  Header h;
  std::vector<std::byte> inline_bytes;
  std::vector<std::byte> key;
};

struct Out {  // a message waiting for a transmit buffer
  Header h;
  int peer = -1;
  const std::byte* data = nullptr;  // inline bytes from a user buffer, or
  std::vector<std::byte> owned;     // owned inline bytes / key
  std::uint64_t req = 0;            // request whose `sends` this message counts in (0: none)
};

struct RmaOp {
  std::uint64_t req = 0;
  std::size_t frag = SIZE_MAX;  // SIZE_MAX: whole-buffer operation
};

struct PendingRma {  // an RMA operation waiting for room in the transmit queue
  RmaOp op;
  bool write = false;
  std::byte* buf = nullptr;
  void* desc = nullptr;
  RemoteMemory rm;
  std::uint64_t roff = 0, len = 0;
};

class ChannelImpl final : public Channel {
 public:
  ChannelImpl(Transport& t, Bootstrap& boot, const ChannelOptions& o);
  ~ChannelImpl() override;
  static void park(std::unique_ptr<MemoryRegion> mr);
  RequestPtr isend(int peer, std::uint32_t tag, std::span<const std::byte> buf,
                   std::optional<Protocol> protocol) override;
  RequestPtr irecv(int peer, std::uint32_t tag, std::span<std::byte> buf) override;
  bool test(const RequestPtr& r) override;
  std::size_t wait(const RequestPtr& r) override;
  void progress() override;
  std::shared_ptr<Memory> allocate(std::size_t len) override;
  Protocol choose(std::size_t bytes) const noexcept override;
  const Costs& costs() const noexcept override { return costs_; }

  const ChannelOptions& options() const noexcept override { return o_; }
  const Stats& stats() noexcept override;
  void reset_stats() noexcept override;
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return ranks_; }
  Transport& transport() noexcept override { return t_; }

 private:
  struct Peer {
    std::uint64_t seq_out = 0, seq_in = 0;
    std::map<std::uint64_t, Early> early;  // by sequence number
    std::unordered_map<std::uint32_t, std::deque<RequestPtr>> posted;
    std::unordered_map<std::uint32_t, std::deque<Early>> unexpected;
  };
  // The payload moves as one piece outside the messages, ended by one FIN: a rendezvous over
  // the whole buffer, or any rendezvous by cross-memory attach.
  static bool whole_buffer(const Request& r) noexcept {
    return rendezvous(r.protocol) && (!pipelined(r.protocol) || r.cma);
  }

  void check_peer(int peer, const char* call) const;
  std::string describe(const Request& r) const;
  bool finished(Request& r);

  // Runs `f`; a peer's broken message or a transport failure fails the whole channel.
  template <typename F>
  void guarded(F&& f) {
    try {
      f();
    } catch (const UsageError&) {
      throw;
    } catch (const PeerError& e) {
      fail_channel(e);
    } catch (const Error& e) {
      fail_channel(e);
    }
  }

  [[noreturn]] void fail_channel(const Error& e);

  // ---- setup ----

  // auto's costs (docs/bulk.md): registration and memcpy on every rank, the round trip and
  // the rendezvous bandwidth between ranks 0 and 1 (the others take rank 0's). Collective.
  void measure();
  void exchange();

  // ---- transmit side ----

  std::byte* tx_slot(unsigned i) const { return tx_mr_->data() + std::size_t{i} * slot_; }
  std::byte* rx_slot(std::size_t i) const { return rx_mr_->data() + i * slot_; }

  // Posts receive buffer `i`; where the transport says again, it is posted by a later
  // repost_rx() (again is a normal state of the data path, not an error).
  void post_rx(std::size_t i);
  void repost_rx();
  Header header(Type type, const Request& r) const;
  void queue(Request& r, Header h, const std::byte* data, std::size_t len,
             std::vector<std::byte> owned = {});

  // Moves queued messages into transmit buffers while buffers and the send queue last.
  void flush();
  void on_tx(const Completion& c);

  // The live request `id` (held, so completing it cannot free it under the caller).
  RequestPtr find(std::uint64_t id) const {
    auto it = requests_.find(id);
    return it == requests_.end() ? nullptr : it->second;
  }

  // ---- the protocols: sender ----

  void start_send(Request& r);

  // Posts whatever the request may post now, then checks whether it is complete.
  void pump(Request& r);
  void pump_all();
  void pump_send(Request& r);
  void complete(Request& r);

  // Registers the request's next fragments of `buf` and advertises each in a READY, until
  // `depth` are active: the pipeline-read sender's sources, the pipeline receiver's targets.
  void advertise_fragments(Request& r, std::byte* buf, unsigned access, bool cached);

  // ---- the protocols: receiver ----

  void on_rx(const Completion& c);
  void dispatch(const wire::Message& m);
  static std::string type_name(Type t);
  void on_rts(int src, const wire::Message& m);
  void take_rts(int src, const Header& h, std::span<const std::byte> inline_bytes,
                std::span<const std::byte> key);

  // A match header's fields agree with its protocol (before it waits anywhere).
  void check_rts(int src, const Header& h, std::uint64_t len) const;
  void match(Request& r, const Header& h, std::span<const std::byte> inline_bytes,
             std::span<const std::byte> key);
  static std::vector<Request::Frag> frags_of(
      const std::vector<std::pair<std::uint64_t, std::uint64_t>>& f);
  void set_data_range(Request& r, std::uint64_t begin, std::uint64_t end);

  // rndv-write / leave-pinned receiver (and the local write path): advertise the buffer.
  void start_target(Request& r, const Header& h, std::span<const std::byte> key);
  bool may_split(const Request& r);
  void start_split(Request& r, const RemoteMemory& source, std::uint64_t base);
  std::uint64_t split_share(Request& r, const wire::Message& ack);

  // rndv-read receiver: read the whole message, then FIN.
  void start_read(Request& r, const Header& h, std::span<const std::byte> key);

  // Queues reads or writes of [buf, buf+len) in pieces of at most rma_op_, counted as in
  // flight from now on, and posts what the transmit queue takes.
  void post_rma(Request& r, std::size_t frag, bool write, std::byte* buf, const MemoryRegion& mr,
                const RemoteMemory& rm, std::uint64_t roff, std::uint64_t len);
  void drain_rma();
  int peer_of_request(std::uint64_t id) const {
    auto it = requests_.find(id);
    return it == requests_.end() ? -1 : it->second->peer;
  }

  void on_rma_done(Request& r, std::size_t frag);
  void on_ack(Request& r, const wire::Message& m);
  void on_nack(Request& r, const wire::Message& m);
  void on_data(Request& r, const wire::Message& m);
  void on_ready(Request& r, const wire::Message& m);
  void on_fin(Request& r, const wire::Message& m);

  // The caching pipeline's registrations are aligned to the fragment size (seed 004 section
  // 5.2), so that the fragments of a reused buffer hit; a size that is no power of two aligns
  // to pages.
  std::size_t frag_align() const noexcept {
    return (o_.frag_size & (o_.frag_size - 1)) == 0 ? o_.frag_size : kPage;
  }

  void pump_recv(Request& r);

  // ---- cross-memory attach (local) ----

  static constexpr std::uint64_t kProbe = 0x70726f6265636d61;  // "probecma"

  // Moves `len` bytes between our `buf` and `addr` in the peer's address space.
  void cma(bool write, int peer, std::byte* buf, std::uint64_t addr, std::uint64_t len);
  // [p, p+len) lies in a Memory of allocate(): on local, a rendezvous advertises its key (the
  // peer copies through its mapping) instead of its address (cross-memory attach).
  bool in_memory(const void* p, std::uint64_t len) {
    return registrar_.find(p, static_cast<std::size_t>(len)).first != nullptr;
  }
  // The registration a rendezvous moves `len` bytes of `buf` through: a Memory's, the cache's
  // (`cached`, not on local, whose cache cannot register user memory) or a fresh one.
  Registration rendezvous_registration(Request& r, void* buf, std::uint64_t len, unsigned access,
                                       bool cached) {
    return registrar_.acquire(buf, static_cast<std::size_t>(len), access, cached && !r.cma);
  }
  // A peer's key for a rendezvous: on local (`r.cma`) through the imports of this channel,
  // since importing maps the peer's segment afresh and a Memory's key comes with every message.
  RemoteMemory import_rendezvous_key(const Request& r, std::span<const std::byte> key);
  Transport& t_;
  Bootstrap& boot_;
  ChannelOptions o_;
  int rank_, ranks_;
  Registrations registrar_;
  bool cma_capable_ = false;  // the transport copies to and from peers' memory (local)
  // The largest RMA operation posted: the transport's preferred size where it states one
  // (rma_operation_size, the transfer engine's rule: tcp's 1 MiB), else kMaxOp.
  std::size_t rma_op_ = kMaxOp;
  bool cma_ok_ = false;
  std::string path_;
  std::uint64_t probe_ = kProbe;
  std::size_t slot_ = 0;
  std::unique_ptr<MemoryRegion> tx_mr_, rx_mr_;
  std::vector<unsigned> tx_free_;
  std::uint64_t tx_req_[kTxBuffers] = {};
  std::vector<int> rx_peer_;
  std::deque<std::size_t> rx_retry_;  // receive buffers to post again (the transport said again)
  std::vector<Peer> peers_;
  std::deque<Out> outq_;
  std::unordered_map<std::uint64_t, RequestPtr> requests_;
  std::unordered_map<std::uint64_t, RmaOp> rma_;
  std::deque<PendingRma> rmaq_;
  std::vector<RequestPtr> pumping_;
  std::uint64_t next_id_ = 1, next_op_ = 1;
  std::uint32_t next_memory_ = 1;
  std::map<std::pair<int, std::vector<std::byte>>, RemoteMemory> mapped_keys_;  // local imports
  std::uint64_t events_ = 0;
  std::string failed_;
  Stats stats_;
  Costs costs_;
};

}  // namespace detail
}  // namespace fabflow::bulk
