// The libfabric transport. Setup lives in fabric_transport.cc; the data path is inline here
// so that loops templated on FabricTransport compile to direct libfabric calls.
#pragma once

#include <fabflow/transport.h>

#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

#include <array>
#include <vector>

#include "transport/libfabric/fid.h"
#include "transport/libfabric/select.h"
#include "transport/libfabric/shm_lock_watch.h"

namespace fabflow::ofi {

// One registered buffer; closes its fid_mr on destruction. Move-only, not thread-safe.
class FabricMemoryRegion final : public MemoryRegion {
 public:
  FabricMemoryRegion(void* addr, std::size_t len, Fid<fid_mr> mr)
      : MemoryRegion(addr, len, fi_mr_desc(mr.get())), mr_(std::move(mr)) {}
  fid_mr* mr() const noexcept { return mr_.get(); }

 private:
  Fid<fid_mr> mr_;
};

// What a libfabric memory key blob carries (export_key's format). Throws PeerError naming
// `peer` when the blob is malformed, out of range, or raw where the domain wants none (and the
// other way round). `raw` borrows the blob.
struct FabricKey {
  std::uint64_t base = 0, length = 0, key = 0;
  std::span<const std::byte> raw;
};
FabricKey decode_fabric_key(std::span<const std::byte> blob, int peer, bool want_raw);

// Owns fabric, domain, completion queues, endpoints (one per peer for msg, one for rdm),
// address vector and event queue. Not thread-safe except progress() when opened thread_safe.
class FabricTransport final : public Transport {
 public:
  explicit FabricTransport(const TransportOptions& options);
  ~FabricTransport() override;

  const Capabilities& caps() const noexcept override { return caps_; }
  std::string_view name() const noexcept override { return "libfabric"; }
  void connect(Bootstrap& boot) override;
  std::unique_ptr<MemoryRegion> register_memory(void* addr, std::size_t len,
                                                unsigned access) override;
  std::vector<std::byte> export_key(const MemoryRegion& mr) const override;
  RemoteMemory import_key(int peer, std::span<const std::byte> blob) override;
  const std::string& last_error() const noexcept override { return error_; }

  Status post_send(int peer, const void* buf, std::size_t len, void* desc, std::uint64_t context,
                   unsigned flags) noexcept override {
    fid_ep* ep = ep_for(peer);
    fi_addr_t to = addr_for(peer);
    ssize_t rc;
    if (flags == kInject) {
      rc = fi_inject(ep, buf, len, to);
    } else if (flags == kSignal) {
      rc = fi_send(ep, buf, len, desc, to, as_ctx(context));
    } else {
      iovec iov{const_cast<void*>(buf), len};
      fi_msg msg{&iov, &desc, 1, to, as_ctx(context), 0};
      rc = fi_sendmsg(ep, &msg, ofi_flags(flags));
    }
    return result(rc, "fi_send");
  }

  Status post_recv(int peer, void* buf, std::size_t len, void* desc,
                   std::uint64_t context) noexcept override {
    return result(fi_recv(ep_for(peer), buf, len, desc, FI_ADDR_UNSPEC, as_ctx(context)),
                  "fi_recv");
  }

  int post_recvs(int peer, std::span<void* const> bufs, std::size_t len, void* desc,
                 std::uint64_t context) noexcept override {
    int posted = 0;
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      iovec iov{bufs[i], len};
      fi_msg msg{&iov, &desc, 1, FI_ADDR_UNSPEC, as_ctx(context), 0};
      const Status s =
          result(fi_recvmsg(ep_for(peer), &msg, i + 1 < bufs.size() ? FI_MORE : 0), "fi_recvmsg");
      if (s == Status::again) break;
      if (s != Status::ok) return -1;
      ++posted;
    }
    return posted;
  }

  Status post_recv_multi(int peer, void* buf, std::size_t len, void* desc, std::size_t min_free,
                         std::uint64_t context) noexcept override;

  Status post_write(int peer, const void* buf, std::size_t len, void* desc, const RemoteMemory& dst,
                    std::uint64_t offset, std::uint64_t context, unsigned flags,
                    std::optional<std::uint64_t> imm = std::nullopt) noexcept override {
    if (!dst.contains(offset, len)) return out_of_range("write", dst, offset, len);
    fid_ep* ep = ep_for(peer);
    fi_addr_t to = addr_for(peer);
    std::uint64_t addr = dst.base + offset;
    ssize_t rc;
    if (flags == kInject) {
      rc = imm ? fi_inject_writedata(ep, buf, len, *imm, to, addr, dst.key)
               : fi_inject_write(ep, buf, len, to, addr, dst.key);
    } else if (flags == kSignal) {
      rc = imm ? fi_writedata(ep, buf, len, desc, *imm, to, addr, dst.key, as_ctx(context))
               : fi_write(ep, buf, len, desc, to, addr, dst.key, as_ctx(context));
    } else {
      iovec iov{const_cast<void*>(buf), len};
      fi_rma_iov rma{addr, len, dst.key};
      fi_msg_rma msg{&iov, &desc, 1, to, &rma, 1, as_ctx(context), imm ? *imm : 0};
      rc = fi_writemsg(ep, &msg, ofi_flags(flags) | (imm ? FI_REMOTE_CQ_DATA : 0));
    }
    return result(rc, "fi_write");
  }

  Status post_read(int peer, void* buf, std::size_t len, void* desc, const RemoteMemory& src,
                   std::uint64_t offset, std::uint64_t context, unsigned flags) noexcept override {
    if (!src.contains(offset, len)) return out_of_range("read", src, offset, len);
    fid_ep* ep = ep_for(peer);
    ssize_t rc;
    if ((flags & ~kInject) == kSignal) {
      rc = fi_read(ep, buf, len, desc, addr_for(peer), src.base + offset, src.key, as_ctx(context));
    } else {
      iovec iov{buf, len};
      fi_rma_iov rma{src.base + offset, len, src.key};
      fi_msg_rma msg{&iov, &desc, 1, addr_for(peer), &rma, 1, as_ctx(context), 0};
      rc = fi_readmsg(ep, &msg, ofi_flags(flags & ~kInject));
    }
    return result(rc, "fi_read");
  }

  // Atomics are always signalled (the caller needs the fetched value).
  Status post_atomic(int peer, AtomicOp op, std::uint64_t operand, std::uint64_t compare,
                     std::uint64_t* res, void* res_desc, const RemoteMemory& dst,
                     std::uint64_t offset, std::uint64_t context,
                     unsigned /*flags*/) noexcept override {
    if (!dst.contains(offset, 8)) return out_of_range("atomic", dst, offset, 8);
    // Operands must live in registered memory on FI_MR_LOCAL providers: use a slot of the
    // operand ring (kOperandSlots outstanding atomics at most).
    std::uint64_t* slot = &operands_[2 * (operand_next_++ % kOperandSlots)];
    slot[0] = operand;
    slot[1] = compare;
    void* desc = operand_mr_ ? operand_mr_->desc() : nullptr;
    ssize_t rc;
    if (op == AtomicOp::fetch_add) {
      rc = fi_fetch_atomic(ep_for(peer), &slot[0], 1, desc, res, res_desc, addr_for(peer),
                           dst.base + offset, dst.key, FI_UINT64, FI_SUM, as_ctx(context));
    } else {
      rc = fi_compare_atomic(ep_for(peer), &slot[0], 1, desc, &slot[1], desc, res, res_desc,
                             addr_for(peer), dst.base + offset, dst.key, FI_UINT64, FI_CSWAP,
                             as_ctx(context));
    }
    return result(rc, "fi_atomic");
  }

  int poll_tx(std::span<Completion> out) noexcept override { return poll(tx_cq_.get(), out); }
  int poll_rx(std::span<Completion> out) noexcept override { return poll(rx_cq_.get(), out); }

  int wait_tx(std::span<Completion> out, std::chrono::milliseconds timeout) noexcept override;
  int wait_rx(std::span<Completion> out, std::chrono::milliseconds timeout) noexcept override;

  void progress() noexcept override {
    // A zero-count read drives the provider without consuming entries.
    fi_cq_read(tx_cq_.get(), nullptr, 0);
    fi_cq_read(rx_cq_.get(), nullptr, 0);
  }

 private:
  static constexpr std::size_t kOperandSlots = 1024;
  static constexpr std::size_t kPollBatch = 16;

  static void* as_ctx(std::uint64_t c) noexcept { return reinterpret_cast<void*>(c); }
  static std::uint64_t ofi_flags(unsigned f) noexcept {
    return ((f & kSignal) ? FI_COMPLETION : 0) | ((f & kInject) ? FI_INJECT : 0) |
           ((f & kMore) ? FI_MORE : 0);
  }
  fid_ep* ep_for(int peer) const noexcept {
    return endpoint_type_ == FI_EP_MSG ? eps_[static_cast<std::size_t>(peer)].get() : eps_[0].get();
  }
  fi_addr_t addr_for(int peer) const noexcept {
    return endpoint_type_ == FI_EP_MSG ? FI_ADDR_UNSPEC : addrs_[static_cast<std::size_t>(peer)];
  }
  Status result(ssize_t rc, const char* call) noexcept {
    if (rc == 0) return Status::ok;
    if (rc == -FI_EAGAIN) return Status::again;
    error_ = call_error(call, caps_.provider, rc);
    return Status::failed;
  }
  Status out_of_range(const char* what, const RemoteMemory& m, std::uint64_t off,
                      std::uint64_t len) noexcept;
  int poll(fid_cq* cq, std::span<Completion> out) noexcept;
  int wait(fid_cq* cq, std::span<Completion> out, std::chrono::milliseconds timeout) noexcept;
  int convert(const fi_cq_data_entry* entries, ssize_t n, std::span<Completion> out) noexcept;
  int read_error(fid_cq* cq) noexcept;

  void connect_msg(Bootstrap& boot);
  void connect_rdm(Bootstrap& boot);
  void watch_shm_locks(const std::vector<std::vector<std::byte>>& names,
                       std::chrono::milliseconds silence);
  Fid<fid_ep> open_endpoint(fi_info* info);

  TransportOptions options_;
  Selection sel_;
  Capabilities caps_;
  fi_ep_type endpoint_type_;
  int rank_ = 0;
  int size_ = 1;
  std::string error_;

  // Declaration order is teardown order reversed: endpoints close before CQs, domain, fabric,
  // and the shm lock watch goes last (closing an endpoint takes the locks it watches).
  std::unique_ptr<ShmLockWatch> shm_watch_;
  Fid<fid_fabric> fabric_;
  Fid<fid_domain> domain_;
  Fid<fid_eq> eq_;
  Fid<fid_cq> tx_cq_;
  Fid<fid_cq> rx_cq_;
  Fid<fid_av> av_;
  Fid<fid_pep> pep_;
  std::vector<Fid<fid_ep>> eps_;
  std::vector<fi_addr_t> addrs_;
  std::vector<std::uint64_t> mapped_raw_keys_;  // FI_MR_RAW keys to unmap
  std::array<std::uint64_t, 2 * kOperandSlots> operands_{};
  std::unique_ptr<MemoryRegion> operand_mr_;
  std::uint64_t operand_next_ = 0;
  int tx_wait_fd_ = -1;  // owned by the completion queues; -1 without blocking waits
  int rx_wait_fd_ = -1;
  std::string shm_watch_off_;  // why shm_watch_ is not armed (shm only)
};

}  // namespace fabflow::ofi
