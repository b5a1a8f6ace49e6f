// The plot module's runner of src/tools/plot.h under the names advise's files use.
#pragma once

#include "tools/plot.h"

namespace fabflow::cli {

using tools::exe_path;
using tools::first_dir;
using tools::install_candidates;
using tools::kNoFigures;
using tools::Plotter;

}  // namespace fabflow::cli
