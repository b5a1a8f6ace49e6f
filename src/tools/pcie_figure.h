// The output of `fabflow model pcie` that is more than a table: its JSON line per row and its
// figure, drawn by python/fabflow_plot from an experiment file (docs/pcie-model.md).
#pragma once

#include <fabflow/model/pcie.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fabflow::tools {

// One row of the grid as its JSON line (docs/pcie-model.md, "Output").
nlohmann::ordered_json pcie_row_json(const model::PcieRow& r);

// Writes `png`'s .jsonl beside it (a header naming the plot, then the rows) and has the plot
// module draw `png` (and .svg, .html); the exit status (kNoFigures where it cannot draw here).
int draw_pcie_figure(const std::string& png, const std::vector<model::PcieRow>& rows);

}  // namespace fabflow::tools
