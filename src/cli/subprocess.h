// The child-process helpers of src/tools/subprocess.h under the names advise's files use.
#pragma once

#include "tools/subprocess.h"

namespace fabflow::cli {

using tools::child_error;
using tools::ChildOptions;
using tools::ChildResult;
using tools::find_binary;
using tools::interrupted;
using tools::run_child;

}  // namespace fabflow::cli
