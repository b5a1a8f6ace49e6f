// Transport selection by provider name: "local" (or "auto" on one host under fabflow's own
// launcher) opens the native shared-memory transport, anything else libfabric.
#include <fabflow/local.h>
#include <fabflow/transport.h>

namespace fabflow {
namespace {

bool wants_local(const TransportOptions& options) {
  return options.provider == "local" || (options.provider == "auto" && local_auto_selected());
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
