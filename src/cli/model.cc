// `fabflow model pcie`: the PCIe cost model (include/fabflow/model/pcie.h) over every
// combination of the inputs given: a table, JSON lines, and with --plot a figure drawn by
// python/fabflow_plot (src/tools/pcie_figure.cc; docs/pcie-model.md).
#include <fabflow/bench/common.h>
#include <fabflow/model/pcie.h>
#include <fabflow/status.h>
#include <fabflow/version.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "bench/report.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "tools/pcie_figure.h"

namespace fabflow::cli {
namespace {

namespace fs = std::filesystem;
using namespace fabflow::model;

struct PcieFlags {
  std::string gens = "gen3";
  unsigned lanes = 16;
  std::string verbs = "send";
  std::string qps = "rc";
  std::string sizes = "64";
  std::string inline_payload = "on";
  std::string methods;  // empty: mmio for batch 1, doorbell for larger batches (the seed's pairing)
  std::vector<unsigned> batches = {1};
  unsigned signal_every = 1;
  std::size_t max_inline = NicModel{}.max_inline_bytes;
  unsigned read_completion = PcieLink{}.read_completion_bytes;
  unsigned max_read_request = PcieLink{}.max_read_request_bytes;
  unsigned max_payload = PcieLink{}.max_payload_bytes;
  double mmio_mlines = 0;
  double nic_mops = 0;
  bool json = false;
  std::string plot;
};

using Row = PcieRow;

// The grid the flags give, evaluated.
std::vector<Row> evaluate(const PcieFlags& f, const NicModel& nic) {
  PcieGrid g;
  g.sizes = parse_sizes_or_zero(f.sizes, "-S");  // 0: header only
  g.inline_payload = parse_name<Switch>(f.inline_payload) == Switch::on;
  g.gens = parse_choice_list<PcieGen>(f.gens);
  g.qps = parse_choice_list<QpType>(f.qps);
  g.verbs = parse_choice_list<Verb>(f.verbs);
  if (!f.methods.empty()) g.paths = parse_choice_list<WqePath>(f.methods);
  g.batches = f.batches;
  g.signal_every = f.signal_every;
  g.link.lanes = f.lanes;
  g.link.read_completion_bytes = f.read_completion;
  g.link.max_read_request_bytes = f.max_read_request;
  g.link.max_payload_bytes = f.max_payload;
  g.link.mmio_lines_per_s = f.mmio_mlines * 1e6;
  return pcie_grid(g, nic);
}

std::string mops(double v) {
  if (!std::isfinite(v)) return "-";
  return report::fmt(v < 1e11 ? "%.2f" : "%.3g", v / 1e6);
}

void print_link(const PcieLink& l, const NicModel& nic) {
  const PcieGenSpec g = gen_spec(l.gen);
  std::cout << "# fabflow " << FABFLOW_VERSION << " model pcie: PCIe " << name_of(l.gen) << " x"
            << l.lanes << ", " << report::fmt("%.1f", l.lane_MBps()) << " MB/s per lane, "
            << report::fmt("%.1f", l.link_MBps()) << " MB/s each way\n"
            << "# TLP header bytes: request " << g.request_header_bytes << ", completion "
            << g.completion_header_bytes << "; read completions of " << l.read_completion_bytes
            << " B: " << report::fmt("%.0f", l.useful_dma_read_MBps())
            << " MB/s of DMA read data; MMIO: " << report::fmt("%.1f", l.mmio_line_rate() / 1e6)
            << " M lines/s" << (l.mmio_lines_per_s > 0 ? " (given)" : " (what the link carries)")
            << "\n# NIC processing: "
            << (nic.ops_per_s > 0 ? mops(nic.ops_per_s) + " Mops (given)"
                                  : "not modelled (--nic-mops)")
            << "\n";
  std::printf("%-6s %-3s %6s %-3s %-8s %5s %4s %8s %6s %8s %8s %8s %8s %8s %9s %-5s %9s\n", "op",
              "qp", "size", "inl", "method", "batch", "sig", "WQE B/CL", "MMIO", "H2D B", "D2H B",
              "H2D", "D2H", "MMIO", "ceiling", "bound", "payload");
  std::printf("%-6s %-3s %6s %-3s %-8s %5s %4s %8s %6s %8s %8s %8s %8s %8s %9s %-5s %9s\n", "", "",
              "bytes", "", "", "", "", "", "/op", "/op", "/op", "Mops", "Mops", "Mops", "Mops", "",
              "MB/s");
}

void print_row(const Row& r) {
  const PcieWork& w = r.work;
  const PcieCost& c = r.cost;
  const std::string method = w.verb == Verb::recv ? "dma" : std::string(name_of(w.path));
  const std::string size = report::size_text(w.payload_bytes);
  const unsigned sig = w.verb == Verb::recv ? 1 : w.signal_every;
  std::printf("%-6s %-3s %6s %-3s %-8s %5u %4u ", std::string(name_of(w.verb)).c_str(),
              std::string(name_of(w.qp)).c_str(), size.c_str(), c.inlined ? "yes" : "no",
              method.c_str(), w.batch, sig);
  if (!c.unsupported.empty()) {
    std::printf("unsupported: %s\n", c.unsupported.c_str());
    return;
  }
  const auto limit = [&](Limit l) { return mops(c.limits[static_cast<std::size_t>(l)]); };
  const std::string wqe = std::to_string(c.wqe_bytes) + "/" + std::to_string(c.wqe_lines);
  std::printf("%8s %6.3f %8.1f %8.1f %8s %8s %8s %9s %-5s %9.0f\n", wqe.c_str(), c.mmio_writes,
              c.h2d_bytes, c.d2h_bytes, limit(Limit::h2d).c_str(), limit(Limit::d2h).c_str(),
              limit(Limit::mmio).c_str(), mops(c.ceiling_ops_per_s).c_str(),
              std::string(name_of(c.bound)).c_str(), c.ceiling_ops_per_s * c.payload_bytes / 1e6);
}

int run_pcie(const PcieFlags& f) {
  NicModel nic;
  nic.max_inline_bytes = f.max_inline;
  nic.ops_per_s = f.nic_mops * 1e6;
  const std::vector<Row> rows = evaluate(f, nic);
  const PcieLink* shown = nullptr;
  for (const auto& r : rows) {
    if (f.json) {
      std::cout << tools::pcie_row_json(r).dump() << "\n";
      continue;
    }
    if (!shown || shown->gen != r.link.gen) {
      if (shown) std::cout << "\n";
      print_link(r.link, nic);
      shown = &r.link;
    }
    print_row(r);
  }
  std::cout << std::flush;
  return f.plot.empty() ? 0 : tools::draw_pcie_figure(f.plot, rows);
}

}  // namespace

void add_model(CLI::App& app, Runner& run) {
  auto* model = app.add_subcommand("model", "analytical models");
  model->require_subcommand(1);
  auto* pcie = model->add_subcommand(
      "pcie",
      "what each RDMA operation costs on the PCIe link, the rate it allows, what binds "
      "(seed 001; docs/pcie-model.md)");
  auto f = std::make_shared<PcieFlags>();
  add_choice_list<PcieGen>(*pcie, "--gen", f->gens, "PCIe generation(s), comma-separated, or all");
  add_number<unsigned>(*pcie, "--lanes", f->lanes, 1, 32, "link width");
  add_choice_list<Verb>(*pcie, "-o,--op", f->verbs, "operation(s), comma-separated, or all");
  add_choice_list<QpType>(*pcie, "--transport", f->qps, "transport(s), comma-separated, or all");
  pcie->add_option("-S,--size", f->sizes,
                   "payload size(s): 0 (header-only) | 60 | 0,60,4K | 8:4K (default 64)");
  add_choice<Switch>(*pcie, "--inline", f->inline_payload,
                     "on: payloads up to --max-inline ride in the WQE (recv: in the CQE)");
  add_choice<WqePath>(
      *pcie, "--method", f->methods,
      "WQE by MMIO or doorbell + DMA read (default: mmio at batch 1, else doorbell)",
      /*list=*/true);
  pcie->add_option_function<std::string>(
          "--batch",
          [f](const std::string& text) {
            f->batches.clear();
            for (const auto& b : split(text, ','))
              f->batches.push_back(static_cast<unsigned>(parse_integer("--batch", b, 1, 4096)));
            if (f->batches.empty()) throw CLI::ValidationError("--batch: no batch size given");
          },
          "WQEs per doorbell, comma-separated (1..4096, default 1)")
      ->type_name("N[,N..]");
  add_number<unsigned>(*pcie, "--signal", f->signal_every, 1, 65536,
                       "a completion (CQE) every n-th operation");
  add_number<std::size_t>(*pcie, "--max-inline", f->max_inline, 0, 4096,
                          "largest inline payload in bytes (default 256)");
  add_number<unsigned>(*pcie, "--read-completion", f->read_completion, 64, 4096,
                       "the CPU's read completion combining size C_rc in bytes (default 128)");
  add_number<unsigned>(*pcie, "--max-read-request", f->max_read_request, 128, 4096,
                       "the NIC's max read request size in bytes (default 512)");
  add_number<unsigned>(*pcie, "--max-payload", f->max_payload, 128, 4096,
                       "the link's max payload size in bytes (default 256)");
  add_real(
      *pcie, "--mmio-rate", f->mmio_mlines, 0, 1e6,
      "write-combined MMIO lines/s the CPU issues, in millions (default: what the link carries)");
  add_real(*pcie, "--nic-mops", f->nic_mops, 0, 1e6,
           "the NIC's processing limit in Mops (default: not modelled)");
  pcie->add_flag("--json", f->json, "one JSON object per input point");
  pcie->add_option("--plot", f->plot, "also draw the ceiling into FILE.png (python/fabflow_plot)")
      ->check(CLI::Validator(
          [](std::string& file) {
            return fs::path(file).extension() == ".png" ? ""
                                                        : "takes a FILE.png, got '" + file + "'";
          },
          "FILE.png"));
  pcie->callback([&run, f] { run = [f] { return run_pcie(*f); }; });
}

}  // namespace fabflow::cli
