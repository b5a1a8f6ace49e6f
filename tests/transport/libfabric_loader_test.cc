// Opening libfabric at run time (src/transport/libfabric/loader.h) leaves the process's signal
// handlers as the program set them: Debian's libfabric loads libinfinipath, which installs its
// own for SIGINT, SIGTERM and four more when it is loaded.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "transport/libfabric/loader.h"

namespace fabflow {
namespace {

bool libfabric_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libfabric.so") != std::string::npos) return true;
  return false;
}

void on_signal(int) {}

TEST(LibfabricLoader, OpeningItKeepsTheProgramsSignalHandlers) {
  // ctest runs each test in a process of its own; a run of the whole binary may have opened
  // libfabric in an earlier test.
  if (libfabric_mapped()) GTEST_SKIP() << "libfabric was opened earlier in this process";
  ::unsetenv("IPATH_NO_BACKTRACE");  // libinfinipath's switch that would hide the difference
  struct sigaction mine {
  }, old_int{}, old_term{};
  mine.sa_handler = on_signal;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(::sigaction(SIGINT, &mine, &old_int), 0);
  ASSERT_EQ(::sigaction(SIGTERM, &mine, &old_term), 0);

  std::string why;
  ASSERT_TRUE(ofi::lib::available(&why)) << why;
  EXPECT_TRUE(libfabric_mapped());
  EXPECT_GE(ofi::lib::version(), FI_VERSION(1, 17));

  struct sigaction now_int {
  }, now_term{};
  ::sigaction(SIGINT, &old_int, &now_int);
  ::sigaction(SIGTERM, &old_term, &now_term);
  EXPECT_EQ(now_int.sa_handler, &on_signal);
  EXPECT_EQ(now_term.sa_handler, &on_signal);
}

}  // namespace
}  // namespace fabflow
