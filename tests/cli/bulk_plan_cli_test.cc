// `fabflow bulk plan` through the CLI: two ranks open a channel, rank 0 prints the costs and the
// size -> protocol table from 1 B to 1 GiB; -S is refused with one error line and exit code 2.
#include <gtest/gtest.h>

#include <string>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::run_cli;
using namespace std::chrono_literals;

TEST(BulkPlanCli, PrintsTheCostsAndAProtocolForEverySize) {
  CliResult r = run_cli({"fabflow", "bulk", "plan", "-p", "local"}, 60s);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("# bulk plan on local (", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("registration pinning off"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("auto's costs, measured at open:"), std::string::npos) << r.out;
  for (const char* size :
       {"\n          1  ", "\n         1K  ", "\n         1M  ", "\n      1024M  "})
    EXPECT_NE(r.out.find(size), std::string::npos) << "size row" << size << "\n" << r.out;
}

TEST(BulkPlanCli, MrPinIsSaidInTheHeader) {
  CliResult r = run_cli({"fabflow", "bulk", "plan", "-p", "local", "--mr-pin"}, 60s);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("registration pinning on"), std::string::npos) << r.out;
}

TEST(BulkPlanCli, RefusesASize) {
  CliResult r = run_cli({"fabflow", "bulk", "plan", "-p", "local", "-S", "64K"}, 20s);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("bulk plan covers 1 B to 1 GiB: -S does not apply"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace fabflow
