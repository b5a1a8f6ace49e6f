// Setup of the libfabric transport: open, connect (msg: listen/connect/accept through the
// event queue; rdm: address vector), memory registration for every mr_mode bit, key blobs.
#include "transport/libfabric/fabric_transport.h"

#include <fabflow/bootstrap.h>

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/shm_regions.h"

namespace fabflow::ofi {
namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(10);

// Key blob layout (little-endian host order; both ends run the same build):
//   u32 magic 'FFMK' | u16 version | u16 raw_len | u64 base | u64 length | u64 key | raw bytes
constexpr std::uint32_t kKeyMagic = 0x4b4d4646;
constexpr std::uint16_t kKeyVersion = 1;
constexpr std::size_t kKeyHeader = 32;
constexpr std::size_t kMaxRawKey = 256;

std::atomic<std::uint64_t> next_requested_key{1};

template <class T>
void put(std::vector<std::byte>& out, std::size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);
}
template <class T>
T get(std::span<const std::byte> in, std::size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

}  // namespace

FabricTransport::FabricTransport(const TransportOptions& options)
    : options_(options), sel_(select(options)), caps_(sel_.caps) {
  fi_info* info = sel_.info;
  endpoint_type_ = info->ep_attr->type;
  const std::string& prov = caps_.provider;
  check(lib::fabric(info->fabric_attr, fabric_.out(), nullptr), "fi_fabric", prov);
  check(fi_domain(fabric_.get(), info, domain_.out(), nullptr), "fi_domain", prov);

  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  // Blocking waits sleep in poll(2) on the queues' wait fds. Providers without FI_WAIT_FD
  // (shm) get plain queues and waits that poll with back-off instead.
  for (bool fd : {options.blocking_waits, false}) {
    cq_attr.wait_obj = fd ? FI_WAIT_FD : FI_WAIT_NONE;
    cq_attr.size = options.tx_depth * 2;
    int rc = fi_cq_open(domain_.get(), &cq_attr, tx_cq_.out(), nullptr);
    if (rc == 0) {
      cq_attr.size = options.rx_depth * 2;
      rc = fi_cq_open(domain_.get(), &cq_attr, rx_cq_.out(), nullptr);
    }
    if (rc == 0 && fd) {
      rc = fi_control(&tx_cq_.get()->fid, FI_GETWAIT, &tx_wait_fd_);
      if (rc == 0) rc = fi_control(&rx_cq_.get()->fid, FI_GETWAIT, &rx_wait_fd_);
    }
    if (rc == 0) break;
    tx_cq_.reset();
    rx_cq_.reset();
    tx_wait_fd_ = rx_wait_fd_ = -1;
    if (!fd) check(rc, "fi_cq_open", prov);
  }

  // Plain fi_send/fi_write calls are the signalled ones; unsignalled posts pass flags. The udp
  // provider refuses FI_COMPLETION in op_flags (fi_endpoint: -FI_ENODATA) and completes every
  // send anyway: the callers' unsignalled posts then carry context 0, which retires nothing.
  if (endpoint_type_ != FI_EP_DGRAM) info->tx_attr->op_flags |= FI_COMPLETION;
  info->tx_attr->size = std::max<std::size_t>(info->tx_attr->size, options.tx_depth);
  info->rx_attr->size = std::max<std::size_t>(info->rx_attr->size, options.rx_depth);
}

FabricTransport::~FabricTransport() {
  for (std::uint64_t key : mapped_raw_keys_) fi_mr_unmap_key(domain_.get(), key);
  operand_mr_.reset();
}

Fid<fid_ep> FabricTransport::open_endpoint(fi_info* info) {
  const std::string& prov = caps_.provider;
  if (endpoint_type_ != FI_EP_DGRAM) info->tx_attr->op_flags |= FI_COMPLETION;
  Fid<fid_ep> ep;
  check(fi_endpoint(domain_.get(), info, ep.out(), nullptr), "fi_endpoint", prov);
  check(fi_ep_bind(ep.get(), &tx_cq_.get()->fid, FI_TRANSMIT | FI_SELECTIVE_COMPLETION),
        "fi_ep_bind(tx cq)", prov);
  check(fi_ep_bind(ep.get(), &rx_cq_.get()->fid, FI_RECV), "fi_ep_bind(rx cq)", prov);
  if (eq_) check(fi_ep_bind(ep.get(), &eq_.get()->fid, 0), "fi_ep_bind(eq)", prov);
  if (av_) check(fi_ep_bind(ep.get(), &av_.get()->fid, 0), "fi_ep_bind(av)", prov);
  if (prov == "shm") {
    // shm names its region /dev/shm/<pid>:<index>:... by default. A SIGKILLed process leaves
    // that file behind, and once the pid is reused (pid_max is 32768 on small machines) the
    // new endpoint's fi_enable fails with EBUSY. A random name cannot collide, and one that
    // carries its owner lets every start sweep the regions of owners that have exited.
    std::vector<std::string> ignored;
    remove_shm_leftovers(find_shm_leftovers("/dev/shm", ShmJudgement::exited_only), ignored);
    const std::string name = shm_region_name();
    check(fi_setname(&ep.get()->fid, const_cast<char*>(name.c_str()), name.size() + 1),
          "fi_setname", prov);
  }
  check(fi_enable(ep.get()), "fi_enable", prov);
  return ep;
}

void FabricTransport::connect(Bootstrap& boot) {
  rank_ = boot.rank();
  size_ = boot.size();
  if (endpoint_type_ == FI_EP_MSG)
    connect_msg(boot);
  else
    connect_rdm(boot);
  if (caps_.atomics_u64 && (caps_.mr_mode & FI_MR_LOCAL))
    operand_mr_ = register_memory(operands_.data(), sizeof operands_, kLocalRead | kLocalWrite);
}

void FabricTransport::connect_rdm(Bootstrap& boot) {
  const std::string& prov = caps_.provider;
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  av_attr.count = static_cast<std::size_t>(size_);
  check(fi_av_open(domain_.get(), &av_attr, av_.out(), nullptr), "fi_av_open", prov);
  eps_.push_back(open_endpoint(sel_.info));

  std::vector<std::byte> name(256);
  std::size_t len = name.size();
  check(fi_getname(&eps_[0].get()->fid, name.data(), &len), "fi_getname", prov);
  name.resize(len);
  auto names = boot.allgather(name);
  addrs_.assign(static_cast<std::size_t>(size_), FI_ADDR_UNSPEC);
  for (int r = 0; r < size_; ++r) {
    const auto& n = names[static_cast<std::size_t>(r)];
    if (n.empty() || n.size() > 256)
      throw PeerError(r, "rank " + std::to_string(r) + " sent a malformed fabric address");
    int rc = fi_av_insert(av_.get(), n.data(), 1, &addrs_[static_cast<std::size_t>(r)], 0, nullptr);
    if (rc != 1) throw Error(call_error("fi_av_insert", prov, rc < 0 ? rc : -FI_EINVAL));
  }
  if (prov == "shm") watch_shm_locks(names, boot.silence_bound());
}

// A peer killed inside the shm provider can leave a lock of a region held for good
// (shm_lock_watch.h): the watch releases it once the peer is gone. Without a watch (another
// libfabric version), such a survivor can only be ended from outside.
void FabricTransport::watch_shm_locks(const std::vector<std::vector<std::byte>>& names,
                                      std::chrono::milliseconds silence) {
  auto text = [](const std::vector<std::byte>& n) {
    std::string s(reinterpret_cast<const char*>(n.data()), n.size());
    return s.substr(0, s.find('\0'));
  };
  std::vector<ShmLockWatch::Region> peers;
  for (int r = 0; r < size_; ++r)
    if (r != rank_) peers.push_back({r, text(names[static_cast<std::size_t>(r)])});
  shm_watch_ = ShmLockWatch::start({rank_, text(names[static_cast<std::size_t>(rank_)])}, peers,
                                   libfabric_version(), silence, &shm_watch_off_);
}

void FabricTransport::connect_msg(Bootstrap& boot) {
  const std::string& prov = caps_.provider;
  fi_eq_attr eq_attr{};
  eq_attr.wait_obj = FI_WAIT_UNSPEC;
  check(fi_eq_open(fabric_.get(), &eq_attr, eq_.out(), nullptr), "fi_eq_open", prov);
  check(fi_passive_ep(fabric_.get(), sel_.info, pep_.out(), nullptr), "fi_passive_ep", prov);
  check(fi_pep_bind(pep_.get(), &eq_.get()->fid, 0), "fi_pep_bind", prov);
  check(fi_listen(pep_.get()), "fi_listen", prov);

  std::vector<std::byte> name(256);
  std::size_t len = name.size();
  check(fi_getname(&pep_.get()->fid, name.data(), &len), "fi_getname", prov);
  name.resize(len);
  auto names = boot.allgather(name);

  eps_.resize(static_cast<std::size_t>(size_));
  std::vector<bool> connected(static_cast<std::size_t>(size_), false);
  int pending = size_ - 1;

  // Lower ranks accept, higher ranks connect; the connect carries our rank.
  const std::int32_t me = rank_;
  for (int peer = 0; peer < rank_; ++peer) {
    const auto& n = names[static_cast<std::size_t>(peer)];
    if (n.empty() || n.size() > 256)
      throw PeerError(peer, "rank " + std::to_string(peer) + " sent a malformed fabric address");
    InfoPtr info(lib::dupinfo(sel_.info));
    free(info->dest_addr);
    info->dest_addr = malloc(n.size());
    std::memcpy(info->dest_addr, n.data(), n.size());
    info->dest_addrlen = n.size();
    eps_[static_cast<std::size_t>(peer)] = open_endpoint(info.get());
    check(fi_connect(eps_[static_cast<std::size_t>(peer)].get(), n.data(), &me, sizeof me),
          "fi_connect", prov);
  }

  auto deadline = std::chrono::steady_clock::now() + kConnectTimeout;
  alignas(fi_eq_cm_entry) std::byte buf[sizeof(fi_eq_cm_entry) + 64];
  while (pending > 0) {
    if (std::chrono::steady_clock::now() > deadline)
      throw Error("connect on " + prov + ": " + std::to_string(pending) +
                  " peer(s) did not connect within 10 s");
    if (boot.peer_failed()) throw PeerError(-1, "connect on " + prov + ": a peer vanished");
    std::uint32_t event = 0;
    ssize_t rc = fi_eq_sread(eq_.get(), &event, buf, sizeof buf, 100, 0);
    if (rc == -FI_EAGAIN || rc == -FI_ETIMEDOUT) continue;
    if (rc == -FI_EAVAIL) {
      fi_eq_err_entry err{};
      fi_eq_readerr(eq_.get(), &err, 0);
      throw Error("connect on " + prov + ": " +
                  fi_eq_strerror(eq_.get(), err.prov_errno, err.err_data, nullptr, 0));
    }
    if (rc < 0) throw Error(call_error("fi_eq_sread", prov, rc));
    auto* entry = reinterpret_cast<fi_eq_cm_entry*>(buf);
    if (event == FI_CONNREQ) {
      InfoPtr req(entry->info);
      std::int32_t peer = -1;
      if (static_cast<std::size_t>(rc) >= sizeof(fi_eq_cm_entry) + sizeof peer)
        std::memcpy(&peer, entry->data, sizeof peer);
      if (peer <= rank_ || peer >= size_ || eps_[static_cast<std::size_t>(peer)]) {
        fi_reject(pep_.get(), req->handle, nullptr, 0);
        continue;  // a stray or duplicate connection request: refuse it, keep waiting
      }
      eps_[static_cast<std::size_t>(peer)] = open_endpoint(req.get());
      check(fi_accept(eps_[static_cast<std::size_t>(peer)].get(), nullptr, 0), "fi_accept", prov);
    } else if (event == FI_CONNECTED) {
      for (int p = 0; p < size_; ++p) {
        auto& ep = eps_[static_cast<std::size_t>(p)];
        if (ep && ep.fid() == entry->fid && !connected[static_cast<std::size_t>(p)]) {
          connected[static_cast<std::size_t>(p)] = true;
          --pending;
        }
      }
    } else if (event == FI_SHUTDOWN) {
      throw PeerError(-1, "connect on " + prov + ": a peer shut its connection down");
    }
  }
}

std::unique_ptr<MemoryRegion> FabricTransport::register_memory(void* addr, std::size_t len,
                                                               unsigned access) {
  const std::string& prov = caps_.provider;
  std::uint64_t acc = 0;
  if (access & kLocalRead) acc |= FI_SEND | FI_WRITE;
  if (access & kLocalWrite) acc |= FI_RECV | FI_READ;
  if (access & kRemoteRead) acc |= FI_REMOTE_READ;
  if (access & kRemoteWrite) acc |= FI_REMOTE_WRITE;
  // Without FI_MR_PROV_KEY the application picks keys, which must be unique in the domain.
  std::uint64_t requested = (caps_.mr_mode & FI_MR_PROV_KEY) ? 0 : next_requested_key++;
  Fid<fid_mr> mr;
  check(fi_mr_reg(domain_.get(), addr, len, acc, 0, requested, 0, mr.out(), nullptr), "fi_mr_reg",
        prov);
  if (caps_.mr_mode & FI_MR_ENDPOINT) {
    int bound = 0;
    for (auto& ep : eps_) {
      if (!ep) continue;
      if (bound++ > 0)
        throw UsageError(prov +
                         " needs FI_MR_ENDPOINT: a region can be bound to one "
                         "endpoint only; use an rdm endpoint for more than one peer");
      check(fi_mr_bind(mr.get(), &ep.get()->fid, 0), "fi_mr_bind", prov);
    }
    check(fi_mr_enable(mr.get()), "fi_mr_enable", prov);
  }
  return std::make_unique<FabricMemoryRegion>(addr, len, std::move(mr));
}

std::vector<std::byte> FabricTransport::export_key(const MemoryRegion& region) const {
  const auto& mr = static_cast<const FabricMemoryRegion&>(region.registered());
  std::uint64_t base =
      (caps_.mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<std::uintptr_t>(region.data()) : 0;
  std::vector<std::byte> raw;
  std::uint64_t key = 0;
  if (caps_.mr_mode & FI_MR_RAW) {
    std::size_t raw_len = kMaxRawKey;
    raw.resize(raw_len);
    std::uint64_t raw_base = 0;
    check(fi_mr_raw_attr(mr.mr(), &raw_base, reinterpret_cast<std::uint8_t*>(raw.data()), &raw_len,
                         0),
          "fi_mr_raw_attr", caps_.provider);
    raw.resize(raw_len);
    if (caps_.mr_mode & FI_MR_VIRT_ADDR) base = raw_base;
  } else {
    key = fi_mr_key(mr.mr());
    if (key == FI_KEY_NOTAVAIL) throw Error("fi_mr_key on " + caps_.provider + ": no key");
  }
  std::vector<std::byte> out(kKeyHeader + raw.size());
  put<std::uint32_t>(out, 0, kKeyMagic);
  put<std::uint16_t>(out, 4, kKeyVersion);
  put<std::uint16_t>(out, 6, static_cast<std::uint16_t>(raw.size()));
  put<std::uint64_t>(out, 8, base);
  put<std::uint64_t>(out, 16, region.size());
  put<std::uint64_t>(out, 24, key);
  if (!raw.empty()) std::memcpy(out.data() + kKeyHeader, raw.data(), raw.size());
  return out;
}

FabricKey decode_fabric_key(std::span<const std::byte> blob, int peer, bool want_raw) {
  auto bad = [&](const char* what) {
    return PeerError(
        peer, "rank " + std::to_string(peer) + " sent a malformed memory key (" + what + ")");
  };
  if (blob.size() < kKeyHeader) throw bad("too short");
  if (get<std::uint32_t>(blob, 0) != kKeyMagic) throw bad("bad magic");
  if (get<std::uint16_t>(blob, 4) != kKeyVersion) throw bad("unknown version");
  std::size_t raw_len = get<std::uint16_t>(blob, 6);
  if (raw_len > kMaxRawKey || blob.size() != kKeyHeader + raw_len) throw bad("bad length");
  if (want_raw != (raw_len > 0)) throw bad("raw key mismatch");
  FabricKey k;
  k.base = get<std::uint64_t>(blob, 8);
  k.length = get<std::uint64_t>(blob, 16);
  k.key = get<std::uint64_t>(blob, 24);
  if (k.length > (std::uint64_t{1} << 48)) throw bad("length out of range");
  if (k.base > ~std::uint64_t{0} - k.length) throw bad("address range wraps");
  k.raw = blob.subspan(kKeyHeader, raw_len);
  return k;
}

RemoteMemory FabricTransport::import_key(int peer, std::span<const std::byte> blob) {
  if (peer < 0 || peer >= size_)
    throw PeerError(peer,
                    "rank " + std::to_string(peer) + " sent a malformed memory key (no such rank)");
  const FabricKey k = decode_fabric_key(blob, peer, (caps_.mr_mode & FI_MR_RAW) != 0);
  RemoteMemory m;
  m.peer = peer;
  m.base = k.base;
  m.length = k.length;
  m.key = k.key;
  if (!k.raw.empty()) {
    std::vector<std::uint8_t> raw(k.raw.size());
    std::memcpy(raw.data(), k.raw.data(), k.raw.size());
    check(fi_mr_map_raw(domain_.get(), m.base, raw.data(), raw.size(), &m.key, 0), "fi_mr_map_raw",
          caps_.provider);
    mapped_raw_keys_.push_back(m.key);
  }
  return m;
}

Status FabricTransport::out_of_range(const char* what, const RemoteMemory& m, std::uint64_t off,
                                     std::uint64_t len) noexcept {
  error_ = std::string(what) + " of " + std::to_string(len) + " bytes at offset " +
           std::to_string(off) + " is outside rank " + std::to_string(m.peer) + "'s region of " +
           std::to_string(m.length) + " bytes";
  return Status::failed;
}

int FabricTransport::read_error(fid_cq* cq) noexcept {
  fi_cq_err_entry err{};
  fi_cq_readerr(cq, &err, 0);
  error_ = "completion error on " + caps_.provider + ": " + lib::strerror(err.err) + " (" +
           fi_cq_strerror(cq, err.prov_errno, err.err_data, nullptr, 0) + ")";
  return -1;
}

int FabricTransport::poll(fid_cq* cq, std::span<Completion> out) noexcept {
  std::array<fi_cq_data_entry, kPollBatch> entries;
  ssize_t n = fi_cq_read(cq, entries.data(), std::min(out.size(), entries.size()));
  if (n == -FI_EAGAIN) return 0;
  if (n == -FI_EAVAIL) return read_error(cq);
  if (n < 0) {
    error_ = call_error("fi_cq_read", caps_.provider, n);
    return -1;
  }
  return convert(entries.data(), n, out);
}

int FabricTransport::wait(fid_cq* cq, std::span<Completion> out,
                          std::chrono::milliseconds timeout) noexcept {
  const bool tx = cq == tx_cq_.get();
  const int fd = tx ? tx_wait_fd_ : rx_wait_fd_;
  if (fd < 0) return tx ? Transport::wait_tx(out, timeout) : Transport::wait_rx(out, timeout);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int n = poll(cq, out);
    if (n != 0) return n;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    // fi_trywait says whether sleeping is safe (nothing pending that only a read would see).
    fid_t f = &cq->fid;
    if (fi_trywait(fabric_.get(), &f, 1) != FI_SUCCESS) continue;
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1 << 30)));
  }
}

int FabricTransport::wait_tx(std::span<Completion> out, std::chrono::milliseconds t) noexcept {
  return wait(tx_cq_.get(), out, t);
}

int FabricTransport::wait_rx(std::span<Completion> out, std::chrono::milliseconds t) noexcept {
  return wait(rx_cq_.get(), out, t);
}

Status FabricTransport::post_recv_multi(int peer, void* buf, std::size_t len, void* desc,
                                        std::size_t min_free, std::uint64_t context) noexcept {
  if (!caps_.multi_recv) {
    error_ = caps_.provider + ": multi-receive buffers were not asked for (FI_MULTI_RECV)";
    return Status::failed;
  }
  fid_ep* ep = ep_for(peer);
  if (int rc =
          fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min_free, sizeof min_free);
      rc != 0)
    return result(rc, "fi_setopt(FI_OPT_MIN_MULTI_RECV)");
  iovec iov{buf, len};
  fi_msg msg{&iov, &desc, 1, FI_ADDR_UNSPEC, as_ctx(context), 0};
  return result(fi_recvmsg(ep, &msg, FI_MULTI_RECV), "fi_recvmsg(FI_MULTI_RECV)");
}

int FabricTransport::convert(const fi_cq_data_entry* entries, ssize_t n,
                             std::span<Completion> out) noexcept {
  for (ssize_t i = 0; i < n; ++i) {
    const fi_cq_data_entry& e = entries[i];
    Completion& c = out[static_cast<std::size_t>(i)];
    c.context = reinterpret_cast<std::uintptr_t>(e.op_context);
    c.length = static_cast<std::uint32_t>(e.len);
    c.has_data = (e.flags & FI_REMOTE_CQ_DATA) != 0;
    c.data = c.has_data ? e.data : 0;
    // A multi-receive buffer's release may come on its last message or alone (no FI_RECV).
    c.released = (e.flags & FI_MULTI_RECV) != 0;
    c.buf = (e.flags & FI_RECV) ? e.buf : nullptr;
    if (c.released && !(e.flags & FI_RECV)) c.length = 0;
    if (e.flags & (FI_RECV | FI_MULTI_RECV))
      c.kind = CompletionKind::recv;
    else if (e.flags & FI_REMOTE_WRITE)
      c.kind = CompletionKind::remote_write;
    else if (e.flags & FI_ATOMIC)
      c.kind = CompletionKind::atomic;
    else if (e.flags & FI_READ)
      c.kind = CompletionKind::read;
    else if (e.flags & FI_WRITE)
      c.kind = CompletionKind::write;
    else
      c.kind = CompletionKind::send;
  }
  return static_cast<int>(n);
}

}  // namespace fabflow::ofi

namespace fabflow {
using ofi::Fid;
using ofi::InfoPtr;

std::unique_ptr<Transport> open_libfabric(const TransportOptions& options) {
  return std::make_unique<ofi::FabricTransport>(options);
}

Capabilities probe_libfabric(const TransportOptions& options) { return ofi::select(options).caps; }

std::vector<Capabilities> discover_libfabric() {
  std::vector<Capabilities> out;
  if (!ofi::lib::available()) return out;
  InfoPtr hints(ofi::lib::allocinfo());
  hints->mode = FI_RX_CQ_DATA;
  hints->domain_attr->mr_mode = static_cast<int>(ofi::kSupportedMrMode);
  InfoPtr list;
  if (ofi::lib::getinfo(ofi::kApiVersion, nullptr, nullptr, 0, hints.get(), list.out()) != 0)
    return out;
  for (fi_info* i = list.get(); i; i = i->next) {
    if (i->ep_attr->type != FI_EP_MSG && i->ep_attr->type != FI_EP_RDM) continue;
    bool seen = false;
    for (const auto& c : out)
      seen |= c.provider == i->fabric_attr->prov_name &&
              c.endpoint == (i->ep_attr->type == FI_EP_MSG ? EndpointType::msg : EndpointType::rdm);
    if (seen) continue;
    Fid<fid_fabric> fabric;
    Fid<fid_domain> domain;
    if (ofi::lib::fabric(i->fabric_attr, fabric.out(), nullptr) == 0)
      if (fi_domain(fabric.get(), i, domain.out(), nullptr) != 0) domain.reset();
    out.push_back(ofi::describe(i, domain.get()));
  }
  return out;
}

std::string libfabric_version() {
  if (!ofi::lib::available()) return "none";
  std::uint32_t v = ofi::lib::version();
  return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
}

}  // namespace fabflow
