// The transfer engine (fabflow/bulk/transfer.h): batches merged where their transfers are
// contiguous on both sides (transfer_merge.h), split into operations, spread over
// the endpoints that reach both memories, queued per endpoint and posted up to max_outstanding
// at a time on each; a batch's notification goes out on the first endpoint once every one of
// its operations has completed at this rank (and, for WRITEs that went on other endpoints, a
// READ on each of those has come back). docs/transfer-engine.md.
#include <fabflow/bootstrap.h>
#include <fabflow/bulk/transfer.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "bulk/descriptor.h"
#include "bulk/transfer_merge.h"
#include "common/bounded_wait.h"

namespace fabflow::bulk {

using detail::NotificationWire;

namespace {

// Completion contexts: a data operation's is its handle << 1; a notification's is
// (handle << 17 | slot << 1 | 1), its send slot below 2^16.
constexpr std::uint64_t kNotifyBit = 1;
constexpr std::uint64_t kMaxSlots = 1u << 16;
// A notification receive's context is its slot.

// Reaps `t`'s completions with `poll` (poll_tx or poll_rx) until a poll finds fewer than a
// batch, handing each to `each`, which returns false to stop. "" or the transport's error.
template <class Each>
std::string drain(Transport& t, int (Transport::*poll)(std::span<Completion>) noexcept, Each each) {
  std::array<Completion, 32> c;
  for (;;) {
    const int n = (t.*poll)(c);
    if (n < 0) return "transfer: " + t.last_error();
    for (int i = 0; i < n; ++i)
      if (!each(c[static_cast<std::size_t>(i)])) return "";
    if (n < static_cast<int>(c.size())) return "";
  }
}

std::string range_text(std::uint64_t offset, std::uint64_t len) {
  return "[" + std::to_string(offset) + ", +" + std::to_string(len) + ")";
}

}  // namespace

namespace {

Transport& first_endpoint(const std::vector<Transport*>& endpoints) {
  if (endpoints.empty() || endpoints.size() > detail::kMaxEndpoints)
    throw UsageError("transfer: an engine takes 1.." + std::to_string(detail::kMaxEndpoints) +
                     " endpoints, not " + std::to_string(endpoints.size()));
  for (Transport* t : endpoints)
    if (!t) throw UsageError("transfer: an endpoint that is no transport");
  return *endpoints[0];
}

}  // namespace

Memory::~Memory() {
  if (on_release_) {
    try {
      on_release_();
    } catch (...) {  // no memory to note it: the peers are not told
    }
  }
  // The later endpoints' registrations of the bytes go before the first's, which owns them
  // when the engine allocated them.
  while (!mrs_.empty()) mrs_.pop_back();
}

Engine::Engine(Transport& transport, Bootstrap& boot, EngineOptions options)
    : Engine(std::vector<Transport*>{&transport}, boot, options) {}

Engine::Engine(std::vector<Transport*> endpoints, Bootstrap& boot, EngineOptions options)
    : t_(first_endpoint(endpoints)), boot_(boot), o_(options) {
  if (o_.max_outstanding == 0 || o_.max_outstanding >= kMaxSlots)
    throw UsageError("transfer: max_outstanding must be in 1..65535");
  if (o_.notification_slots == 0 || o_.notification_slots > 65536)
    throw UsageError("transfer: notification_slots must be in 1..65536");
  if (o_.stripe_min == 0) throw UsageError("transfer: stripe_min must be above 0");
  if (o_.max_batch == 0) throw UsageError("transfer: max_batch must be above 0");
  for (Transport* t : endpoints) {
    if (auto m = missing_op(t->caps(), required_ops())) throw UsageError("transfer: " + m->why);
    Endpoint ep;
    ep.t = t;
    if (endpoints.size() > 1) ep.fence = t->allocate(64, kLocalWrite);
    eps_.push_back(std::move(ep));
  }
  posted_bytes_.assign(eps_.size(), 0);
  posted_ops_.assign(eps_.size(), 0);
  set_max_operation(o_.max_operation);
  rx_slots_ = o_.notification_slots * static_cast<std::size_t>(boot_.size());
  rx_ = t_.allocate(rx_slots_ * sizeof(NotificationWire), kLocalWrite);
  tx_ = t_.allocate(o_.max_outstanding * sizeof(NotificationWire), kLocalRead);
  for (std::uint32_t s = static_cast<std::uint32_t>(o_.max_outstanding); s-- > 0;)
    free_tx_.push_back(s);
  for (std::size_t s = 0; s < rx_slots_; ++s)
    if (s / o_.notification_slots != static_cast<std::size_t>(boot_.rank()) && !post_receive(s))
      throw Error("transfer: posting a notification receive: " + t_.last_error() +
                  " (open the transport with rx_depth of at least notification_slots)");
}

Engine::~Engine() {
  // Operations still in flight read or write memories the batches keep: wait for them a
  // bounded time so that none lands in freed memory.
  BoundedWait watch(o_.peer_timeout, nullptr);
  auto in_flight = [this] {
    std::size_t n = 0;
    for (const Endpoint& ep : eps_) n += ep.outstanding;
    return n;
  };
  while (in_flight() > 0 && failure_.empty()) {
    const std::size_t before = in_flight();
    for (std::size_t e = 0; e < eps_.size(); ++e) reap_tx(e);
    if (in_flight() != before) {
      watch.reset();
    } else if (watch.spin() != BoundedWait::State::waiting) {
      break;
    }
  }
}

void Engine::set_max_operation(std::size_t bytes) {
  // rma_operation_size on every endpoint (the rule the bulk channel follows too): the smallest
  // size asked or preferred among them, within the smallest largest operation; with neither,
  // that largest.
  std::size_t most = std::size_t{1} << 30, chosen = 0;
  for (const Endpoint& ep : eps_) {
    const Capabilities& caps = ep.t->caps();
    most = std::min(most, largest_rma_operation(caps));
    if (const std::size_t n = rma_operation_size(caps, bytes); n > 0)
      chosen = chosen ? std::min(chosen, n) : n;
  }
  max_op_ = chosen > 0 ? std::min(chosen, most) : most;
  o_.max_operation = bytes;
}

std::vector<Op> Engine::required_ops() { return {Op::send, Op::write, Op::read}; }

std::shared_ptr<Memory> Engine::allocate(std::size_t len) {
  if (len == 0) throw UsageError("transfer: allocate(0)");
  std::vector<std::unique_ptr<MemoryRegion>> mrs;
  mrs.push_back(t_.allocate(len, kAllAccess));
  // A transport that maps its peers' memory (local) shares only what it allocated itself.
  for (std::size_t e = 1; e < eps_.size(); ++e)
    mrs.push_back(eps_[e].t->caps().peer_mapping
                      ? nullptr
                      : eps_[e].t->register_memory(mrs[0]->data(), len, kAllAccess));
  auto m = std::shared_ptr<Memory>(new Memory(std::move(mrs), next_memory_++));
  m->on_release_ = [list = released_here_, id = m->id()] { list->push_back(id); };
  return m;
}

std::shared_ptr<Memory> Engine::register_memory(void* addr, std::size_t len) {
  if (!addr || len == 0) throw UsageError("transfer: register_memory of no memory");
  std::vector<std::unique_ptr<MemoryRegion>> mrs;
  for (Endpoint& ep : eps_) mrs.push_back(ep.t->register_memory(addr, len, kAllAccess));
  auto m = std::shared_ptr<Memory>(new Memory(std::move(mrs), next_memory_++));
  m->on_release_ = [list = released_here_, id = m->id()] { list->push_back(id); };
  return m;
}

std::vector<std::byte> Engine::describe(const Memory& m, int peer) const {
  if (peer < 0 || peer >= boot_.size() || peer == boot_.rank())
    throw UsageError("transfer: describe for rank " + std::to_string(peer) +
                     ", not another rank of " + std::to_string(boot_.size()));
  std::vector<std::vector<std::byte>> keys;
  for (std::size_t e = 0; e < eps_.size(); ++e) {
    const MemoryRegion* mr = m.region_on(e);
    keys.push_back(mr ? eps_[e].t->export_key(mr->registered()) : std::vector<std::byte>{});
  }
  auto& peers = described_[m.id()];
  if (std::find(peers.begin(), peers.end(), peer) == peers.end()) peers.push_back(peer);
  return detail::encode_descriptor(boot_.rank(), peer, m.id(), m.size(), keys);
}

RemoteRegion Engine::import(int peer, std::span<const std::byte> descriptor) {
  if (peer < 0 || peer >= boot_.size() || peer == boot_.rank())
    throw UsageError("transfer: import from rank " + std::to_string(peer) +
                     ", not another rank of " + std::to_string(boot_.size()));
  const auto d = detail::decode_descriptor(descriptor, peer, boot_.rank());
  auto bad = [&](const std::string& why) {
    return PeerError(peer,
                     "transfer: the descriptor from rank " + std::to_string(peer) + " " + why);
  };
  if (d.keys.size() != eps_.size())
    throw bad("names " + std::to_string(d.keys.size()) + " endpoints, this engine has " +
              std::to_string(eps_.size()));
  RemoteRegion r;
  r.peer = peer;
  r.id = d.memory;
  r.length = d.length;
  for (std::size_t e = 0; e < eps_.size(); ++e) {
    RemoteMemory m;
    if (!d.keys[e].empty()) {
      m = eps_[e].t->import_key(peer, d.keys[e]);
      if (m.length != d.length)
        throw bad("gives " + std::to_string(d.length) + " bytes, its key on endpoint " +
                  std::to_string(e) + " " + std::to_string(m.length));
    }
    r.endpoints.push_back(m);
  }
  return r;
}

std::vector<std::size_t> Engine::reaching(const Memory& local, const RemoteRegion& remote) const {
  std::vector<std::size_t> out;
  for (std::size_t e = 0; e < eps_.size() && e < remote.endpoints.size(); ++e)
    if (local.region_on(e) && remote.endpoints[e].length == remote.length) out.push_back(e);
  return out;
}

Handle Engine::submit(std::span<const TransferRequest> batch,
                      std::optional<std::uint64_t> notify_tag) {
  if (!failure_.empty()) throw Error(failure_);
  if (batch.empty()) throw UsageError("transfer: an empty batch");
  if (batch.size() > o_.max_batch)
    throw UsageError("transfer: a batch of " + std::to_string(batch.size()) +
                     " transfers is above the engine's max_batch (" + std::to_string(o_.max_batch) +
                     ")");
  const Handle h = next_handle_++;
  Batch b;
  b.notify_tag = notify_tag;
  std::vector<Posting> ops;
  // Counted and dealt here, kept only once the whole batch is taken.
  std::vector<std::uint64_t> bytes(eps_.size(), 0), operations(eps_.size(), 0);
  std::size_t turn = next_ep_;
  // Every entry checked before anything is planned: a refused batch posts nothing.
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const TransferRequest& r = batch[i];
    auto bad = [&](const std::string& why) {
      return UsageError("transfer: entry " + std::to_string(i) + " of the batch " + why);
    };
    if (!r.local || !r.remote) throw bad("names no local or no remote memory");
    if (r.length == 0) throw bad("moves 0 bytes");
    if (r.direction != Direction::write && r.direction != Direction::read)
      throw bad("has no direction");
    if (r.local_offset > r.local->size() || r.length > r.local->size() - r.local_offset)
      throw bad("reaches " + range_text(r.local_offset, r.length) + " of a local memory of " +
                std::to_string(r.local->size()) + " bytes");
    if (r.remote_offset > r.remote->length || r.length > r.remote->length - r.remote_offset)
      throw bad("reaches " + range_text(r.remote_offset, r.length) + " of rank " +
                std::to_string(r.remote->peer) + "'s memory of " +
                std::to_string(r.remote->size()) + " bytes");
    if (r.remote->peer < 0 || r.remote->peer >= boot_.size() || r.remote->peer == boot_.rank())
      throw bad("names rank " + std::to_string(r.remote->peer) + " as its peer");
    if (notify_tag && b.notify_peer >= 0 && r.remote->peer != b.notify_peer)
      throw bad("goes to rank " + std::to_string(r.remote->peer) +
                ", another peer than the batch's notification's");
    if (released_there_.count({r.remote->peer, r.remote->id}))
      throw bad("reaches memory " + std::to_string(r.remote->id) + " of rank " +
                std::to_string(r.remote->peer) + ", which rank " + std::to_string(r.remote->peer) +
                " released");
    if (reaching(*r.local, *r.remote).empty())
      throw bad("names memories that no endpoint of this engine reaches both of");
    b.notify_peer = r.remote->peer;
    if (std::find(b.keep.begin(), b.keep.end(), r.local) == b.keep.end()) b.keep.push_back(r.local);
  }
  // Consecutive entries contiguous on both sides (the same memories, the same direction) go as
  // one transfer (transfer_merge.h), which is then cut like any other.
  for (const detail::Run& run : detail::contiguous_runs(batch, o_.merge_contiguous)) {
    const TransferRequest& r = batch[run.first];
    const std::vector<std::size_t> eps = reaching(*r.local, *r.remote);
    // One part per endpoint that reaches both memories (page-aligned cuts), or the whole
    // transfer on the next of them in turn; each part in operations of at most max_op_.
    const std::size_t parts = run.length >= o_.stripe_min ? eps.size() : 1;
    const std::uint64_t per = ((run.length + parts - 1) / parts + 4095) / 4096 * 4096;
    for (std::uint64_t at = 0, k = 0; at < run.length; ++k) {
      const std::size_t e = parts > 1 ? eps[k] : eps[turn++ % eps.size()];
      const std::uint64_t part = std::min<std::uint64_t>(per, run.length - at);
      for (std::uint64_t done = 0; done < part;) {
        const std::size_t n =
            static_cast<std::size_t>(std::min<std::uint64_t>(max_op_, part - done));
        ops.push_back({h, r.remote->peer, r.remote->id, e,
                       r.local->data() + run.local_offset + at + done,
                       r.local->region_on(e)->desc(), r.remote->endpoints[e],
                       run.remote_offset + at + done, n, r.direction});
        done += n;
        ++operations[e];
      }
      bytes[e] += part;
      const bool fenced = std::any_of(b.fences.begin(), b.fences.end(),
                                      [e](const Posting& f) { return f.ep == e; });
      if (notify_tag && r.direction == Direction::write && e != 0 && !fenced)
        b.fences.push_back({h, r.remote->peer, r.remote->id, e, eps_[e].fence->data(),
                            eps_[e].fence->desc(), r.remote->endpoints[e], run.remote_offset + at,
                            1, Direction::read});
      at += part;
    }
  }
  b.queued = ops.size();
  b.notify_sent = b.notify_done = !notify_tag;
  for (std::size_t e = 0; e < eps_.size(); ++e) {
    posted_bytes_[e] += bytes[e];
    posted_ops_[e] += operations[e];
  }
  next_ep_ = turn;
  batches_.emplace(h, std::move(b));
  for (const Posting& op : ops) eps_[op.ep].queue.push_back(op);
  progress();
  return h;
}

Engine::Batch& Engine::batch(Handle h) {
  auto it = batches_.find(h);
  if (it == batches_.end()) throw UsageError("transfer: unknown handle " + std::to_string(h));
  return it->second;
}

const Engine::Batch& Engine::batch(Handle h) const {
  auto it = batches_.find(h);
  if (it == batches_.end()) throw UsageError("transfer: unknown handle " + std::to_string(h));
  return it->second;
}

bool Engine::finished(const Batch& b) const noexcept {
  return b.queued == 0 && b.in_flight == 0 && b.notify_done;
}

Status Engine::test(Handle h) {
  progress();
  Batch& b = batch(h);
  if (!b.error.empty()) return b.in_flight == 0 ? Status::failed : Status::again;
  if (b.cancelled) return b.in_flight == 0 ? Status::closed : Status::again;
  return finished(b) ? Status::ok : Status::again;
}

std::size_t Engine::pending() const noexcept {
  std::size_t n = 0;
  for (const Endpoint& ep : eps_) n += ep.outstanding + ep.queue.size();
  return n;
}

Status Engine::wait(Handle h) {
  BoundedWait watch(o_.peer_timeout, &boot_);
  for (;;) {
    const std::size_t before = pending();
    const Status s = test(h);
    if (s != Status::again) return s;
    if (pending() != before) {
      watch.reset();
      continue;
    }
    if (auto ended = spin(watch, "waiting for a batch")) fail(ended->what());
  }
}

void Engine::cancel(Handle h) {
  Batch& b = batch(h);
  if (finished(b) || b.cancelled) return;
  b.cancelled = true;
  for (Endpoint& ep : eps_)
    std::erase_if(ep.queue, [h](const Posting& op) { return op.handle == h; });
  b.fences.clear();
  b.queued = 0;
  b.notify_sent = b.notify_done = true;  // a cancelled batch tells its peer nothing
}

const std::string& Engine::error(Handle h) const { return batch(h).error; }

bool Engine::released(const RemoteRegion& r) {
  progress();
  return released_there_.count({r.peer, r.id}) > 0;
}

void Engine::release(Handle h) {
  Batch& b = batch(h);
  if (b.in_flight != 0 || (b.error.empty() && !b.cancelled && !finished(b)))
    throw UsageError("transfer: release of handle " + std::to_string(h) + " while it runs");
  batches_.erase(h);
}

bool Engine::poll_notification(Notification* out) {
  progress();
  if (arrived_.empty()) return false;
  *out = arrived_.front();
  arrived_.pop_front();
  return true;
}

Notification Engine::wait_notification() {
  BoundedWait watch(o_.peer_timeout, &boot_);
  for (Notification n;;) {
    if (poll_notification(&n)) return n;
    if (!failure_.empty()) throw Error(failure_);
    if (auto ended = spin(watch, "waiting for a notification")) throw *ended;
  }
}

std::optional<PeerError> Engine::spin(BoundedWait& watch, const char* what) {
  switch (watch.spin()) {
    case BoundedWait::State::waiting: return std::nullopt;
    case BoundedWait::State::peer_failed: return peer_failure_error(&boot_, "transfer", what);
    case BoundedWait::State::timed_out:
      return no_progress_error(&boot_, o_.peer_timeout, "transfer", what);
  }
  return std::nullopt;
}

void Engine::progress() {
  if (!failure_.empty()) return;
  // Reading a completion queue drives the provider (libfabric's progress is the endpoint's,
  // whichever queue is read; local has none to drive): reaping both queues is the progress, and
  // a separate Transport::progress() would only add two calls (on tcp two poll(2) syscalls) to
  // every spin of a wait.
  for (std::size_t e = 0; e < eps_.size(); ++e) {
    reap_tx(e);
    reap_rx(e);
  }
  for (auto& [h, b] : batches_) {
    if (b.notify_sent || !b.error.empty() || b.queued != 0 || b.in_flight != 0) continue;
    if (b.fences.empty()) {
      post_notify(h, b);
      continue;
    }
    // Every transfer completed here: the fences, then (once they completed) the notification.
    for (const Posting& f : b.fences) eps_[f.ep].queue.push_back(f);
    b.queued += b.fences.size();
    b.fences.clear();
  }
  announce_releases();
  for (Endpoint& ep : eps_) post_queued(ep);
}

void Engine::announce_releases() {
  for (std::uint32_t id : std::exchange(*released_here_, {})) {
    auto it = described_.find(id);
    if (it == described_.end()) continue;
    for (int peer : it->second) to_announce_.emplace_back(peer, id);
    described_.erase(it);
  }
  while (!to_announce_.empty() && !free_tx_.empty()) {
    const auto [peer, id] = to_announce_.front();
    const std::uint32_t slot = free_tx_.back();
    NotificationWire w;
    w.magic = NotificationWire::kReleasedMagic;
    w.sender = boot_.rank();
    w.tag = id;
    std::byte* buf = tx_->data() + slot * sizeof w;
    std::memcpy(buf, &w, sizeof w);
    // Handle 0 is no batch's: the completion only frees the slot.
    const std::uint64_t ctx = std::uint64_t{slot} << 1 | kNotifyBit;
    const Status s = t_.post_send(peer, buf, sizeof w, tx_->desc(), ctx, kSignal);
    if (s == Status::again) return;
    to_announce_.pop_front();
    if (s != Status::ok) continue;  // the peer is gone or going: nothing to tell
    free_tx_.pop_back();
  }
}

void Engine::post_queued(Endpoint& ep) {
  while (!ep.queue.empty() && ep.outstanding < o_.max_outstanding && failure_.empty()) {
    const Posting& op = ep.queue.front();
    if (released_there_.count({op.peer, op.remote_id})) {
      abandon(op.handle, "transfer: rank " + std::to_string(op.peer) + " released its memory " +
                             std::to_string(op.remote_id) +
                             " before this batch's transfers to it were posted");
      continue;
    }
    const std::uint64_t ctx = op.handle << 1;
    const Status s = op.direction == Direction::write
                         ? ep.t->post_write(op.peer, op.local, op.length, op.desc, op.remote,
                                            op.remote_offset, ctx, kSignal)
                         : ep.t->post_read(op.peer, op.local, op.length, op.desc, op.remote,
                                           op.remote_offset, ctx, kSignal);
    if (s == Status::again) return;
    Batch& b = batch(op.handle);
    --b.queued;
    if (s != Status::ok) {
      abandon(op.handle, "transfer: posting a " +
                             std::string(op.direction == Direction::write ? "write" : "read") +
                             " to rank " + std::to_string(op.peer) + ": " + ep.t->last_error());
      continue;
    }
    ++b.in_flight;
    ++ep.outstanding;
    ep.queue.pop_front();
  }
}

void Engine::abandon(Handle h, std::string error) {
  Batch& b = batch(h);
  b.error = std::move(error);
  for (Endpoint& ep : eps_)
    std::erase_if(ep.queue, [h](const Posting& o) { return o.handle == h; });
  b.fences.clear();
  b.queued = 0;
}

void Engine::post_notify(Handle h, Batch& b) {
  if (free_tx_.empty()) return;  // a slot frees when an earlier notification completes
  const std::uint32_t slot = free_tx_.back();
  NotificationWire w;
  w.sender = boot_.rank();
  w.tag = *b.notify_tag;
  std::byte* buf = tx_->data() + slot * sizeof w;
  std::memcpy(buf, &w, sizeof w);
  const std::uint64_t ctx = h << 17 | std::uint64_t{slot} << 1 | kNotifyBit;
  const Status s = t_.post_send(b.notify_peer, buf, sizeof w, tx_->desc(), ctx, kSignal);
  if (s == Status::again) return;
  if (s != Status::ok) {
    b.error = "transfer: sending the notification to rank " + std::to_string(b.notify_peer) + ": " +
              t_.last_error();
    return;
  }
  free_tx_.pop_back();
  b.notify_sent = true;
}

void Engine::reap_tx(std::size_t e) {
  Endpoint& ep = eps_[e];
  const std::string error = drain(*ep.t, &Transport::poll_tx, [&](const Completion& done) {
    const std::uint64_t ctx = done.context;
    if (ctx & kNotifyBit) {  // notifications go on the first endpoint only
      if (e != 0) {
        fail("transfer: endpoint " + std::to_string(e) + " completed a send it never posted");
        return false;
      }
      free_tx_.push_back(static_cast<std::uint32_t>(ctx >> 1 & (kMaxSlots - 1)));
      if (auto it = batches_.find(ctx >> 17); it != batches_.end()) it->second.notify_done = true;
      return true;
    }
    if (ep.outstanding > 0) --ep.outstanding;
    if (auto it = batches_.find(ctx >> 1); it != batches_.end() && it->second.in_flight > 0)
      --it->second.in_flight;
    return true;
  });
  if (!error.empty()) fail(error);
}

bool Engine::post_receive(std::size_t slot) {
  // notification_slots receives per peer (connected endpoints take receives per peer).
  const int peer = static_cast<int>(slot / o_.notification_slots);
  return t_.post_recv(peer, rx_->data() + slot * sizeof(NotificationWire), sizeof(NotificationWire),
                      rx_->desc(), slot) == Status::ok;
}

void Engine::reap_rx(std::size_t e) {
  const std::string error = drain(*eps_[e].t, &Transport::poll_rx, [&](const Completion& done) {
    if (done.kind != CompletionKind::recv) return true;
    if (e != 0) {  // notifications come on the first endpoint; no receive is posted elsewhere
      fail("transfer: endpoint " + std::to_string(e) + " received a message");
      return false;
    }
    if (done.context >= rx_slots_) {
      fail("transfer: a receive completed with a context the engine never posted");
      return false;
    }
    NotificationWire w;
    std::memcpy(&w, rx_->data() + done.context * sizeof w, sizeof w);
    const bool released = w.magic == NotificationWire::kReleasedMagic;
    if (done.length != sizeof w || (w.magic != NotificationWire::kMagic && !released) ||
        w.sender < 0 || w.sender >= boot_.size() || w.sender == boot_.rank() ||
        (released && w.tag > UINT32_MAX)) {
      fail("transfer: a malformed notification arrived (" + std::to_string(done.length) +
           " bytes)");
      return false;
    }
    if (released)
      released_there_.insert({w.sender, static_cast<std::uint32_t>(w.tag)});
    else
      arrived_.push_back({w.sender, w.tag});
    if (post_receive(done.context)) return true;
    fail("transfer: re-posting a notification receive: " + t_.last_error());
    return false;
  });
  if (!error.empty()) fail(error);
}

void Engine::fail(const std::string& why) {
  if (failure_.empty()) failure_ = why;
  for (auto& [h, b] : batches_) {
    if (finished(b) || b.cancelled) continue;
    if (b.error.empty()) b.error = why;
    b.queued = 0;
    b.in_flight = 0;
    b.fences.clear();
  }
  for (Endpoint& ep : eps_) ep.queue.clear();
}

}  // namespace fabflow::bulk
