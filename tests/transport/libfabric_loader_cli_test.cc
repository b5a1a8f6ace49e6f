// fabflow opens libfabric when it first needs it (src/transport/libfabric/loader.h): a process
// that only parses flags, or fails on them, never loads it, and one that looks up a provider
// does. The dynamic loader's own trace (LD_DEBUG=libs) says which libraries a run loaded.
#include <gtest/gtest.h>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::run_cli;
using namespace std::chrono_literals;

bool loaded_libfabric(const CliResult& r) {
  return r.err.find("libfabric.so") != std::string::npos;
}

TEST(LibfabricLoaderCli, FlagsAloneNeverLoadIt) {
  const std::map<std::string, std::string> trace{{"LD_DEBUG", "libs"}};
  CliResult version = run_cli({"fabflow", "--version"}, 10s, trace);
  ASSERT_EQ(version.status, 0) << version.err;
  EXPECT_FALSE(loaded_libfabric(version)) << version.err;
  // Refused input: the size is checked before any transport is opened.
  CliResult bad = run_cli({"fabflow", "bench", "raw", "-p", "tcp", "-S", "-5"}, 10s, trace);
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_FALSE(loaded_libfabric(bad)) << bad.err;
}

TEST(LibfabricLoaderCli, LookingUpAProviderLoadsIt) {
  CliResult info = run_cli({"fabflow", "info"}, 30s, {{"LD_DEBUG", "libs"}});
  ASSERT_EQ(info.status, 0) << info.err;
  EXPECT_TRUE(loaded_libfabric(info)) << info.err.substr(0, 2000);
  // The library answered: its providers are listed.
  EXPECT_NE(info.out.find("tcp"), std::string::npos) << info.out;
}

}  // namespace
}  // namespace fabflow
