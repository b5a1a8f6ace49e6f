// The rpc and rpc-batch sequencers over request-response channels (HERD's pattern: requests
// by WRITE into the server's mailboxes, responses by SEND). One channel per lane; every client
// joins every lane's channel at setup (collective) and talks on its own.
#include <fabflow/rr.h>

#include <cstring>

#include "common/bounded_wait.h"
#include "rr/lane.h"
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

class RpcServer final : public CrewServer {
 public:
  RpcServer(const TransportOptions& to, Bootstrap& boot, const Options& o)
      : CrewServer(o), boot_(boot) {
    const int clients = client_count(boot);
    for (unsigned l = 0; l < lane_count(o); ++l) {
      lanes_.push_back(
          rr::responder_lane(open_lane(to, boot, o.design), boot, channel_options(o), clients));
    }
  }

 private:
  // Worker w drives lanes [w*queues, (w+1)*queues), one round on each in turn.
  ServerStats serve(unsigned w, const std::atomic<bool>& stop) override {
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
        rr::Responder& r = *lanes_[first + q].end;
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
      end_round(stop, moved, watch);
    }
  }

  Bootstrap& boot_;
  std::vector<rr::Lane<rr::Responder>> lanes_;
};

class RpcClient final : public SlotClient {
 public:
  RpcClient(const TransportOptions& to, Bootstrap& boot, const Options& o)
      : SlotClient(o), mine_(lane_of(boot.rank(), o)) {
    const int clients = client_count(boot);
    for (unsigned l = 0; l < lane_count(o); ++l) {
      lanes_.push_back(rr::requester_lane(open_lane(to, boot, o.design), boot, channel_options(o),
                                          clients, o.outstanding));
    }
  }

  Status issue() noexcept override {
    if (free_.empty()) return Status::again;
    Status s = lanes_[mine_].end->submit(free_.back(), 0, 0);
    if (s != Status::ok) return s == Status::again ? s : fail();
    free_.pop_back();
    tally_.issued();
    return Status::ok;
  }

  Status poll(std::uint64_t* value) noexcept override {
    rr::Requester& q = *lanes_[mine_].end;
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

 private:
  void say_goodbye(BoundedWait& watch) override { rr::close_requesters(lanes_, watch, "seq"); }

  Status fail() noexcept { return SlotClient::fail(lanes_[mine_].end->error()); }

  unsigned mine_;
  std::vector<rr::Lane<rr::Requester>> lanes_;
};

}  // namespace

const Ends kRpcEnds = ends_of<RpcServer, RpcClient>();

}  // namespace fabflow::seq::detail
