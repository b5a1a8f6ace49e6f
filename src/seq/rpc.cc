// The rpc and rpc-batch sequencers over request-response channels (HERD's pattern: requests
// by WRITE into the server's mailboxes, responses by SEND). One channel per lane; every client
// joins every lane's channel at setup (collective) and talks on its own.
#include <fabflow/rr.h>

#include <cstring>

#include "common/bounded_wait.h"
#include "seq/internal.h"

namespace fabflow::seq::detail {
namespace {

rr::ChannelOptions channel_options(const Options& o) {
  rr::ChannelOptions c;
  c.pattern = rr::Pattern::write_send;
  c.request_bytes = 8;  // requests carry nothing; responses the 8-byte value
  c.response_bytes = 8;
  c.peer_timeout = o.peer_timeout;
  return c;
}

struct RpcLane {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<rr::Responder> responder;
};

class RpcServer final : public Server {
 public:
  RpcServer(const TransportOptions& to, Bootstrap& boot, const Options& o) : boot_(boot), o_(o) {
    counter_.value.store(o.first_value);
    const int clients = client_count(boot);
    for (unsigned l = 0; l < lane_count(o); ++l) {
      RpcLane lane;
      lane.transport = open_lane(to, boot, o.design);
      lane.responder = rr::make_responder(*lane.transport, boot, channel_options(o), clients);
      lanes_.push_back(std::move(lane));
    }
  }

  ServerStats run() override {
    ServerStats total;
    std::mutex m;
    std::atomic<bool> stop{false};
    total.cpu_s = run_workers(o_, stop, [&](unsigned w) {
      ServerStats mine = serve(w, stop);
      std::lock_guard<std::mutex> lock(m);
      total.served += mine.served;
      total.rounds += mine.rounds;
    });
    total.counter = counter_.value.load();
    return total;
  }
  std::uint64_t counter() const noexcept override { return counter_.value.load(); }

 private:
  // Worker w drives lanes [w*queues, (w+1)*queues), one round on each in turn.
  ServerStats serve(unsigned w, const std::atomic<bool>& stop) {
    ServerStats s;
    const bool batched = o_.design == Design::rpc_batch;
    const rr::Handler one = [this](int, std::span<const std::byte>, std::span<std::byte> out) {
      std::uint64_t v = counter_.value.fetch_add(1, std::memory_order_relaxed);
      std::memcpy(out.data(), &v, 8);
      return std::size_t{8};
    };
    const rr::BatchHandler many = [this](std::span<rr::BatchRequest> batch) {
      std::uint64_t v = counter_.value.fetch_add(batch.size(), std::memory_order_relaxed);
      for (rr::BatchRequest& b : batch) {
        std::memcpy(b.response.data(), &v, 8);
        b.response_len = 8;
        ++v;
      }
    };
    // Worker 0 watches the bootstrap for vanished clients; the others rely on the peer timeout.
    BoundedWait watch(o_.peer_timeout, w == 0 ? &boot_ : nullptr, {}, 256);
    watch.yield_when_idle(o_.yield_when_idle);
    const unsigned first = w * o_.queues;
    for (;;) {
      bool all_done = true, moved = false;
      for (unsigned q = 0; q < o_.queues; ++q) {
        rr::Responder& r = *lanes_[first + q].responder;
        if (r.done()) continue;
        all_done = false;
        unsigned n = 0;
        Status st = batched ? r.serve_batch(many, o_.batch, &n) : r.serve(&one, &n);
        if (st == Status::failed)
          throw Error("seq: lane " + std::to_string(first + q) + ": " + r.error());
        if (st == Status::ok) moved = true;
        s.served += n;
        s.rounds += n > 0;
      }
      if (all_done) return s;
      if (stop.load(std::memory_order_relaxed))
        throw Error("seq: stopped after another worker failed");
      if (moved)
        watch.reset();
      else
        watch.idle("seq server", "waiting for requests");
    }
  }

  Bootstrap& boot_;
  Options o_;
  std::vector<RpcLane> lanes_;
  Counter counter_;
};

struct ClientLane {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<rr::Requester> requester;
};

class RpcClient final : public Client {
 public:
  RpcClient(const TransportOptions& to, Bootstrap& boot, const Options& o)
      : o_(o), mine_(lane_of(boot.rank(), o)) {
    const int clients = client_count(boot);
    for (unsigned l = 0; l < lane_count(o); ++l) {
      ClientLane lane;
      lane.transport = open_lane(to, boot, o.design);
      lane.requester =
          rr::make_requester(*lane.transport, boot, channel_options(o), clients, o.outstanding);
      lanes_.push_back(std::move(lane));
    }
    for (unsigned k = o.outstanding; k-- > 0;) free_.push_back(k);
  }

  Status issue() noexcept override {
    if (free_.empty()) return Status::again;
    Status s = lanes_[mine_].requester->submit(free_.back(), 0, 0);
    if (s != Status::ok) return s == Status::again ? s : fail();
    free_.pop_back();
    tally_.issued();
    return Status::ok;
  }

  Status poll(std::uint64_t* value) noexcept override {
    rr::Requester& q = *lanes_[mine_].requester;
    rr::Response r;
    Status s = q.poll(&r);
    if (s == Status::empty) return s;
    if (s != Status::ok) return fail();
    if (r.data.size() != 8) {
      q.release(r);
      error_ = "seq: the server sent a " + std::to_string(r.data.size()) + "-byte value";
      return Status::failed;
    }
    std::memcpy(value, r.data.data(), 8);
    q.release(r);
    free_.push_back(r.slot);
    tally_.received(*value, stats_);
    return Status::ok;
  }

  unsigned in_flight() const noexcept override {
    return o_.outstanding - static_cast<unsigned>(free_.size());
  }

  void close(Bootstrap& boot) override {
    drain(*this, boot, o_);
    BoundedWait watch(o_.peer_timeout, &boot, {}, 256);
    watch.yield_when_idle(o_.yield_when_idle);
    for (ClientLane& l : lanes_) {
      watch.reset();
      for (;;) {
        Status s = l.requester->close();
        if (s == Status::ok) break;
        if (s == Status::failed) throw Error("seq: " + l.requester->error());
        watch.idle("seq client", "closing");
      }
    }
  }

  const ClientStats& stats() const noexcept override { return stats_; }
  const std::string& error() const noexcept override { return error_; }

 private:
  Status fail() noexcept {
    if (error_.empty()) error_ = "seq: " + lanes_[mine_].requester->error();
    return Status::failed;
  }

  Options o_;
  unsigned mine_;
  std::vector<ClientLane> lanes_;
  std::vector<unsigned> free_;  // slots with no request in flight
  Tally tally_;
  ClientStats stats_;
  std::string error_;
};

}  // namespace

std::unique_ptr<Server> make_rpc_server(const TransportOptions& to, Bootstrap& boot,
                                        const Options& o) {
  return std::make_unique<RpcServer>(to, boot, o);
}
std::unique_ptr<Client> make_rpc_client(const TransportOptions& to, Bootstrap& boot,
                                        const Options& o) {
  return std::make_unique<RpcClient>(to, boot, o);
}

}  // namespace fabflow::seq::detail
