// The native shared-memory transport ("local"): ranks on one host reach each other's memory
// through memfd segments passed over Unix sockets. One-sided operations are plain loads,
// stores and atomic instructions on the peer's mapping; sends and write-with-data notices go
// through shared-memory rings. See docs/local-transport.md.
#pragma once

#include <fabflow/transport.h>

#include <memory>

namespace fabflow {

// Opens the local transport (not yet connected). Throws UsageError for an unsupported request.
std::unique_ptr<Transport> open_local(const TransportOptions& options);

// What the local transport offers (the same on every host).
Capabilities local_capabilities(const TransportOptions& options = {});

}  // namespace fabflow
