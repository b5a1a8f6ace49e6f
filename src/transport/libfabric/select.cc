#include "transport/libfabric/select.h"

#include <rdma/fi_atomic.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <algorithm>
#include <cstring>
#include <set>

namespace fabflow::ofi {

std::string call_error(const char* call, const std::string& provider, long rc) {
  return std::string(call) + " on " + (provider.empty() ? "libfabric" : provider) + ": " +
         lib::strerror(static_cast<int>(-rc)) + " (" + std::to_string(rc) + ")";
}

bool software_provider(std::string_view name) noexcept {
  for (std::string_view p : {"tcp", "net", "shm", "udp", "sockets"})
    if (name.find(p) != std::string_view::npos) return true;
  return false;
}

namespace {

// Providers whose RMA rides the connection's byte stream (tcp, and ofi_rxm over it): a WRITE
// is its header and payload in the stream, the payload placed by the target as its progress
// reads it.
bool stream_rma(std::string_view name) noexcept {
  return name == "tcp" || name.starts_with("tcp;");
}

bool wants(const TransportOptions& o, std::initializer_list<Op> ops) {
  return std::any_of(o.ops.begin(), o.ops.end(),
                     [&](Op op) { return std::find(ops.begin(), ops.end(), op) != ops.end(); });
}

InfoPtr make_hints(const TransportOptions& o, EndpointType ep) {
  InfoPtr hints(lib::allocinfo());
  if (!hints) throw Error("fi_allocinfo: out of memory");
  hints->caps = FI_MSG;
  if (wants(o, {Op::write, Op::read, Op::writedata})) hints->caps |= FI_RMA;
  if (wants(o, {Op::fadd, Op::cswap})) hints->caps |= FI_ATOMIC;
  if (o.multi_recv) hints->caps |= FI_MULTI_RECV;
  hints->mode = FI_RX_CQ_DATA;
  hints->ep_attr->type = ep == EndpointType::msg     ? FI_EP_MSG
                         : ep == EndpointType::dgram ? FI_EP_DGRAM
                                                     : FI_EP_RDM;
  hints->domain_attr->mr_mode = static_cast<int>(kSupportedMrMode);
  hints->domain_attr->threading = o.thread_safe ? FI_THREAD_SAFE : FI_THREAD_DOMAIN;
  if (o.provider != "auto") hints->fabric_attr->prov_name = strdup(o.provider.c_str());
  return hints;
}

InfoPtr getinfo(const char* node, uint64_t flags, const fi_info* hints) {
  InfoPtr out;
  int rc = lib::getinfo(kApiVersion, node, nullptr, flags, hints, out.out());
  if (rc != 0) return InfoPtr();
  return out;
}

std::string available_providers() {
  InfoPtr all = getinfo(nullptr, 0, nullptr);
  std::set<std::string> names;
  for (fi_info* i = all.get(); i; i = i->next) names.insert(i->fabric_attr->prov_name);
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

bool ip_addressed(const fi_info* i) {
  return i->addr_format == FI_SOCKADDR_IN || i->addr_format == FI_SOCKADDR_IN6 ||
         i->addr_format == FI_SOCKADDR;
}

// Drops providers we do not want for "auto": the udp datagram stack and the legacy sockets
// provider are not reliable-connected transports worth benchmarking by default.
bool acceptable_for_auto(const fi_info* i) {
  std::string_view name = i->fabric_attr->prov_name;
  return name.find("udp") == std::string_view::npos &&
         name.find("sockets") == std::string_view::npos;
}

// Asked through fi_getinfo rather than by opening a context: closing an unused shared receive
// context crashes the shm provider of libfabric 1.17.
bool offers_shared_rx(const fi_info* info) {
  InfoPtr hints(lib::allocinfo());
  hints->fabric_attr->prov_name = strdup(info->fabric_attr->prov_name);
  hints->ep_attr->type = info->ep_attr->type;
  hints->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
  hints->mode = FI_RX_CQ_DATA;
  hints->domain_attr->mr_mode = static_cast<int>(kSupportedMrMode);
  return static_cast<bool>(getinfo(nullptr, 0, hints.get()));
}

}  // namespace

Capabilities describe(const fi_info* info, fid_domain* domain) {
  Capabilities c;
  c.provider = info->fabric_attr->prov_name;
  c.fabric = info->fabric_attr->name ? info->fabric_attr->name : "";
  c.domain = info->domain_attr->name ? info->domain_attr->name : "";
  c.endpoint = info->ep_attr->type == FI_EP_MSG     ? EndpointType::msg
               : info->ep_attr->type == FI_EP_DGRAM ? EndpointType::dgram
                                                    : EndpointType::rdm;
  c.reliable = info->ep_attr->type != FI_EP_DGRAM;
  c.api_version = info->fabric_attr->prov_version;
  c.inject_size = info->tx_attr->inject_size;
  c.max_msg_size = info->ep_attr->max_msg_size;
  c.max_rma_size = info->ep_attr->max_msg_size;
  // tcp: an 8 MB WRITE as 8 of 1 MiB ran 1.1-1.7x one of 8 MB in the same run
  // (docs/transfer-engine.md).
  if (stream_rma(c.provider)) c.rma_preferred_size = std::size_t{1} << 20;
  c.cq_data_size = info->domain_attr->cq_data_size;
  c.rma = (info->caps & FI_RMA) != 0;
  c.multi_recv = (info->caps & FI_MULTI_RECV) != 0;
  c.rx_cq_data_consumes_recv = (info->mode & FI_RX_CQ_DATA) != 0;
  c.in_order_data = (info->tx_attr->comp_order & FI_ORDER_DATA) != 0;
  c.msg_order = info->tx_attr->msg_order;
  c.write_after_write = (c.msg_order & FI_ORDER_WAW) != 0;
  c.data_progress_advertised_manual = info->domain_attr->data_progress == FI_PROGRESS_MANUAL;
  c.data_progress_manual = c.data_progress_advertised_manual || software_provider(c.provider);
  c.control_progress_manual = info->domain_attr->control_progress == FI_PROGRESS_MANUAL;
  c.mr_mode = static_cast<std::uint64_t>(info->domain_attr->mr_mode);
  c.threading = info->domain_attr->threading;
  if (domain && (info->caps & FI_ATOMIC)) {
    fi_atomic_attr attr{};
    bool fadd = fi_query_atomic(domain, FI_UINT64, FI_SUM, &attr, FI_FETCH_ATOMIC) == 0;
    bool cswap = fi_query_atomic(domain, FI_UINT64, FI_CSWAP, &attr, FI_COMPARE_ATOMIC) == 0;
    c.atomics_u64 = fadd && cswap;
  }
  c.shared_rx = offers_shared_rx(info);
  return c;
}

Selection select(const TransportOptions& o) {
  if (o.provider.empty()) throw UsageError("provider name is empty");
  std::vector<EndpointType> order;
  if (o.endpoint == EndpointType::automatic)
    order = {EndpointType::msg, EndpointType::rdm};
  else
    order = {o.endpoint};

  Selection s;
  for (EndpointType ep : order) {
    InfoPtr hints = make_hints(o, ep);
    InfoPtr list;
    // The bootstrap's address binds IP-based providers to the right interface; others (shm)
    // would take it as their endpoint name, which must stay unique per process.
    if (!o.node.empty()) {
      list = getinfo(o.node.c_str(), FI_SOURCE, hints.get());
      if (list && !ip_addressed(list.get())) list = InfoPtr();
    }
    if (!list) list = getinfo(nullptr, 0, hints.get());
    for (fi_info* i = list.get(); i; i = i->next) {
      // udp is the one datagram provider here: "auto" takes it where dgram is asked for.
      if (o.provider == "auto" && ep != EndpointType::dgram && !acceptable_for_auto(i)) continue;
      s.info = i;
      break;
    }
    if (s.info) {
      s.list = std::move(list);
      break;
    }
  }

  if (!s.info) {
    // Tell apart "no such provider" from "provider lacks what was asked".
    InfoPtr probe(lib::allocinfo());
    if (o.provider != "auto") probe->fabric_attr->prov_name = strdup(o.provider.c_str());
    InfoPtr any = getinfo(nullptr, 0, probe.get());
    if (!any)
      throw UsageError("unknown provider '" + o.provider + "' (available: local, " +
                       available_providers() + ")");
    if (!o.ops.empty()) {
      // The endpoint exists without the operations' capabilities: name the missing one.
      TransportOptions bare = o;
      bare.ops.clear();
      Selection b = select(bare);
      if (auto m = missing_op(b.caps, o.ops)) throw UsageError(m->why);
    }
    std::string what = o.endpoint == EndpointType::automatic
                           ? std::string("a msg or rdm endpoint")
                           : std::string(to_string(o.endpoint)) + " endpoints";
    std::string ops;
    for (Op op : o.ops) ops += (ops.empty() ? "" : ", ") + std::string(to_string(op));
    throw UsageError("provider '" + o.provider + "' offers no " + what +
                     (ops.empty() ? "" : " with " + ops) + " on this machine");
  }

  // Open a throw-away domain to learn about atomics and shared receive contexts.
  Fid<fid_fabric> fabric;
  Fid<fid_domain> domain;
  if (lib::fabric(s.info->fabric_attr, fabric.out(), nullptr) == 0)
    if (fi_domain(fabric.get(), s.info, domain.out(), nullptr) != 0) domain.reset();
  s.caps = describe(s.info, domain.get());
  if (auto m = missing_op(s.caps, o.ops)) throw UsageError(m->why);
  return s;
}

}  // namespace fabflow::ofi
