// The fault-injecting transport wrapper behind make_fault_transport (see fabflow/fault.h).
#pragma once

#include <fabflow/fault.h>
#include <fabflow/forwarding.h>
#include <fabflow/transport.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace fabflow {

// Owns the inner transport and forwards every call to it, injecting the faults of its plan.
// Not thread-safe, like any Transport; progress() only forwards, so it is as safe as the
// inner transport's.
class FaultTransport final : public ForwardingTransport {
 public:
  FaultTransport(std::unique_ptr<Transport> inner, FaultPlan plan);

  const FaultCounters& counters() const noexcept { return counters_; }

  // The inner transport's, less in-place receive and peer mapping: every message and write
  // passes through this wrapper, where faults are injected.
  const Capabilities& caps() const noexcept override { return caps_; }
  std::string_view name() const noexcept override { return name_; }
  void connect(Bootstrap& boot) override {
    inner_->connect(boot);
    refresh_caps();
  }
  Status post_send(int peer, const void* buf, std::size_t len, void* desc, std::uint64_t context,
                   unsigned flags) noexcept override;
  Status post_recv(int peer, void* buf, std::size_t len, void* desc,
                   std::uint64_t context) noexcept override;
  Status post_recv_multi(int peer, void* buf, std::size_t len, void* desc, std::size_t min_free,
                         std::uint64_t context) noexcept override;
  Status post_write(int peer, const void* buf, std::size_t len, void* desc, const RemoteMemory& dst,
                    std::uint64_t offset, std::uint64_t context, unsigned flags,
                    std::optional<std::uint64_t> imm = std::nullopt) noexcept override;
  Status post_read(int peer, void* buf, std::size_t len, void* desc, const RemoteMemory& src,
                   std::uint64_t offset, std::uint64_t context, unsigned flags) noexcept override;
  Status post_atomic(int peer, AtomicOp op, std::uint64_t operand, std::uint64_t compare,
                     std::uint64_t* result, void* result_desc, const RemoteMemory& dst,
                     std::uint64_t offset, std::uint64_t context, unsigned flags) noexcept override;

  int poll_tx(std::span<Completion> out) noexcept override { return poll(tx_, false, out); }
  int poll_rx(std::span<Completion> out) noexcept override { return poll(rx_, true, out); }
  // Cross-memory attach passes through; only corrupt_rma_op touches what it moves.
  Status copy_peer(int peer, PeerCopy dir, void* buf, std::uint64_t addr,
                   std::size_t len) noexcept override;
  const std::string& last_error() const noexcept override { return error_; }

 private:
  struct Held {
    Completion completion;
    std::uint64_t due;  // the poll call of its queue that may deliver it
  };
  struct Queue {
    std::deque<Held> held;
    std::uint64_t polls = 0;
  };
  struct RecvBuffer {
    std::byte* data;
    std::size_t size;
  };
  // The one RMA operation corrupt_rma_op picked, until its completion is delivered.
  struct CorruptRma {
    std::uint64_t context;
    std::byte* byte;  // the flipped source byte (a write) or the byte to flip (a read)
    std::byte flip;
    bool write;
  };

  template <class Forward>
  Status post(Forward&& forward) noexcept;
  int poll(Queue& queue, bool rx, std::span<Completion> out) noexcept;
  void reorder(std::span<Completion> batch) noexcept;
  void deliver_recv(const Completion& c) noexcept;
  // Whether the RMA operation accepted now is the one to corrupt (counts it).
  bool corrupt_this_rma(std::size_t len) noexcept;
  void deliver_rma(const Completion& c) noexcept;
  double uniform() noexcept { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  void refresh_caps() {
    caps_ = inner_->caps();
    caps_.rx_in_place_max = caps_.rx_in_place_depth = 0;
    caps_.peer_mapping = false;
  }

  Capabilities caps_;
  FaultPlan plan_;
  std::string name_;
  std::string fail_message_;
  std::string error_;
  std::mt19937_64 rng_;
  FaultCounters counters_;
  Queue tx_;
  Queue rx_;
  std::multimap<std::uint64_t, RecvBuffer> recvs_;  // posted recvs by context, FIFO per context
  std::optional<CorruptRma> rma_;
  std::vector<Completion> scratch_;
  std::vector<std::size_t> perm_;
};

}  // namespace fabflow
