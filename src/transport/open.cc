// Transport selection by provider name.
#include <fabflow/transport.h>

namespace fabflow {

std::unique_ptr<Transport> open_transport(const TransportOptions& options) {
  return open_libfabric(options);
}

Capabilities probe_transport(const TransportOptions& options) {
  return probe_libfabric(options);
}

}  // namespace fabflow
