// `fabflow model pcie`: the PCIe cost model (include/fabflow/model/pcie.h) over every
// combination of the inputs given: a table, JSON lines, and with --plot a figure drawn by
// python/fabflow_plot (docs/pcie-model.md).
#include <fabflow/bench/common.h>
#include <fabflow/model/pcie.h>
#include <fabflow/status.h>
#include <fabflow/version.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "bench/report.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "tools/plot.h"

namespace fabflow::cli {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;
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

// Operations/s as the JSON gives them: null for "no limit".
ojson rate_json(double v) { return std::isfinite(v) ? ojson(v) : ojson(nullptr); }

ojson row_json(const Row& r) {
  const PcieWork& w = r.work;
  const PcieCost& c = r.cost;
  const PcieGenSpec g = gen_spec(r.link.gen);
  ojson j = {{"type", "model"},
             {"model", "pcie"},
             {"generation", name_of(r.link.gen)},
             {"lanes", r.link.lanes},
             {"op", name_of(w.verb)},
             {"transport", name_of(w.qp)},
             {"size_bytes", w.payload_bytes},
             {"inline", w.inline_payload},
             {"method", w.verb == Verb::recv ? ojson(nullptr) : ojson(name_of(w.path))},
             {"batch", w.batch},
             {"signal_every", w.verb == Verb::recv ? 1u : w.signal_every}};
  if (!c.unsupported.empty()) {
    j["unsupported"] = c.unsupported;
    return j;
  }
  ojson limits;
  for (Limit l : all_values<Limit>())
    limits[std::string(name_of(l))] = rate_json(c.limits[static_cast<std::size_t>(l)]);
  j.update(ojson{{"inlined", c.inlined},
                 {"wqe_bytes", c.wqe_bytes},
                 {"wqe_lines", c.wqe_lines},
                 {"mmio_writes_per_op", c.mmio_writes},
                 {"h2d_bytes_per_op", c.h2d_bytes},
                 {"d2h_bytes_per_op", c.d2h_bytes},
                 {"limits_ops_per_s", limits},
                 {"ceiling_ops_per_s", c.ceiling_ops_per_s},
                 {"bound", name_of(c.bound)},
                 {"payload_MBps", c.ceiling_ops_per_s * c.payload_bytes / 1e6},
                 {"link",
                  {{"lane_MBps", r.link.lane_MBps()},
                   {"link_MBps", r.link.link_MBps()},
                   {"request_header_bytes", g.request_header_bytes},
                   {"completion_header_bytes", g.completion_header_bytes},
                   {"read_completion_bytes", r.link.read_completion_bytes},
                   {"max_read_request_bytes", r.link.max_read_request_bytes},
                   {"max_payload_bytes", r.link.max_payload_bytes},
                   {"useful_dma_read_MBps", r.link.useful_dma_read_MBps()},
                   {"mmio_lines_per_s", r.link.mmio_line_rate()}}},
                 {"fabflow_version", FABFLOW_VERSION}});
  return j;
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

// --- the figure --------------------------------------------------------------------------

// The experiment file the plot module reads: a header naming the plot, then the rows. x is
// the batch size when only it varies, else the payload size; every other input that varies
// is a series.
ojson figure_header(const std::vector<Row>& rows, const std::string& id) {
  std::set<std::size_t> sizes, batches;
  for (const auto& r : rows) {
    sizes.insert(r.work.payload_bytes);
    batches.insert(r.work.batch);
  }
  const bool by_batch = batches.size() > 1 && sizes.size() == 1;
  const std::string x = by_batch ? "batch" : "size_bytes";
  ojson series = ojson::array();
  std::string links;
  for (const char* field : {"generation", "transport", "op", "method", "inline", "batch"}) {
    if (field == x) continue;
    std::set<std::string> seen;
    for (const auto& r : rows) seen.insert(row_json(r)[field].dump());
    if (seen.size() > 1) series.push_back(field);
  }
  if (series.empty()) series.push_back("op");
  std::set<std::string> seen_links;
  for (const auto& r : rows) {
    const std::string l = std::string(name_of(r.link.gen)) + " x" + std::to_string(r.link.lanes);
    if (seen_links.insert(l).second) links += (links.empty() ? "" : ", ") + l;
  }
  ojson entry = {{"id", id},
                 {"title", "PCIe ceiling on the operation rate (model)"},
                 {"caption",
                  "The operation rate that the PCIe link allows, from fabflow's PCIe cost model "
                  "(docs/pcie-model.md): bytes per operation in each direction against the link "
                  "bandwidth, and MMIO writes against the write-combining rate."},
                 {"rows", {{"type", "model"}}},
                 {"plot",
                  {{"kind", "line"},
                   {"x", x},
                   {"y", "ceiling_ops_per_s"},
                   {"series", series},
                   {"xlabel", by_batch ? "WQEs per doorbell (batch)" : "payload (bytes)"},
                   {"ylabel", "ceiling (M operations/s)"},
                   {"logx", true},
                   {"logy", false},
                   {"y_scale", 1e-6}}},
                 {"claim", {{"text", "A model, not a measurement: no claim is checked."}}}};
  return {{"type", "experiment"},
          {"id", id},
          {"entry", entry},
          {"provider", "pcie model"},
          {"environment", {{"cpu_model", links}}}};
}

// Writes FILE's .jsonl beside it and has the plot module draw FILE (.png, .svg, .html).
int draw(const std::string& png, const std::vector<Row>& rows) {
  const fs::path path(png);
  const fs::path jsonl = fs::path(path).replace_extension(".jsonl");
  {
    std::ofstream out(jsonl);
    out << figure_header(rows, path.stem().string()).dump() << "\n";
    for (const auto& r : rows) out << row_json(r).dump() << "\n";
    if (!out) throw UsageError("--plot: cannot write " + jsonl.string());
  }
  tools::Plotter plot("the data is in " + jsonl.string());
  int status = 1;
  std::string err;
  // The module prints a verdict line, and there is no claim to judge: ignore it.
  if (!plot.run(
          {"figure", jsonl.string()}, [](const std::string&) {}, &status, &err))
    return tools::kNoFigures;
  if (status == 0) {
    std::cerr << "fabflow: wrote " << png << " (and .svg, .html, .jsonl beside it)\n";
    return 0;
  }
  const std::string why = tools::Plotter::last_error_line(err);
  print_error((why.empty() ? "the plot module failed" : why) +
              ": no figure drawn; the data is in " + jsonl.string());
  return 1;
}

int run_pcie(const PcieFlags& f) {
  NicModel nic;
  nic.max_inline_bytes = f.max_inline;
  nic.ops_per_s = f.nic_mops * 1e6;
  const std::vector<Row> rows = evaluate(f, nic);
  const PcieLink* shown = nullptr;
  for (const auto& r : rows) {
    if (f.json) {
      std::cout << row_json(r).dump() << "\n";
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
  return f.plot.empty() ? 0 : draw(f.plot, rows);
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
