// fabflow started as any MPI program is: `mpirun -np 2 fabflow bench raw` (Open MPI, which
// runs a PMIx server) and `srun --mpi=pmix -n 2 fabflow bench raw` on a one-node Slurm
// (scripts/slurm-local.sh), with no FABFLOW_* variable: rank 0 publishes its coordinator's
// address and a fresh secret through PMIx. Skipped, with the reason, where the launcher or
// libpmix is missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "bootstrap/pmix.h"
#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::run_cli;
using namespace std::chrono_literals;

bool executable(const char* path) { return ::access(path, X_OK) == 0; }

// Checks one launched `bench raw` run: both ranks joined, rank 0 printed its table, and no
// secret was derived from the job id (no warning about it).
void expect_ran(const CliResult& r, const std::string& launcher) {
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("launcher " + launcher), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  send           64"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("derived from"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("error"), std::string::npos) << r.err;
}

class PmixLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!bootstrap_detail::pmix_built())
      GTEST_SKIP() << "this fabflow was built without PMIx (libpmix-dev)";
    if (!std::string(FABFLOW_SANITIZER).empty())
      GTEST_SKIP() << "the release tree runs it: libpmix, mpirun and slurmd are not built with "
                   << FABFLOW_SANITIZER << " sanitizer";
  }
};

TEST_F(PmixLaunch, MpirunTwoRanksTcpAndShm) {
  if (!executable("/usr/bin/mpirun"))
    GTEST_SKIP() << "no /usr/bin/mpirun (apt install openmpi-bin)";
  // Open MPI refuses root unless told twice; CI runs as root.
  const std::map<std::string, std::string> env = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"},
                                                  {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
  for (const char* provider : {"tcp", "shm"}) {
    SCOPED_TRACE(provider);
    expect_ran(run_cli({"/usr/bin/mpirun", "-np", "2", FABFLOW_BIN, "bench", "raw", "-p", provider,
                        "-I", "2000"},
                       60s, env),
               "openmpi");
  }
}

// A PMIx namespace with no server behind it: one error line, exit code 1, no hang.
TEST_F(PmixLaunch, NoServerIsOneLine) {
  CliResult r =
      run_cli({"fabflow", "bench", "raw", "-p", "tcp"}, 30s,
              {{"PMIX_RANK", "0"}, {"PMIX_NAMESPACE", "fabflow-test"}, {"PMIX_SIZE", "2"}});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.status, 0) << r.out;
  const auto err = testing::lines(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_EQ(err[0].rfind("fabflow: error: bootstrap: PMIx init failed: ", 0), 0u) << err[0];
}

TEST_F(PmixLaunch, SrunPmixTwoRanksShm) {
  if (::geteuid() != 0) GTEST_SKIP() << "a one-node Slurm needs root";
  if (!executable("/usr/bin/srun"))
    GTEST_SKIP() << "no /usr/bin/srun (apt install slurm-wlm munge)";
  const std::string script = std::string(FABFLOW_SOURCE_DIR) + "/scripts/slurm-local.sh";
  const std::string dir = "/tmp/fabflow-slurm-test";  // its own: a user's Slurm stays untouched
  const std::map<std::string, std::string> env = {{"FABFLOW_SLURM_DIR", dir},
                                                  {"FABFLOW_SLURM_PORT", "6917"}};
  CliResult up = run_cli({"/bin/bash", script, "start"}, 60s, env);
  if (up.status != 0) GTEST_SKIP() << "scripts/slurm-local.sh start failed: " << up.err;
  CliResult r = run_cli({"/usr/bin/srun", "--mpi=pmix", "-n", "2", FABFLOW_BIN, "bench", "raw",
                         "-p", "shm", "-I", "2000"},
                        60s, {{"SLURM_CONF", dir + "/slurm.conf"}});
  run_cli({"/bin/bash", script, "stop"}, 30s, env);
  expect_ran(r, "pmix");
}

}  // namespace
}  // namespace fabflow
