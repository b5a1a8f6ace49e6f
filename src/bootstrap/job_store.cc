// Which job store a launcher offers, and the PMI process-mapping parser.
#include "bootstrap/job_store.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>

#include "fabflow/status.h"

namespace fabflow::bootstrap_detail {
namespace {

bool set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

}  // namespace

std::string job_store_offered() {
  if (set("PMIX_NAMESPACE") && set("PMIX_RANK")) return "pmix";
  if (set("PMI_FD") && set("PMI_RANK")) return "pmi2";
  return "";
}

bool job_store_built(const std::string& offered) {
  if (offered == "pmix") return pmix_built();
  if (offered == "pmi2") return pmi2_built();
  return false;
}

std::unique_ptr<JobStore> open_job_store(std::chrono::milliseconds timeout) {
  const std::string offered = job_store_offered();
  if (offered.empty()) throw Error("bootstrap: no PMIx or PMI2 server started this process");
  if (offered == "pmix") return open_pmix(timeout);
  return open_pmi2();
}

std::optional<std::uint32_t> nodes_in_process_mapping(std::string_view s) {
  constexpr std::string_view head = "(vector";
  if (s.substr(0, head.size()) != head) return std::nullopt;
  s.remove_prefix(head.size());
  std::uint64_t nodes = 0;
  while (!s.empty() && s.front() == ',') {
    s.remove_prefix(1);
    if (s.empty() || s.front() != '(') return std::nullopt;
    s.remove_prefix(1);
    std::uint32_t v[3] = {};
    for (int i = 0; i < 3; ++i) {
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v[i]);
      if (ec != std::errc() || end == s.data()) return std::nullopt;
      s.remove_prefix(static_cast<std::size_t>(end - s.data()));
      const char want = i < 2 ? ',' : ')';
      if (s.empty() || s.front() != want) return std::nullopt;
      s.remove_prefix(1);
    }
    if (v[1] == 0 || v[2] == 0) return std::nullopt;
    // Blocks may name the same nodes again (a cyclic layout): the count is the highest node.
    nodes = std::max<std::uint64_t>(nodes, std::uint64_t{v[0]} + v[1]);
    if (nodes > UINT32_MAX) return std::nullopt;
  }
  if (s != ")" || nodes == 0) return std::nullopt;
  return static_cast<std::uint32_t>(nodes);
}

}  // namespace fabflow::bootstrap_detail
