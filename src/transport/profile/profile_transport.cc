// The profile transport: any transport held to a provider profile's envelope (fabflow/profile.h).
// Each rule below fails a call the way the real provider fails it (the error class in the
// message: -FI_EINVAL, -FI_EMSGSIZE, -FI_ENOSYS), or answers again where it would run out of
// queue entries (-FI_EAGAIN); a call inside the envelope is forwarded unchanged.
#include <fabflow/forwarding.h>
#include <fabflow/profile.h>

#include <array>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <utility>

namespace fabflow {
namespace {

// The regions registered through one profile transport, for its FI_MR_LOCAL rule: a descriptor
// names one of them. Shared with the regions, which may outlive the transport.
struct Registry {
  std::mutex lock;
  std::set<const MemoryRegion*> live;
};

// A registration made through the profile transport: its descriptor is itself (a provider's
// descriptor is opaque and belongs to its domain); the inner registration does the work.
class ProfileRegion final : public MemoryRegion {
 public:
  ProfileRegion(std::unique_ptr<MemoryRegion> inner, std::shared_ptr<Registry> registry)
      : MemoryRegion(inner->data(), inner->size(), nullptr),
        inner_(std::move(inner)),
        registry_(std::move(registry)) {
    desc_ = this;
    std::lock_guard g(registry_->lock);
    registry_->live.insert(this);
  }
  ~ProfileRegion() override {
    std::lock_guard g(registry_->lock);
    registry_->live.erase(this);
  }
  const MemoryRegion& registered() const noexcept override { return inner_->registered(); }
  void* inner_desc() const noexcept { return inner_->desc(); }

 private:
  std::unique_ptr<MemoryRegion> inner_;
  std::shared_ptr<Registry> registry_;
};

class ProfileTransport final : public ForwardingTransport {
 public:
  ProfileTransport(std::unique_ptr<Transport> inner, ProviderProfile profile)
      : ForwardingTransport(std::move(inner), DirectAccess::hide),  // no hardware provider has them
        profile_(std::move(profile)),
        caps_(apply_profile(inner_->caps(), profile_)),
        name_("profile(" + profile_.name + ", " + std::string(inner_->name()) + ")"),
        registry_(std::make_shared<Registry>()),
        mr_local_(profile_.requires_mr("local")) {}

  const ProfileCounters& counters() const noexcept { return counters_; }

  const Capabilities& caps() const noexcept override { return caps_; }
  std::string_view name() const noexcept override { return name_; }
  void connect(Bootstrap& boot) override {
    inner_->connect(boot);
    caps_ = apply_profile(inner_->caps(), profile_);
  }
  std::unique_ptr<MemoryRegion> register_memory(void* addr, std::size_t len,
                                                unsigned access) override {
    try {
      return std::make_unique<ProfileRegion>(inner_->register_memory(addr, len, access), registry_);
    } catch (const UsageError& e) {
      // The real provider registers any memory; an inner transport that cannot (local, for
      // remote access) cannot emulate it.
      throw UsageError("profile " + profile_.name + " over " + inner_->caps().provider +
                       ": cannot emulate this registration (" + e.what() +
                       "); run the profile over shm or tcp");
    }
  }
  std::unique_ptr<MemoryRegion> allocate(std::size_t len, unsigned access) override {
    return std::make_unique<ProfileRegion>(inner_->allocate(len, access), registry_);
  }

  Status post_send(int peer, const void* buf, std::size_t len, void* desc, std::uint64_t context,
                   unsigned flags) noexcept override {
    if (Status s = check_tx(Op::send, buf, len, desc, flags); s != Status::ok) return s;
    return track(inner_->post_send(peer, buf, len, inner_desc(desc), context, flags), flags);
  }
  Status post_recv(int peer, void* buf, std::size_t len, void* desc,
                   std::uint64_t context) noexcept override {
    if (Status s = check_rx(buf, len, desc); s != Status::ok) return s;
    Status s = inner_->post_recv(peer, buf, len, inner_desc(desc), context);
    if (s == Status::ok) ++recvs_posted_;
    return relay(s);
  }
  Status post_recv_multi(int peer, void* buf, std::size_t len, void* desc, std::size_t min_free,
                         std::uint64_t context) noexcept override {
    if (Status s = check_rx(buf, len, desc); s != Status::ok) return s;
    Status s = inner_->post_recv_multi(peer, buf, len, inner_desc(desc), min_free, context);
    if (s == Status::ok) {
      ++recvs_posted_;
      multi_contexts_.insert(context);
    }
    return relay(s);
  }
  Status post_write(int peer, const void* buf, std::size_t len, void* desc, const RemoteMemory& dst,
                    std::uint64_t offset, std::uint64_t context, unsigned flags,
                    std::optional<std::uint64_t> imm = std::nullopt) noexcept override {
    if (Status s = check_tx(imm ? Op::writedata : Op::write, buf, len, desc, flags);
        s != Status::ok)
      return s;
    if (imm && profile_.cq_data_size < 8 && (*imm >> (8 * profile_.cq_data_size)) != 0) {
      ++counters_.cq_data_too_wide;
      return refuse("-FI_EINVAL: remote CQ data " + std::to_string(*imm) + " is wider than " +
                    std::to_string(profile_.cq_data_size) + " bytes (capabilities.cq_data_size)");
    }
    return track(
        inner_->post_write(peer, buf, len, inner_desc(desc), dst, offset, context, flags, imm),
        flags);
  }
  Status post_read(int peer, void* buf, std::size_t len, void* desc, const RemoteMemory& src,
                   std::uint64_t offset, std::uint64_t context, unsigned flags) noexcept override {
    if (Status s = check_tx(Op::read, buf, len, desc, flags); s != Status::ok) return s;
    return track(inner_->post_read(peer, buf, len, inner_desc(desc), src, offset, context, flags),
                 flags);
  }
  Status post_atomic(int peer, AtomicOp op, std::uint64_t operand, std::uint64_t compare,
                     std::uint64_t* result, void* result_desc, const RemoteMemory& dst,
                     std::uint64_t offset, std::uint64_t context,
                     unsigned flags) noexcept override {
    const Op as = op == AtomicOp::fetch_add ? Op::fadd : Op::cswap;
    if (Status s = check_tx(as, result, sizeof *result, result_desc, flags & ~kInject);
        s != Status::ok)
      return s;
    return track(inner_->post_atomic(peer, op, operand, compare, result, inner_desc(result_desc),
                                     dst, offset, context, flags),
                 flags);
  }

  // A provider retires unsignalled operations while it is driven: by reading either completion
  // queue or by progress() (libfabric's progress is the endpoint's, whichever queue is read).
  void progress() noexcept override {
    unsignalled_.store(0, std::memory_order_relaxed);
    inner_->progress();
  }
  int poll_tx(std::span<Completion> out) noexcept override { return poll(false, out); }
  int poll_rx(std::span<Completion> out) noexcept override { return poll(true, out); }
  const std::string& last_error() const noexcept override { return error_; }

 private:
  // A queue entry is free again once the operation's completion exists, reaped or not (the
  // hardware frees it when it writes the completion). Completions are counted as they leave
  // the inner transport: when the caller polls, or when a full queue makes room by moving the
  // completions that already exist into `held`, delivered first by the next poll.
  struct Side {
    std::deque<Completion> held;
    bool failed = false;  // the inner transport failed while making room: the next poll fails
  };
  void account(bool rx, std::span<const Completion> got) noexcept {
    for (const Completion& c : got) {
      if (!rx) {
        if (signalled_ > 0) --signalled_;
        continue;
      }
      // A multi-receive buffer holds its entry until it is released.
      const bool consumed =
          (c.kind == CompletionKind::recv && (c.released || !multi_contexts_.count(c.context))) ||
          (c.kind == CompletionKind::remote_write && c.has_data && caps_.rx_cq_data_consumes_recv);
      if (consumed && recvs_posted_ > 0) --recvs_posted_;
    }
  }
  int poll(bool rx, std::span<Completion> out) noexcept {
    unsignalled_.store(0, std::memory_order_relaxed);
    Side& side = rx ? rx_ : tx_;
    std::size_t k = 0;
    while (k < out.size() && !side.held.empty()) {
      out[k++] = side.held.front();
      side.held.pop_front();
    }
    if (side.failed && side.held.empty()) {
      side.failed = false;
      return k > 0 ? static_cast<int>(k) : -1;  // error_ says why
    }
    if (k == out.size()) return static_cast<int>(k);
    const auto rest = out.subspan(k);
    const int n = rx ? inner_->poll_rx(rest) : inner_->poll_tx(rest);
    if (n < 0) {
      error_ = inner_->last_error();
      if (k == 0) return -1;
      side.failed = true;
      return static_cast<int>(k);
    }
    account(rx, rest.first(static_cast<std::size_t>(n)));
    return static_cast<int>(k) + n;
  }
  // Moves the completions that exist now into `held`; false when the inner transport failed.
  bool make_room(bool rx) noexcept {
    Side& side = rx ? rx_ : tx_;
    std::array<Completion, 64> got;
    const int n = rx ? inner_->poll_rx(got) : inner_->poll_tx(got);
    if (n < 0) {
      error_ = inner_->last_error();
      return false;
    }
    const auto fresh = std::span(got).first(static_cast<std::size_t>(n));
    account(rx, fresh);
    try {
      side.held.insert(side.held.end(), fresh.begin(), fresh.end());
    } catch (...) {
      return false;
    }
    return true;
  }

  Status refuse(const std::string& why) noexcept {
    try {
      error_ = "profile " + profile_.name + ": " + why;
    } catch (...) {
    }
    return Status::failed;
  }
  Status relay(Status s) noexcept {
    if (s == Status::failed) error_ = inner_->last_error();
    return s;
  }
  Status track(Status s, unsigned flags) noexcept {
    if (s == Status::ok) {
      if (flags & kSignal)
        ++signalled_;
      else
        unsignalled_.fetch_add(1, std::memory_order_relaxed);
    }
    return relay(s);
  }

  // FI_MR_LOCAL: every buffer handed to the provider (but an inject's, copied at post time)
  // lies inside the region its descriptor names, registered through this transport.
  Status check_desc(const void* buf, std::size_t len, void* desc) noexcept {
    if (!mr_local_ || len == 0) return Status::ok;
    if (desc == nullptr) {
      ++counters_.missing_descriptor;
      return refuse("-FI_EINVAL: a " + std::to_string(len) +
                    "-byte buffer without its memory descriptor (FI_MR_LOCAL: every local "
                    "buffer must be registered and its desc passed)");
    }
    const auto* region = static_cast<const MemoryRegion*>(desc);
    bool known;
    {
      std::lock_guard g(registry_->lock);
      known = registry_->live.count(region) != 0;
    }
    const auto* b = static_cast<const std::byte*>(buf);
    if (!known || b < region->data() || len > region->size() ||
        b > region->data() + (region->size() - len)) {
      ++counters_.foreign_descriptor;
      return refuse(known ? "-FI_EINVAL: a buffer outside the region its descriptor names "
                            "(FI_MR_LOCAL: a local protection error on the hardware)"
                          : "-FI_EINVAL: a descriptor this transport did not register "
                            "(FI_MR_LOCAL)");
    }
    return Status::ok;
  }
  // The inner registration's descriptor for one of ours; any other descriptor (allowed
  // without FI_MR_LOCAL, or with an inject) passes unchanged.
  void* inner_desc(void* desc) const noexcept {
    if (desc == nullptr) return nullptr;
    std::lock_guard g(registry_->lock);
    return registry_->live.count(static_cast<const MemoryRegion*>(desc))
               ? static_cast<ProfileRegion*>(desc)->inner_desc()
               : desc;
  }

  Status check_tx(Op op, const void* buf, std::size_t len, void* desc, unsigned flags) noexcept {
    if (!profile_.has(op)) {
      ++counters_.missing_op;
      return refuse("-FI_ENOSYS: the provider has no " + std::string(to_string(op)));
    }
    if (len > profile_.max_msg_size) {
      ++counters_.message_too_large;
      return refuse("-FI_EMSGSIZE: " + std::to_string(len) + " bytes exceed max_msg_size " +
                    std::to_string(profile_.max_msg_size));
    }
    if (flags & kInject) {
      if (len > profile_.inject_size) {
        ++counters_.inject_too_large;
        return refuse("-FI_EINVAL: an inject of " + std::to_string(len) +
                      " bytes exceeds inject_size " + std::to_string(profile_.inject_size));
      }
    } else if (Status s = check_desc(buf, len, desc); s != Status::ok) {
      return s;
    }
    if (signalled_ + unsignalled_.load(std::memory_order_relaxed) >= profile_.tx_depth &&
        !make_room(false))
      return Status::failed;
    if (signalled_ + unsignalled_.load(std::memory_order_relaxed) >= profile_.tx_depth) {
      ++counters_.queue_full;
      return Status::again;  // -FI_EAGAIN: the transmit queue is full until completions are reaped
    }
    return Status::ok;
  }
  Status check_rx(void* buf, std::size_t len, void* desc) noexcept {
    if (Status s = check_desc(buf, len, desc); s != Status::ok) return s;
    if (recvs_posted_ >= profile_.rx_depth && !make_room(true)) return Status::failed;
    if (recvs_posted_ >= profile_.rx_depth) {
      ++counters_.queue_full;
      return Status::again;
    }
    return Status::ok;
  }

  ProviderProfile profile_;
  Capabilities caps_;
  std::string name_;
  std::string error_;
  std::shared_ptr<Registry> registry_;
  bool mr_local_;
  std::size_t signalled_ = 0;  // signalled operations whose completion is not yet reaped
  // Unsignalled operations posted since the provider was last driven (progress() may run on a
  // progress thread: atomic).
  std::atomic<std::size_t> unsignalled_{0};
  std::size_t recvs_posted_ = 0;
  Side tx_, rx_;
  std::set<std::uint64_t> multi_contexts_;  // contexts of multi-receive buffers
  ProfileCounters counters_;
};

}  // namespace

std::unique_ptr<Transport> make_profile_transport(std::unique_ptr<Transport> inner,
                                                  const ProviderProfile& profile,
                                                  std::span<const Op> ops) {
  if (!inner) throw UsageError("profile " + profile.name + ": no transport to wrap");
  if (std::string why = profile_refusal(inner->caps(), profile, ops); !why.empty())
    throw UsageError(why);
  return std::make_unique<ProfileTransport>(std::move(inner), profile);
}

const ProfileCounters* profile_counters(const Transport& transport) noexcept {
  auto* p = dynamic_cast<const ProfileTransport*>(&transport);
  return p ? &p->counters() : nullptr;
}

}  // namespace fabflow
