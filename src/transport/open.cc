// Transport selection by provider name: "local" (or "auto" when every rank shares this host,
// TransportOptions::same_host) opens the native shared-memory transport, anything else
// libfabric.
#include <fabflow/local.h>
#include <fabflow/transport.h>

namespace fabflow {
namespace {

bool wants_local(const TransportOptions& options) {
  return options.provider == "local" || (options.provider == "auto" && options.same_host);
}

}  // namespace

std::unique_ptr<Transport> open_transport(const TransportOptions& options) {
  if (wants_local(options)) return open_local(options);
  return open_libfabric(options);
}

Capabilities probe_transport(const TransportOptions& options) {
  if (wants_local(options)) return local_capabilities(options);
  return probe_libfabric(options);
}

}  // namespace fabflow
