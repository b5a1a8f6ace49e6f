// The bulk channel's public calls: sending and receiving, testing and waiting with the peer
// timeout, progress, statistics, and failing the whole channel. docs/bulk.md.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "bulk/channel_impl.h"

#include "common/bounded_wait.h"

namespace fabflow::bulk::detail {

ChannelImpl::ChannelImpl(Transport& t, Bootstrap& boot, const ChannelOptions& o)
    : t_(t),
      boot_(boot),
      o_(resolve(o, t.caps())),
      rank_(boot.rank()),
      ranks_(boot.size()),
      registrar_(t, o_) {
  cma_capable_ = t.caps().cross_memory_attach;
  if (const std::size_t n = rma_operation_size(t.caps()); n > 0) rma_op_ = std::min(n, kMaxOp);
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

ChannelImpl::~ChannelImpl() {
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

void ChannelImpl::park(std::unique_ptr<MemoryRegion> mr) {
  if (!mr) return;
  static std::mutex m;
  static auto* parked = new std::vector<std::unique_ptr<MemoryRegion>>;  // never freed
  std::lock_guard<std::mutex> lock(m);
  parked->push_back(std::move(mr));
}

RequestPtr ChannelImpl::isend(int peer, std::uint32_t tag, std::span<const std::byte> buf,
                              std::optional<Protocol> protocol) {
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
                     std::to_string(o_.eager_limit) + " bytes), not " + std::to_string(buf.size()));
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

RequestPtr ChannelImpl::irecv(int peer, std::uint32_t tag, std::span<std::byte> buf) {
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

bool ChannelImpl::test(const RequestPtr& r) {
  if (!r) throw UsageError("bulk: test of a null request");
  if (r->state == Request::State::active) progress();
  return finished(*r);
}

std::size_t ChannelImpl::wait(const RequestPtr& r) {
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
      fail_channel(no_progress_error(&boot_, o_.peer_timeout, "bulk", describe(*r), r->peer));
    }
    if (now - last_check >= std::chrono::milliseconds(1)) {
      last_check = now;
      bool gone = false;
      try {
        gone = boot_.peer_failed();
      } catch (...) {
        gone = true;
      }
      if (gone) fail_channel(peer_failure_error(&boot_, "bulk", describe(*r)));
    }
  }
  return static_cast<std::size_t>(r->size);
}

void ChannelImpl::progress() {
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

std::shared_ptr<Memory> ChannelImpl::allocate(std::size_t len) {
  if (len == 0) throw UsageError("bulk: allocate(0)");
  if (len > kMaxMessage)
    throw UsageError("bulk: allocate of " + std::to_string(len) + " bytes is above 1 TiB");
  auto m = std::shared_ptr<Memory>(new Memory(t_.allocate(len, kAllAccess), next_memory_++));
  registrar_.adopt(m);
  return m;
}

Protocol ChannelImpl::choose(std::size_t bytes) const noexcept {
  if (costs_.measured) return cheapest(costs_, o_, bytes);
  if (bytes <= o_.eager_limit) return Protocol::eager;
  if (bytes <= o_.copy_limit) return Protocol::copy;
  return Protocol::pipeline;
}

const Stats& ChannelImpl::stats() noexcept {
  registrar_.fill(stats_);
  stats_.rendezvous_path = path_;
  return stats_;
}

void ChannelImpl::reset_stats() noexcept {
  stats_ = Stats{};
  registrar_.reset();
}

void ChannelImpl::check_peer(int peer, const char* call) const {
  if (!failed_.empty()) throw Error(failed_);
  if (peer < 0 || peer >= ranks_ || peer == rank_)
    throw UsageError("bulk: " + std::string(call) + " with rank " + std::to_string(peer) +
                     ": not a peer (ranks 0-" + std::to_string(ranks_ - 1) + ", this is " +
                     std::to_string(rank_) + ")");
}

std::string ChannelImpl::describe(const Request& r) const {
  return std::string(r.send ? "sending " : "receiving ") +
         (r.send || r.matched ? std::to_string(r.size) + " bytes " : "") +
         (r.send ? "to " : "from ") + rank_str(r.peer) + " (tag " + std::to_string(r.tag) + ", " +
         std::string(to_string(r.protocol)) + ")";
}

bool ChannelImpl::finished(Request& r) {
  if (r.state == Request::State::failed) {
    requests_.erase(r.id);
    throw Error(r.error);
  }
  return r.state == Request::State::done;
}

void ChannelImpl::fail_channel(const Error& e) {
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

}  // namespace fabflow::bulk::detail

namespace fabflow::bulk {

Opened<Channel> open_channel(Peer& peer, const ChannelOptions& o,
                             const TransportOptions& transport) {
  Opened<Channel> c;
  static_cast<Connected&>(c) = connect_transport(
      with_needs(transport, {Op::send, Op::write, Op::read}), peer, peer.bootstrap().rank());
  c.end = open_channel(*c.transport, *c.session, o);
  return c;
}

std::unique_ptr<Channel> open_channel(Transport& t, Bootstrap& boot, const ChannelOptions& o) {
  return std::make_unique<detail::ChannelImpl>(t, boot, o);
}

std::size_t request_bytes(const RequestPtr& r) noexcept {
  return r ? static_cast<std::size_t>(r->size) : 0;
}

}  // namespace fabflow::bulk
