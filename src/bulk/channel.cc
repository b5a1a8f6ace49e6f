// The bulk channel: matching, the protocols' state machines and progress. docs/bulk.md.
#include <fabflow/bootstrap.h>
#include <fabflow/bulk.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <thread>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <utility>

#include <fabflow/regcache.h>

#include "bulk/registrar.h"
#include "bulk/wire.h"

namespace fabflow::bulk {

using wire::Header;
using wire::kHeader;
using wire::Type;

namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kMaxOp = std::size_t{64} << 20;  // one RMA / CMA call moves at most this
constexpr unsigned kTxBuffers = 64;
constexpr std::size_t kMaxEarly = 1 << 16;         // out-of-order match headers kept per peer
constexpr std::uint32_t kMeasureTag = 0xffffffff;  // open_channel's cost measurement

// Completion contexts: the kind in the top byte, an index below.
constexpr std::uint64_t kCtxTx = 1ull << 56;
constexpr std::uint64_t kCtxRx = 2ull << 56;
constexpr std::uint64_t kCtxRma = 3ull << 56;
constexpr std::uint64_t kCtxMask = (1ull << 56) - 1;

std::string rank_str(int r) { return "rank " + std::to_string(r); }

}  // namespace

ChannelOptions resolve(const ChannelOptions& in, const Capabilities& caps) {
  ChannelOptions o = in;
  auto dflt = [](auto& v, auto d) {
    if (v == 0) v = d;
  };
  dflt(o.eager_limit, std::size_t{16} << 10);
  dflt(o.bounce_size, std::max<std::size_t>(std::size_t{64} << 10, o.eager_limit));
  dflt(o.frag_size, std::size_t{1} << 20);
  dflt(o.max_frag, std::max<std::size_t>(std::size_t{16} << 20, o.frag_size));
  dflt(o.depth, 4u);
  dflt(o.copy_ahead, o.bounce_size);
  dflt(o.copy_limit, std::size_t{256} << 10);
  dflt(o.rx_buffers, 32u);
  dflt(o.cache_entries, std::size_t{1024});
  dflt(o.cache_bytes, std::size_t{1} << 30);
  auto bad = [](const std::string& what) { throw UsageError("bulk: " + what); };
  if (o.eager_limit > o.bounce_size)
    bad("the eager limit (" + std::to_string(o.eager_limit) + ") is above the bounce size (" +
        std::to_string(o.bounce_size) + ")");
  const std::size_t max_bounce =
      std::min<std::size_t>(std::size_t{16} << 20, caps.max_msg_size - kHeader);
  if (o.bounce_size > max_bounce || o.bounce_size < 1024)
    bad("bounce size " + std::to_string(o.bounce_size) + " is outside [1024, " +
        std::to_string(max_bounce) + "] (" + caps.provider + "'s largest message)");
  if (o.frag_size < kPage || o.frag_size % kPage != 0 || o.frag_size > (std::size_t{1} << 30))
    bad("fragment size " + std::to_string(o.frag_size) + " must be a multiple of 4096 up to 1 GiB");
  if (o.max_frag < o.frag_size || o.max_frag % kPage != 0 || o.max_frag > (std::size_t{1} << 30))
    bad("the largest fragment (" + std::to_string(o.max_frag) +
        ") must be a multiple of 4096, at least the fragment size, at most 1 GiB");
  if (!(o.frag_growth >= 1.0 && o.frag_growth <= 16.0)) bad("fragment growth must be in [1, 16]");
  if (o.depth > 64) bad("depth " + std::to_string(o.depth) + " is above 64");
  if (o.rx_buffers < 2 || o.rx_buffers > 1024)
    bad("receive buffers " + std::to_string(o.rx_buffers) + " outside [2, 1024]");
  if (o.copy_ahead > (std::size_t{1} << 30)) bad("copy-ahead is above 1 GiB");
  return o;
}

// The pipeline's fragments of [begin, size): the first frag_size long, each next one
// frag_growth times the one before (rounded down to pages, at most max_frag), the last cut.
std::vector<std::pair<std::uint64_t, std::uint64_t>> fragments(const ChannelOptions& o,
                                                               std::uint64_t begin,
                                                               std::uint64_t size) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> f;
  double len = static_cast<double>(o.frag_size);
  for (std::uint64_t at = begin; at < size;) {
    auto l = static_cast<std::uint64_t>(len) / kPage * kPage;
    l = std::min<std::uint64_t>({l, o.max_frag, size - at});
    f.emplace_back(at, l);
    at += l;
    len = std::min(len * o.frag_growth, static_cast<double>(o.max_frag));
  }
  return f;
}

double estimate_ns(const Costs& c, const ChannelOptions& o, Protocol p, std::size_t bytes) {
  const double s = static_cast<double>(bytes), rt = c.round_trip_ns;
  auto copy = [&](double n) { return n * c.memcpy_byte_ns; };
  auto reg = [&](double n) { return c.registration_free ? 0 : c.reg_call_ns + n * c.reg_byte_ns; };
  const double wire = s * c.wire_byte_ns;
  const double bounce = static_cast<double>(o.bounce_size);
  switch (p) {
    case Protocol::eager:
      if (bytes > o.eager_limit) return HUGE_VAL;
      return rt / 2 + 2 * copy(s) + wire;
    case Protocol::copy:  // pieces overlap: the first and last copies are not hidden
      return rt / 2 + (s > bounce ? rt : 0) + std::max(wire, copy(s)) +
             2 * copy(std::min(s, bounce));
    case Protocol::rndv_write: return 1.5 * rt + 2 * reg(s) + wire;
    case Protocol::pipeline: {
      const double head = std::min(s, static_cast<double>(o.eager_limit + o.copy_ahead));
      if (s <= head) return estimate_ns(c, o, Protocol::copy, bytes);
      const double f = std::min(s - head, static_cast<double>(o.frag_size));
      const double n = std::ceil((s - head) / static_cast<double>(o.frag_size));
      // The first fragment's registrations (both sides) are exposed; the others overlap the
      // transfer of the ones before.
      return 1.5 * rt + 2 * reg(f) + std::max(wire, n * reg(f)) + 2 * copy(head);
    }
    default: return HUGE_VAL;
  }
}

Protocol cheapest(const Costs& c, const ChannelOptions& o, std::size_t bytes) {
  Protocol best = Protocol::copy;
  double best_ns = HUGE_VAL;
  for (Protocol p : kAutoCandidates) {
    const double e = estimate_ns(c, o, p, bytes);
    if (e < best_ns) {
      best_ns = e;
      best = p;
    }
  }
  return best;
}

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
  bool cma = false;                // rendezvous by cross-memory attach
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
  // Pipelines.
  std::uint64_t rdma_offset = 0;
  std::vector<Frag> frags;
  std::size_t next_frag = 0;  // next fragment this side registers and advertises
  std::size_t frags_active = 0, frags_finished = 0;
  // Sender: READYs that overtook the ACK (header, key), taken once it came.
  std::vector<std::pair<wire::Header, std::vector<std::byte>>> early_ready;
};

namespace {

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

struct Agreement {  // what every rank must agree on, plus what each tells the others
  std::uint64_t eager_limit, bounce_size, frag_size, max_frag, depth, copy_ahead, rx_buffers;
  double frag_growth;
  std::uint64_t probe_addr;  // a word this rank's peers read by cross-memory attach
  std::int32_t cma_refused;  // after the exchange: 0 when this rank read its right neighbour
  std::int32_t pad;
};

class ChannelImpl final : public Channel {
 public:
  ChannelImpl(Transport& t, Bootstrap& boot, const ChannelOptions& o)
      : t_(t),
        boot_(boot),
        o_(resolve(o, t.caps())),
        rank_(boot.rank()),
        ranks_(boot.size()),
        registrar_(t, o_) {
    cma_capable_ = t.caps().cross_memory_attach;
    exchange();
    slot_ = kHeader + o_.bounce_size;
    tx_mr_ = t_.allocate(slot_ * kTxBuffers, kLocalRead | kLocalWrite);
    for (unsigned i = kTxBuffers; i-- > 0;) tx_free_.push_back(i);
    const unsigned per_peer = o_.rx_buffers;
    const std::size_t rx_count = std::size_t{per_peer} * static_cast<std::size_t>(ranks_ - 1);
    rx_mr_ = t_.allocate(slot_ * std::max<std::size_t>(rx_count, 1), kLocalRead | kLocalWrite);
    rx_peer_.assign(rx_count, -1);
    std::size_t i = 0;
    for (int p = 0; p < ranks_; ++p) {
      if (p == rank_) continue;
      for (unsigned k = 0; k < per_peer; ++k, ++i) {
        rx_peer_[i] = p;
        post_rx(i);
      }
    }
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1); !rx_retry_.empty();
         repost_rx()) {
      if (std::chrono::steady_clock::now() > end)
        throw Error("bulk: posting a receive buffer: receive queue full");
      t_.progress();
    }
    peers_.resize(static_cast<std::size_t>(ranks_));
    // Every rank's receives are posted before any rank sends.
    boot_.barrier([this] { t_.progress(); });
    if (o_.measure_costs && o_.protocol == Protocol::automatic && ranks_ > 1) measure();
  }

  ~ChannelImpl() override {
    // Release what requests still hold.
    requests_.clear();
    // The receive buffers stay posted in the transport, which cannot take a posted receive
    // back, and a peer may still send (a late FIN, a message for a channel that failed): the
    // transport would write into freed memory. The buffers are parked for the life of the
    // process instead of freed (docs/bulk.md, "Lifetime"), and so are the transmit buffers of
    // sends that may still be in flight.
    park(std::move(rx_mr_));
    park(std::move(tx_mr_));
  }

  static void park(std::unique_ptr<MemoryRegion> mr) {
    if (!mr) return;
    static std::mutex m;
    static auto* parked = new std::vector<std::unique_ptr<MemoryRegion>>;  // never freed
    std::lock_guard<std::mutex> lock(m);
    parked->push_back(std::move(mr));
  }

  RequestPtr isend(int peer, std::uint32_t tag, std::span<const std::byte> buf,
                   std::optional<Protocol> protocol) override {
    check_peer(peer, "isend");
    if (buf.size() > kMaxMessage)
      throw UsageError("bulk: a " + std::to_string(buf.size()) + "-byte message is above 1 TiB");
    auto r = std::make_shared<Request>();
    r->id = next_id_++;
    r->send = true;
    r->peer = peer;
    r->tag = tag;
    r->src = buf.data();
    r->size = buf.size();
    Protocol p = protocol.value_or(o_.protocol);
    if (p == Protocol::automatic) p = choose(buf.size());
    if (p == Protocol::eager && buf.size() > o_.eager_limit)
      throw UsageError("bulk: eager takes messages up to the eager limit (" +
                       std::to_string(o_.eager_limit) + " bytes), not " +
                       std::to_string(buf.size()));
    if (buf.size() == 0) p = Protocol::eager;
    if (rendezvous(p) && cma_capable_) {
      if (cma_ok_)
        r->cma = true;
      else
        p = Protocol::copy;  // stats().rendezvous_path says why
    }
    r->protocol = p;
    requests_[r->id] = r;
    stats_.messages_sent++;
    start_send(*r);
    return r;
  }

  RequestPtr irecv(int peer, std::uint32_t tag, std::span<std::byte> buf) override {
    check_peer(peer, "irecv");
    auto r = std::make_shared<Request>();
    r->id = next_id_++;
    r->peer = peer;
    r->tag = tag;
    r->dst = buf.data();
    r->capacity = buf.size();
    requests_[r->id] = r;
    Peer& pr = peers_[static_cast<std::size_t>(peer)];
    auto& unexpected = pr.unexpected[tag];
    if (!unexpected.empty()) {
      Early e = std::move(unexpected.front());
      unexpected.pop_front();
      guarded([&] { match(*r, e.h, e.inline_bytes, e.key); });
    } else {
      pr.posted[tag].push_back(r);
    }
    return r;
  }

  bool test(const RequestPtr& r) override {
    if (!r) throw UsageError("bulk: test of a null request");
    if (r->state == Request::State::active) progress();
    return finished(*r);
  }

  std::size_t wait(const RequestPtr& r) override {
    if (!r) throw UsageError("bulk: wait on a null request");
    auto last = std::chrono::steady_clock::now();
    auto last_check = last;
    std::uint64_t seen = events_;
    while (!test(r)) {
      if (o_.yield_when_idle && events_ == seen) std::this_thread::yield();
      const auto now = std::chrono::steady_clock::now();
      if (events_ != seen) {
        seen = events_;
        last = now;
      } else if (now - last > o_.peer_timeout) {
        fail_channel(PeerError(r->peer, "bulk: no progress for " +
                                            std::to_string(o_.peer_timeout.count()) + " ms while " +
                                            describe(*r)));
      }
      if (now - last_check >= std::chrono::milliseconds(1)) {
        last_check = now;
        bool gone = false;
        try {
          gone = boot_.peer_failed();
        } catch (...) {
          gone = true;
        }
        if (gone) fail_channel(PeerError(r->peer, "bulk: a peer vanished while " + describe(*r)));
      }
    }
    return static_cast<std::size_t>(r->size);
  }

  void progress() override {
    if (!failed_.empty()) throw Error(failed_);
    guarded([this] {
      Completion c[32];
      for (int round = 0; round < 4; ++round) {
        int n = t_.poll_tx(c);
        if (n < 0) throw Error("bulk: " + t_.last_error());
        for (int i = 0; i < n; ++i) on_tx(c[i]);
        int m = t_.poll_rx(c);
        if (m < 0) throw Error("bulk: " + t_.last_error());
        for (int i = 0; i < m; ++i) on_rx(c[i]);
        repost_rx();
        flush();
        drain_rma();
        pump_all();
        if (n + m == 0) break;
        events_ += static_cast<std::uint64_t>(n + m);
      }
    });
  }

  Protocol choose(std::size_t bytes) const noexcept override {
    if (costs_.measured) return cheapest(costs_, o_, bytes);
    if (bytes <= o_.eager_limit) return Protocol::eager;
    if (bytes <= o_.copy_limit) return Protocol::copy;
    return Protocol::pipeline;
  }
  const Costs& costs() const noexcept override { return costs_; }

  const ChannelOptions& options() const noexcept override { return o_; }
  const Stats& stats() noexcept override {
    registrar_.fill(stats_);
    stats_.rendezvous_path = path_;
    return stats_;
  }
  void reset_stats() noexcept override {
    stats_ = Stats{};
    registrar_.reset();
  }
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

  static bool rendezvous(Protocol p) noexcept {
    return p != Protocol::copy && p != Protocol::eager && p != Protocol::automatic;
  }
  static bool read_based(Protocol p) noexcept {
    return p == Protocol::rndv_read || p == Protocol::pipeline_read;
  }
  static bool pipelined(Protocol p) noexcept {
    return p == Protocol::pipeline || p == Protocol::pipeline_read ||
           p == Protocol::caching_pipeline;
  }

  void check_peer(int peer, const char* call) const {
    if (!failed_.empty()) throw Error(failed_);
    if (peer < 0 || peer >= ranks_ || peer == rank_)
      throw UsageError("bulk: " + std::string(call) + " with rank " + std::to_string(peer) +
                       ": not a peer (ranks 0-" + std::to_string(ranks_ - 1) + ", this is " +
                       std::to_string(rank_) + ")");
  }

  std::string describe(const Request& r) const {
    return std::string(r.send ? "sending " : "receiving ") +
           (r.send || r.matched ? std::to_string(r.size) + " bytes " : "") +
           (r.send ? "to " : "from ") + rank_str(r.peer) + " (tag " + std::to_string(r.tag) + ", " +
           std::string(to_string(r.protocol)) + ")";
  }

  bool finished(Request& r) {
    if (r.state == Request::State::failed) {
      requests_.erase(r.id);
      throw Error(r.error);
    }
    return r.state == Request::State::done;
  }

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

  [[noreturn]] void fail_channel(const Error& e) {
    if (failed_.empty()) failed_ = e.what();
    // Every registration is released; the requests fail.
    for (auto& [id, r] : requests_) {
      r->reg = {};
      r->frags.clear();
      if (r->state == Request::State::active) {
        r->state = Request::State::failed;
        r->error = failed_;
      }
    }
    requests_.clear();
    if (const auto* pe = dynamic_cast<const PeerError*>(&e)) throw PeerError(pe->rank(), failed_);
    throw Error(failed_);
  }

  // ---- setup ----

  // auto's costs (docs/bulk.md): registration and memcpy on every rank, the round trip and
  // the rendezvous bandwidth between ranks 0 and 1 (the others take rank 0's). Collective.
  void measure() {
    using clock = std::chrono::steady_clock;
    auto ns_since = [](clock::time_point t0) {
      return std::chrono::duration<double, std::nano>(clock::now() - t0).count();
    };
    constexpr std::size_t kSmall = 4096, kLarge = std::size_t{4} << 20;
    std::vector<std::byte> a(kLarge, std::byte{1}), b(kLarge, std::byte{2});
    Costs c;
    c.registration_free = cma_capable_;
    if (!cma_capable_) {
      auto reg = [&](std::size_t n, int reps) {
        register_buffer(t_, a.data(), n, kLocalRead | kRemoteWrite, o_.pin);  // warm
        const auto t0 = clock::now();
        for (int i = 0; i < reps; ++i)
          register_buffer(t_, a.data(), n, kLocalRead | kRemoteWrite, o_.pin);
        return ns_since(t0) / reps;
      };
      const double small = reg(kSmall, 20), large = reg(kLarge, 4);
      c.reg_byte_ns = std::max(0.0, (large - small) / static_cast<double>(kLarge - kSmall));
      c.reg_call_ns = std::max(0.0, small - c.reg_byte_ns * kSmall);
    }
    std::memcpy(b.data(), a.data(), kLarge);
    auto t0 = clock::now();
    for (int i = 0; i < 4; ++i) {
      std::memcpy(b.data(), a.data(), kLarge);
      asm volatile("" ::: "memory");
    }
    c.memcpy_byte_ns = ns_since(t0) / 4 / kLarge;
    // Ranks 0 and 1: zero-byte round trips, then 4 MiB by rendezvous-write (registration
    // taken out with the costs just measured).
    std::array<double, 2> shared{};
    if (rank_ < 2) {
      const int peer = 1 - rank_;
      std::byte none{};
      auto round = [&] {
        if (rank_ == 0) {
          send(peer, kMeasureTag, {&none, 0}, Protocol::eager);
          recv(peer, kMeasureTag, {&none, 0});
        } else {
          recv(peer, kMeasureTag, {&none, 0});
          send(peer, kMeasureTag, {&none, 0}, Protocol::eager);
        }
      };
      round();
      t0 = clock::now();
      for (int i = 0; i < 50; ++i) round();
      shared[0] = ns_since(t0) / 50;
      auto big = [&] {
        if (rank_ == 0) {
          send(peer, kMeasureTag, a, Protocol::rndv_write);
          recv(peer, kMeasureTag, {&none, 0});
        } else {
          recv(peer, kMeasureTag, b);
          send(peer, kMeasureTag, {&none, 0}, Protocol::eager);
        }
      };
      big();
      t0 = clock::now();
      for (int i = 0; i < 2; ++i) big();
      const double one = ns_since(t0) / 2 - shared[0] / 2;  // the zero-byte answer's half
      const double overhead = 1.5 * shared[0] + 2 * (c.reg_call_ns + c.reg_byte_ns * kLarge);
      shared[1] = std::max(0.0, one - overhead) / kLarge;
    }
    shared = allgather_value(boot_, shared, "bulk: costs")[0];
    c.round_trip_ns = shared[0];
    c.wire_byte_ns = shared[1];
    c.measured = true;
    costs_ = c;
    registrar_.reset();
    stats_ = Stats{};
    boot_.barrier([this] { t_.progress(); });
  }

  void exchange() {
    Agreement mine{};
    mine.eager_limit = o_.eager_limit;
    mine.bounce_size = o_.bounce_size;
    mine.frag_size = o_.frag_size;
    mine.max_frag = o_.max_frag;
    mine.depth = o_.depth;
    mine.copy_ahead = o_.copy_ahead;
    mine.rx_buffers = o_.rx_buffers;
    mine.frag_growth = o_.frag_growth;
    mine.probe_addr = reinterpret_cast<std::uint64_t>(&probe_);
    const auto a = allgather_value(boot_, mine, "bulk: channel hello");
    for (std::size_t r = 0; r < a.size(); ++r) {
      const Agreement& x = a[r];
      // Name every parameter that differs, with both values.
      std::string theirs, ours;
      auto differ = [&](const char* name, auto t, auto m) {
        if (t == m) return;
        std::ostringstream a, b;
        a << (theirs.empty() ? "" : ", ") << name << " " << t;
        b << (ours.empty() ? "" : ", ") << name << " " << m;
        theirs += a.str();
        ours += b.str();
      };
      differ("eager", x.eager_limit, mine.eager_limit);
      differ("bounce", x.bounce_size, mine.bounce_size);
      differ("fragment", x.frag_size, mine.frag_size);
      differ("largest fragment", x.max_frag, mine.max_frag);
      differ("growth", x.frag_growth, mine.frag_growth);
      differ("depth", x.depth, mine.depth);
      differ("copy-ahead", x.copy_ahead, mine.copy_ahead);
      differ("receive buffers", x.rx_buffers, mine.rx_buffers);
      if (!theirs.empty())
        throw PeerError(static_cast<int>(r), "bulk: ranks disagree on the channel's parameters: " +
                                                 rank_str(static_cast<int>(r)) + " has " + theirs +
                                                 "; " + rank_str(rank_) + " has " + ours);
    }
    if (!cma_capable_) {
      path_ = "fabric RMA";
      return;
    }
    // Cross-memory attach: each rank reads its right neighbour's probe word through the
    // transport; all must succeed. A refusal is named by the rank that met it.
    int verdict = 0;  // -1 turned off, 0 read, 1 refused
    std::string why;
    if (!o_.cross_memory_attach) {
      verdict = -1;
    } else if (ranks_ > 1) {
      const int right = (rank_ + 1) % ranks_;
      std::uint64_t got = 0;
      if (t_.copy_peer(right, Transport::PeerCopy::read, &got,
                       a[static_cast<std::size_t>(right)].probe_addr, sizeof got) != Status::ok) {
        verdict = 1;
        why = t_.last_error();
      } else if (got != kProbe) {
        verdict = 1;
        why = rank_str(right) + "'s probe word read back wrong";
      }
    }
    mine.cma_refused = verdict;
    const auto verdicts = allgather_value(boot_, mine, "bulk: cross-memory-attach verdict");
    for (std::size_t r = 0; r < verdicts.size() && verdict == 0; ++r) {
      verdict = verdicts[r].cma_refused;
      if (verdict > 0) why = "on " + rank_str(static_cast<int>(r));
    }
    cma_ok_ = verdict == 0;
    if (cma_ok_)
      path_ = "cross-memory attach (single copy; no registration)";
    else if (verdict < 0)
      path_ = "copy (cross-memory attach turned off)";
    else
      path_ = "copy (cross-memory attach refused: " + why + ")";
  }

  // ---- transmit side ----

  std::byte* tx_slot(unsigned i) const { return tx_mr_->data() + std::size_t{i} * slot_; }
  std::byte* rx_slot(std::size_t i) const { return rx_mr_->data() + i * slot_; }

  // Posts receive buffer `i`; where the transport says again, it is posted by a later
  // repost_rx() (again is a normal state of the data path, not an error).
  void post_rx(std::size_t i) {
    rx_retry_.push_back(i);
    repost_rx();
  }

  void repost_rx() {
    while (!rx_retry_.empty()) {
      const std::size_t i = rx_retry_.front();
      Status s = t_.post_recv(rx_peer_[i], rx_slot(i), slot_, rx_mr_->desc(), kCtxRx | i);
      if (s == Status::again) return;
      if (s != Status::ok) throw Error("bulk: posting a receive buffer: " + t_.last_error());
      rx_retry_.pop_front();
    }
  }

  Header header(Type type, const Request& r) const {
    Header h;
    h.type = type;
    h.protocol = r.protocol;
    h.src = static_cast<std::uint32_t>(rank_);
    h.tag = r.tag;
    h.size = r.size;
    h.sreq = r.send ? r.id : r.peer_req;
    h.rreq = r.send ? r.peer_req : r.id;
    return h;
  }

  void queue(Request& r, Header h, const std::byte* data, std::size_t len,
             std::vector<std::byte> owned = {}) {
    Out out;
    out.h = h;
    out.data = data;
    if (data) out.h.length = len;
    out.owned = std::move(owned);
    out.req = r.id;
    out.peer = r.peer;
    ++r.sends;
    outq_.push_back(std::move(out));
    stats_.control_messages += h.type != Type::data;
  }

  // Moves queued messages into transmit buffers while buffers and the send queue last.
  void flush() {
    while (!outq_.empty() && !tx_free_.empty()) {
      Out& out = outq_.front();
      const unsigned b = tx_free_.back();
      std::byte* slot = tx_slot(b);
      std::size_t len = kHeader;
      if (out.data) {
        std::memcpy(slot + kHeader, out.data, out.h.length);
        len += out.h.length;
      }
      if (!out.owned.empty()) {
        std::memcpy(slot + len, out.owned.data(), out.owned.size());
        len += out.owned.size();
      }
      std::memcpy(slot, &out.h, kHeader);
      const int dest = out.peer;
      Status s = t_.post_send(dest, slot, len, tx_mr_->desc(), kCtxTx | b, kSignal);
      if (s == Status::again) return;
      if (s != Status::ok) throw Error("bulk: send to " + rank_str(dest) + ": " + t_.last_error());
      tx_free_.pop_back();
      tx_req_[b] = out.req;
      outq_.pop_front();
    }
  }

  void on_tx(const Completion& c) {
    const std::uint64_t kind = c.context & ~kCtxMask;
    const std::uint64_t idx = c.context & kCtxMask;
    if (kind == kCtxTx) {
      if (idx >= kTxBuffers) throw Error("bulk: a send completion with a bad context");
      tx_free_.push_back(static_cast<unsigned>(idx));
      if (RequestPtr r = find(tx_req_[idx])) {
        --r->sends;
        pump(*r);
      }
      return;
    }
    if (kind == kCtxRma) {
      auto it = rma_.find(idx);
      if (it == rma_.end()) throw Error("bulk: an RMA completion with a bad context");
      RmaOp op = it->second;
      rma_.erase(it);
      if (RequestPtr r = find(op.req)) on_rma_done(*r, op.frag);
    }
  }

  // The live request `id` (held, so completing it cannot free it under the caller).
  RequestPtr find(std::uint64_t id) const {
    auto it = requests_.find(id);
    return it == requests_.end() ? nullptr : it->second;
  }

  // ---- the protocols: sender ----

  void start_send(Request& r) {
    Header h = header(Type::rts, r);
    h.seq = peers_[static_cast<std::size_t>(r.peer)].seq_out++;
    std::size_t inline_len = 0;
    std::vector<std::byte> key;
    switch (r.protocol) {
      case Protocol::eager: inline_len = r.size; break;
      case Protocol::copy: inline_len = std::min<std::uint64_t>(r.size, o_.bounce_size); break;
      case Protocol::pipeline:
      case Protocol::pipeline_read:
      case Protocol::caching_pipeline:
        if (!r.cma) inline_len = std::min<std::uint64_t>(r.size, o_.eager_limit);
        break;
      default: break;
    }
    if (r.protocol == Protocol::rndv_read || (r.cma && read_based(r.protocol))) {
      if (r.cma) {
        h.base = reinterpret_cast<std::uint64_t>(r.src);
      } else {
        r.reg = registrar_.acquire(const_cast<std::byte*>(r.src), r.size, kRemoteRead,
                                   uses_cache(r.protocol));
        key = t_.export_key(*r.reg.mr);
        h.base = r.reg.offset;
        h.key_len = static_cast<std::uint16_t>(key.size());
      }
    }
    queue(r, h, inline_len ? r.src : nullptr, inline_len, std::move(key));
    stats_.bytes_sent += r.size;
    flush();
    pump(r);
  }

  // Posts whatever the request may post now, then checks whether it is complete.
  void pump(Request& r) {
    if (r.state != Request::State::active) return;
    if (r.send)
      pump_send(r);
    else
      pump_recv(r);
  }

  void pump_all() {
    // Requests may have more to post now that buffers were freed.
    pumping_.clear();
    for (const auto& [id, r] : requests_) pumping_.push_back(r);
    for (const RequestPtr& r : pumping_) pump(*r);
    pumping_.clear();
  }

  void pump_send(Request& r) {
    // Copy fragments, while transmit buffers last (at most depth + 1 queued at once).
    if (r.matched) {
      while (r.data_next < r.data_end && outq_.size() < kTxBuffers) {
        const std::uint64_t len = std::min<std::uint64_t>(o_.bounce_size, r.data_end - r.data_next);
        Header h = header(Type::data, r);
        h.offset = r.data_next;
        queue(r, h, r.src + r.data_next, len);
        r.data_next += len;
      }
      flush();
    }
    if (r.protocol == Protocol::pipeline_read && r.matched && !r.cma)
      advertise_fragments(r, const_cast<std::byte*>(r.src), kRemoteRead, false);
    // Complete?
    bool done = r.sends == 0 && r.rma == 0;
    switch (r.protocol) {
      case Protocol::eager: break;
      case Protocol::copy:
        done = done && (r.size <= o_.bounce_size || r.matched) && r.data_next == r.data_end;
        break;
      case Protocol::rndv_write:
      case Protocol::leave_pinned: done = done && r.fin; break;
      case Protocol::rndv_read: done = done && r.fin; break;
      default:  // pipelines
        if (r.cma) {
          done = done && r.fin;
        } else {
          done = done && (r.size <= o_.eager_limit || (r.matched && r.data_next == r.data_end &&
                                                       r.frags_finished == r.frags.size()));
        }
        break;
    }
    if (done) complete(r);
  }

  void complete(Request& r) {
    r.reg = {};
    r.frags.clear();
    r.state = Request::State::done;
    requests_.erase(r.id);  // the caller's RequestPtr keeps it
  }

  // Registers the request's next fragments of `buf` and advertises each in a READY, until
  // `depth` are active: the pipeline-read sender's sources, the pipeline receiver's targets.
  void advertise_fragments(Request& r, std::byte* buf, unsigned access, bool cached) {
    while (r.next_frag < r.frags.size() && r.frags_active < o_.depth) {
      Request::Frag& f = r.frags[r.next_frag];
      f.reg = registrar_.acquire(buf + f.off, f.len, access, cached, frag_align());
      Header h = header(Type::ready, r);
      h.seq = r.next_frag;
      h.base = f.reg.offset;
      std::vector<std::byte> key = t_.export_key(*f.reg.mr);
      h.key_len = static_cast<std::uint16_t>(key.size());
      queue(r, h, nullptr, 0, std::move(key));
      f.advertised = true;
      ++r.frags_active;
      ++r.next_frag;
    }
    flush();
  }

  // ---- the protocols: receiver ----

  void on_rx(const Completion& c) {
    const std::uint64_t kind = c.context & ~kCtxMask;
    const std::uint64_t idx = c.context & kCtxMask;
    if (kind != kCtxRx || idx >= rx_peer_.size()) {
      if (c.kind == CompletionKind::remote_write) return;
      throw Error("bulk: a receive completion with a bad context");
    }
    const std::byte* at = rx_slot(idx);
    if (c.length > slot_) throw Error("bulk: a receive completion longer than its buffer");
    wire::Message m;
    try {
      m = wire::parse({at, c.length}, ranks_, rank_);
    } catch (const PeerError& e) {
      // parse names no rank when the header's own is unusable; the buffer names its sender on
      // connected endpoints, and a pair has one peer.
      const int from = t_.caps().endpoint == EndpointType::msg ? rx_peer_[idx]
                       : ranks_ == 2                           ? 1 - rank_
                                                               : -1;
      if (e.rank() >= 0 || from < 0) throw;
      std::string what = e.what();
      if (what.rfind("bulk: ", 0) == 0) what.erase(0, 6);
      throw PeerError(from, "bulk: " + rank_str(from) + " sent " + what);
    }
    // On connected endpoints the buffer names the peer; a header claiming another is forged.
    if (t_.caps().endpoint == EndpointType::msg && rx_peer_[idx] != static_cast<int>(m.h.src))
      throw PeerError(rx_peer_[idx], "bulk: " + rank_str(rx_peer_[idx]) +
                                         " sent a message claiming to be from " +
                                         rank_str(static_cast<int>(m.h.src)));
    dispatch(m);
    post_rx(idx);
  }

  void dispatch(const wire::Message& m) {
    const int src = static_cast<int>(m.h.src);
    if (m.h.type == Type::rts) return on_rts(src, m);
    // Every other message names a request of ours.
    const bool to_sender = m.h.type == Type::ack || m.h.type == Type::nack ||
                           (m.h.type == Type::ready && !read_based(m.h.protocol)) ||
                           (m.h.type == Type::fin && read_based(m.h.protocol));
    RequestPtr r = find(to_sender ? m.h.sreq : m.h.rreq);
    if (!r || r->peer != src || r->send != to_sender || r->state != Request::State::active ||
        (!to_sender && !r->matched))
      throw PeerError(src, "bulk: " + rank_str(src) + " sent a " + type_name(m.h.type) +
                               " for a request it has no part in");
    if (r->protocol != m.h.protocol)
      throw PeerError(src, "bulk: " + rank_str(src) + " sent a " + type_name(m.h.type) +
                               " of another protocol than its request's");
    if (m.h.type == Type::ready && r->send && !r->matched) {
      // The receiver advertises fragments right after its ACK; a transport that reorders may
      // deliver them first. Held until the ACK, at most depth of them.
      if (r->early_ready.size() >= o_.depth)
        throw PeerError(src, "bulk: " + rank_str(src) + " sent more READYs than the depth (" +
                                 std::to_string(o_.depth) + ") before its ACK");
      r->early_ready.emplace_back(m.h, std::vector<std::byte>(m.key.begin(), m.key.end()));
      return;
    }
    switch (m.h.type) {
      case Type::ack:
        on_ack(*r, m);
        for (auto& [h, key] : std::exchange(r->early_ready, {})) on_ready(*r, {h, {}, key});
        break;
      case Type::nack: on_nack(*r, m); break;
      case Type::data: on_data(*r, m); break;
      case Type::ready: on_ready(*r, m); break;
      case Type::fin: on_fin(*r, m); break;
      default: break;
    }
    pump(*r);
  }

  static std::string type_name(Type t) {
    switch (t) {
      case Type::rts: return "match header";
      case Type::ack: return "ACK";
      case Type::data: return "data fragment";
      case Type::ready: return "READY";
      case Type::fin: return "FIN";
      case Type::nack: return "NACK";
    }
    return "message";
  }

  void on_rts(int src, const wire::Message& m) {
    Peer& p = peers_[static_cast<std::size_t>(src)];
    if (m.h.seq < p.seq_in)
      throw PeerError(
          src, "bulk: " + rank_str(src) + " repeated message number " + std::to_string(m.h.seq));
    check_rts(src, m.h, m.inline_bytes.size());
    if (m.h.seq > p.seq_in) {
      Early e{m.h, {m.inline_bytes.begin(), m.inline_bytes.end()}, {m.key.begin(), m.key.end()}};
      if (p.early.size() >= kMaxEarly || !p.early.emplace(m.h.seq, std::move(e)).second)
        throw PeerError(src, "bulk: " + rank_str(src) + " sent message number " +
                                 std::to_string(m.h.seq) + " twice or far out of order");
      return;
    }
    take_rts(src, m.h, m.inline_bytes, m.key);
    // Headers that waited for this one.
    for (auto it = p.early.begin(); it != p.early.end() && it->first == p.seq_in;
         it = p.early.begin()) {
      Early next = std::move(it->second);
      p.early.erase(it);
      take_rts(src, next.h, next.inline_bytes, next.key);
    }
  }

  void take_rts(int src, const Header& h, std::span<const std::byte> inline_bytes,
                std::span<const std::byte> key) {
    Peer& p = peers_[static_cast<std::size_t>(src)];
    ++p.seq_in;
    auto& posted = p.posted[h.tag];
    if (posted.empty()) {
      ++stats_.unexpected;
      p.unexpected[h.tag].push_back(
          Early{h, {inline_bytes.begin(), inline_bytes.end()}, {key.begin(), key.end()}});
      return;
    }
    RequestPtr r = posted.front();
    posted.pop_front();
    match(*r, h, inline_bytes, key);
  }

  // A match header's fields agree with its protocol (before it waits anywhere).
  void check_rts(int src, const Header& h, std::uint64_t len) const {
    const auto proto = static_cast<std::uint8_t>(h.protocol);
    bool ok = proto >= static_cast<std::uint8_t>(Protocol::copy) &&
              proto <= static_cast<std::uint8_t>(Protocol::caching_pipeline) &&
              h.size <= kMaxMessage;
    if (ok) {
      switch (h.protocol) {
        case Protocol::eager: ok = len == h.size && h.size <= o_.eager_limit; break;
        case Protocol::copy: ok = len == std::min<std::uint64_t>(h.size, o_.bounce_size); break;
        case Protocol::rndv_write:
        case Protocol::leave_pinned: ok = len == 0; break;
        case Protocol::rndv_read: ok = len == 0; break;
        default: ok = len == 0 || len == std::min<std::uint64_t>(h.size, o_.eager_limit); break;
      }
    }
    if (!ok) throw PeerError(src, "bulk: " + rank_str(src) + " sent a malformed match header");
  }

  void match(Request& r, const Header& h, std::span<const std::byte> inline_bytes,
             std::span<const std::byte> key) {
    const int src = r.peer;
    r.matched = true;
    r.protocol = h.protocol;
    r.size = h.size;
    r.peer_req = h.sreq;
    ++stats_.messages_received;
    if (h.size > r.capacity) {
      r.state = Request::State::failed;
      r.error = "bulk: " + rank_str(src) + " sent " + std::to_string(h.size) + " bytes with tag " +
                std::to_string(h.tag) + ", the receive buffer holds " + std::to_string(r.capacity);
      // The sender learns it too, unless the whole message already came.
      if (inline_bytes.size() < h.size) {
        Out out;
        out.h = header(Type::nack, r);
        out.h.length = r.capacity;
        out.peer = src;
        outq_.push_back(std::move(out));
        ++stats_.control_messages;
        flush();
      }
      requests_.erase(r.id);
      return;
    }
    stats_.bytes_received += h.size;
    if (!inline_bytes.empty()) std::memcpy(r.dst, inline_bytes.data(), inline_bytes.size());
    // On local every rendezvous goes by cross-memory attach (all ranks agreed it works at
    // open; without it senders turn rendezvous into copy).
    r.cma = cma_capable_ && rendezvous(h.protocol);
    if (r.cma && (!cma_ok_ || !inline_bytes.empty() || !key.empty() ||
                  (read_based(h.protocol) && h.base == 0)))
      throw PeerError(src, "bulk: " + rank_str(src) + " sent a malformed local rendezvous");
    if (!r.cma && read_based(h.protocol) && h.protocol == Protocol::rndv_read && key.empty())
      throw PeerError(src, "bulk: " + rank_str(src) + " sent a read rendezvous without a key");
    switch (h.protocol) {
      case Protocol::eager: break;
      case Protocol::copy:
        if (h.size > inline_bytes.size()) {
          set_data_range(r, inline_bytes.size(), h.size);
          queue(r, header(Type::ack, r), nullptr, 0);
        }
        break;
      case Protocol::rndv_write:
      case Protocol::leave_pinned: start_target(r); break;
      case Protocol::rndv_read: start_read(r, h, key); break;
      default:  // pipelines
        if (r.cma) {
          if (read_based(h.protocol))
            start_read(r, h, key);
          else
            start_target(r);
          break;
        }
        if (h.size > inline_bytes.size()) {
          r.rdma_offset = std::min<std::uint64_t>(h.size, inline_bytes.size() + o_.copy_ahead);
          set_data_range(r, inline_bytes.size(), r.rdma_offset);
          r.frags = frags_of(fragments(o_, r.rdma_offset, h.size));
          Header a = header(Type::ack, r);
          a.offset = r.rdma_offset;
          queue(r, a, nullptr, 0);
        }
        break;
    }
    flush();
    pump(r);
  }

  static std::vector<Request::Frag> frags_of(
      const std::vector<std::pair<std::uint64_t, std::uint64_t>>& f) {
    std::vector<Request::Frag> out(f.size());
    for (std::size_t i = 0; i < f.size(); ++i) {
      out[i].off = f[i].first;
      out[i].len = f[i].second;
    }
    return out;
  }

  void set_data_range(Request& r, std::uint64_t begin, std::uint64_t end) {
    r.data_begin = r.data_next = begin;
    r.data_end = end;
    r.data_got = 0;
    if (!r.send) r.data_seen.assign((end - begin + o_.bounce_size - 1) / o_.bounce_size, false);
  }

  // rndv-write / leave-pinned receiver (and the local write path): advertise the buffer.
  void start_target(Request& r) {
    Header a = header(Type::ack, r);
    std::vector<std::byte> key;
    if (r.cma) {
      a.base = reinterpret_cast<std::uint64_t>(r.dst);
    } else if (r.size > 0) {
      r.reg = registrar_.acquire(r.dst, r.size, kRemoteWrite | kLocalWrite, uses_cache(r.protocol));
      key = t_.export_key(*r.reg.mr);
      a.base = r.reg.offset;
      a.key_len = static_cast<std::uint16_t>(key.size());
    }
    queue(r, a, nullptr, 0, std::move(key));
  }

  // rndv-read receiver: read the whole message, then FIN.
  void start_read(Request& r, const Header& h, std::span<const std::byte> key) {
    if (r.cma) {
      cma(false, r.peer, r.dst, h.base, r.size);
      r.fin = true;
      queue(r, header(Type::fin, r), nullptr, 0);
      return;
    }
    RemoteMemory rm = t_.import_key(r.peer, key);
    if (!rm.contains(h.base, r.size))
      throw PeerError(
          r.peer, "bulk: " + rank_str(r.peer) + " advertised a region shorter than its message");
    r.reg = registrar_.acquire(r.dst, r.size, kLocalWrite, uses_cache(r.protocol));
    post_rma(r, SIZE_MAX, false, r.dst, *r.reg.mr, rm, h.base, r.size);
  }

  // Queues reads or writes of [buf, buf+len) in pieces of at most kMaxOp, counted as in
  // flight from now on, and posts what the transmit queue takes.
  void post_rma(Request& r, std::size_t frag, bool write, std::byte* buf, const MemoryRegion& mr,
                const RemoteMemory& rm, std::uint64_t roff, std::uint64_t len) {
    for (std::uint64_t done = 0; done < len;) {
      const std::uint64_t n = std::min<std::uint64_t>(kMaxOp, len - done);
      rmaq_.push_back(
          PendingRma{RmaOp{r.id, frag}, write, buf + done, mr.desc(), rm, roff + done, n});
      if (frag == SIZE_MAX)
        ++r.rma;
      else
        ++r.frags[frag].ops;
      done += n;
    }
    drain_rma();
  }

  void drain_rma() {
    while (!rmaq_.empty()) {
      PendingRma& p = rmaq_.front();
      const std::uint64_t op = next_op_;
      const int peer = peer_of_request(p.op.req);
      if (peer < 0) {  // its request failed meanwhile
        rmaq_.pop_front();
        continue;
      }
      Status s =
          p.write ? t_.post_write(peer, p.buf, p.len, p.desc, p.rm, p.roff, kCtxRma | op, kSignal)
                  : t_.post_read(peer, p.buf, p.len, p.desc, p.rm, p.roff, kCtxRma | op, kSignal);
      if (s == Status::again) return;
      if (s != Status::ok)
        throw Error("bulk: RMA " + std::string(p.write ? "write" : "read") + " with " +
                    rank_str(peer) + ": " + t_.last_error());
      ++next_op_;
      rma_[op] = p.op;
      rmaq_.pop_front();
    }
  }

  int peer_of_request(std::uint64_t id) const {
    auto it = requests_.find(id);
    return it == requests_.end() ? -1 : it->second->peer;
  }

  void on_rma_done(Request& r, std::size_t frag) {
    if (frag == SIZE_MAX) {
      if (--r.rma == 0) {
        r.reg = {};  // released as soon as the data moved
        // rndv-write sender: FIN after the write; rndv-read receiver: FIN after the read.
        r.fin = true;
        queue(r, header(Type::fin, r), nullptr, 0);
        flush();
      }
    } else if (frag < r.frags.size()) {
      Request::Frag& f = r.frags[frag];
      if (--f.ops == 0) {
        f.reg = {};
        f.finished = true;
        ++r.frags_finished;
        --r.frags_active;
        Header h = header(Type::fin, r);
        h.seq = frag;
        queue(r, h, nullptr, 0);
        flush();
      }
    }
    pump(r);
  }

  void on_ack(Request& r, const wire::Message& m) {
    if (r.matched) throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " sent a second ACK");
    r.matched = true;
    r.peer_req = m.h.rreq;
    switch (r.protocol) {
      case Protocol::copy:
        if (r.size <= o_.bounce_size)
          throw PeerError(r.peer, "bulk: an ACK for a copy in one piece");
        set_data_range(r, o_.bounce_size, r.size);
        break;
      case Protocol::rndv_write:
      case Protocol::leave_pinned:
      case Protocol::pipeline:
      case Protocol::caching_pipeline:
        if (r.cma) {
          cma(true, r.peer, const_cast<std::byte*>(r.src), m.h.base, r.size);
          r.fin = true;
          queue(r, header(Type::fin, r), nullptr, 0);
          break;
        }
        if (r.protocol == Protocol::rndv_write || r.protocol == Protocol::leave_pinned) {
          RemoteMemory rm = t_.import_key(r.peer, m.key);
          if (!rm.contains(m.h.base, r.size))
            throw PeerError(r.peer, "bulk: " + rank_str(r.peer) +
                                        " advertised a region shorter than the message");
          r.reg = registrar_.acquire(const_cast<std::byte*>(r.src), r.size, kLocalRead,
                                     uses_cache(r.protocol));
          post_rma(r, SIZE_MAX, true, const_cast<std::byte*>(r.src), *r.reg.mr, rm, m.h.base,
                   r.size);
          break;
        }
        [[fallthrough]];
      case Protocol::pipeline_read: {
        if (r.cma) throw PeerError(r.peer, "bulk: an ACK for a read by cross-memory attach");
        const std::uint64_t eager = std::min<std::uint64_t>(r.size, o_.eager_limit);
        const std::uint64_t expect = std::min<std::uint64_t>(r.size, eager + o_.copy_ahead);
        if (m.h.offset != expect)
          throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " asked for the fragments from " +
                                      std::to_string(m.h.offset) + ", not " +
                                      std::to_string(expect));
        r.rdma_offset = expect;
        set_data_range(r, eager, expect);
        r.frags = frags_of(fragments(o_, expect, r.size));
        break;
      }
      default: throw PeerError(r.peer, "bulk: an ACK for an eager message");
    }
  }

  void on_nack(Request& r, const wire::Message& m) {
    r.state = Request::State::failed;
    r.error = "bulk: " + rank_str(r.peer) + "'s receive buffer (tag " + std::to_string(r.tag) +
              ") holds " + std::to_string(m.h.length) + " bytes, the message is " +
              std::to_string(r.size);
    r.reg = {};
    requests_.erase(r.id);
  }

  void on_data(Request& r, const wire::Message& m) {
    const std::uint64_t off = m.h.offset, len = m.inline_bytes.size();
    const std::uint64_t piece = o_.bounce_size;
    if (off < r.data_begin || off >= r.data_end || (off - r.data_begin) % piece != 0 ||
        len != std::min<std::uint64_t>(piece, r.data_end - off) ||
        r.data_seen[(off - r.data_begin) / piece])
      throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " sent a data fragment at offset " +
                                  std::to_string(off) + " of " + std::to_string(len) +
                                  " bytes outside what is expected");
    r.data_seen[(off - r.data_begin) / piece] = true;
    std::memcpy(r.dst + off, m.inline_bytes.data(), len);
    r.data_got += len;
  }

  void on_ready(Request& r, const wire::Message& m) {
    const std::uint64_t i = m.h.seq;
    if (r.cma || i >= r.frags.size() || r.frags[i].advertised || r.frags[i].finished ||
        (!r.send && !r.matched) || (r.send && !r.matched))
      throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " sent a READY for fragment " +
                                  std::to_string(i) + " it may not");
    Request::Frag& f = r.frags[i];
    RemoteMemory rm = t_.import_key(r.peer, m.key);
    if (!rm.contains(m.h.base, f.len))
      throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " advertised fragment " +
                                  std::to_string(i) + " in a region too short for it");
    f.advertised = true;
    ++r.frags_active;
    if (r.send) {  // pipeline: write our fragment into the advertised one
      f.reg = registrar_.acquire(const_cast<std::byte*>(r.src) + f.off, f.len, kLocalRead,
                                 r.protocol == Protocol::caching_pipeline, frag_align());
      post_rma(r, i, true, const_cast<std::byte*>(r.src) + f.off, *f.reg.mr, rm, m.h.base, f.len);
    } else {  // pipeline-read receiver: read the advertised source fragment
      f.reg = registrar_.acquire(r.dst + f.off, f.len, kLocalWrite, false);
      post_rma(r, i, false, r.dst + f.off, *f.reg.mr, rm, m.h.base, f.len);
    }
  }

  void on_fin(Request& r, const wire::Message& m) {
    if (!pipelined(r.protocol) || r.cma) {
      if (r.fin) throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " sent a second FIN");
      r.fin = true;
      r.reg = {};
      return;
    }
    const std::uint64_t i = m.h.seq;
    if (i >= r.frags.size() || !r.frags[i].advertised || r.frags[i].finished)
      throw PeerError(r.peer, "bulk: " + rank_str(r.peer) + " sent a FIN for fragment " +
                                  std::to_string(i) + " it was not given");
    Request::Frag& f = r.frags[i];
    f.reg = {};  // deregistered as soon as the fragment completes
    f.finished = true;
    ++r.frags_finished;
    --r.frags_active;
  }

  // The caching pipeline's registrations are aligned to the fragment size (seed 004 section
  // 5.2), so that the fragments of a reused buffer hit; a size that is no power of two aligns
  // to pages.
  std::size_t frag_align() const noexcept {
    return (o_.frag_size & (o_.frag_size - 1)) == 0 ? o_.frag_size : kPage;
  }

  void pump_recv(Request& r) {
    if (!r.matched) return;
    // pipeline (write): target fragments registered and advertised, depth at a time.
    if ((r.protocol == Protocol::pipeline || r.protocol == Protocol::caching_pipeline) && !r.cma)
      advertise_fragments(r, r.dst, kRemoteWrite | kLocalWrite,
                          r.protocol == Protocol::caching_pipeline);
    bool done = r.sends == 0 && r.rma == 0 && r.data_got == r.data_end - r.data_begin;
    switch (r.protocol) {
      case Protocol::eager:
      case Protocol::copy: break;
      case Protocol::rndv_write:
      case Protocol::leave_pinned:
      case Protocol::rndv_read: done = done && (r.fin || r.size == 0); break;
      default:
        if (r.cma)
          done = done && r.fin;
        else
          done = done && r.frags_finished == r.frags.size();
        break;
    }
    if (done) complete(r);
  }

  // ---- cross-memory attach (local) ----

  static constexpr std::uint64_t kProbe = 0x70726f6265636d61;  // "probecma"

  // Moves `len` bytes between our `buf` and `addr` in the peer's address space.
  void cma(bool write, int peer, std::byte* buf, std::uint64_t addr, std::uint64_t len) {
    if (t_.copy_peer(peer, write ? Transport::PeerCopy::write : Transport::PeerCopy::read, buf,
                     addr, static_cast<std::size_t>(len)) != Status::ok)
      throw PeerError(peer,
                      "bulk: " + t_.last_error() + " (the peer's buffer is not where it said)");
    stats_.cma_bytes += len;
  }

  Transport& t_;
  Bootstrap& boot_;
  ChannelOptions o_;
  int rank_, ranks_;
  Registrations registrar_;
  bool cma_capable_ = false;  // the transport copies to and from peers' memory (local)
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
  std::uint64_t events_ = 0;
  std::string failed_;
  Stats stats_;
  Costs costs_;
};

}  // namespace

std::unique_ptr<Channel> open_channel(Transport& t, Bootstrap& boot, const ChannelOptions& o) {
  return std::make_unique<ChannelImpl>(t, boot, o);
}

std::size_t request_bytes(const RequestPtr& r) noexcept {
  return r ? static_cast<std::size_t>(r->size) : 0;
}

}  // namespace fabflow::bulk
