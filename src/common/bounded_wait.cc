#include "common/bounded_wait.h"

#include <optional>
#include <string>
#include <vector>

namespace fabflow {
namespace {

// "bootstrap: rank 1 ..." -> "rank 1 ...": the wait's own name leads.
std::string_view without_prefix(std::string_view what) {
  constexpr std::string_view prefix = "bootstrap: ";
  if (what.starts_with(prefix)) what.remove_prefix(prefix.size());
  return what;
}

// "1.9 s"
std::string tenths_of_seconds(std::chrono::milliseconds d) {
  const auto ms = d.count();
  return std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100) + " s";
}

}  // namespace

PeerError peer_failure_error(Bootstrap* boot, std::string_view who, std::string_view what) {
  std::optional<Bootstrap::Failure> f;
  try {
    if (boot) f = boot->failure();
  } catch (...) {  // the liveness channel itself broke: the generic line below
  }
  if (!f) return PeerError(-1, std::string(who) + ": a peer vanished while " + std::string(what));
  return PeerError(f->rank, std::string(who) + ", " + std::string(what) + ": " +
                                std::string(without_prefix(f->what)));
}

PeerError no_progress_error(Bootstrap* boot, std::chrono::milliseconds timeout,
                            std::string_view who, std::string_view what, int blame) {
  std::string text = std::string(who) + ": no progress for " + std::to_string(timeout.count()) +
                     " ms while " + std::string(what);
  std::vector<Bootstrap::Silence> silent;
  try {
    if (boot) silent = boot->silent_peers(timeout / 2);
  } catch (...) {
  }
  if (silent.empty()) return PeerError(blame, text);
  const Bootstrap::Silence& s = silent.front();
  return PeerError(s.rank, text + ": rank " + std::to_string(s.rank) +
                               " stopped answering (no sign of life for " +
                               tenths_of_seconds(s.silent) + ")");
}

}  // namespace fabflow
