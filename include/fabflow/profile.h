// Provider profiles: the capability envelope of a hardware provider (verbs, efa, cxi, ...),
// as data, and a transport wrapper that holds any transport to it.
//
// fabflow is built and tested here on libfabric's software providers (tcp, shm) and its own
// local transport, which are lenient where the hardware providers are strict: 4-byte CQ data,
// small inject sizes, no native atomics, required local descriptors. A profile says what the
// real provider reports (profiles/*.json, every value with its source); a profile transport
// reports the intersection of that envelope with the inner transport's capabilities, so designs
// choose (or refuse) as they would there, and fails every call outside it the way that provider
// fails it: an emulation of the envelope, never of the performance. docs/portability.md.
#pragma once

#include <fabflow/transport.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fabflow {

struct ProviderProfile {
  std::string name;      // "efa"
  std::string provider;  // libfabric's name of the provider it describes, e.g. "verbs;ofi_rxm"
  std::string summary;
  std::string origin;  // "built-in" or the file it was read from

  std::vector<EndpointType> endpoint_types;
  std::vector<std::string> mr_mode;  // FI_MR_* the provider requires, by name ("local", ...)
  std::size_t cq_data_size = 0;
  std::size_t inject_size = 0;
  std::size_t max_msg_size = 0;
  std::size_t tx_depth = 0;
  std::size_t rx_depth = 0;
  std::size_t rma_iov_limit = 0;
  std::vector<Op> ops;                 // send, write, read, writedata, fadd, cswap it has
  std::vector<std::string> msg_order;  // FI_ORDER_* by name ("sas", ...)
  bool data_order = false;             // FI_ORDER_DATA
  bool rma_event = false;
  bool shared_rx = false;
  bool multi_recv = false;
  std::vector<std::string> modes;  // "context", "rx_cq_data", ...
  bool uses_fi_more = false;
  bool data_progress_manual = false;
  bool control_progress_manual = false;

  // Every capability as the file gives it, in file order: for `fabflow info --profile`.
  struct Entry {
    std::string field;
    std::string value;  // as compact JSON
    std::string source;
    std::string note;  // empty when the file gives none
  };
  std::vector<Entry> entries;

  bool requires_mr(std::string_view bit) const;
  bool has_mode(std::string_view mode) const;
  bool has(Op op) const;
  bool has(EndpointType t) const;
};

// The profiles built into fabflow (profiles/*.json in the source tree), by name.
std::vector<std::string> builtin_profile_names();

// A built-in profile by name, or a profile file when `name_or_path` names one (it contains a
// '/' or ends in .json). Throws UsageError: an unknown name (listing the known ones), a file
// that cannot be read, malformed JSON, a missing or unknown field or a value out of range
// (naming the file and the field).
ProviderProfile load_profile(const std::string& name_or_path);

// Parses one profile's JSON text; `origin` names it in errors.
ProviderProfile parse_profile(std::string_view text, const std::string& origin);

// The capabilities a transport with `inner`'s reports under `profile`: the smaller of each
// size, an operation or feature only where both have it, the profile's registration modes and
// ordering, none of local's direct powers (in-place receive, peer mapping, cross-memory
// attach: no hardware provider has them).
Capabilities apply_profile(const Capabilities& inner, const ProviderProfile& profile);

// Why `inner` (with the capabilities `caps`) cannot be held to `profile` for `ops`: an endpoint
// type the profile lacks, or an operation the profile (or the inner transport) lacks; each one
// line naming the profile and the capability. Empty when it can.
std::string profile_refusal(const Capabilities& caps, const ProviderProfile& profile,
                            std::span<const Op> ops);

// Wraps `inner` (not yet connected) in the profile's envelope. Throws UsageError with
// profile_refusal's line when the profile refuses `ops` on it.
std::unique_ptr<Transport> make_profile_transport(std::unique_ptr<Transport> inner,
                                                  const ProviderProfile& profile,
                                                  std::span<const Op> ops);

// What a profile transport refused so far, by rule (for tests and `bench` diagnostics);
// nullptr for any other transport.
struct ProfileCounters {
  std::uint64_t missing_descriptor = 0;  // FI_MR_LOCAL: a buffer without its registration
  std::uint64_t foreign_descriptor = 0;  // FI_MR_LOCAL: a buffer outside the descriptor's region
  std::uint64_t inject_too_large = 0;    // an inject larger than inject_size
  std::uint64_t message_too_large = 0;   // more than max_msg_size
  std::uint64_t cq_data_too_wide = 0;    // immediate data wider than cq_data_size
  std::uint64_t missing_op = 0;          // an operation the profile lacks
  std::uint64_t queue_full = 0;          // more unsignalled-or-outstanding posts than tx_depth
};
const ProfileCounters* profile_counters(const Transport& transport) noexcept;

}  // namespace fabflow
