// ranks_share_this_host: whether every rank of the run can use the local transport, read from
// the kernel rather than from the launcher's environment.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "fabflow/bootstrap.h"

namespace fabflow {
namespace {

// What two processes must share for one to map the other's memory and read it by cross-memory
// attach. Compared as bytes; zero-filled first.
struct HostIdentity {
  char boot_id[40];        // /proc/sys/kernel/random/boot_id: this kernel since its boot
  std::uint64_t net_ns;    // inode of /proc/self/ns/net
  std::uint64_t pid_ns;    // inode of /proc/self/ns/pid
  std::uint64_t mount_ns;  // inode of /proc/self/ns/mnt (/dev/shm must be the same)
  std::uint32_t uid;
  std::uint32_t unknown;  // 1: something could not be read (then nothing matches)
};

std::uint64_t namespace_inode(const char* path, std::uint32_t* unknown) {
  struct stat st {};
  if (::stat(path, &st) != 0) {
    *unknown = 1;
    return 0;
  }
  return static_cast<std::uint64_t>(st.st_ino);
}

HostIdentity this_host() {
  HostIdentity id;
  std::memset(&id, 0, sizeof id);
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  if (!std::getline(in, boot) || boot.empty()) id.unknown = 1;
  std::strncpy(id.boot_id, boot.c_str(), sizeof id.boot_id - 1);
  id.net_ns = namespace_inode("/proc/self/ns/net", &id.unknown);
  id.pid_ns = namespace_inode("/proc/self/ns/pid", &id.unknown);
  id.mount_ns = namespace_inode("/proc/self/ns/mnt", &id.unknown);
  id.uid = static_cast<std::uint32_t>(::getuid());
  return id;
}

}  // namespace

bool ranks_share_this_host(Bootstrap& boot) {
  const HostIdentity mine = this_host();
  const auto all = allgather_value(boot, mine, "host identity");
  for (const HostIdentity& other : all) {
    if (other.unknown != 0 || std::memcmp(&other, &mine, sizeof mine) != 0) return false;
  }
  return mine.unknown == 0;
}

}  // namespace fabflow
