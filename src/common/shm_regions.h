// The files libfabric's shm provider keeps in /dev/shm for fabflow's endpoints: their names,
// and finding and removing those whose owner is gone.
//
// The provider maps each endpoint's region from a file named after the endpoint and unlinks
// it only on an orderly close, so a rank killed by a signal (under mpirun, by hand, or with
// its launcher) leaves 16 MiB behind. fabflow names every region
// "fabflow_<pid>_<pid namespace>_<64 random bits>": the owner can be found from the name, a
// name cannot collide with a dead process's, and regions of another pid namespace (a
// container sharing /dev/shm) are never judged by pids that mean something else there.
// Regions named by fabflow before the namespace was added ("fabflow_<pid>_<random>") are
// judged as this namespace's.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fabflow {

// A fresh region name for an endpoint of this process.
std::string shm_region_name();

// The owner's pid of a region named by fabflow in this pid namespace; nullopt for any other
// name (not fabflow's, or another namespace's, whose pids mean something else here).
std::optional<pid_t> shm_region_owner(std::string_view name);

struct ShmLeftover {
  std::string name;  // the file's name in the directory
  pid_t owner = 0;
  std::uint64_t bytes = 0;
  std::string why;  // "owner exited", or "owner pid reused (it does not map the region)"
};

enum class ShmJudgement : std::uint8_t {
  exited_only,  // leftovers only when the owner pid no longer exists (cheap: one kill(2) each)
  thorough,     // also a live pid that does not map the region (its pid was reused); regions
                // younger than a minute are left alone (their owner may still be setting up)
};

// fabflow's regions in `dir` whose owner is gone, by the judgement asked for. Regions of
// another pid namespace, and those whose owner cannot be inspected, are never listed.
std::vector<ShmLeftover> find_shm_leftovers(const std::string& dir = "/dev/shm",
                                            ShmJudgement how = ShmJudgement::thorough);

// Unlinks each leftover; returns the bytes freed. A file already gone is not an error; one
// that cannot be removed (another user's) is skipped and named in `errors`.
std::uint64_t remove_shm_leftovers(std::span<const ShmLeftover> leftovers,
                                   std::vector<std::string>& errors,
                                   const std::string& dir = "/dev/shm");

// Removes every region of `pid` in /dev/shm: for the launcher, while its dead rank is still a
// zombie (its pid cannot have been reused, so every such file is that rank's or an earlier
// dead process's).
void remove_shm_regions_of(pid_t pid);

}  // namespace fabflow
