// The transfer engine (fabflow/bulk/transfer.h): batches split into operations queued here and
// posted up to max_outstanding at a time; a batch's notification goes out once every one of its
// operations has completed at this rank. docs/transfer-engine.md.
#include <fabflow/bootstrap.h>
#include <fabflow/bulk/transfer.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "bulk/descriptor.h"
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

Engine::Engine(Transport& transport, Bootstrap& boot, EngineOptions options)
    : t_(transport), boot_(boot), o_(options) {
  if (o_.max_outstanding == 0 || o_.max_outstanding >= kMaxSlots)
    throw UsageError("transfer: max_outstanding must be in 1..65535");
  if (o_.notification_slots == 0 || o_.notification_slots > 65536)
    throw UsageError("transfer: notification_slots must be in 1..65536");
  if (auto m = missing_op(t_.caps(), required_ops())) throw UsageError("transfer: " + m->why);
  const Capabilities& caps = t_.caps();
  max_op_ = std::min(caps.max_msg_size, caps.max_rma_size ? caps.max_rma_size : caps.max_msg_size);
  if (max_op_ == 0) max_op_ = std::size_t{1} << 30;
  max_op_ = std::min(max_op_, std::size_t{1} << 30);
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
  while (outstanding_ > 0 && failure_.empty()) {
    const std::size_t before = outstanding_;
    reap_tx();
    if (outstanding_ != before) {
      watch.reset();
    } else if (watch.spin() != BoundedWait::State::waiting) {
      break;
    }
  }
}

std::vector<Op> Engine::required_ops() { return {Op::send, Op::write, Op::read}; }

std::shared_ptr<Memory> Engine::allocate(std::size_t len) {
  if (len == 0) throw UsageError("transfer: allocate(0)");
  return std::shared_ptr<Memory>(new Memory(t_.allocate(len, kAllAccess), next_memory_++));
}

std::shared_ptr<Memory> Engine::register_memory(void* addr, std::size_t len) {
  if (!addr || len == 0) throw UsageError("transfer: register_memory of no memory");
  return std::shared_ptr<Memory>(
      new Memory(t_.register_memory(addr, len, kAllAccess), next_memory_++));
}

std::vector<std::byte> Engine::describe(const Memory& m, int peer) const {
  if (peer < 0 || peer >= boot_.size() || peer == boot_.rank())
    throw UsageError("transfer: describe for rank " + std::to_string(peer) +
                     ", not another rank of " + std::to_string(boot_.size()));
  return detail::encode_descriptor(boot_.rank(), peer, m.id(), m.size(),
                                   t_.export_key(m.mr_->registered()));
}

RemoteRegion Engine::import(int peer, std::span<const std::byte> descriptor) {
  if (peer < 0 || peer >= boot_.size() || peer == boot_.rank())
    throw UsageError("transfer: import from rank " + std::to_string(peer) +
                     ", not another rank of " + std::to_string(boot_.size()));
  const auto d = detail::decode_descriptor(descriptor, peer, boot_.rank());
  RemoteRegion r;
  r.peer = peer;
  r.id = d.memory;
  r.memory = t_.import_key(peer, d.key);
  if (r.memory.length != d.length)
    throw PeerError(peer, "transfer: the descriptor from rank " + std::to_string(peer) + " gives " +
                              std::to_string(d.length) + " bytes, its key " +
                              std::to_string(r.memory.length));
  return r;
}

Handle Engine::submit(std::span<const TransferRequest> batch,
                      std::optional<std::uint64_t> notify_tag) {
  if (!failure_.empty()) throw Error(failure_);
  if (batch.empty()) throw UsageError("transfer: an empty batch");
  const Handle h = next_handle_++;
  Batch b;
  b.notify_tag = notify_tag;
  std::vector<Posting> ops;
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
    if (!r.remote->memory.contains(r.remote_offset, r.length))
      throw bad("reaches " + range_text(r.remote_offset, r.length) + " of rank " +
                std::to_string(r.remote->peer) + "'s memory of " +
                std::to_string(r.remote->size()) + " bytes");
    if (r.remote->peer < 0 || r.remote->peer >= boot_.size() || r.remote->peer == boot_.rank())
      throw bad("names rank " + std::to_string(r.remote->peer) + " as its peer");
    if (notify_tag && b.notify_peer >= 0 && r.remote->peer != b.notify_peer)
      throw bad("goes to rank " + std::to_string(r.remote->peer) +
                ", another peer than the batch's notification's");
    b.notify_peer = r.remote->peer;
    if (std::find(b.keep.begin(), b.keep.end(), r.local) == b.keep.end()) b.keep.push_back(r.local);
    for (std::uint64_t done = 0; done < r.length;) {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(max_op_, r.length - done));
      ops.push_back({h, r.remote->peer, r.local->data() + r.local_offset + done,
                     r.local->mr_->desc(), r.remote->memory, r.remote_offset + done, n,
                     r.direction});
      done += n;
    }
  }
  b.queued = ops.size();
  b.notify_sent = b.notify_done = !notify_tag;
  batches_.emplace(h, std::move(b));
  queue_.insert(queue_.end(), ops.begin(), ops.end());
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

Status Engine::wait(Handle h) {
  BoundedWait watch(o_.peer_timeout, &boot_);
  for (;;) {
    const std::size_t before = outstanding_ + queue_.size();
    const Status s = test(h);
    if (s != Status::again) return s;
    if (outstanding_ + queue_.size() != before) {
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
  std::erase_if(queue_, [h](const Posting& op) { return op.handle == h; });
  b.queued = 0;
  b.notify_sent = b.notify_done = true;  // a cancelled batch tells its peer nothing
}

const std::string& Engine::error(Handle h) const { return batch(h).error; }

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
  t_.progress();
  reap_tx();
  reap_rx();
  post_queued();
  for (auto& [h, b] : batches_)
    if (!b.notify_sent && b.error.empty() && b.queued == 0 && b.in_flight == 0) post_notify(h, b);
}

void Engine::post_queued() {
  while (!queue_.empty() && outstanding_ < o_.max_outstanding && failure_.empty()) {
    const Posting& op = queue_.front();
    const std::uint64_t ctx = op.handle << 1;
    const Status s = op.direction == Direction::write
                         ? t_.post_write(op.peer, op.local, op.length, op.desc, op.remote,
                                         op.remote_offset, ctx, kSignal)
                         : t_.post_read(op.peer, op.local, op.length, op.desc, op.remote,
                                        op.remote_offset, ctx, kSignal);
    if (s == Status::again) return;
    Batch& b = batch(op.handle);
    --b.queued;
    if (s != Status::ok) {
      b.error = "transfer: posting a " +
                std::string(op.direction == Direction::write ? "write" : "read") + " to rank " +
                std::to_string(op.peer) + ": " + t_.last_error();
      std::erase_if(queue_, [h = op.handle](const Posting& o) { return o.handle == h; });
      b.queued = 0;
      continue;
    }
    ++b.in_flight;
    ++outstanding_;
    queue_.pop_front();
  }
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

void Engine::reap_tx() {
  const std::string error = drain(t_, &Transport::poll_tx, [this](const Completion& done) {
    const std::uint64_t ctx = done.context;
    if (ctx & kNotifyBit) {
      free_tx_.push_back(static_cast<std::uint32_t>(ctx >> 1 & (kMaxSlots - 1)));
      if (auto it = batches_.find(ctx >> 17); it != batches_.end()) it->second.notify_done = true;
      return true;
    }
    --outstanding_;
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

void Engine::reap_rx() {
  const std::string error = drain(t_, &Transport::poll_rx, [this](const Completion& done) {
    if (done.kind != CompletionKind::recv) return true;
    if (done.context >= rx_slots_) {
      fail("transfer: a receive completed with a context the engine never posted");
      return false;
    }
    NotificationWire w;
    std::memcpy(&w, rx_->data() + done.context * sizeof w, sizeof w);
    if (done.length != sizeof w || w.magic != NotificationWire::kMagic || w.sender < 0 ||
        w.sender >= boot_.size() || w.sender == boot_.rank()) {
      fail("transfer: a malformed notification arrived (" + std::to_string(done.length) +
           " bytes)");
      return false;
    }
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
  }
  queue_.clear();
}

}  // namespace fabflow::bulk
