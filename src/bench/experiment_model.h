// The catalogue's reference series from a model (an entry's "reference"): the flags of
// `fabflow model pcie` it may give and the model's rows for one of its curves.
#pragma once

#include <fabflow/bench/experiment.h>
#include <fabflow/model/pcie.h>

#include <cstddef>
#include <vector>

namespace fabflow::bench {

// The `fabflow model pcie` flags a reference may give, one value each; the x flag (-S or
// --batch) takes the entry's values as a list.
inline constexpr const char* kPcieFlags[] = {
    "-o",      "--op",     "--transport", "--gen",  "--lanes",      "--inline",    "--method",
    "--batch", "--signal", "-S",          "--size", "--max-inline", "--mmio-rate", "--nic-mops"};

// Curve `curve` of entry `e`'s reference evaluated by the PCIe model at the entry's x values
// (with `quick`'s reductions, on `cores` CPUs); throws std::invalid_argument naming the flag
// or value that is wrong.
std::vector<model::PcieRow> model_rows(const ExperimentEntry& e, std::size_t curve, bool quick,
                                       unsigned cores);

}  // namespace fabflow::bench
