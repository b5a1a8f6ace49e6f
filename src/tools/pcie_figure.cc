#include "tools/pcie_figure.h"

#include <fabflow/names.h>
#include <fabflow/status.h>
#include <fabflow/version.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "tools/plot.h"
#include "tools/subprocess.h"

namespace fabflow::tools {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;
using namespace fabflow::model;

// Operations/s as the JSON gives them: null for "no limit".
ojson rate_json(double v) { return std::isfinite(v) ? ojson(v) : ojson(nullptr); }

}  // namespace

ojson pcie_row_json(const PcieRow& r) {
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

namespace {

// The experiment file the plot module reads: a header naming the plot, then the rows. x is
// the batch size when only it varies, else the payload size; every other input that varies
// is a series.
ojson figure_header(const std::vector<PcieRow>& rows, const std::string& id) {
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
    for (const auto& r : rows) seen.insert(pcie_row_json(r)[field].dump());
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

}  // namespace

int draw_pcie_figure(const std::string& png, const std::vector<PcieRow>& rows) {
  const fs::path path(png);
  const fs::path jsonl = fs::path(path).replace_extension(".jsonl");
  {
    std::ofstream out(jsonl);
    out << figure_header(rows, path.stem().string()).dump() << "\n";
    for (const auto& r : rows) out << pcie_row_json(r).dump() << "\n";
    if (!out) throw UsageError("--plot: cannot write " + jsonl.string());
  }
  Plotter plot("the data is in " + jsonl.string());
  int status = 1;
  std::string err;
  // The module prints a verdict line, and there is no claim to judge: ignore it.
  if (!plot.run(
          {"figure", jsonl.string()}, [](const std::string&) {}, &status, &err))
    return kNoFigures;
  if (status == 0) {
    std::cerr << "fabflow: wrote " << png << " (and .svg, .html, .jsonl beside it)\n";
    return 0;
  }
  const std::string why = Plotter::last_error_line(err);
  print_error((why.empty() ? "the plot module failed" : why) +
              ": no figure drawn; the data is in " + jsonl.string());
  return 1;
}

}  // namespace fabflow::tools
