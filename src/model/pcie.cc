// The PCIe cost model (include/fabflow/model/pcie.h); equations in docs/pcie-model.md.
#include <fabflow/model/pcie.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace fabflow::model {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

double ceil_div(double bytes, double unit) { return bytes <= 0 ? 0 : std::ceil(bytes / unit); }

std::size_t round_up(std::size_t bytes, std::size_t unit) {
  return (bytes + unit - 1) / unit * unit;
}

// Bytes on the link in each direction for one transfer of `bytes` of data.
struct Traffic {
  double h2d = 0, d2h = 0;
  Traffic& operator+=(const Traffic& o) {
    h2d += o.h2d;
    d2h += o.d2h;
    return *this;
  }
  Traffic operator*(double n) const { return {h2d * n, d2h * n}; }
  Traffic operator/(double n) const { return {h2d / n, d2h / n}; }
};

// The NIC reads host memory: read requests go up, completions of at most C_rc bytes come down.
Traffic dma_read(const PcieLink& link, double bytes) {
  const PcieGenSpec g = gen_spec(link.gen);
  return {bytes + ceil_div(bytes, link.read_completion_bytes) * g.completion_header_bytes,
          ceil_div(bytes, link.max_read_request_bytes) * g.request_header_bytes};
}

// The NIC writes host memory: posted write requests of at most MPS bytes go up.
Traffic dma_write(const PcieLink& link, double bytes) {
  return {
      0, bytes + ceil_div(bytes, link.max_payload_bytes) * gen_spec(link.gen).request_header_bytes};
}

// The CPU writes the device: one write request per MMIO (a write-combined line or a doorbell).
Traffic mmio_write(const PcieLink& link, double bytes) {
  return {bytes + gen_spec(link.gen).request_header_bytes, 0};
}

const char* unsupported_reason(QpType qp, Verb verb) {
  if (qp == QpType::ud && verb != Verb::send && verb != Verb::recv)
    return "UD carries only send and recv";
  if (qp == QpType::uc && (verb == Verb::read || verb == Verb::atomic))
    return "UC has no read or atomics (send, recv and write only)";
  return "";
}

// A send-queue WQE: control segment, the verb's segments, then the payload inline, a pointer
// to it, or nothing (header-only).
std::size_t wqe_bytes(const NicModel& nic, const PcieWork& w, bool inlined) {
  std::size_t bytes = nic.ctrl_segment_bytes;
  if (w.qp == QpType::ud) bytes += nic.datagram_segment_bytes;
  if (w.verb != Verb::send) bytes += nic.raddr_segment_bytes;
  if (w.verb == Verb::atomic) return bytes + nic.atomic_segment_bytes + nic.pointer_segment_bytes;
  if (w.payload_bytes == 0) return bytes;
  return bytes + (inlined ? nic.inline_header_bytes + w.payload_bytes : nic.pointer_segment_bytes);
}

}  // namespace

PcieGenSpec gen_spec(PcieGen gen) {
  // gen1/gen2: 8b/10b; TLP = 1 B STP + 2 B sequence + 16 B (request, 64-bit address) or 12 B
  // (completion) header + 4 B LCRC + 1 B END: 24 / 20 B (the seed's Figure 2a for gen2).
  // gen3 on: 128b/130b; the seed's Figure 2a gives 26 / 22 B for gen3; gen4 and gen5 keep
  // gen3's encoding and framing.
  switch (gen) {
    case PcieGen::gen1: return {2.5, 0.8, 24, 20};
    case PcieGen::gen2: return {5.0, 0.8, 24, 20};
    case PcieGen::gen3: return {8.0, 128.0 / 130.0, 26, 22};
    case PcieGen::gen4: return {16.0, 128.0 / 130.0, 26, 22};
    case PcieGen::gen5: return {32.0, 128.0 / 130.0, 26, 22};
  }
  return {8.0, 128.0 / 130.0, 26, 22};
}

double PcieLink::lane_MBps() const {
  const PcieGenSpec g = gen_spec(gen);
  return g.gigatransfers_per_s * 1000.0 * g.encoding / 8.0;
}

double PcieLink::link_MBps() const { return lanes * lane_MBps(); }

double PcieLink::useful_dma_read_MBps() const {
  const double c = read_completion_bytes;
  return link_MBps() * c / (c + gen_spec(gen).completion_header_bytes);
}

double PcieLink::mmio_line_rate() const {
  if (mmio_lines_per_s > 0) return mmio_lines_per_s;
  return link_MBps() * 1e6 / (cache_line_bytes + gen_spec(gen).request_header_bytes);
}

PcieCost pcie_cost(const PcieLink& link, const NicModel& nic, const PcieWork& w) {
  PcieCost c;
  c.unsupported = unsupported_reason(w.qp, w.verb);
  if (!c.unsupported.empty()) return c;
  const double line = link.cache_line_bytes;
  const double batch = std::max(1u, w.batch);
  c.payload_bytes = w.verb == Verb::atomic ? nic.atomic_bytes : w.payload_bytes;
  Traffic t;

  if (w.verb == Verb::recv) {
    // Receive WQEs are fetched by DMA, `batch` at a time; the CQE is always written, and
    // carries the payload with inline receive; a header-only receive writes no payload.
    c.wqe_bytes = nic.recv_wqe_bytes;
    c.wqe_lines = round_up(c.wqe_bytes, link.cache_line_bytes) / link.cache_line_bytes;
    t += dma_read(link, batch * c.wqe_bytes) / batch;
    c.inlined = w.inline_payload && c.payload_bytes > 0 && c.payload_bytes <= nic.recv_inline_bytes;
    std::size_t cqe = nic.cqe_bytes;
    if (c.inlined)
      cqe += round_up(c.payload_bytes, link.cache_line_bytes);
    else
      t += dma_write(link, static_cast<double>(c.payload_bytes));
    t += dma_write(link, static_cast<double>(cqe));
  } else {
    // Send queue: the WQE by MMIO or by doorbell + DMA read of the batch's cache lines.
    c.inlined = w.inline_payload && (w.verb == Verb::send || w.verb == Verb::write) &&
                c.payload_bytes > 0 && c.payload_bytes <= nic.max_inline_bytes;
    c.wqe_bytes = wqe_bytes(nic, w, c.inlined);
    c.wqe_lines = round_up(c.wqe_bytes, link.cache_line_bytes) / link.cache_line_bytes;
    if (w.path == WqePath::mmio) {
      c.mmio_writes = static_cast<double>(c.wqe_lines);
      t += mmio_write(link, line) * c.mmio_writes;
    } else {
      c.mmio_writes = 1 / batch;
      t += mmio_write(link, link.doorbell_bytes) / batch;
      t += dma_read(link, batch * static_cast<double>(c.wqe_lines) * line) / batch;
    }
    const double payload = static_cast<double>(c.payload_bytes);
    if ((w.verb == Verb::send || w.verb == Verb::write) && !c.inlined) t += dma_read(link, payload);
    if (w.verb == Verb::read || w.verb == Verb::atomic)
      t += dma_write(link, payload);  // the response
    t += dma_write(link, nic.cqe_bytes) / std::max(1u, w.signal_every);
  }

  c.h2d_bytes = t.h2d;
  c.d2h_bytes = t.d2h;
  const double link_Bps = link.link_MBps() * 1e6;
  auto rate = [](double capacity, double per_op) {
    return per_op > 0 ? capacity / per_op : kInfinity;
  };
  c.limits[static_cast<std::size_t>(Limit::h2d)] = rate(link_Bps, c.h2d_bytes);
  c.limits[static_cast<std::size_t>(Limit::d2h)] = rate(link_Bps, c.d2h_bytes);
  c.limits[static_cast<std::size_t>(Limit::mmio)] = rate(link.mmio_line_rate(), c.mmio_writes);
  c.limits[static_cast<std::size_t>(Limit::nic)] = nic.ops_per_s > 0 ? nic.ops_per_s : kInfinity;
  // The lowest limit binds. On a tie MMIO is named first: with the link-derived MMIO rate the
  // MMIO and host-to-device limits coincide exactly when the MMIO writes fill that direction.
  c.ceiling_ops_per_s = kInfinity;
  for (Limit l : {Limit::mmio, Limit::h2d, Limit::d2h, Limit::nic}) {
    const double v = c.limits[static_cast<std::size_t>(l)];
    if (v < c.ceiling_ops_per_s * (1 - 1e-12)) {
      c.ceiling_ops_per_s = v;
      c.bound = l;
    }
  }
  return c;
}

std::vector<PcieRow> pcie_grid(const PcieGrid& grid, const NicModel& nic) {
  std::vector<PcieRow> rows;
  for (PcieGen gen : grid.gens) {
    PcieLink link = grid.link;
    link.gen = gen;
    for (QpType qp : grid.qps)
      for (Verb verb : grid.verbs)
        for (unsigned batch : grid.batches) {
          std::vector<WqePath> paths = grid.paths;
          if (paths.empty()) paths = {batch == 1 ? WqePath::mmio : WqePath::doorbell};
          if (verb == Verb::recv) paths.resize(1);  // receive WQEs are always DMA-read
          for (WqePath path : paths)
            for (std::size_t size : grid.sizes) {
              if (verb == Verb::atomic && size != grid.sizes.front()) continue;  // always 8 bytes
              const PcieWork w{.verb = verb,
                               .qp = qp,
                               .payload_bytes = verb == Verb::atomic ? nic.atomic_bytes : size,
                               .inline_payload = grid.inline_payload,
                               .path = path,
                               .batch = batch,
                               .signal_every = grid.signal_every};
              rows.push_back({link, w, pcie_cost(link, nic, w)});
            }
        }
  }
  return rows;
}

}  // namespace fabflow::model
