// Advise profiles written by hand for the tests of `auto`: measured "here" unless told
// otherwise, so the library trusts them.
#pragma once

#include <fabflow/version.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

#include "common/machine.h"

namespace fabflow::testing {

struct RankedRow {
  std::string provider, design;
  double median;
  std::string status = "behind";
};

// A queue profile of `rows`, measured on this machine by this version for `size` and
// throughput.
inline nlohmann::json advice_profile(const std::vector<RankedRow>& rows, std::string size = "64",
                                     std::string family = "queue") {
  const MachineIdentity& m = machine_identity();
  nlohmann::json ranked = nlohmann::json::array(), providers = nlohmann::json::array();
  for (const auto& r : rows) {
    ranked.push_back({{"provider", r.provider},
                      {"design", r.design},
                      {"median", r.median},
                      {"status", r.status}});
    if (std::find(providers.begin(), providers.end(), r.provider) == providers.end())
      providers.push_back(r.provider);
  }
  return {{"type", "advice"},
          {"family", std::move(family)},
          {"objective", "throughput"},
          {"unit", "items/s"},
          {"providers", providers},
          {"workload", {{"size", std::move(size)}, {"args", nlohmann::json::array()}}},
          {"created", "2026-11-28T09:00:00Z"},
          {"fabflow_version", FABFLOW_VERSION},
          {"fingerprint", {{"cpu_model", m.cpu_model}, {"cores", m.cores}, {"kernel", m.kernel}}},
          {"winner", nullptr},
          {"ranked", ranked},
          {"refused", nlohmann::json::array()}};
}

// Writes `content` to a fresh file under the test's temporary folder and returns its path.
inline std::string write_temp(const std::string& name, const std::string& content) {
  const std::string path =
      ::testing::TempDir() + "/fabflow-" + std::to_string(::getpid()) + "-" + name;
  std::ofstream(path, std::ios::trunc) << content;
  return path;
}

}  // namespace fabflow::testing
