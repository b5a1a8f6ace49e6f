// Runtime selection of compile-time specialisations: calls f with the concrete transport type
// so that templated hot loops bind the data path statically. Unknown implementations (the
// fault-injecting wrapper, test doubles) run through the virtual interface.
#pragma once

#include <fabflow/transport.h>

#include "transport/libfabric/fabric_transport.h"
#include "transport/local/local_transport.h"

namespace fabflow {

template <class F>
decltype(auto) with_concrete(Transport& t, F&& f) {
  if (auto* fabric = dynamic_cast<ofi::FabricTransport*>(&t)) return f(*fabric);
  if (auto* shm = dynamic_cast<local::LocalTransport*>(&t)) return f(*shm);
  return f(t);
}

// The types with_concrete() calls f with, X(type) for each, the interface itself last: a file
// that defines a templated data path out of line instantiates it for every one of them.
#define FABFLOW_CONCRETE_TRANSPORTS(X) X(ofi::FabricTransport) X(local::LocalTransport) X(Transport)

}  // namespace fabflow
