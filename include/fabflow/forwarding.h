// A Transport that forwards every call to another one: the base of wrappers that watch or change
// a few calls and pass the rest through (the fault-injecting transport, the provider-profile
// transport, tests' counters). A wrapper overrides what it changes and nothing else.
//
// Not forwarded, on purpose: post_recvs, wait_tx and wait_rx keep Transport's defaults, which
// call this object's own post_recv and poll_tx / poll_rx, so that a wrapper that intercepts
// those sees every receive posted and every completion reaped through them.
#pragma once

#include <fabflow/status.h>
#include <fabflow/transport.h>

#include <memory>
#include <utility>

namespace fabflow {

class ForwardingTransport : public Transport {
 public:
  // Whether the direct-access calls (poll_rx_in_place, release_rx, map_peer, copy_peer) reach
  // the inner transport, or fail as Transport's defaults do: a wrapper that must see every
  // message and write hides them (and clears the capabilities that offer them).
  enum class DirectAccess { forward, hide };

  // Owns `inner`, which must not be used directly afterwards. Throws UsageError when null.
  explicit ForwardingTransport(std::unique_ptr<Transport> inner,
                               DirectAccess direct = DirectAccess::forward)
      : owned_(std::move(inner)), inner_(owned_.get()), direct_(direct) {
    if (!inner_) throw UsageError("transport wrapper: no transport to wrap");
  }
  // Borrows `inner`, which must outlive this wrapper (and is not used directly meanwhile).
  explicit ForwardingTransport(Transport& inner, DirectAccess direct = DirectAccess::forward)
      : inner_(&inner), direct_(direct) {}

  Transport& inner() noexcept { return *inner_; }
  const Transport& inner() const noexcept { return *inner_; }

  const Capabilities& caps() const noexcept override { return inner_->caps(); }
  std::string_view name() const noexcept override { return inner_->name(); }
  void connect(Bootstrap& boot) override { inner_->connect(boot); }
  std::unique_ptr<MemoryRegion> register_memory(void* addr, std::size_t len,
                                                unsigned access) override {
    return inner_->register_memory(addr, len, access);
  }
  // The inner transport's own allocation: local shares only memory it allocated itself.
  std::unique_ptr<MemoryRegion> allocate(std::size_t len, unsigned access) override {
    return inner_->allocate(len, access);
  }
  std::vector<std::byte> export_key(const MemoryRegion& mr) const override {
    return inner_->export_key(mr);
  }
  RemoteMemory import_key(int peer, std::span<const std::byte> blob) override {
    return inner_->import_key(peer, blob);
  }

  Status post_send(int peer, const void* buf, std::size_t len, void* desc, std::uint64_t context,
                   unsigned flags) noexcept override {
    return inner_->post_send(peer, buf, len, desc, context, flags);
  }
  Status post_recv(int peer, void* buf, std::size_t len, void* desc,
                   std::uint64_t context) noexcept override {
    return inner_->post_recv(peer, buf, len, desc, context);
  }
  Status post_recv_multi(int peer, void* buf, std::size_t len, void* desc, std::size_t min_free,
                         std::uint64_t context) noexcept override {
    return inner_->post_recv_multi(peer, buf, len, desc, min_free, context);
  }
  Status post_write(int peer, const void* buf, std::size_t len, void* desc, const RemoteMemory& dst,
                    std::uint64_t offset, std::uint64_t context, unsigned flags,
                    std::optional<std::uint64_t> imm = std::nullopt) noexcept override {
    return inner_->post_write(peer, buf, len, desc, dst, offset, context, flags, imm);
  }
  Status post_read(int peer, void* buf, std::size_t len, void* desc, const RemoteMemory& src,
                   std::uint64_t offset, std::uint64_t context, unsigned flags) noexcept override {
    return inner_->post_read(peer, buf, len, desc, src, offset, context, flags);
  }
  Status post_atomic(int peer, AtomicOp op, std::uint64_t operand, std::uint64_t compare,
                     std::uint64_t* result, void* result_desc, const RemoteMemory& dst,
                     std::uint64_t offset, std::uint64_t context,
                     unsigned flags) noexcept override {
    return inner_->post_atomic(peer, op, operand, compare, result, result_desc, dst, offset,
                               context, flags);
  }

  int poll_tx(std::span<Completion> out) noexcept override { return inner_->poll_tx(out); }
  int poll_rx(std::span<Completion> out) noexcept override { return inner_->poll_rx(out); }
  int poll_rx_in_place(std::span<Completion> out) noexcept override {
    return forwards() ? inner_->poll_rx_in_place(out) : Transport::poll_rx_in_place(out);
  }
  Status release_rx(const Completion& c) noexcept override {
    return forwards() ? inner_->release_rx(c) : Transport::release_rx(c);
  }
  void progress() noexcept override { inner_->progress(); }

  std::byte* map_peer(int peer, const RemoteMemory& m, std::uint64_t offset,
                      std::size_t len) noexcept override {
    return forwards() ? inner_->map_peer(peer, m, offset, len)
                      : Transport::map_peer(peer, m, offset, len);
  }
  Status copy_peer(int peer, PeerCopy dir, void* buf, std::uint64_t addr,
                   std::size_t len) noexcept override {
    return forwards() ? inner_->copy_peer(peer, dir, buf, addr, len)
                      : Transport::copy_peer(peer, dir, buf, addr, len);
  }
  const std::string& last_error() const noexcept override { return inner_->last_error(); }

 protected:
  bool forwards() const noexcept { return direct_ == DirectAccess::forward; }

  std::unique_ptr<Transport> owned_;  // null when borrowed
  Transport* inner_;
  DirectAccess direct_;
};

}  // namespace fabflow
