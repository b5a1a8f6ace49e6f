// BootstrapConfig::fill_from_env and detect_launcher: rank, size, coordinator and secret from
// fabflow's own variables or the environment of Slurm, Open MPI, Hydra PMI or PMIx.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bootstrap/net.h"
#include "bootstrap/job_store.h"
#include "fabflow/bootstrap.h"
#include "fabflow/status.h"

namespace fabflow {
namespace {

// The variables one launcher sets. `job` lists job identifiers a secret may be derived from.
struct Launcher {
  const char* name;
  const char* rank;
  std::vector<const char*> size;
  std::vector<const char*> local_rank;
  std::vector<const char*> job;
};

// In priority order: mpirun and mpiexec inside a Slurm allocation inherit SLURM_PROCID of the
// batch step, so the MPI launchers' variables win over Slurm's.
const std::vector<Launcher>& external_launchers() {
  static const std::vector<Launcher> launchers = {
      {"openmpi",
       "OMPI_COMM_WORLD_RANK",
       {"OMPI_COMM_WORLD_SIZE"},
       {"OMPI_COMM_WORLD_LOCAL_RANK"},
       {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "SLURM_JOB_ID"}},
      {"pmix",
       "PMIX_RANK",
       {"PMIX_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"},
       {"PMIX_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"},
       {"PMIX_NAMESPACE", "SLURM_JOB_ID"}},
      {"pmi", "PMI_RANK", {"PMI_SIZE"}, {"MPI_LOCALRANKID"}, {"PMI_JOBID", "SLURM_JOB_ID"}},
      {"slurm",
       "SLURM_PROCID",
       {"SLURM_NTASKS", "SLURM_NPROCS"},
       {"SLURM_LOCALID"},
       {"SLURM_JOB_ID"}},
  };
  return launchers;
}

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

const Launcher* external_launcher() {
  for (const auto& l : external_launchers()) {
    if (env(l.rank)) return &l;
  }
  return nullptr;
}

template <typename T>
T parse_number(const std::string& name, const std::string& value) {
  T v{};
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec == std::errc::result_out_of_range)
    throw UsageError("bootstrap: " + name + "=" + value + " is out of range");
  if (ec != std::errc() || end != value.data() + value.size()) {
    throw UsageError("bootstrap: " + name + "=" + value + " is not a number");
  }
  return v;
}

// The first variable of `names` that is set, parsed; `source` names it for later messages.
std::optional<int> int_from(const std::vector<const char*>& names, std::string* source) {
  for (const char* name : names) {
    if (auto v = env(name)) {
      *source = name;
      return parse_number<int>(name, *v);
    }
  }
  return std::nullopt;
}

std::vector<const char*> chain(const char* own, const Launcher* l,
                               const std::vector<const char*> Launcher::*vars) {
  std::vector<const char*> names{own};
  if (l != nullptr) names.insert(names.end(), (l->*vars).begin(), (l->*vars).end());
  return names;
}

std::string from(const std::string& source) {
  return source.empty() ? "" : " (from " + source + ")";
}

// A secret every rank of the same job computes alike, or "" when the job id is not visible.
std::string derived_secret(const Launcher& l) {
  for (const char* var : l.job) {
    if (auto id = env(var)) {
      std::string secret = std::string("fabflow:") + l.name + ":" + var + "=" + *id;
      if (std::string(var) == "SLURM_JOB_ID") {
        if (auto step = env("SLURM_STEP_ID")) secret += "." + *step;
      }
      return secret;
    }
  }
  return "";
}

constexpr std::size_t kMaxSecretFile = 4096;

}  // namespace

std::string BootstrapConfig::read_secret_file(const std::string& path) {
  const std::string at = "bootstrap: secret file " + path;
  bootstrap_detail::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) throw UsageError(at + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw UsageError(at + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw UsageError(at + " is not a regular file");
  if (st.st_uid != ::geteuid()) {
    throw UsageError(at + " is owned by uid " + std::to_string(st.st_uid) + ", not by this user");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw UsageError(at + " has mode " + mode + ": other users may read it (chmod 600 " + path +
                     ")");
  }
  std::string secret;
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw UsageError(at + ": " + std::strerror(errno));
    if (n == 0) break;
    secret.append(buf, static_cast<std::size_t>(n));
    if (secret.size() > kMaxSecretFile) {
      throw UsageError(at + " is larger than " + std::to_string(kMaxSecretFile) + " bytes");
    }
  }
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty()) throw UsageError(at + " is empty");
  return secret;
}

std::string BootstrapConfig::detect_launcher() {
  if (env("FABFLOW_RANK")) return "fabflow";
  const Launcher* l = external_launcher();
  return l != nullptr ? l->name : "";
}

void BootstrapConfig::fill_from_env() {
  const Launcher* ext = external_launcher();
  std::string rank_src, size_src, local_src;
  if (size == -1)
    size = int_from(chain("FABFLOW_SIZE", ext, &Launcher::size), &size_src).value_or(-1);
  if (rank == -1) {
    std::vector<const char*> names{"FABFLOW_RANK"};
    if (ext != nullptr) names.push_back(ext->rank);
    rank = int_from(names, &rank_src).value_or(size == 1 ? 0 : -1);
  }
  if (size == -1)
    throw UsageError(
        "bootstrap: size unknown (set FABFLOW_SIZE, or start under fabflow's launcher, mpirun or "
        "srun)");
  if (size < 1)
    throw UsageError("bootstrap: size " + std::to_string(size) + from(size_src) +
                     " must be at least 1");
  if (rank == -1)
    throw UsageError(
        "bootstrap: rank unknown (set FABFLOW_RANK, or start under fabflow's launcher, mpirun or "
        "srun)");
  if (rank < 0 || rank >= size) {
    throw UsageError("bootstrap: rank " + std::to_string(rank) + from(rank_src) +
                     " is out of range for size " + std::to_string(size));
  }
  if (local_rank == -1) {
    local_rank = int_from(chain("FABFLOW_LOCAL_RANK", ext, &Launcher::local_rank), &local_src)
                     .value_or(rank);
  }
  if (local_rank < 0 || local_rank >= size) {
    throw UsageError("bootstrap: local rank " + std::to_string(local_rank) + from(local_src) +
                     " is out of range for size " + std::to_string(size));
  }

  if (rank == 0 && listen_fd < 0) {
    if (auto fd = env("FABFLOW_COORD_FD")) {
      listen_fd = parse_number<int>("FABFLOW_COORD_FD", *fd);
      if (listen_fd < 0)
        throw UsageError("bootstrap: FABFLOW_COORD_FD=" + *fd + " is not a file descriptor");
    }
  }
  std::string coord_src = "coordinator ";
  if (coordinator.empty()) {
    coordinator = env("FABFLOW_COORD").value_or("");
    coord_src = "FABFLOW_COORD=";
  }
  if (!coordinator.empty()) {
    std::string why;
    if (!bootstrap_detail::parse_host_port(coordinator, &why)) {
      throw UsageError("bootstrap: " + coord_src + coordinator + " " + why);
    }
  }
  // Under a PMIx or PMI2 launcher with no coordinator given, rank 0 publishes the coordinator's
  // address and a fresh secret in the resource manager's store (make_tcp_bootstrap).
  const std::string store = bootstrap_detail::job_store_offered();
  const bool via_store = coordinator.empty() && !(rank == 0 && listen_fd >= 0) &&
                         bootstrap_detail::job_store_built(store);
  if (coordinator.empty() && size > 1 && !(rank == 0 && listen_fd >= 0) && !via_store) {
    std::string hint = ")";
    if (store == "pmix") {
      hint = "; this fabflow was built without PMIx, which would take it from the launcher)";
    } else if (store == "pmi2") {
      hint = "; this fabflow was built without PMI2, which would take it from the launcher)";
    } else if (ext != nullptr && std::string(ext->name) == "slurm") {
      hint = ", or start with srun --mpi=pmix)";
    }
    throw UsageError("bootstrap: no coordinator address (set FABFLOW_COORD=host:port" + hint);
  }

  // Never from the command line, where `ps` shows it to every user of the host.
  if (secret.empty() && !secret_file.empty()) secret = read_secret_file(secret_file);
  if (secret.empty()) secret = env("FABFLOW_SECRET").value_or("");
  if (secret.empty()) {
    if (auto file = env("FABFLOW_SECRET_FILE"); file && !file->empty())
      secret = read_secret_file(*file);
  }
  if (secret.empty() && ext != nullptr && !env("FABFLOW_RANK") && !via_store) {
    secret = derived_secret(*ext);
    static bool warned = false;  // once per process, by rank 0 only
    if (!secret.empty() && rank == 0 && size > 1 && !warned) {
      warned = true;
      std::fprintf(stderr,
                   "fabflow: warning: no FABFLOW_SECRET or FABFLOW_SECRET_FILE; the secret is "
                   "derived from the %s job id, which protects against accidental cross-talk, "
                   "not against other users of the cluster\n",
                   ext->name);
    }
  }
  if (secret.empty() && size > 1 && !via_store) {
    throw UsageError(
        "bootstrap: no shared secret (set FABFLOW_SECRET or FABFLOW_SECRET_FILE, or pass "
        "--secret-file)");
  }

  if (timeout == BootstrapConfig{}.timeout) {
    if (auto ms = env("FABFLOW_BOOTSTRAP_TIMEOUT_MS")) {
      timeout =
          std::chrono::milliseconds(parse_number<long long>("FABFLOW_BOOTSTRAP_TIMEOUT_MS", *ms));
      if (timeout.count() <= 0) {
        throw UsageError("bootstrap: FABFLOW_BOOTSTRAP_TIMEOUT_MS=" + *ms + " must be positive");
      }
    }
  }
  if (timeout.count() <= 0) {
    throw UsageError("bootstrap: timeout must be positive (got " + std::to_string(timeout.count()) +
                     " ms)");
  }
  if (silence.count() == 0) {
    if (auto ms = env("FABFLOW_BOOTSTRAP_SILENCE_MS")) {
      silence =
          std::chrono::milliseconds(parse_number<long long>("FABFLOW_BOOTSTRAP_SILENCE_MS", *ms));
      if (silence.count() <= 0) {
        throw UsageError("bootstrap: FABFLOW_BOOTSTRAP_SILENCE_MS=" + *ms + " must be positive");
      }
    }
  }
  if (silence.count() < 0) {
    throw UsageError("bootstrap: silence must not be negative (got " +
                     std::to_string(silence.count()) + " ms)");
  }
}

}  // namespace fabflow
