// The dispatcher model: worker threads hand requests to the one thread that drives the
// channel. A worker's local mailbox is its slot's request buffer (registered memory, so the
// dispatcher posts it without a copy) plus a state word that moves the slot between threads:
//   free -(worker)-> ready -(dispatcher)-> in flight -(dispatcher)-> answered
//   -(worker)-> released -(dispatcher)-> free
// Each transition is a release store by the thread giving the slot up and an acquire load by
// the one taking it, so payloads and responses need no other synchronisation.
#include <fabflow/rr.h>

namespace fabflow::rr {

namespace {
enum : std::uint32_t { kFree, kReady, kInFlight, kAnswered, kReleased };
}

struct DispatcherRequester::Slot {
  std::atomic<std::uint32_t> state{kFree};
  int responder = 0;    // written by the worker before ready
  std::size_t len = 0;  // written by the worker before ready
  Response response;    // written by the dispatcher before answered
};

DispatcherRequester::DispatcherRequester(Requester& inner, unsigned workers)
    : inner_(inner), per_worker_(workers ? inner.slots() / workers : 0), workers_(workers) {
  if (workers == 0 || per_worker_ == 0)
    throw UsageError("rr: a dispatcher needs at least one slot per worker");
  slots_ = std::make_unique<Slot[]>(inner.slots());
  bells_ = std::make_unique<std::atomic<std::uint32_t>[]>(workers);
}

DispatcherRequester::~DispatcherRequester() = default;

DispatcherRequester::Slot& DispatcherRequester::slot(unsigned w, unsigned k) noexcept {
  return slots_[w * per_worker_ + k];
}

std::span<std::byte> DispatcherRequester::request_buffer(unsigned w, unsigned k) noexcept {
  return inner_.request_buffer(w * per_worker_ + k);
}

Status DispatcherRequester::hand_over(unsigned w, unsigned k, int responder,
                                      std::size_t len) noexcept {
  Slot& s = slot(w, k);
  // A released slot is free again only once the dispatcher recycled its response buffer.
  if (s.state.load(std::memory_order_acquire) != kFree) return Status::again;
  s.responder = responder;
  s.len = len;
  s.state.store(kReady, std::memory_order_release);
  return Status::ok;
}

std::optional<std::span<const std::byte>> DispatcherRequester::response(unsigned w,
                                                                        unsigned k) noexcept {
  Slot& s = slot(w, k);
  if (s.state.load(std::memory_order_acquire) != kAnswered) return std::nullopt;
  return s.response.data;
}

void DispatcherRequester::release(unsigned w, unsigned k) noexcept {
  slot(w, k).state.store(kReleased, std::memory_order_release);
}

bool DispatcherRequester::failed() const noexcept {
  return failed_.load(std::memory_order_acquire);
}

std::uint32_t DispatcherRequester::doorbell(unsigned w) const noexcept {
  return bells_[w].load(std::memory_order_acquire);
}

void DispatcherRequester::wait_doorbell(unsigned w, std::uint32_t seen) const noexcept {
  bells_[w].wait(seen, std::memory_order_acquire);
}

void DispatcherRequester::ring(unsigned w) noexcept {
  bells_[w].fetch_add(1, std::memory_order_release);
  bells_[w].notify_one();
}

void DispatcherRequester::abort() noexcept {
  failed_.store(true, std::memory_order_release);
  for (unsigned w = 0; w < workers_; ++w) ring(w);
}

Status DispatcherRequester::run_once() noexcept {
  bool moved = false;
  const unsigned n = inner_.slots();
  for (unsigned i = 0; i < n; ++i) {
    Slot& s = slots_[i];
    std::uint32_t st = s.state.load(std::memory_order_acquire);
    if (st == kReady) {
      Status r = inner_.submit(i, s.responder, s.len);
      if (r == Status::again) continue;
      if (r != Status::ok) break;
      s.state.store(kInFlight, std::memory_order_relaxed);
      moved = true;
    } else if (st == kReleased) {
      inner_.release(s.response);
      s.state.store(kFree, std::memory_order_release);
      moved = true;
    }
  }
  Response r;
  Status p;
  while (inner_.error().empty() && (p = inner_.poll(&r)) == Status::ok) {
    Slot& s = slots_[r.slot];  // the channel checked that this slot was in flight
    s.response = r;
    s.state.store(kAnswered, std::memory_order_release);
    ring(r.slot / per_worker_);
    moved = true;
  }
  if (!inner_.error().empty()) {
    abort();
    return Status::failed;
  }
  return moved ? Status::ok : Status::empty;
}

}  // namespace fabflow::rr
