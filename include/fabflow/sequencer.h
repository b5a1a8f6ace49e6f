// Compatibility while fabflow is 0.x: the sequencer's header is <fabflow/seq.h>, named for its
// namespace (fabflow::seq). This forwarding header goes at 1.0 (CHANGELOG.md).
#pragma once

#include <fabflow/seq.h>
