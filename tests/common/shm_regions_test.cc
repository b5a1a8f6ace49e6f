// Naming and finding the shm provider's regions of dead ranks (issue 44, item 2).
#include "common/shm_regions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <string>
#include <vector>

namespace fabflow {
namespace {

namespace fs = std::filesystem;

// A pid that existed and has been reaped (reuse within the test is vanishingly unlikely).
pid_t reaped_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

std::string region_namespace() {  // the "<pidns>" field of this process's region names
  const std::string mine = shm_region_name();
  const std::size_t a = mine.find('_', 8), b = mine.find('_', a + 1);
  return mine.substr(a + 1, b - a - 1);
}

class ShmRegionsDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fabflow-shm-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string put(const std::string& name, std::size_t bytes = 4096) {
    std::ofstream(dir_ / name) << std::string(bytes, 'x');
    return name;
  }
  void age(const std::string& name, int seconds) {
    timespec times[2];
    ::clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= seconds;
    times[1] = times[0];
    ASSERT_EQ(::utimensat(AT_FDCWD, (dir_ / name).c_str(), times, 0), 0);
  }
  std::vector<std::string> found(ShmJudgement how) {
    std::vector<std::string> names;
    for (const auto& l : find_shm_leftovers(dir_.string(), how)) names.push_back(l.name);
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

TEST(ShmRegionName, CarriesThePidAndNamespaceAndIsFresh) {
  const std::string a = shm_region_name(), b = shm_region_name();
  EXPECT_NE(a, b);
  EXPECT_TRUE(a.starts_with("fabflow_" + std::to_string(::getpid()) + "_")) << a;
  EXPECT_EQ(std::count(a.begin(), a.end(), '_'), 3) << a;
  EXPECT_EQ(a.size() - a.rfind('_') - 1, 16u) << a;
  EXPECT_FALSE(region_namespace().empty());
}

TEST_F(ShmRegionsDir, RegionsOfExitedOwnersAreFoundWithTheirSize) {
  const pid_t dead = reaped_pid();
  const std::string ns = region_namespace();
  const std::string d = std::to_string(dead);
  const std::string fresh = put("fabflow_" + d + "_" + ns + "_0123456789abcdef", 8192);
  const std::string old_form = put("fabflow_" + d + "_fedcba9876543210");
  put("fabflow_" + d + "_1_0123456789abcdef");  // another pid namespace: not judged
  put("fabflow_" + std::to_string(::getpid()) + "_" + ns + "_0123456789abcdef");  // alive
  put("fabflow_" + d + "_" + ns + "_0123");  // not a name fabflow makes
  put("fabflow_x_0123456789abcdef");
  put(d + ":0:shm");                                                    // libfabric's default name
  fs::create_directory(dir_ / ("fabflow_" + d + "_aaaaaaaaaaaaaaaa"));  // not a file
  std::vector<std::string> want{fresh, old_form};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(found(ShmJudgement::exited_only), want);
  EXPECT_EQ(found(ShmJudgement::thorough), want);
  for (const auto& l : find_shm_leftovers(dir_.string()))
    if (l.name == fresh) {
      EXPECT_EQ(l.bytes, 8192u);
      EXPECT_EQ(l.owner, dead);
      EXPECT_EQ(l.why, "owner exited");
    }

  std::vector<std::string> errors;
  EXPECT_EQ(remove_shm_leftovers(find_shm_leftovers(dir_.string()), errors, dir_.string()),
            8192u + 4096u);
  EXPECT_TRUE(errors.empty());
  EXPECT_FALSE(fs::exists(dir_ / fresh));
  EXPECT_FALSE(fs::exists(dir_ / old_form));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 6);
}

TEST_F(ShmRegionsDir, ALivePidIsAnOwnerOnlyWhileItMapsTheRegion) {
  const std::string ns = region_namespace();
  const std::string name =
      put("fabflow_" + std::to_string(::getpid()) + "_" + ns + "_00000000000000aa");
  // Young: never judged (its owner may be setting it up).
  EXPECT_EQ(found(ShmJudgement::thorough), std::vector<std::string>{});
  age(name, 120);
  // Old and mapped by its (live) owner: in use.
  const int fd = ::open((dir_ / name).c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* p = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(found(ShmJudgement::thorough), std::vector<std::string>{});
  // Old, not mapped by the live pid: the pid was reused, the region is a leftover; the cheap
  // judgement every start makes leaves it alone.
  ::munmap(p, 4096);
  ::close(fd);
  EXPECT_EQ(found(ShmJudgement::thorough), std::vector<std::string>{name});
  EXPECT_EQ(found(ShmJudgement::exited_only), std::vector<std::string>{});
  const auto left = find_shm_leftovers(dir_.string());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].why, "owner pid reused (it does not map the region)");
}

TEST_F(ShmRegionsDir, AFileAlreadyGoneIsNotAnError) {
  std::vector<std::string> errors;
  const std::vector<ShmLeftover> gone{{"fabflow_1_0123456789abcdef", 1, 4096, "owner exited"}};
  EXPECT_EQ(remove_shm_leftovers(gone, errors, dir_.string()), 0u);
  EXPECT_TRUE(errors.empty());
}

TEST_F(ShmRegionsDir, AMissingDirectoryHasNoLeftovers) {
  EXPECT_TRUE(find_shm_leftovers((dir_ / "absent").string()).empty());
}

}  // namespace
}  // namespace fabflow
