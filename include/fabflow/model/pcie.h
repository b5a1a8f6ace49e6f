// The PCIe cost model of seed 001 (Kalia et al., "Design Guidelines for High Performance RDMA
// Systems", ATC 2016, sections 2-3 and 5.2): the bytes one RDMA operation puts on the PCIe link
// in each direction (work requests by MMIO or doorbell + DMA read, payload DMA, completion
// entries), the operation rate each direction, the MMIO rate and the NIC allow, and which of
// them binds. Pure arithmetic, no hardware needed; docs/pcie-model.md states the equations,
// the defaults and their sources, and what the model cannot know.
//
// Start with pcie_cost(link, nic, work). Hardware constants are fields with the seed's values
// (its Connect-IB on PCIe 3.0 x16) as defaults.
#pragma once

#include <fabflow/names.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fabflow::model {

enum class PcieGen : std::uint8_t { gen1, gen2, gen3, gen4, gen5 };
enum class Verb : std::uint8_t { send, recv, write, read, atomic };
enum class QpType : std::uint8_t { rc, uc, ud };
// How the CPU hands work requests (WQEs) to the NIC: each WQE written to the device by MMIO
// (write-combined cache lines), or one doorbell MMIO per batch after which the NIC DMA-reads
// the batch's WQEs from host memory.
enum class WqePath : std::uint8_t { mmio, doorbell };
// What limits the operation rate: host-to-device bytes, device-to-host bytes, MMIO writes the
// CPU can issue, or the NIC's processing (only when given).
enum class Limit : std::uint8_t { h2d, d2h, mmio, nic };
inline constexpr std::size_t kLimits = 4;

inline constexpr NameTable<PcieGen, 10> kPcieGenNames{{{{"gen1", PcieGen::gen1},
                                                        {"gen2", PcieGen::gen2},
                                                        {"gen3", PcieGen::gen3},
                                                        {"gen4", PcieGen::gen4},
                                                        {"gen5", PcieGen::gen5},
                                                        {"1", PcieGen::gen1},
                                                        {"2", PcieGen::gen2},
                                                        {"3", PcieGen::gen3},
                                                        {"4", PcieGen::gen4},
                                                        {"5", PcieGen::gen5}}},
                                                      /*case_insensitive=*/true};
inline constexpr NameTable<Verb, 5> kVerbNames{{{{"send", Verb::send},
                                                 {"recv", Verb::recv},
                                                 {"write", Verb::write},
                                                 {"read", Verb::read},
                                                 {"atomic", Verb::atomic}}}};
inline constexpr NameTable<QpType, 3> kQpTypeNames{
    {{{"rc", QpType::rc}, {"uc", QpType::uc}, {"ud", QpType::ud}}}, /*case_insensitive=*/true};
inline constexpr NameTable<WqePath, 2> kWqePathNames{
    {{{"mmio", WqePath::mmio}, {"doorbell", WqePath::doorbell}}}};
inline constexpr NameTable<Limit, 4> kLimitNames{
    {{{"h2d", Limit::h2d}, {"d2h", Limit::d2h}, {"mmio", Limit::mmio}, {"nic", Limit::nic}}}};
constexpr const auto& name_table(PcieGen) noexcept { return kPcieGenNames; }
constexpr const auto& name_table(Verb) noexcept { return kVerbNames; }
constexpr const auto& name_table(QpType) noexcept { return kQpTypeNames; }
constexpr const auto& name_table(WqePath) noexcept { return kWqePathNames; }
constexpr const auto& name_table(Limit) noexcept { return kLimitNames; }

// What a generation's physical and transaction layers cost: the raw rate, the line encoding,
// and the bytes each transaction-layer packet (TLP) carries besides its data (header, sequence
// number, LCRC, framing).
struct PcieGenSpec {
  double gigatransfers_per_s;
  double encoding;                   // 8b/10b: 0.8; 128b/130b: 128/130
  unsigned request_header_bytes;     // P_r: a memory read or write request
  unsigned completion_header_bytes;  // P_c: a read completion
};
PcieGenSpec gen_spec(PcieGen gen);

// One PCIe link and the host's side of it. Defaults: the seed's CIB cluster.
struct PcieLink {
  PcieGen gen = PcieGen::gen3;
  unsigned lanes = 16;
  unsigned cache_line_bytes = 64;
  unsigned read_completion_bytes = 128;   // C_rc: the CPU's read completion combining size
  unsigned max_read_request_bytes = 512;  // MRRS: a DMA read asks for at most this much
  unsigned max_payload_bytes = 256;       // MPS: a DMA write carries at most this much
  unsigned doorbell_bytes = 8;            // d
  double mmio_lines_per_s = 0;  // write-combined lines the CPU can issue; 0: what the link carries

  double lane_MBps() const;  // P_bw, 10^6 bytes/s per direction
  double link_MBps() const;  // lanes * P_bw
  // Data bytes/s of DMA reads: every C_rc bytes of data come with P_c bytes of header.
  double useful_dma_read_MBps() const;
  // Write-combining MMIO: mmio_lines_per_s, or lanes * P_bw / (64 + P_r) (seed section 5.2.1).
  double mmio_line_rate() const;
};

// What the NIC does per operation. WQE segment sizes are Mellanox's (mlx5: Connect-IB and
// later), which reproduce the seed's Table 1 boundaries; see docs/pcie-model.md.
struct NicModel {
  unsigned ctrl_segment_bytes = 16;      // every send-queue WQE
  unsigned raddr_segment_bytes = 16;     // write, read, atomic: remote address and key
  unsigned datagram_segment_bytes = 48;  // UD: the address vector
  unsigned atomic_segment_bytes = 16;    // operands
  unsigned inline_header_bytes = 4;      // an inline payload's length word
  unsigned pointer_segment_bytes = 16;   // address, length, key of a payload in host memory
  unsigned recv_wqe_bytes = 16;          // one scatter entry
  unsigned cqe_bytes = 64;
  unsigned atomic_bytes = 8;
  std::size_t max_inline_bytes = 256;  // larger payloads are DMA-read even with inline on
  std::size_t recv_inline_bytes = 64;  // inline receive: payloads up to this ride in the CQE
  double ops_per_s = 0;                // the NIC's processing limit; 0: not modelled
};

// One operation and how it is posted.
struct PcieWork {
  Verb verb = Verb::send;
  QpType qp = QpType::rc;
  std::size_t payload_bytes = 64;  // 0: header-only; atomics always move atomic_bytes
  bool inline_payload = true;      // send, write: payload copied into the WQE; recv: into the CQE
  WqePath path = WqePath::mmio;    // recv: ignored, receive WQEs are always DMA-read
  unsigned batch = 1;              // WQEs per doorbell (recv: receive WQEs per DMA read)
  unsigned signal_every = 1;       // a CQE every n-th operation (recv: every one)
};

// Per-operation costs on the link of the host that posts the operation (the requester; for
// recv the responder). Bytes are transaction-layer bytes, headers included.
struct PcieCost {
  std::string unsupported;  // non-empty: the QP type lacks the verb; nothing else is set
  std::size_t payload_bytes = 0;
  bool inlined = false;
  std::size_t wqe_bytes = 0, wqe_lines = 0;
  double mmio_writes = 0;  // MMIO write TLPs (WQE lines, doorbells) per operation
  double h2d_bytes = 0, d2h_bytes = 0;
  std::array<double, kLimits> limits{};  // operations/s by Limit; +infinity: no limit
  double ceiling_ops_per_s = 0;
  Limit bound = Limit::h2d;
};

PcieCost pcie_cost(const PcieLink& link, const NicModel& nic, const PcieWork& work);

// A grid of inputs, for evaluating every combination at once (`fabflow model pcie`).
struct PcieGrid {
  PcieLink link;  // every generation's lanes, read and write sizes and MMIO rate
  std::vector<PcieGen> gens;
  std::vector<QpType> qps;
  std::vector<Verb> verbs;
  std::vector<unsigned> batches;
  std::vector<WqePath> paths;      // empty: mmio for batch 1, doorbell for larger batches
  std::vector<std::size_t> sizes;  // payload bytes (0: header only)
  bool inline_payload = true;
  unsigned signal_every = 1;
};

// One point of the grid and its cost.
struct PcieRow {
  PcieLink link;
  PcieWork work;
  PcieCost cost;
};

// Every combination of the grid, in the order gens, qps, verbs, batches, paths, sizes. A
// receive has one path (its WQEs are always DMA-read); an atomic one size (its operand).
std::vector<PcieRow> pcie_grid(const PcieGrid& grid, const NicModel& nic);

}  // namespace fabflow::model
