// Network namespaces for local launches: one per rank plus a hub holding a bridge, all created
// and removed with the `ip` command. Every veth is created inside a namespace, never in the
// caller's, so deleting the namespaces removes every link too.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launcher/fd.h"

namespace fabflow::launcher {

inline constexpr std::string_view kNetnsPrefix = "ffl-";
inline constexpr std::string_view kNetnsDir = "/var/run/netns";
inline constexpr int kNetnsCoordPort = 17471;

// Runs `ip args...` (stdin from `batch`, else /dev/null) and throws Error with its stderr when
// it fails or takes longer than a few seconds.
void run_ip(const std::vector<std::string>& args, std::string_view batch = {});

// One namespace created with `ip netns add`, deleted on destruction; move-only, not thread-safe.
class Netns {
 public:
  explicit Netns(std::string name);  // creates it; throws Error saying why it could not
  Netns(Netns&& other) noexcept : name_(std::exchange(other.name_, {})) {}
  Netns& operator=(Netns&&) = delete;
  Netns(const Netns&) = delete;
  Netns& operator=(const Netns&) = delete;
  ~Netns();

  const std::string& name() const noexcept { return name_; }
  // An O_RDONLY|O_CLOEXEC fd for setns(CLONE_NEWNET).
  Fd open() const;

 private:
  std::string name_;
};

// The network of one launch: namespaces ffl-<pid>-<i> with eth0 = 10.213.0.<i+1>/24 and lo up,
// veth-joined to bridge br0 in ffl-<pid>-hub. Owns them all; move-only, not thread-safe.
class VirtualNetwork {
 public:
  VirtualNetwork(pid_t owner, int nprocs);

  const Netns& rank(int i) const { return ranks_.at(static_cast<std::size_t>(i)); }
  static std::string address(int i) { return "10.213.0." + std::to_string(i + 1); }
  static constexpr int kMaxRanks = 254;

 private:
  Netns hub_;
  std::vector<Netns> ranks_;
};

}  // namespace fabflow::launcher
