// The PCIe model's rows for a catalogue entry's reference series: the entry's model flags read
// as `fabflow model pcie` reads them (src/cli/model.cc), evaluated at the entry's x values.
#include "bench/experiment_model.h"

#include <fabflow/bench/common.h>
#include <fabflow/status.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace fabflow::bench {
namespace {

std::string joined_flags() {
  std::string out;
  for (const char* f : kPcieFlags) {
    if (!out.empty()) out += '|';
    out += f;
  }
  return out;
}

// `text` as a whole number (long) or real (double) in [low, high], else one error naming `flag`.
template <typename T>
T number_in(const std::string& flag, const std::string& text, T low, T high) {
  constexpr bool kInteger = std::is_integral_v<T>;
  std::size_t used = 0;
  T v{};
  try {
    if constexpr (kInteger)
      v = std::stol(text, &used);
    else
      v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !(v >= low && v <= high))
    throw std::invalid_argument(flag + " '" + text + "': expected " +
                                (kInteger ? "an integer" : "a number") + " in " +
                                std::to_string(low) + ".." + std::to_string(high));
  return v;
}

template <class E>
E name_in(const std::string& flag, const std::string& text) {
  if (auto v = parse_name<E>(text)) return *v;
  throw std::invalid_argument(flag + " '" + text + "': expected one of " + name_list<E>());
}

std::vector<std::string> comma_items(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

// Sets one `fabflow model pcie` flag of the grid as that command reads it (src/cli/model.cc).
// Throws std::invalid_argument naming the flag and the value.
void set_pcie_flag(model::PcieGrid& g, model::NicModel& nic, const std::string& flag,
                   const std::string& value) {
  using namespace fabflow::model;
  if (flag == "-o" || flag == "--op") {
    g.verbs = {name_in<Verb>(flag, value)};
  } else if (flag == "--transport") {
    g.qps = {name_in<QpType>(flag, value)};
  } else if (flag == "--gen") {
    g.gens = {name_in<PcieGen>(flag, value)};
  } else if (flag == "--lanes") {
    g.link.lanes = static_cast<unsigned>(number_in<long>(flag, value, 1, 32));
  } else if (flag == "--inline") {
    g.inline_payload = name_in<Switch>(flag, value) == Switch::on;
  } else if (flag == "--method") {
    g.paths = {name_in<WqePath>(flag, value)};
  } else if (flag == "--batch") {
    g.batches.clear();
    for (const auto& b : comma_items(value))
      g.batches.push_back(static_cast<unsigned>(number_in<long>(flag, b, 1, 4096)));
    if (g.batches.empty()) throw std::invalid_argument(flag + ": no batch size given");
  } else if (flag == "--signal") {
    g.signal_every = static_cast<unsigned>(number_in<long>(flag, value, 1, 65536));
  } else if (flag == "-S" || flag == "--size") {
    g.sizes.clear();
    for (const auto& item : comma_items(value)) {
      if (item == "0") {
        g.sizes.push_back(0);
        continue;
      }
      try {
        const auto more = parse_sizes(item);
        g.sizes.insert(g.sizes.end(), more.begin(), more.end());
      } catch (const UsageError& e) {
        throw std::invalid_argument(flag + " '" + item + "': " + e.what());
      }
    }
    if (g.sizes.empty()) throw std::invalid_argument(flag + ": no sizes given");
  } else if (flag == "--max-inline") {
    nic.max_inline_bytes = static_cast<std::size_t>(number_in<long>(flag, value, 0, 4096));
  } else if (flag == "--mmio-rate") {
    g.link.mmio_lines_per_s = number_in<double>(flag, value, 0, 1e6) * 1e6;
  } else if (flag == "--nic-mops") {
    nic.ops_per_s = number_in<double>(flag, value, 0, 1e6) * 1e6;
  } else {
    throw std::invalid_argument("'fabflow model pcie' has no flag " + flag +
                                " a reference may set (" + joined_flags() + ")");
  }
}

// A reference curve's rows; throws std::invalid_argument naming the flag that is wrong.
}  // namespace

std::vector<model::PcieRow> model_rows(const ExperimentEntry& e, std::size_t curve, bool quick,
                                       unsigned cores) {
  const std::vector<std::string> argv = reference_argv(e, curve, quick, cores);
  model::PcieGrid grid;  // `fabflow model pcie`'s defaults
  grid.gens = {model::PcieGen::gen3};
  grid.qps = {model::QpType::rc};
  grid.verbs = {model::Verb::send};
  grid.batches = {1};
  grid.sizes = {64};
  model::NicModel nic;
  for (std::size_t i = 2; i + 1 < argv.size(); i += 2)
    set_pcie_flag(grid, nic, argv[i], argv[i + 1]);
  return model::pcie_grid(grid, nic);
}

}  // namespace fabflow::bench
