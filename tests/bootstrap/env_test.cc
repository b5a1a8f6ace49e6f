// BootstrapConfig::fill_from_env and detect_launcher against fabricated launcher environments.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>

#include "bootstrap/job_store.h"
#include "fabflow/bootstrap.h"
#include "fabflow/status.h"

namespace fabflow {
namespace {

// Clears every variable the bootstrap reads, sets the given ones, and restores the original
// environment on destruction. Move-less; the test process is single-threaded here.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::initializer_list<std::pair<std::string, std::string>> vars = {}) {
    for (const char* name : kNames) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      ::unsetenv(name);
    }
    for (const auto& [name, value] : vars) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const char* name : kNames) ::unsetenv(name);
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  static constexpr const char* kNames[] = {"FABFLOW_RANK",
                                           "FABFLOW_SIZE",
                                           "FABFLOW_LOCAL_RANK",
                                           "FABFLOW_COORD",
                                           "FABFLOW_COORD_FD",
                                           "FABFLOW_SECRET",
                                           "FABFLOW_SECRET_FILE",
                                           "FABFLOW_BOOTSTRAP_TIMEOUT_MS",
                                           "SLURM_PROCID",
                                           "SLURM_NTASKS",
                                           "SLURM_NPROCS",
                                           "SLURM_LOCALID",
                                           "SLURM_JOB_ID",
                                           "SLURM_STEP_ID",
                                           "OMPI_COMM_WORLD_RANK",
                                           "OMPI_COMM_WORLD_SIZE",
                                           "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "OMPI_MCA_ess_base_jobid",
                                           "PMIX_RANK",
                                           "PMIX_SIZE",
                                           "PMIX_LOCAL_RANK",
                                           "PMIX_NAMESPACE",
                                           "PMI_RANK",
                                           "PMI_SIZE",
                                           "MPI_LOCALRANKID",
                                           "PMI_JOBID"};
  std::map<std::string, std::string> saved_;
};

constexpr const char* kNoSecret =
    "bootstrap: no shared secret (set FABFLOW_SECRET or FABFLOW_SECRET_FILE, or pass "
    "--secret-file)";

// The UsageError message fill_from_env throws, or "" when it succeeds.
std::string fill_error(BootstrapConfig config = {}) {
  try {
    config.fill_from_env();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

BootstrapConfig filled(BootstrapConfig config = {}) {
  config.fill_from_env();
  return config;
}

TEST(BootstrapEnv, FabflowVariables) {
  ScopedEnv env({{"FABFLOW_RANK", "2"},
                 {"FABFLOW_SIZE", "4"},
                 {"FABFLOW_LOCAL_RANK", "1"},
                 {"FABFLOW_COORD", "10.0.0.1:4000"},
                 {"FABFLOW_SECRET", "s"},
                 {"FABFLOW_BOOTSTRAP_TIMEOUT_MS", "1500"}});
  const auto c = filled();
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.size, 4);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.coordinator, "10.0.0.1:4000");
  EXPECT_EQ(c.secret, "s");
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(c.listen_fd, -1);
  EXPECT_EQ(BootstrapConfig::detect_launcher(), "fabflow");
}

TEST(BootstrapEnv, ExplicitValuesWin) {
  ScopedEnv env({{"FABFLOW_RANK", "2"},
                 {"FABFLOW_SIZE", "4"},
                 {"FABFLOW_COORD", "10.0.0.1:4000"},
                 {"FABFLOW_SECRET", "env"},
                 {"FABFLOW_BOOTSTRAP_TIMEOUT_MS", "1500"}});
  BootstrapConfig c;
  c.rank = 1;
  c.size = 3;
  c.local_rank = 0;
  c.coordinator = "node7:5000";
  c.secret = "flag";
  c.timeout = std::chrono::milliseconds(300);
  c = filled(c);
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.size, 3);
  EXPECT_EQ(c.local_rank, 0);
  EXPECT_EQ(c.coordinator, "node7:5000");
  EXPECT_EQ(c.secret, "flag");
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(300));
}

TEST(BootstrapEnv, CoordinatorFdOnlyForRankZero) {
  ScopedEnv env({{"FABFLOW_RANK", "0"},
                 {"FABFLOW_SIZE", "2"},
                 {"FABFLOW_COORD_FD", "7"},
                 {"FABFLOW_SECRET", "s"}});
  const auto c = filled();
  EXPECT_EQ(c.listen_fd, 7);
  EXPECT_EQ(c.coordinator, "");  // rank 0 with a listening socket needs no address
  BootstrapConfig other;
  other.rank = 1;
  EXPECT_EQ(fill_error(other), "bootstrap: no coordinator address (set FABFLOW_COORD=host:port)");
}

TEST(BootstrapEnv, Slurm) {
  ScopedEnv env({{"SLURM_PROCID", "5"},
                 {"SLURM_NTASKS", "8"},
                 {"SLURM_LOCALID", "1"},
                 {"SLURM_JOB_ID", "4242"},
                 {"SLURM_STEP_ID", "3"},
                 {"FABFLOW_COORD", "node1:7000"}});
  EXPECT_EQ(BootstrapConfig::detect_launcher(), "slurm");
  const auto c = filled();
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.size, 8);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.secret, "fabflow:slurm:SLURM_JOB_ID=4242.3");
}

TEST(BootstrapEnv, OpenMpiWinsOverTheSurroundingSlurmAllocation) {
  ScopedEnv env({{"SLURM_PROCID", "0"},
                 {"SLURM_NTASKS", "16"},
                 {"SLURM_JOB_ID", "4242"},
                 {"OMPI_COMM_WORLD_RANK", "3"},
                 {"OMPI_COMM_WORLD_SIZE", "4"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                 {"OMPI_MCA_ess_base_jobid", "99"},
                 {"FABFLOW_COORD", "node1:7000"}});
  EXPECT_EQ(BootstrapConfig::detect_launcher(), "openmpi");
  const auto c = filled();
  EXPECT_EQ(c.rank, 3);
  EXPECT_EQ(c.size, 4);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.secret, "fabflow:openmpi:OMPI_MCA_ess_base_jobid=99");
}

TEST(BootstrapEnv, HydraPmi) {
  ScopedEnv env(
      {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"FABFLOW_COORD", "h:1"}});
  EXPECT_EQ(BootstrapConfig::detect_launcher(), "pmi");
  EXPECT_EQ(fill_error(), kNoSecret);
  ::setenv("FABFLOW_SECRET", "s", 1);
  const auto c = filled();
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.size, 2);
  EXPECT_EQ(c.local_rank, 1);
}

TEST(BootstrapEnv, PmixSizeFromTheLauncher) {
  ScopedEnv env({{"PMIX_RANK", "2"},
                 {"PMIX_NAMESPACE", "ns-7"},
                 {"SLURM_NTASKS", "6"},
                 {"FABFLOW_COORD", "h:1"}});
  EXPECT_EQ(BootstrapConfig::detect_launcher(), "pmix");
  auto c = filled();
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.size, 6);
  EXPECT_EQ(c.local_rank, 2);  // not given anywhere: the rank
  EXPECT_EQ(c.secret, "fabflow:pmix:PMIX_NAMESPACE=ns-7");
  ::setenv("PMIX_SIZE", "3", 1);
  EXPECT_EQ(filled().size, 3);
}

// Under a PMIx launcher with no coordinator given, both the coordinator's address and the
// secret come from the resource manager's store later (make_tcp_bootstrap): nothing is derived
// from the job id, and nothing is missing yet.
TEST(BootstrapEnv, PmixWithoutCoordinatorLeavesAddressAndSecretToTheStore) {
  ScopedEnv env({{"PMIX_RANK", "1"}, {"PMIX_NAMESPACE", "ns-7"}, {"PMIX_SIZE", "2"}});
  if (!bootstrap_detail::pmix_built()) {
    EXPECT_EQ(fill_error(),
              "bootstrap: no coordinator address (set FABFLOW_COORD=host:port; "
              "this fabflow was built without PMIx, which would take it from the launcher)");
    return;
  }
  const auto c = filled();
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.size, 2);
  EXPECT_EQ(c.coordinator, "");
  EXPECT_EQ(c.secret, "");
  ::setenv("FABFLOW_COORD", "h:1", 1);  // an address given: the job-id secret as before
  EXPECT_EQ(filled().secret, "fabflow:pmix:PMIX_NAMESPACE=ns-7");
}

TEST(BootstrapEnv, Pmi2WithoutCoordinatorLeavesAddressAndSecretToTheStore) {
  ScopedEnv env({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"PMI_FD", "9"}, {"PMI_JOBID", "3.0"}});
  EXPECT_EQ(bootstrap_detail::job_store_offered(), "pmi2");
  if (!bootstrap_detail::pmi2_built()) {
    EXPECT_EQ(fill_error(),
              "bootstrap: no coordinator address (set FABFLOW_COORD=host:port; "
              "this fabflow was built without PMI2, which would take it from the launcher)");
    return;
  }
  const auto c = filled();
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.coordinator, "");
  EXPECT_EQ(c.secret, "");
}

TEST(BootstrapEnv, ProcessMappingNodeCount) {
  using bootstrap_detail::nodes_in_process_mapping;
  EXPECT_EQ(nodes_in_process_mapping("(vector,(0,1,2))"), 1u);
  EXPECT_EQ(nodes_in_process_mapping("(vector,(0,2,4),(2,1,3))"), 3u);
  EXPECT_EQ(nodes_in_process_mapping("(vector,(0,2,1),(0,2,1))"), 2u);  // cyclic: nodes again
  for (const char* bad :
       {"", "(vector)", "(vector,(0,1))", "(vector,(0,0,2))", "(vector,(0,1,0))", "(vector,(0,1,2)",
        "(vector,(0,1,2)))", "(vector,(a,1,2))", "(vector,(0,1,2),)", "(vector,(4294967295,2,1))",
        "(vector,(-1,1,1))", "(vector (0,1,2))"}) {
    EXPECT_EQ(nodes_in_process_mapping(bad), std::nullopt) << bad;
  }
}

TEST(BootstrapEnv, SlurmWithoutPmixPointsAtIt) {
  ScopedEnv env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "4242"}});
  EXPECT_EQ(fill_error(),
            "bootstrap: no coordinator address (set FABFLOW_COORD=host:port, or "
            "start with srun --mpi=pmix)");
}

TEST(BootstrapEnv, NoLauncher) {
  ScopedEnv env;
  EXPECT_EQ(BootstrapConfig::detect_launcher(), "");
  EXPECT_EQ(fill_error(),
            "bootstrap: size unknown (set FABFLOW_SIZE, or start under fabflow's launcher, mpirun "
            "or srun)");
  BootstrapConfig c;
  c.size = 2;
  EXPECT_EQ(fill_error(c),
            "bootstrap: rank unknown (set FABFLOW_RANK, or start under fabflow's launcher, mpirun "
            "or srun)");
}

TEST(BootstrapEnv, SingleProcessNeedsNothingElse) {
  ScopedEnv env({{"FABFLOW_SIZE", "1"}});
  const auto c = filled();
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.size, 1);
  EXPECT_EQ(c.coordinator, "");
  EXPECT_EQ(c.secret, "");
}

TEST(BootstrapEnv, MalformedNumbers) {
  ScopedEnv env({{"FABFLOW_RANK", "abc"}, {"FABFLOW_SIZE", "2"}});
  EXPECT_EQ(fill_error(), "bootstrap: FABFLOW_RANK=abc is not a number");
  ::setenv("FABFLOW_RANK", "1 ", 1);
  EXPECT_EQ(fill_error(), "bootstrap: FABFLOW_RANK=1  is not a number");
  ::setenv("FABFLOW_RANK", "99999999999", 1);
  EXPECT_EQ(fill_error(), "bootstrap: FABFLOW_RANK=99999999999 is out of range");
  ::setenv("FABFLOW_RANK", "1", 1);
  ::setenv("FABFLOW_SIZE", "2x", 1);
  EXPECT_EQ(fill_error(), "bootstrap: FABFLOW_SIZE=2x is not a number");
}

TEST(BootstrapEnv, RangeChecks) {
  ScopedEnv env({{"FABFLOW_RANK", "4"},
                 {"FABFLOW_SIZE", "4"},
                 {"FABFLOW_COORD", "h:1"},
                 {"FABFLOW_SECRET", "s"}});
  EXPECT_EQ(fill_error(), "bootstrap: rank 4 (from FABFLOW_RANK) is out of range for size 4");
  ::setenv("FABFLOW_SIZE", "0", 1);
  EXPECT_EQ(fill_error(), "bootstrap: size 0 (from FABFLOW_SIZE) must be at least 1");
  ::setenv("FABFLOW_SIZE", "8", 1);
  ::setenv("FABFLOW_LOCAL_RANK", "-2", 1);
  EXPECT_EQ(fill_error(),
            "bootstrap: local rank -2 (from FABFLOW_LOCAL_RANK) is out of range for size 8");
  ::unsetenv("FABFLOW_LOCAL_RANK");
  BootstrapConfig c;
  c.rank = -3;
  EXPECT_EQ(fill_error(c), "bootstrap: rank -3 is out of range for size 8");
}

TEST(BootstrapEnv, CoordinatorAddress) {
  ScopedEnv env({{"FABFLOW_RANK", "1"}, {"FABFLOW_SIZE", "2"}, {"FABFLOW_SECRET", "s"}});
  EXPECT_EQ(fill_error(), "bootstrap: no coordinator address (set FABFLOW_COORD=host:port)");
  const std::map<std::string, std::string> bad = {
      {"node1", "is not host:port"},
      {":4000", "is not host:port"},
      {"node1:", "has no valid port (1..65535)"},
      {"node1:0", "has no valid port (1..65535)"},
      {"node1:65536", "has no valid port (1..65535)"},
      {"node1:12ab", "has no valid port (1..65535)"},
      {"256.1.1.1:80", "has an invalid IPv4 address"},
      {"10.0.0:80", "has an invalid IPv4 address"},
      {"bad host:80", "has an invalid host name"},
      {"-node:80", "has an invalid host name"},
      {"a..b:80", "has an invalid host name"},
      {"::1:80", "has an invalid host name"},
  };
  for (const auto& [value, why] : bad) {
    ::setenv("FABFLOW_COORD", value.c_str(), 1);
    EXPECT_EQ(fill_error(), "bootstrap: FABFLOW_COORD=" + value + " " + why);
  }
  for (const char* good : {"127.0.0.1:1", "node-7.cluster.local:65535", "n_1:4000"}) {
    ::setenv("FABFLOW_COORD", good, 1);
    EXPECT_EQ(fill_error(), "") << good;
  }
  BootstrapConfig c;
  c.coordinator = "x";
  EXPECT_EQ(fill_error(c), "bootstrap: coordinator x is not host:port");
}

TEST(BootstrapEnv, SecretAndTimeout) {
  ScopedEnv env({{"FABFLOW_RANK", "1"}, {"FABFLOW_SIZE", "2"}, {"FABFLOW_COORD", "h:1"}});
  EXPECT_EQ(fill_error(), kNoSecret);
  ::setenv("SLURM_PROCID", "1",
           1);  // under Slurm, but fabflow's own launcher always passes a secret
  ::setenv("SLURM_NTASKS", "2", 1);
  ::setenv("SLURM_JOB_ID", "77", 1);
  EXPECT_EQ(fill_error(), kNoSecret);
  ::setenv("FABFLOW_SECRET", "s", 1);
  ::setenv("FABFLOW_BOOTSTRAP_TIMEOUT_MS", "0", 1);
  EXPECT_EQ(fill_error(), "bootstrap: FABFLOW_BOOTSTRAP_TIMEOUT_MS=0 must be positive");
  ::setenv("FABFLOW_BOOTSTRAP_TIMEOUT_MS", "soon", 1);
  EXPECT_EQ(fill_error(), "bootstrap: FABFLOW_BOOTSTRAP_TIMEOUT_MS=soon is not a number");
  ::unsetenv("FABFLOW_BOOTSTRAP_TIMEOUT_MS");
  BootstrapConfig c;
  c.timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(fill_error(c), "bootstrap: timeout must be positive (got 0 ms)");
}

// A file in a fresh private directory, written with `text` and given `mode`; removed with it.
class TempFile {
 public:
  TempFile(const std::string& text, mode_t mode) {
    char dir[] = "/tmp/fabflow-secret-XXXXXX";
    if (::mkdtemp(dir) == nullptr) std::abort();
    dir_ = dir;
    path_ = dir_ + "/secret";
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      std::abort();
    ::close(fd);
    ::chmod(path_.c_str(), mode);
  }
  ~TempFile() {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::string path_;
};

std::string read_error(const std::string& path) {
  try {
    BootstrapConfig::read_secret_file(path);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(BootstrapEnv, SecretFile) {
  TempFile good("s3cret\n", 0600);
  EXPECT_EQ(BootstrapConfig::read_secret_file(good.path()), "s3cret");
  TempFile strict("x y\r\n", 0400);
  EXPECT_EQ(BootstrapConfig::read_secret_file(strict.path()), "x y");

  TempFile readable("s3cret", 0644);
  EXPECT_EQ(read_error(readable.path()), "bootstrap: secret file " + readable.path() +
                                             " has mode 0644: other users may read it (chmod "
                                             "600 " +
                                             readable.path() + ")");
  TempFile group("s3cret", 0640);
  EXPECT_NE(read_error(group.path()).find("has mode 0640"), std::string::npos);
  TempFile empty("", 0600);
  EXPECT_EQ(read_error(empty.path()), "bootstrap: secret file " + empty.path() + " is empty");
  TempFile newline("\n", 0600);
  EXPECT_EQ(read_error(newline.path()), "bootstrap: secret file " + newline.path() + " is empty");
  EXPECT_EQ(read_error(good.dir() + "/missing"),
            "bootstrap: secret file " + good.dir() + "/missing: No such file or directory");
  EXPECT_EQ(read_error(good.dir()),
            "bootstrap: secret file " + good.dir() + " is not a regular file");
  TempFile big(std::string(5000, 'x'), 0600);
  EXPECT_EQ(read_error(big.path()),
            "bootstrap: secret file " + big.path() + " is larger than 4096 bytes");
  for (const auto& e : {read_error(readable.path()), read_error(empty.path())})
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
}

TEST(BootstrapEnv, SecretFromAFile) {
  TempFile file("from-file\n", 0600);
  ScopedEnv env({{"FABFLOW_RANK", "1"}, {"FABFLOW_SIZE", "2"}, {"FABFLOW_COORD", "h:1"}});
  BootstrapConfig c;
  c.secret_file = file.path();
  EXPECT_EQ(filled(c).secret, "from-file");
  ::setenv("FABFLOW_SECRET_FILE", file.path().c_str(), 1);
  EXPECT_EQ(filled().secret, "from-file");
  ::setenv("FABFLOW_SECRET", "from-env", 1);  // the variable wins over the variable's file
  EXPECT_EQ(filled().secret, "from-env");
  EXPECT_EQ(filled(c).secret, "from-file");  // the explicit file wins over both
  TempFile readable("s", 0644);
  c.secret_file = readable.path();
  EXPECT_NE(fill_error(c).find("has mode 0644"), std::string::npos);
}

// The derived secret's warning: rank 0 prints it once per process. In a re-executed child, so
// that no earlier test has printed it already.
TEST(BootstrapEnv, DerivedSecretWarnsOnceOnRankZero) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ScopedEnv env({{"SLURM_PROCID", "0"},
                       {"SLURM_NTASKS", "2"},
                       {"SLURM_JOB_ID", "4242"},
                       {"FABFLOW_COORD", "node1:7000"}});
        ::testing::internal::CaptureStderr();
        filled();
        filled();
        ::setenv("SLURM_PROCID", "1", 1);
        filled();
        const std::string err = ::testing::internal::GetCapturedStderr();
        std::fputs(err.c_str(), stderr);
        const std::string line =
            "fabflow: warning: no FABFLOW_SECRET or FABFLOW_SECRET_FILE; the secret is derived "
            "from the slurm job id, which protects against accidental cross-talk, not against "
            "other users of the cluster\n";
        std::exit(err == line ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "not against other users of the cluster");
}

}  // namespace
}  // namespace fabflow
