#include <fabflow/version.h>

namespace fabflow {

std::string_view library_version() noexcept { return FABFLOW_VERSION; }

}  // namespace fabflow
