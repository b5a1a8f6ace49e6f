// Provider profiles as data: the built-in ones (profiles/*.json, compiled in), files, their
// validation, and what a profile makes of a transport's capabilities.
#include <fabflow/profile.h>
#include <fabflow/status.h>

#include <nlohmann/json.hpp>
#include <rdma/fabric.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "fabflow_profiles.h"  // generated from profiles/*.json

namespace fabflow {
namespace {

using nlohmann::json;

constexpr std::string_view kFields[] = {"endpoint_types",  "mr_mode",       "cq_data_size",
                                        "inject_size",     "max_msg_size",  "tx_depth",
                                        "rx_depth",        "rma_iov_limit", "ops",
                                        "atomics",         "msg_order",     "data_order",
                                        "rma_event",       "shared_rx",     "multi_recv",
                                        "modes",           "uses_fi_more",  "data_progress",
                                        "control_progress"};

struct MrBit {
  std::string_view name;
  std::uint64_t bit;
};
constexpr MrBit kMrBits[] = {{"local", FI_MR_LOCAL},           {"virt_addr", FI_MR_VIRT_ADDR},
                             {"allocated", FI_MR_ALLOCATED},   {"prov_key", FI_MR_PROV_KEY},
                             {"endpoint", FI_MR_ENDPOINT},     {"raw", FI_MR_RAW},
                             {"mmu_notify", FI_MR_MMU_NOTIFY}, {"hmem", FI_MR_HMEM}};

struct OrderBit {
  std::string_view name;
  std::uint64_t bit;
};
constexpr OrderBit kOrderBits[] = {
    {"rar", FI_ORDER_RAR}, {"raw", FI_ORDER_RAW}, {"ras", FI_ORDER_RAS},
    {"war", FI_ORDER_WAR}, {"waw", FI_ORDER_WAW}, {"was", FI_ORDER_WAS},
    {"sar", FI_ORDER_SAR}, {"saw", FI_ORDER_SAW}, {"sas", FI_ORDER_SAS}};

constexpr std::string_view kModes[] = {"context", "context2", "rx_cq_data", "msg_prefix",
                                       "local_mr"};

[[noreturn]] void refuse(const std::string& origin, std::string_view field,
                         const std::string& why) {
  throw UsageError("profile " + origin + ": " + std::string(field) + ": " + why);
}

template <class Names>
std::string known(const Names& names) {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ", ";
    if constexpr (requires { n.name; })
      out += n.name;
    else
      out += n;
  }
  return out;
}

// The list of strings in `v`, each one of `allowed` (by name), no duplicates.
template <class Names>
std::vector<std::string> names_of(const json& v, const std::string& origin, std::string_view field,
                                  const Names& allowed) {
  if (!v.is_array()) refuse(origin, field, "must be a list");
  std::vector<std::string> out;
  for (const json& e : v) {
    if (!e.is_string()) refuse(origin, field, "every entry must be a string");
    const std::string s = e.get<std::string>();
    const bool ok = std::any_of(std::begin(allowed), std::end(allowed), [&](const auto& a) {
      if constexpr (requires { a.name; })
        return a.name == s;
      else
        return std::string_view(a) == s;
    });
    if (!ok) refuse(origin, field, "unknown value '" + s + "' (known: " + known(allowed) + ")");
    if (std::find(out.begin(), out.end(), s) != out.end())
      refuse(origin, field, "'" + s + "' given twice");
    out.push_back(s);
  }
  return out;
}

std::size_t number_of(const json& v, const std::string& origin, std::string_view field,
                      std::size_t min) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
    refuse(origin, field, "must be a non-negative integer");
  const auto n = v.get<std::uint64_t>();
  if (n < min) refuse(origin, field, "must be at least " + std::to_string(min));
  return static_cast<std::size_t>(n);
}

bool flag_of(const json& v, const std::string& origin, std::string_view field) {
  if (!v.is_boolean()) refuse(origin, field, "must be true or false");
  return v.get<bool>();
}

bool manual_of(const json& v, const std::string& origin, std::string_view field) {
  if (v == "manual") return true;
  if (v == "auto") return false;
  refuse(origin, field, "must be \"auto\" or \"manual\"");
}

// The capabilities that are one number, with the least each may be.
struct NumberField {
  std::string_view name;
  std::size_t ProviderProfile::*member;
  std::size_t min;
};
constexpr NumberField kNumberFields[] = {{"cq_data_size", &ProviderProfile::cq_data_size, 0},
                                         {"inject_size", &ProviderProfile::inject_size, 0},
                                         {"max_msg_size", &ProviderProfile::max_msg_size, 1},
                                         {"tx_depth", &ProviderProfile::tx_depth, 1},
                                         {"rx_depth", &ProviderProfile::rx_depth, 1},
                                         {"rma_iov_limit", &ProviderProfile::rma_iov_limit, 0}};

// The capabilities that are one flag: true or false, or a progress mode ("manual" true).
struct FlagField {
  std::string_view name;
  bool ProviderProfile::*member;
  bool (*read)(const json& v, const std::string& origin, std::string_view field);
};
constexpr FlagField kFlagFields[] = {
    {"data_order", &ProviderProfile::data_order, flag_of},
    {"rma_event", &ProviderProfile::rma_event, flag_of},
    {"shared_rx", &ProviderProfile::shared_rx, flag_of},
    {"multi_recv", &ProviderProfile::multi_recv, flag_of},
    {"uses_fi_more", &ProviderProfile::uses_fi_more, flag_of},
    {"data_progress", &ProviderProfile::data_progress_manual, manual_of},
    {"control_progress", &ProviderProfile::control_progress_manual, manual_of}};

// The entry of `fields` named `name`, or null.
template <class Field, std::size_t N>
const Field* find_field(const Field (&fields)[N], std::string_view name) {
  for (const Field& f : fields)
    if (f.name == name) return &f;
  return nullptr;
}

const std::string& text_of(const json& obj, std::string_view key, const std::string& origin,
                           std::string_view field) {
  auto it = obj.find(std::string(key));
  if (it == obj.end() || !it->is_string() || it->get_ref<const std::string&>().empty())
    refuse(origin, field, std::string("needs a non-empty string \"") + std::string(key) + "\"");
  return it->get_ref<const std::string&>();
}

}  // namespace

bool ProviderProfile::requires_mr(std::string_view bit) const {
  return std::find(mr_mode.begin(), mr_mode.end(), bit) != mr_mode.end();
}

bool ProviderProfile::has_mode(std::string_view mode) const {
  return std::find(modes.begin(), modes.end(), mode) != modes.end();
}

bool ProviderProfile::has(Op op) const {
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

bool ProviderProfile::has(EndpointType t) const {
  return std::find(endpoint_types.begin(), endpoint_types.end(), t) != endpoint_types.end();
}

std::vector<std::string> builtin_profile_names() {
  std::vector<std::string> out;
  for (const auto& p : detail::kBuiltinProfiles)
    if (p.name) out.emplace_back(p.name);
  std::sort(out.begin(), out.end());
  return out;
}

ProviderProfile parse_profile(std::string_view text, const std::string& origin) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    throw UsageError("profile " + origin + ": not valid JSON (" + e.what() + ")");
  }
  if (!doc.is_object()) throw UsageError("profile " + origin + ": must be a JSON object");
  for (const auto& [key, value] : doc.items())
    if (key != "name" && key != "provider" && key != "summary" && key != "capabilities")
      refuse(origin, key, "unknown field (known: name, provider, summary, capabilities)");
  ProviderProfile p;
  p.origin = origin;
  p.name = text_of(doc, "name", origin, "name");
  p.provider = text_of(doc, "provider", origin, "provider");
  p.summary = text_of(doc, "summary", origin, "summary");
  auto caps_it = doc.find("capabilities");
  if (caps_it == doc.end() || !caps_it->is_object())
    refuse(origin, "capabilities", "missing (an object of capabilities)");
  const json& caps = *caps_it;
  for (const auto& [key, value] : caps.items())
    if (std::find(std::begin(kFields), std::end(kFields), key) == std::end(kFields))
      refuse(origin, "capabilities." + key, "unknown capability (known: " + known(kFields) + ")");

  for (std::string_view field : kFields) {
    const std::string where = "capabilities." + std::string(field);
    auto it = caps.find(std::string(field));
    if (it == caps.end()) refuse(origin, where, "missing");
    const json& entry = *it;
    if (!entry.is_object()) refuse(origin, where, "must be {\"value\": ..., \"source\": ...}");
    for (const auto& [key, value] : entry.items())
      if (key != "value" && key != "source" && key != "note")
        refuse(origin, where + "." + key, "unknown key (known: value, source, note)");
    auto v_it = entry.find("value");
    if (v_it == entry.end() || v_it->is_null()) refuse(origin, where, "has no value");
    const json& v = *v_it;
    ProviderProfile::Entry shown{std::string(field), v.dump(),
                                 text_of(entry, "source", origin, where), ""};
    if (auto n = entry.find("note"); n != entry.end()) {
      if (!n->is_string()) refuse(origin, where + ".note", "must be a string");
      shown.note = n->get<std::string>();
    }
    p.entries.push_back(std::move(shown));

    if (const NumberField* n = find_field(kNumberFields, field)) {
      p.*(n->member) = number_of(v, origin, where, n->min);
      if (field == "cq_data_size" && p.cq_data_size > 8)
        refuse(origin, where, "must be at most 8 (bytes)");
    } else if (const FlagField* f = find_field(kFlagFields, field)) {
      p.*(f->member) = f->read(v, origin, where);
    } else if (field == "endpoint_types") {
      constexpr std::string_view kTypes[] = {"msg", "rdm"};
      for (const auto& s : names_of(v, origin, where, kTypes))
        p.endpoint_types.push_back(*parse_endpoint_type(s));
      if (p.endpoint_types.empty()) refuse(origin, where, "names no endpoint type");
    } else if (field == "mr_mode") {
      p.mr_mode = names_of(v, origin, where, kMrBits);
    } else if (field == "ops") {
      constexpr std::string_view kOps[] = {"send", "write", "read", "writedata"};
      for (const auto& s : names_of(v, origin, where, kOps)) p.ops.push_back(*parse_op(s));
    } else if (field == "atomics") {
      constexpr std::string_view kAtomics[] = {"fadd", "cswap"};
      for (const auto& s : names_of(v, origin, where, kAtomics)) p.ops.push_back(*parse_op(s));
    } else if (field == "msg_order") {
      p.msg_order = names_of(v, origin, where, kOrderBits);
    } else if (field == "modes") {
      p.modes = names_of(v, origin, where, kModes);
    }
  }
  if (p.has(Op::writedata) && p.cq_data_size == 0)
    refuse(origin, "capabilities.ops", "writedata needs cq_data_size of at least 1");
  if ((p.has(Op::write) || p.has(Op::read) || p.has(Op::writedata)) && p.rma_iov_limit == 0)
    refuse(origin, "capabilities.rma_iov_limit", "must be at least 1 where RMA exists");
  return p;
}

ProviderProfile load_profile(const std::string& name_or_path) {
  const bool is_file =
      name_or_path.find('/') != std::string::npos ||
      (name_or_path.size() > 5 && name_or_path.compare(name_or_path.size() - 5, 5, ".json") == 0);
  if (!is_file) {
    for (const auto& p : detail::kBuiltinProfiles)
      if (p.name && name_or_path == p.name) {
        ProviderProfile out = parse_profile(p.text, name_or_path);
        out.origin = "built-in";
        return out;
      }
    std::string names;
    for (const auto& n : builtin_profile_names()) names += (names.empty() ? "" : ", ") + n;
    throw UsageError("unknown profile '" + name_or_path + "' (known: " + names +
                     "; or a profile file ending in .json)");
  }
  std::ifstream in(name_or_path);
  if (!in) throw UsageError("profile " + name_or_path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return parse_profile(text.str(), name_or_path);
}

Capabilities apply_profile(const Capabilities& inner, const ProviderProfile& profile) {
  Capabilities c = inner;
  c.provider = inner.provider + " as " + profile.name;
  c.inject_size = std::min(inner.inject_size, profile.inject_size);
  c.max_msg_size = std::min(inner.max_msg_size, profile.max_msg_size);
  c.max_rma_size = std::min(inner.max_rma_size, profile.max_msg_size);
  c.cq_data_size = std::min(inner.cq_data_size, profile.cq_data_size);
  c.rma = inner.rma && profile.has(Op::write) && profile.has(Op::read);
  c.atomics_u64 = inner.atomics_u64 && profile.has(Op::fadd) && profile.has(Op::cswap);
  c.shared_rx = inner.shared_rx && profile.shared_rx;
  c.multi_recv = inner.multi_recv && profile.multi_recv;
  c.rx_cq_data_consumes_recv = inner.rx_cq_data_consumes_recv || profile.has_mode("rx_cq_data");
  c.rx_in_place_max = c.rx_in_place_depth = 0;
  c.peer_mapping = false;
  c.cross_memory_attach = false;
  c.stores_demoted = false;
  c.in_order_data = inner.in_order_data && profile.data_order;
  std::uint64_t order = 0;
  for (const auto& o : kOrderBits)
    if (std::find(profile.msg_order.begin(), profile.msg_order.end(), o.name) !=
        profile.msg_order.end())
      order |= o.bit;
  c.msg_order = inner.msg_order & order;
  c.write_after_write = inner.write_after_write && (order & FI_ORDER_WAW);
  c.data_progress_manual = inner.data_progress_manual || profile.data_progress_manual;
  c.data_progress_advertised_manual = profile.data_progress_manual;
  c.control_progress_manual = inner.control_progress_manual || profile.control_progress_manual;
  std::uint64_t mr = 0;
  for (const auto& b : kMrBits)
    if (profile.requires_mr(b.name)) mr |= b.bit;
  c.mr_mode = mr;
  return c;
}

std::string profile_refusal(const Capabilities& caps, const ProviderProfile& profile,
                            std::span<const Op> ops) {
  const std::string who = "profile " + profile.name + " (" + profile.provider + ")";
  if (!profile.has(caps.endpoint))
    return who + " has no " + std::string(to_string(caps.endpoint)) + " endpoints (it has: " + [&] {
      std::string s;
      for (EndpointType t : profile.endpoint_types)
        s += (s.empty() ? "" : ", ") + std::string(to_string(t));
      return s;
    }() + ")";
  for (Op op : ops) {
    if (!profile.has(op)) {
      const bool atomic = is_atomic(op);
      return who + " has no " +
             (atomic ? "u64 " + std::string(to_string(op)) + " atomic"
                     : std::string(to_string(op))) +
             " (capabilities." + (atomic ? "atomics" : "ops") + ")";
    }
  }
  const Capabilities held = apply_profile(caps, profile);
  if (auto m = missing_op(held, ops)) return who + " over " + caps.provider + ": " + m->why;
  return {};
}

}  // namespace fabflow
