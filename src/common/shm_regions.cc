#include "common/shm_regions.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string_view>

#include "common/errno_text.h"

namespace fabflow {
namespace {

constexpr std::string_view kRegionPrefix = "fabflow_";
constexpr std::chrono::seconds kYoungRegion{60};

// The inode of this process's pid namespace ("pid:[4026531836]"), 0 when unknown.
std::uint64_t pid_namespace() {
  char link[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
  if (n <= 0) return 0;
  const std::string_view s(link, static_cast<std::size_t>(n));
  const auto open = s.find('['), close = s.find(']');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return 0;
  std::uint64_t ino = 0;
  std::from_chars(s.data() + open + 1, s.data() + close, ino);
  return ino;
}

template <class T>
std::optional<T> whole_number(std::string_view s) {
  T v{};
  if (s.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

struct RegionName {
  pid_t pid = 0;
  std::optional<std::uint64_t> pidns;  // absent in names from before the namespace was added
};

// "fabflow_<pid>_<pidns>_<16 hex>" or "fabflow_<pid>_<16 hex>"; nullopt for any other name.
std::optional<RegionName> parse_region_name(std::string_view name) {
  if (!name.starts_with(kRegionPrefix)) return std::nullopt;
  name.remove_prefix(kRegionPrefix.size());
  std::vector<std::string_view> parts;
  for (std::size_t at = 0;;) {
    const std::size_t next = name.find('_', at);
    parts.push_back(name.substr(at, next - at));
    if (next == std::string_view::npos) break;
    at = next + 1;
  }
  if (parts.size() != 2 && parts.size() != 3) return std::nullopt;
  const std::string_view random = parts.back();
  if (random.size() != 16 || random.find_first_not_of("0123456789abcdef") != std::string_view::npos)
    return std::nullopt;
  const auto pid = whole_number<pid_t>(parts[0]);
  if (!pid || *pid <= 0) return std::nullopt;
  RegionName r{*pid, std::nullopt};
  if (parts.size() == 3) {
    r.pidns = whole_number<std::uint64_t>(parts[1]);
    if (!r.pidns) return std::nullopt;
  }
  return r;
}

// Whether `pid` maps `path`: true, false, or nullopt when its maps cannot be read.
std::optional<bool> maps_file(pid_t pid, const std::string& path) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  if (!maps) return std::nullopt;
  std::string line;
  bool any = false;
  while (std::getline(maps, line)) {
    any = true;
    const std::size_t at = line.find(path);
    if (at == std::string::npos) continue;
    const std::size_t after = at + path.size();
    if (after == line.size() || line[after] == ' ') return true;
  }
  if (!any) return std::nullopt;  // another user's process: an empty read, not "maps nothing"
  return false;
}

}  // namespace

std::string shm_region_name() {
  std::uint64_t r = 0;
  if (::getrandom(&r, sizeof r, 0) != sizeof r)
    r = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  char buf[96];
  std::snprintf(buf, sizeof buf, "fabflow_%d_%llu_%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(pid_namespace()),
                static_cast<unsigned long long>(r));
  return buf;
}

std::optional<pid_t> shm_region_owner(std::string_view name) {
  const auto region = parse_region_name(name);
  if (!region || (region->pidns && *region->pidns != pid_namespace())) return std::nullopt;
  return region->pid;
}

std::vector<ShmLeftover> find_shm_leftovers(const std::string& dir, ShmJudgement how) {
  std::vector<ShmLeftover> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  const std::uint64_t ours = pid_namespace();
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const auto region = parse_region_name(name);
    if (!region) continue;
    if (region->pidns && *region->pidns != ours) continue;  // another namespace's pids
    struct stat st {};
    if (::fstatat(::dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    ShmLeftover l{name, region->pid, static_cast<std::uint64_t>(st.st_size), ""};
    if (::kill(region->pid, 0) != 0 && errno == ESRCH) {
      l.why = "owner exited";
    } else if (how == ShmJudgement::thorough) {
      const auto age = std::chrono::system_clock::now() -
                       std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec);
      if (age < kYoungRegion) continue;
      const auto mapped = maps_file(region->pid, dir + "/" + name);
      if (!mapped || *mapped) continue;
      l.why = "owner pid reused (it does not map the region)";
    } else {
      continue;
    }
    out.push_back(std::move(l));
  }
  ::closedir(d);
  return out;
}

std::uint64_t remove_shm_leftovers(std::span<const ShmLeftover> leftovers,
                                   std::vector<std::string>& errors, const std::string& dir) {
  std::uint64_t freed = 0;
  for (const ShmLeftover& l : leftovers) {
    const std::string path = dir + "/" + l.name;
    if (::unlink(path.c_str()) == 0) {
      freed += l.bytes;
    } else if (errno != ENOENT) {
      errors.push_back(errno_text(path, errno));
    }
  }
  return freed;
}

void remove_shm_regions_of(pid_t pid) {
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return;
  const std::string prefix = std::string(kRegionPrefix) + std::to_string(pid) + "_";
  while (const dirent* e = ::readdir(dir))
    if (std::string_view(e->d_name).starts_with(prefix)) ::unlinkat(::dirfd(dir), e->d_name, 0);
  ::closedir(dir);
}

}  // namespace fabflow
