// fabflow started as any MPI program is: `mpirun -np 2 fabflow bench raw` (Open MPI, which
// runs a PMIx server), and `srun --mpi=pmix` / `srun --mpi=pmi2 -n 2 fabflow bench raw` on a
// one-node Slurm (scripts/slurm-local.sh), with no FABFLOW_* variable: rank 0 publishes its
// coordinator's address and a fresh secret through the job's store. Skipped, with the reason,
// where the launcher, libpmix or libpmi2 is missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "bootstrap/job_store.h"
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

class JobStoreLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::string(FABFLOW_SANITIZER).empty())
      GTEST_SKIP()
          << "the release tree runs it: libpmix, libpmi2, mpirun and slurmd are not built with "
          << FABFLOW_SANITIZER << " sanitizer";
  }
};

TEST_F(JobStoreLaunch, MpirunTwoRanksTcpAndShm) {
  if (!bootstrap_detail::pmix_built())
    GTEST_SKIP() << "this fabflow was built without PMIx (libpmix-dev)";
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
TEST_F(JobStoreLaunch, NoPmixServerIsOneLine) {
  if (!bootstrap_detail::pmix_built())
    GTEST_SKIP() << "this fabflow was built without PMIx (libpmix-dev)";
  CliResult r =
      run_cli({"fabflow", "bench", "raw", "-p", "tcp"}, 30s,
              {{"PMIX_RANK", "0"}, {"PMIX_NAMESPACE", "fabflow-test"}, {"PMIX_SIZE", "2"}});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.status, 0) << r.out;
  const auto err = testing::lines(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_EQ(err[0].rfind("fabflow: error: bootstrap: PMIx init failed: ", 0), 0u) << err[0];
}

// Starts the one-node Slurm of scripts/slurm-local.sh in its own folder and ports (a user's
// own stays untouched), runs `srun --mpi=MPI -n 2 fabflow bench raw -p shm`, stops it. Each
// test has its own folder and ports: ctest runs tests side by side, and one test's `stop` must
// not take down the Slurm another is using.
void srun_two_ranks(const std::string& mpi, const std::string& launcher, int port) {
  if (::geteuid() != 0) GTEST_SKIP() << "a one-node Slurm needs root";
  if (!executable("/usr/bin/srun"))
    GTEST_SKIP() << "no /usr/bin/srun (apt install slurm-wlm munge)";
  const std::string script = std::string(FABFLOW_SOURCE_DIR) + "/scripts/slurm-local.sh";
  const std::string dir = "/tmp/fabflow-slurm-test-" + mpi;
  const std::map<std::string, std::string> env = {{"FABFLOW_SLURM_DIR", dir},
                                                  {"FABFLOW_SLURM_PORT", std::to_string(port)}};
  CliResult up = run_cli({"/bin/bash", script, "start"}, 60s, env);
  if (up.status != 0) GTEST_SKIP() << "scripts/slurm-local.sh start failed: " << up.err;
  CliResult r = run_cli({"/usr/bin/srun", "--mpi=" + mpi, "-n", "2", FABFLOW_BIN, "bench", "raw",
                         "-p", "shm", "-I", "2000"},
                        60s, {{"SLURM_CONF", dir + "/slurm.conf"}});
  run_cli({"/bin/bash", script, "stop"}, 30s, env);
  expect_ran(r, launcher);
}

TEST_F(JobStoreLaunch, SrunPmixTwoRanksShm) {
  if (!bootstrap_detail::pmix_built())
    GTEST_SKIP() << "this fabflow was built without PMIx (libpmix-dev)";
  srun_two_ranks("pmix", "pmix", 6917);
}

TEST_F(JobStoreLaunch, SrunPmi2TwoRanksShm) {
  if (!bootstrap_detail::pmi2_built())
    GTEST_SKIP() << "this fabflow was built without PMI2 (libpmi2-0-dev)";
  srun_two_ranks("pmi2", "pmi", 6927);
}

}  // namespace
}  // namespace fabflow
