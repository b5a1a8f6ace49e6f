// `fabflow info`: the providers libfabric finds here and what fabflow makes of each.
#include <fabflow/local.h>
#include <fabflow/profile.h>
#include <fabflow/transport.h>
#include <fabflow/version.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "cli/commands.h"

namespace fabflow::cli {
namespace {

std::string mr_mode_text(std::uint64_t m) {
  std::string out;
  auto add = [&](std::uint64_t bit, const char* name) {
    if (m & bit) out += (out.empty() ? "" : "|") + std::string(name);
  };
  add(FI_MR_LOCAL, "LOCAL");
  add(FI_MR_VIRT_ADDR, "VIRT_ADDR");
  add(FI_MR_ALLOCATED, "ALLOCATED");
  add(FI_MR_PROV_KEY, "PROV_KEY");
  add(FI_MR_ENDPOINT, "ENDPOINT");
  add(FI_MR_RAW, "RAW");
  add(FI_MR_HMEM, "HMEM");
  return out.empty() ? "none" : out;
}

std::string order_text(const Capabilities& c) {
  std::string out;
  if (c.in_order_data) out += "DATA ";
  if (c.msg_order & FI_ORDER_WAW) out += "WAW ";
  if (c.msg_order & FI_ORDER_SAS) out += "SAS ";
  if (c.msg_order & FI_ORDER_RAW) out += "RAW ";
  if (out.empty()) return "none";
  out.pop_back();
  return out;
}

// What fabflow does about each capability (the "so what" column of the report).
std::vector<std::string> consequences(const Capabilities& c) {
  std::vector<std::string> n;
  if (c.data_progress_manual)
    n.push_back(
        "data lands only while the target drives progress: passive peers get a "
        "progress thread (--progress auto)");
  if (!c.in_order_data)
    n.push_back(
        "no in-order placement: polled writes carry header+trailer sequence numbers, "
        "never last-byte polling");
  n.push_back("inject (inline) used for messages <= " + std::to_string(c.inject_size) + " B");
  if (c.provider == "local") {  // fabflow's own: no libfabric registration rules apply
    n.push_back(
        "peers map each other's memfd segments: loads, stores and atomics, no progress thread; "
        "\"auto\" picks it for ranks of one host (docs/local-transport.md)");
    return n;
  }
  if (c.rma_preferred_size > 0)
    n.push_back("the transfer engine cuts larger transfers into RMA operations of " +
                std::to_string(c.rma_preferred_size) + " B (rma_preferred_size)");
  if (!c.atomics_u64) n.push_back("no u64 atomics: fadd/cswap refused");
  if (c.cq_data_size < 4) n.push_back("no remote CQ data: writedata refused");
  if (c.rx_cq_data_consumes_recv) n.push_back("writedata consumes a posted receive: posted for it");
  if (c.mr_mode & FI_MR_LOCAL)
    n.push_back("local buffers passed with their descriptors (MR_LOCAL)");
  if (!(c.mr_mode & FI_MR_VIRT_ADDR)) n.push_back("remote addresses are offsets (no VIRT_ADDR)");
  if (c.mr_mode & FI_MR_PROV_KEY)
    n.push_back("keys chosen by the provider (PROV_KEY)");
  else
    n.push_back("unique requested keys per domain; peers always use fi_mr_key()");
  if (c.mr_mode & FI_MR_ENDPOINT) n.push_back("regions bound to the endpoint (MR_ENDPOINT)");
  if (c.mr_mode & FI_MR_RAW) n.push_back("raw keys exchanged and mapped (MR_RAW)");
  if (!c.shared_rx) n.push_back("no shared receive context: one receive queue per endpoint");
  return n;
}

// A provider profile's envelope as its file gives it, each value with its source, then what
// fabflow makes of it (the capabilities a transport reports under it, and their consequences).
int print_profile(const std::string& name, bool json) {
  const ProviderProfile p = load_profile(name);
  Capabilities open_caps;  // a transport that can do everything: what is left is the profile's
  open_caps.provider = p.provider;
  open_caps.endpoint = p.endpoint_types.front();
  open_caps.inject_size = open_caps.max_msg_size = open_caps.max_rma_size = ~std::size_t{0};
  open_caps.cq_data_size = 8;
  open_caps.rma = open_caps.atomics_u64 = open_caps.shared_rx = open_caps.multi_recv = true;
  open_caps.in_order_data = open_caps.write_after_write = true;
  open_caps.msg_order = ~std::uint64_t{0};
  const Capabilities held = apply_profile(open_caps, p);
  if (json) {
    nlohmann::json j = {{"profile", p.name},
                        {"provider", p.provider},
                        {"summary", p.summary},
                        {"origin", p.origin},
                        {"capabilities", nlohmann::json::array()},
                        {"fabflow_does", consequences(held)}};
    for (const auto& e : p.entries) {
      nlohmann::json row = {
          {"field", e.field}, {"value", nlohmann::json::parse(e.value)}, {"source", e.source}};
      if (!e.note.empty()) row["note"] = e.note;
      j["capabilities"].push_back(std::move(row));
    }
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::cout << "# profile " << p.name << " (" << p.origin << "): libfabric provider " << p.provider
            << "\n# " << p.summary
            << "\n# an emulation of the envelope at fabflow's transport interface, not of the "
               "performance (docs/portability.md)\n\n";
  for (const auto& e : p.entries) {
    std::printf("%-17s %s\n", e.field.c_str(), e.value.c_str());
    std::printf("%-17s   source: %s\n", "", e.source.c_str());
    if (!e.note.empty()) std::printf("%-17s   note: %s\n", "", e.note.c_str());
  }
  std::cout << "\nWhat fabflow does about it:\n";
  for (const auto& line : consequences(held)) std::cout << "  - " << line << "\n";
  return 0;
}

}  // namespace

Runner add_info(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto profile = std::make_shared<std::string>();
  app.add_flag("--json", *json, "one JSON object per provider/endpoint");
  app.add_option("--profile", *profile,
                 "print a provider profile's envelope with its sources instead (verbs, efa, cxi, "
                 "...; or a profile file)");
  return [json, profile]() -> int {
    if (!profile->empty()) return print_profile(*profile, *json);
    auto all = discover_libfabric();
    if (all.empty()) {
      print_error("libfabric found no provider with msg or rdm endpoints");
      return 1;
    }
    // fabflow's own shared-memory transport (-p local, and "auto" for ranks of one host) first.
    all.insert(all.begin(), local_capabilities());
    if (*json) {
      for (const auto& c : all) {
        nlohmann::json j = {
            {"provider", c.provider},
            {"endpoint", std::string(to_string(c.endpoint))},
            {"fabric", c.fabric},
            {"domain", c.domain},
            {"inject_size", c.inject_size},
            {"max_msg_size", c.max_msg_size},
            {"rma_preferred_size", c.rma_preferred_size},
            {"cq_data_size", c.cq_data_size},
            {"rma", c.rma},
            {"atomics_u64", c.atomics_u64},
            {"shared_rx", c.shared_rx},
            {"in_order_data", c.in_order_data},
            {"data_progress", c.data_progress_manual ? "manual" : "auto"},
            {"control_progress", c.control_progress_manual ? "manual" : "auto"},
            {"mr_mode", mr_mode_text(c.mr_mode)},
            {"order", order_text(c)},
            {"fabflow_does", consequences(c)},
        };
        std::cout << j.dump() << "\n";
      }
      return 0;
    }
    std::cout << "# fabflow " << FABFLOW_VERSION << ", libfabric " << libfabric_version()
              << "\n# data progress 'manual*': advertised auto but verified to need the "
                 "target's progress on libfabric 1.17\n\n";
    std::printf("%-14s %-4s %-14s %7s %9s %5s %4s %6s %4s %-8s %-24s %s\n", "provider", "ep",
                "domain", "inject", "max_msg", "cqdat", "rma", "atomic", "srx", "progress",
                "mr_mode", "order");
    for (const auto& c : all) {
      std::string max_msg = c.max_msg_size >= (std::size_t{1} << 48)
                                ? std::string("unlimited")
                                : std::to_string(c.max_msg_size);
      std::printf("%-14s %-4s %-14s %7zu %9s %5zu %4s %6s %4s %-8s %-24s %s\n", c.provider.c_str(),
                  std::string(to_string(c.endpoint)).c_str(), c.domain.substr(0, 14).c_str(),
                  c.inject_size, max_msg.c_str(), c.cq_data_size, c.rma ? "yes" : "no",
                  c.atomics_u64 ? "yes" : "no", c.shared_rx ? "yes" : "no",
                  !c.data_progress_manual             ? "auto"
                  : c.data_progress_advertised_manual ? "manual"
                                                      : "manual*",
                  mr_mode_text(c.mr_mode).c_str(), order_text(c).c_str());
    }
    std::cout << "\nWhat fabflow does about it:\n";
    for (const auto& c : all) {
      std::cout << "  " << c.provider << " (" << to_string(c.endpoint) << "):\n";
      for (const auto& line : consequences(c)) std::cout << "    - " << line << "\n";
    }
    return 0;
  };
}

}  // namespace fabflow::cli
