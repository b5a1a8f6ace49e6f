// Fault injection on the data path: posts, completion delivery and received bytes.
#include "transport/fault/fault_transport.h"

#include <algorithm>
#include <array>
#include <utility>

namespace fabflow {
namespace {

constexpr std::size_t kPollBatch = 64;

void check_probability(double p, const char* knob) {
  if (!(p >= 0 && p <= 1))
    throw UsageError(std::string("fault plan: ") + knob + " must be within [0, 1], not " +
                     std::to_string(p));
}

}  // namespace

FaultTransport::FaultTransport(std::unique_ptr<Transport> inner, FaultPlan plan)
    : ForwardingTransport(std::move(inner), DirectAccess::hide),
      plan_(std::move(plan)),
      rng_(plan_.seed) {
  refresh_caps();
  check_probability(plan_.again_probability, "again_probability");
  check_probability(plan_.corrupt_recv_probability, "corrupt_recv_probability");
  if (plan_.kill_after_posts && !plan_.on_kill)
    throw UsageError("fault plan: kill_after_posts needs an on_kill callback");
  name_ = "fault(" + std::string(inner_->name()) + ")";
  if (plan_.fail_after_posts)
    fail_message_ =
        "fault: injected failure after " + std::to_string(*plan_.fail_after_posts) + " posts";
}

template <class Forward>
Status FaultTransport::post(Forward&& forward) noexcept {
  if (plan_.fail_after_posts && counters_.posts >= *plan_.fail_after_posts) {
    ++counters_.failures;
    error_ = fail_message_;
    return Status::failed;
  }
  if (plan_.again_probability > 0 && uniform() < plan_.again_probability) {
    ++counters_.agains;
    return Status::again;
  }
  Status s = forward();
  if (s == Status::failed) error_ = inner_->last_error();
  if (s != Status::ok) return s;
  ++counters_.posts;
  if (plan_.kill_after_posts && counters_.posts == *plan_.kill_after_posts) plan_.on_kill();
  return s;
}

Status FaultTransport::post_send(int peer, const void* buf, std::size_t len, void* desc,
                                 std::uint64_t context, unsigned flags) noexcept {
  return post([&] { return inner_->post_send(peer, buf, len, desc, context, flags); });
}

Status FaultTransport::post_recv(int peer, void* buf, std::size_t len, void* desc,
                                 std::uint64_t context) noexcept {
  return post([&] {
    Status s = inner_->post_recv(peer, buf, len, desc, context);
    if (s == Status::ok && plan_.corrupt_recv_probability > 0)
      recvs_.emplace(context, RecvBuffer{static_cast<std::byte*>(buf), len});
    return s;
  });
}

// Not corrupted on completion: a multi-receive buffer's messages land at offsets only the
// completions name.
Status FaultTransport::post_recv_multi(int peer, void* buf, std::size_t len, void* desc,
                                       std::size_t min_free, std::uint64_t context) noexcept {
  return post([&] { return inner_->post_recv_multi(peer, buf, len, desc, min_free, context); });
}

Status FaultTransport::post_write(int peer, const void* buf, std::size_t len, void* desc,
                                  const RemoteMemory& dst, std::uint64_t offset,
                                  std::uint64_t context, unsigned flags,
                                  std::optional<std::uint64_t> imm) noexcept {
  return post([&] {
    const bool corrupt = (flags & kSignal) && corrupt_this_rma(len);
    std::byte* src = static_cast<std::byte*>(const_cast<void*>(buf));
    const std::size_t at = corrupt ? rng_() % len : 0;
    const std::byte flip = static_cast<std::byte>(1 + rng_() % 255);
    if (corrupt) src[at] ^= flip;
    const Status s = inner_->post_write(peer, buf, len, desc, dst, offset, context, flags, imm);
    if (corrupt && s != Status::ok) src[at] ^= flip;
    if (s == Status::ok && len > 0) ++counters_.rma_ops;
    if (corrupt && s == Status::ok) rma_ = CorruptRma{context, src + at, flip, true};
    return s;
  });
}

Status FaultTransport::post_read(int peer, void* buf, std::size_t len, void* desc,
                                 const RemoteMemory& src, std::uint64_t offset,
                                 std::uint64_t context, unsigned flags) noexcept {
  return post([&] {
    const bool corrupt = (flags & kSignal) && corrupt_this_rma(len);
    const Status s = inner_->post_read(peer, buf, len, desc, src, offset, context, flags);
    if (s == Status::ok && len > 0) ++counters_.rma_ops;
    if (corrupt && s == Status::ok)
      rma_ = CorruptRma{context, static_cast<std::byte*>(buf) + rng_() % len,
                        static_cast<std::byte>(1 + rng_() % 255), false};
    return s;
  });
}

Status FaultTransport::copy_peer(int peer, PeerCopy dir, void* buf, std::uint64_t addr,
                                 std::size_t len) noexcept {
  const bool corrupt = corrupt_this_rma(len);
  std::byte* bytes = static_cast<std::byte*>(buf);
  const std::size_t at = corrupt ? rng_() % len : 0;
  const std::byte flip = static_cast<std::byte>(1 + rng_() % 255);
  if (corrupt && dir == PeerCopy::write) bytes[at] ^= flip;
  const Status s = inner_->copy_peer(peer, dir, buf, addr, len);
  if (corrupt) {
    bytes[at] ^= flip;  // a write's source restored, a read's landed byte flipped
    if (s == Status::ok) {
      ++counters_.corruptions;
      plan_.corrupt_rma_op.reset();
    }
    if (s != Status::ok && dir == PeerCopy::read) bytes[at] ^= flip;
  }
  if (s == Status::ok && len > 0) ++counters_.rma_ops;
  if (s == Status::failed) error_ = inner_->last_error();
  return s;
}

bool FaultTransport::corrupt_this_rma(std::size_t len) noexcept {
  return len > 0 && plan_.corrupt_rma_op && !rma_ && counters_.rma_ops + 1 >= *plan_.corrupt_rma_op;
}

Status FaultTransport::post_atomic(int peer, AtomicOp op, std::uint64_t operand,
                                   std::uint64_t compare, std::uint64_t* result, void* result_desc,
                                   const RemoteMemory& dst, std::uint64_t offset,
                                   std::uint64_t context, unsigned flags) noexcept {
  return post([&] {
    return inner_->post_atomic(peer, op, operand, compare, result, result_desc, dst, offset,
                               context, flags);
  });
}

int FaultTransport::poll(Queue& queue, bool rx, std::span<Completion> out) noexcept {
  const std::uint64_t now = ++queue.polls;
  std::array<Completion, kPollBatch> fresh;
  int n = rx ? inner_->poll_rx(fresh) : inner_->poll_tx(fresh);
  if (n < 0) {
    error_ = inner_->last_error();
    if (rx) recvs_.clear();  // which recv failed is unknown: never touch those buffers again
    return -1;
  }
  for (int i = 0; i < n; ++i)
    queue.held.push_back({fresh[static_cast<std::size_t>(i)], now + plan_.delay_completions});
  if (plan_.delay_completions > 0) counters_.delayed += static_cast<std::uint64_t>(n);

  std::size_t k = 0;
  while (k < out.size() && !queue.held.empty() && queue.held.front().due <= now) {
    out[k++] = queue.held.front().completion;
    queue.held.pop_front();
  }
  reorder(out.first(k));
  if (!rx && rma_)
    for (const Completion& c : out.first(k)) deliver_rma(c);
  if (rx && plan_.corrupt_recv_probability > 0)
    for (const Completion& c : out.first(k)) deliver_recv(c);
  return static_cast<int>(k);
}

void FaultTransport::reorder(std::span<Completion> batch) noexcept {
  const std::size_t window = plan_.reorder_window;
  if (window < 2) return;
  for (std::size_t at = 0; at < batch.size(); at += window) {
    auto run = batch.subspan(at, std::min(window, batch.size() - at));
    perm_.resize(run.size());
    for (std::size_t i = 0; i < run.size(); ++i) perm_[i] = i;
    for (std::size_t i = run.size(); i > 1; --i) std::swap(perm_[i - 1], perm_[rng_() % i]);
    scratch_.assign(run.begin(), run.end());
    for (std::size_t i = 0; i < run.size(); ++i) {
      run[i] = scratch_[perm_[i]];
      if (perm_[i] != i) ++counters_.reordered;
    }
  }
}

void FaultTransport::deliver_recv(const Completion& c) noexcept {
  bool consumed = c.kind == CompletionKind::recv ||
                  (c.kind == CompletionKind::remote_write && caps().rx_cq_data_consumes_recv);
  if (!consumed) return;
  auto it = recvs_.find(c.context);
  if (it == recvs_.end()) return;
  RecvBuffer buf = it->second;
  recvs_.erase(it);
  std::size_t landed = std::min<std::size_t>(c.length, buf.size);
  if (c.kind != CompletionKind::recv || landed == 0) return;
  if (uniform() >= plan_.corrupt_recv_probability) return;
  buf.data[rng_() % landed] ^= static_cast<std::byte>(1 + rng_() % 255);
  ++counters_.corruptions;
}

void FaultTransport::deliver_rma(const Completion& c) noexcept {
  if (!rma_ || rma_->context != c.context ||
      (c.kind != CompletionKind::write && c.kind != CompletionKind::read))
    return;
  *rma_->byte ^= rma_->flip;  // a write's source restored, a read's landed byte flipped
  ++counters_.corruptions;
  plan_.corrupt_rma_op.reset();
  rma_.reset();
}

std::unique_ptr<Transport> make_fault_transport(std::unique_ptr<Transport> inner, FaultPlan plan) {
  return std::make_unique<FaultTransport>(std::move(inner), std::move(plan));
}

const FaultCounters* fault_counters(const Transport& transport) noexcept {
  auto* fault = dynamic_cast<const FaultTransport*>(&transport);
  return fault ? &fault->counters() : nullptr;
}

}  // namespace fabflow
