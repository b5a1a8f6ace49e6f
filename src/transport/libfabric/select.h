// Choosing a libfabric provider and endpoint for a set of TransportOptions, and describing
// what it can do.
#pragma once

#include <fabflow/transport.h>

#include "transport/libfabric/fid.h"

namespace fabflow::ofi {

// The mr_mode bits fabflow handles (see docs/transport.md).
inline constexpr std::uint64_t kSupportedMrMode =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT | FI_MR_RAW;

inline constexpr std::uint32_t kApiVersion = FI_VERSION(1, 17);

// The chosen fi_info (first of `list`) with its capabilities.
struct Selection {
  InfoPtr list;
  fi_info* info = nullptr;
  Capabilities caps;
};

// Throws UsageError for an unknown provider, an endpoint type it lacks, or a requested
// operation it cannot do.
Selection select(const TransportOptions& options);

// Capabilities of `info`; queries atomics and shared receive contexts on `domain`.
Capabilities describe(const fi_info* info, fid_domain* domain);

// True for providers that place inbound data only while the target drives progress,
// whatever they advertise (verified on libfabric 1.17: tcp, shm, udp, rxm/rxd over them).
bool software_provider(std::string_view prov_name) noexcept;

}  // namespace fabflow::ofi
