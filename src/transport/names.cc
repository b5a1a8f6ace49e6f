// The capability checks and helpers shared by every transport (the enums' names live in
// their tables in transport.h).
#include <fabflow/transport.h>

#include <rdma/fabric.h>

#include <sched.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

namespace fabflow {
namespace {

// Polls until a completion arrives or the timeout passes: spins briefly, then yields, then
// sleeps in growing steps (up to 1 ms) so an idle waiter costs little CPU.
template <class Poll>
int poll_until(Poll poll, std::chrono::milliseconds timeout) noexcept {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::microseconds nap{1};
  for (unsigned i = 0;; ++i) {
    int n = poll();
    if (n != 0) return n;
    if ((i & 63) != 63) continue;
    if (std::chrono::steady_clock::now() >= deadline) return 0;
    if (i < 4096) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }
}

}  // namespace

namespace {

// Page-aligned memory registered with a transport; frees it after deregistering.
class OwnedRegion final : public MemoryRegion {
 public:
  OwnedRegion(void* mem, std::unique_ptr<MemoryRegion> inner)
      : MemoryRegion(inner->data(), inner->size(), inner->desc()),
        mem_(mem),
        inner_(std::move(inner)) {}
  ~OwnedRegion() override {
    inner_.reset();
    std::free(mem_);
  }
  const MemoryRegion& registered() const noexcept override { return *inner_; }

 private:
  void* mem_;
  std::unique_ptr<MemoryRegion> inner_;
};

}  // namespace

std::unique_ptr<MemoryRegion> Transport::allocate(std::size_t len, unsigned access) {
  constexpr std::size_t kPage = 4096;
  std::size_t rounded = (std::max<std::size_t>(len, 1) + kPage - 1) / kPage * kPage;
  void* mem = std::aligned_alloc(kPage, rounded);
  if (!mem) throw Error("out of memory allocating " + std::to_string(len) + " bytes");
  std::memset(mem, 0, rounded);
  try {
    return std::make_unique<OwnedRegion>(mem, register_memory(mem, len, access));
  } catch (...) {
    std::free(mem);
    throw;
  }
}

int Transport::post_recvs(int peer, std::span<void* const> bufs, std::size_t len, void* desc,
                          std::uint64_t context) noexcept {
  int posted = 0;
  for (void* buf : bufs) {
    const Status s = post_recv(peer, buf, len, desc, context);
    if (s == Status::again) break;
    if (s != Status::ok) return -1;
    ++posted;
  }
  return posted;
}

Status Transport::post_recv_multi(int, void*, std::size_t, void*, std::size_t,
                                  std::uint64_t) noexcept {
  return Status::failed;  // callers check caps().multi_recv first
}

int Transport::poll_rx_in_place(std::span<Completion>) noexcept {
  return -1;  // callers check caps().rx_in_place_max first
}

Status Transport::release_rx(const Completion&) noexcept { return Status::failed; }

std::byte* Transport::map_peer(int, const RemoteMemory&, std::uint64_t, std::size_t) noexcept {
  return nullptr;  // callers check caps().peer_mapping first
}

Status Transport::copy_peer(int, PeerCopy, void*, std::uint64_t, std::size_t) noexcept {
  return Status::failed;  // callers check caps().cross_memory_attach first
}

int Transport::wait_tx(std::span<Completion> out, std::chrono::milliseconds timeout) noexcept {
  return poll_until([&] { return poll_tx(out); }, timeout);
}

int Transport::wait_rx(std::span<Completion> out, std::chrono::milliseconds timeout) noexcept {
  return poll_until([&] { return poll_rx(out); }, timeout);
}

bool Capabilities::supports(Op op) const noexcept {
  switch (op) {
    case Op::send: return true;
    case Op::write:
    case Op::read: return rma;
    case Op::writedata: return rma && cq_data_size >= 4;
    case Op::fadd:
    case Op::cswap: return atomics_u64;
  }
  return false;
}

std::string Capabilities::why_not(Op op) const {
  if (supports(op)) return {};
  const std::string where = provider + " (" + std::string(to_string(endpoint)) + ")";
  switch (op) {
    case Op::write:
    case Op::read: return where + " has no RMA";
    case Op::writedata:
      return rma ? where + " carries no remote CQ data (cq_data_size " +
                       std::to_string(cq_data_size) + ")"
                 : where + " has no RMA";
    case Op::fadd:
    case Op::cswap: return where + " has no u64 fetch-add / compare-swap atomics";
    case Op::send: break;
  }
  return where + " cannot do " + std::string(to_string(op));
}

std::optional<MissingOp> missing_op(const Capabilities& caps, std::span<const Op> ops) {
  for (Op op : ops)
    if (!caps.supports(op)) return MissingOp{op, caps.why_not(op)};
  return std::nullopt;
}

std::size_t largest_rma_operation(const Capabilities& caps) noexcept {
  constexpr std::size_t kCap = std::size_t{1} << 30;
  const std::size_t largest =
      std::min(caps.max_msg_size, caps.max_rma_size ? caps.max_rma_size : caps.max_msg_size);
  return largest > 0 ? std::min(largest, kCap) : kCap;
}

std::size_t rma_operation_size(const Capabilities& caps, std::size_t asked) noexcept {
  const std::size_t wanted = asked > 0 ? asked : caps.rma_preferred_size;
  return wanted > 0 ? std::min(wanted, largest_rma_operation(caps)) : 0;
}

}  // namespace fabflow
