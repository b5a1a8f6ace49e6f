// Spec-S0 (seed 001): header-only requests and responses. A request is a 0-byte WRITE with
// 32 bits of CQ data [bye | client | guess of bits 32..47]; the answer is a 0-byte WRITE whose
// CQ data is the value's low 32 bits when the guess holds, else a regular 8-byte SEND of the
// whole value, after which the client adopts the new guess once nothing is in flight (so
// that every header-only answer it receives confirms the one guess it sent).
#include <cstring>
#include <mutex>

#include "common/bounded_wait.h"
#include "seq/internal.h"

namespace fabflow::seq::detail {

std::vector<RemoteMemory> spec_exchange(Transport& t, Bootstrap& boot, const MemoryRegion& mr,
                                        unsigned outstanding,
                                        const std::function<bool(int)>& wanted,
                                        const std::function<std::size_t(int)>& bytes_of) {
  auto key = t.export_key(mr);
  SpecHello mine;
  mine.outstanding = outstanding;
  mine.region_bytes = mr.size();
  mine.key_len = static_cast<std::uint32_t>(key.size());
  std::vector<std::byte> blob(sizeof mine + key.size());
  std::memcpy(blob.data(), &mine, sizeof mine);
  std::memcpy(blob.data() + sizeof mine, key.data(), key.size());
  auto all = boot.allgather(blob);
  std::vector<RemoteMemory> remote(all.size());
  for (std::size_t r = 0; r < all.size(); ++r) {
    const int rank = static_cast<int>(r);
    std::span<const std::byte> peer_key;
    const SpecHello h = decode_spec_hello(all[r], rank, outstanding, &peer_key);
    if (rank == boot.rank() || !wanted(rank)) continue;
    remote[r] = t.import_key(rank, peer_key);
    if (h.region_bytes < bytes_of(rank) || !remote[r].contains(0, bytes_of(rank)))
      throw PeerError(rank, "seq: rank " + std::to_string(rank) +
                                " published a region that does not hold its layout");
  }
  return remote;
}

namespace {

using namespace spec;

// Posts with retries while the transmit queue is full.
template <class Post>
void post_retrying(Transport& t, BoundedWait& watch, Post&& post) {
  for (;;) {
    Status s = post();
    if (s == Status::ok) return;
    if (s != Status::again) throw Error("seq: post failed: " + t.last_error());
    Completion c[16];
    if (t.poll_tx(c) < 0) throw Error("seq: transmit failed: " + t.last_error());
    t.progress();
    watch.idle("seq", "posting (transmit queue full)");
  }
}

struct SpecLane {
  std::unique_ptr<Transport> t;
  std::unique_ptr<MemoryRegion> mr;
  std::vector<RemoteMemory> remote;  // per rank (clients of this lane)
  std::vector<int> clients;          // the clients of this lane
  bool recvs = false;                // CQ data consumes posted receives
  int open = 0;                      // clients not yet closed
};

class SpecServer final : public CrewServer {
 public:
  SpecServer(const TransportOptions& to, Bootstrap& boot, const Options& o)
      : CrewServer(o), boot_(boot), clients_(client_count(boot)) {
    closed_.assign(static_cast<std::size_t>(clients_), 0);
    for (unsigned l = 0; l < lane_count(o); ++l) {
      SpecLane lane;
      lane.t = open_lane(to, boot, o.design);
      for (int c = 0; c < clients_; ++c)
        if (lane_of(c, o) == l) lane.clients.push_back(c);
      lane.open = static_cast<int>(lane.clients.size());
      lane.recvs = lane.t->caps().rx_cq_data_consumes_recv;
      const std::size_t buffers = lane.recvs ? lane.clients.size() * o.outstanding : 0;
      lane.mr = lane.t->allocate(kSpecLanding + 8 * std::max<std::size_t>(buffers, 1), kAllAccess);
      const std::size_t client_bytes = kSpecLanding + 8 * o.outstanding;
      lane.remote = spec_exchange(
          *lane.t, boot, *lane.mr, o.outstanding,
          [&](int r) { return r < clients_ && lane_of(r, o) == l; },
          [&](int) { return client_bytes; });
      for (std::size_t b = 0; b < buffers; ++b)
        if (repost(lane, b) != Status::ok)
          throw Error("seq: posting receives failed: " + lane.t->last_error());
      lanes_.push_back(std::move(lane));
    }
  }

 private:
  struct Ask {
    int client;
    std::uint16_t guess;
  };

  Status repost(SpecLane& lane, std::size_t b) {
    const int peer = lane.clients[b / o_.outstanding];
    return lane.t->post_recv(peer, lane.mr->data() + kSpecLanding + 8 * b, 8, lane.mr->desc(), b);
  }

  static void reject(ServerStats& s, std::string why) {
    if (s.rejected++ == 0) s.first_rejection = "seq: " + std::move(why);
  }

  // Takes one completion of lane l: a request into `asks`, a bye, or a rejection.
  void take(SpecLane& lane, unsigned l, const Completion& c, std::vector<Ask>& asks,
            ServerStats& s) {
    if (lane.recvs && c.kind == CompletionKind::recv) {
      const std::size_t buffers = lane.clients.size() * o_.outstanding;
      if (c.context >= buffers) throw Error("seq: receive completion with unknown context");
      if (repost(lane, c.context) != Status::ok)
        throw Error("seq: posting a receive failed: " + lane.t->last_error());
    }
    if (!c.has_data) return reject(s, "a request without CQ data");
    if (c.data > 0xffffffffu) return reject(s, "a request with more than 32 bits of CQ data");
    const auto word = static_cast<std::uint32_t>(c.data);
    const auto client = static_cast<int>(client_of(word));
    if (client >= clients_ || lane_of(client, o_) != l)
      return reject(
          s, "a request naming client " + std::to_string(client) + " on lane " + std::to_string(l));
    const auto ci = static_cast<std::size_t>(client);
    if (closed_[ci]) return reject(s, "client " + std::to_string(client) + " sent after its close");
    if (is_bye(word)) {
      if (guess_of(word) != 0)
        return reject(s, "client " + std::to_string(client) + " sent a malformed close");
      closed_[ci] = 1;
      --lane.open;
      return;
    }
    asks.push_back({client, guess_of(word)});
  }

  ServerStats serve(unsigned w, const std::atomic<bool>& stop) override {
    ServerStats s;
    BoundedWait watch(o_.peer_timeout, w == 0 ? &boot_ : nullptr, {}, 256);
    watch.yield_when_idle(o_.yield_when_idle);
    std::vector<Ask> asks;
    Completion c[16];
    const unsigned first = w * o_.queues;
    for (;;) {
      bool all_done = true, moved = false;
      for (unsigned q = 0; q < o_.queues; ++q) {
        const unsigned l = first + q;
        SpecLane& lane = lanes_[l];
        if (lane.open == 0) continue;
        all_done = false;
        asks.clear();
        // Take what has arrived, up to a batch, never waiting for more.
        for (std::size_t got = 0; got < o_.batch;) {
          const std::size_t want = std::min<std::size_t>(16, o_.batch - got);
          int n = lane.t->poll_rx({c, want});
          if (n < 0) throw Error("seq: lane " + std::to_string(l) + ": " + lane.t->last_error());
          if (n == 0) break;
          moved = true;
          for (int k = 0; k < n; ++k) take(lane, l, c[k], asks, s);
          got += static_cast<std::size_t>(n);
        }
        if (asks.empty()) continue;
        respond(lane, asks, s, watch);
      }
      if (all_done) return s;
      end_round(stop, moved, watch);
    }
  }

  // One counter update for the round; the answers back to back, FI_MORE on all but the last
  // when batching.
  void respond(SpecLane& lane, const std::vector<Ask>& asks, ServerStats& s, BoundedWait& watch) {
    std::uint64_t v = counter_.value.fetch_add(asks.size(), std::memory_order_relaxed);
    std::byte* scratch = lane.mr->data();
    for (std::size_t i = 0; i < asks.size(); ++i, ++v) {
      const Ask& a = asks[i];
      const unsigned more = o_.batch_responses && i + 1 < asks.size() ? kMore : 0;
      const RemoteMemory& dst = lane.remote[static_cast<std::size_t>(a.client)];
      if (confirms(v, a.guess)) {
        const std::uint64_t low = v & 0xffffffffu;
        post_retrying(*lane.t, watch, [&] {
          return lane.t->post_write(a.client, scratch, 0, lane.mr->desc(), dst, 0, 0,
                                    kInject | more, low);
        });
      } else {
        std::memcpy(scratch, &v, 8);  // injected: copied out at post time
        post_retrying(*lane.t, watch, [&] {
          return lane.t->post_send(a.client, scratch, 8, lane.mr->desc(), 0, kInject | more);
        });
        ++s.full_responses;
      }
    }
    s.served += asks.size();
    ++s.rounds;
  }

  Bootstrap& boot_;
  int clients_;
  std::vector<SpecLane> lanes_;
  std::vector<char> closed_;  // per client; each lane's worker touches only its clients
};

class SpecClient final : public ClientBase {
 public:
  SpecClient(const TransportOptions& to, Bootstrap& boot, const Options& o)
      : ClientBase(o),
        me_(boot.rank()),
        server_(server_rank(boot)),
        mine_(lane_of(boot.rank(), o)) {
    const int clients = client_count(boot);
    for (unsigned l = 0; l < lane_count(o); ++l) {
      auto t = open_lane(to, boot, o.design);
      auto mr = t->allocate(kSpecLanding + 8 * o.outstanding, kAllAccess);
      // The server's region: the landing line plus its receive buffers for this lane.
      std::size_t on_lane = 0;
      for (int c = 0; c < clients; ++c) on_lane += lane_of(c, o) == l;
      const std::size_t server_bytes =
          kSpecLanding + 8 * (t->caps().rx_cq_data_consumes_recv ? on_lane * o.outstanding : 1);
      auto remote = spec_exchange(
          *t, boot, *mr, o.outstanding, [&](int r) { return l == mine_ && r == server_; },
          [&](int) { return server_bytes; });
      if (l == mine_) {
        server_mem_ = remote[static_cast<std::size_t>(server_)];
        mr_ = std::move(mr);
      }
      lanes_.push_back(std::move(t));
    }
    t_ = lanes_[mine_].get();
    for (unsigned k = 0; k < o.outstanding; ++k)
      if (repost(k) != Status::ok) throw Error("seq: posting receives failed: " + t_->last_error());
  }

  Status issue() noexcept override {
    if (in_flight_ == o_.outstanding || changing_) return Status::again;
    const std::uint64_t imm = request(static_cast<std::uint32_t>(me_), guess_);
    Status s =
        t_->post_write(server_, mr_->data(), 0, mr_->desc(), server_mem_, 0, 0, kInject, imm);
    if (s == Status::failed) return fail("sending a request failed: " + t_->last_error());
    if (s != Status::ok) return s;
    ++in_flight_;
    tally_.issued();
    return Status::ok;
  }

  Status poll(std::uint64_t* value) noexcept override {
    Completion c;
    int n = t_->poll_rx({&c, 1});
    if (n < 0) return fail("receive failed: " + t_->last_error());
    if (n == 0) return Status::empty;
    if (in_flight_ == 0) return fail("the server answered a request never sent");
    const bool consumed = c.kind == CompletionKind::recv;
    if (consumed && c.context >= o_.outstanding)
      return fail("receive completion with unknown context");
    if (c.has_data) {
      if (c.data > 0xffffffffu) return fail("the server sent more than 32 bits of CQ data");
      *value = value_of(guess_, static_cast<std::uint32_t>(c.data));
    } else {
      if (!consumed || c.length != 8)
        return fail("the server sent a malformed value (" + std::to_string(c.length) + " bytes)");
      std::memcpy(value, mr_->data() + kSpecLanding + 8 * c.context, 8);
      ++stats_.full_responses;
      next_guess_ = guess_for(*value);
      changing_ = next_guess_ != guess_;
    }
    if (consumed && repost(static_cast<unsigned>(c.context)) != Status::ok)
      return fail("posting a receive failed: " + t_->last_error());
    --in_flight_;
    if (changing_ && in_flight_ == 0) {
      guess_ = next_guess_;
      changing_ = false;
    }
    tally_.received(*value, stats_);
    return Status::ok;
  }

  unsigned in_flight() const noexcept override { return in_flight_; }

 private:
  void say_goodbye(BoundedWait& watch) override {
    // The close is signalled so that it has left before the transport may go.
    post_retrying(*t_, watch, [&] {
      return t_->post_write(server_, mr_->data(), 0, mr_->desc(), server_mem_, 0, 1, kSignal,
                            bye(static_cast<std::uint32_t>(me_)));
    });
    watch.reset();
    for (;;) {
      Completion c[4];
      int n = t_->poll_tx(c);
      if (n < 0) throw Error("seq: closing failed: " + t_->last_error());
      bool sent = false;
      for (int k = 0; k < n; ++k) sent |= c[k].context == 1;
      if (sent) return;
      watch.idle("seq client", "closing");
    }
  }

  Status repost(unsigned k) noexcept {
    return t_->post_recv(server_, mr_->data() + kSpecLanding + 8 * k, 8, mr_->desc(), k);
  }
  int me_, server_;
  unsigned mine_;
  std::vector<std::unique_ptr<Transport>> lanes_;
  Transport* t_ = nullptr;
  std::unique_ptr<MemoryRegion> mr_;
  RemoteMemory server_mem_;
  unsigned in_flight_ = 0;
  std::uint16_t guess_ = 0, next_guess_ = 0;
  bool changing_ = false;  // a full answer changed the guess: send again once drained
};

}  // namespace

const Ends kSpecEnds = ends_of<SpecServer, SpecClient>();

}  // namespace fabflow::seq::detail
