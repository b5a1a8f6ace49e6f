// Out-of-band bootstrap: how the processes of one experiment find each other and exchange
// endpoint names and memory keys before any fabric traffic flows.
//
// The TCP bootstrap needs no external service: rank 0 runs a small coordinator, every rank
// (rank 0 included) connects to it, proves it knows the shared secret, and from then on
// all-gathers and barriers are relayed through the coordinator. The same sockets double as a
// liveness channel: when a process dies its socket hangs up and every other rank learns of it.
#pragma once

#include <fabflow/status.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace fabflow {

// Where rank, size, coordinator and secret come from. Explicit values win over the environment.
struct BootstrapConfig {
  int rank = -1;            // -1: from the environment
  int size = -1;            // -1: from the environment
  int local_rank = -1;      // rank among the processes on this host; -1: from the environment
  std::string coordinator;  // "host:port" of rank 0's coordinator; empty: FABFLOW_COORD
  int listen_fd = -1;       // rank 0 only: an already-listening socket (FABFLOW_COORD_FD)
  std::string secret;       // empty: secret_file, FABFLOW_SECRET, FABFLOW_SECRET_FILE
  std::string secret_file;  // a file holding the secret (--secret-file); mode 0600 or stricter
  std::chrono::milliseconds timeout{8000};  // join, all-gather and barrier bound
  // Liveness: every rank's bootstrap runs a thread that sends a heartbeat to the coordinator
  // every silence/8 (10 to 250 ms), whatever the rank's own threads are doing. A rank not heard
  // from for `silence` (its process stopped with SIGSTOP or by a debugger, swapped out, or
  // starved of CPU) is declared stuck and the run fails, naming it: every rank's next bootstrap
  // call or peer_failed() says so. A dead rank is known sooner, when its socket hangs up.
  // 0: the timeout. FABFLOW_BOOTSTRAP_SILENCE_MS sets it from the environment.
  std::chrono::milliseconds silence{0};

  // Fills unset fields from FABFLOW_RANK / FABFLOW_SIZE / FABFLOW_LOCAL_RANK / FABFLOW_COORD /
  // FABFLOW_COORD_FD / FABFLOW_SECRET / FABFLOW_BOOTSTRAP_TIMEOUT_MS, then from the launcher's
  // environment: Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), Open MPI
  // (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK), MPICH/Hydra PMI (PMI_RANK, PMI_SIZE,
  // MPI_LOCALRANKID), PMIx (PMIX_RANK with PMIX_SIZE or the launcher's size variable).
  // Without any of these, under an external launcher, the secret is derived from the job id
  // (rank 0 warns once on stderr: it only protects against accidental cross-talk).
  // Throws UsageError naming what is missing or malformed.
  void fill_from_env();

  // The secret in `path`, trailing newlines dropped. Throws UsageError (one line) unless it is
  // a regular file owned by this user that no other user may read or write, and not empty.
  static std::string read_secret_file(const std::string& path);

  // The name of the launcher whose environment supplied rank/size ("fabflow", "slurm",
  // "openmpi", "pmi", "pmix"), or "" when none did.
  static std::string detect_launcher();
};

// Runtime interface for the out-of-band channel (UCX's ucx_perf_rte_t idea). Implementations:
// TCP (make_tcp_bootstrap) and in-process threads for tests (make_thread_bootstraps).
// Not thread-safe: one thread of a process uses its Bootstrap at a time.
class Bootstrap {
 public:
  virtual ~Bootstrap() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;

  // Every rank contributes one blob; returns all blobs indexed by rank. Throws PeerError when
  // a peer vanished and Error on timeout.
  virtual std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> mine) = 0;

  // Blocks until every rank has entered the barrier. `while_waiting`, when given, is called
  // repeatedly while waiting (a passive peer drives its fabric progress from here).
  // Timeout: unbounded when `while_waiting` is given (the caller bounds its own work), else
  // the configured timeout.
  virtual void barrier(const std::function<void()>& while_waiting = {}) = 0;

  // Non-blocking: true once any peer process is known to have died, aborted or gone silent
  // (BootstrapConfig::silence).
  virtual bool peer_failed() = 0;

  // Why the run failed, once peer_failed() is true: the rank to blame (-1: the run as a whole)
  // and one line, e.g. "bootstrap: rank 1 stopped answering: ...". nullopt before.
  struct Failure {
    int rank = -1;
    std::string what;
  };
  virtual std::optional<Failure> failure() {
    if (!peer_failed()) return std::nullopt;
    return Failure{-1, "a peer vanished"};
  }

  // A peer that showed no sign of life for a while, as this process last heard.
  struct Silence {
    int rank = -1;
    std::chrono::milliseconds silent{0};
  };
  // Non-blocking: the peers that showed no sign of life for at least `at_least` (and never
  // less than a few heartbeats), longest first. A wait that timed out asks this to say whether
  // its peer is stuck or only slow. Empty where the bootstrap cannot tell (threads of one
  // process, a single process).
  virtual std::vector<Silence> silent_peers(std::chrono::milliseconds at_least) {
    (void)at_least;
    return {};
  }

  // How long a peer may show no sign of life before peer_failed() says so
  // (BootstrapConfig::silence); 0 where the bootstrap does not watch for silence.
  virtual std::chrono::milliseconds silence_bound() const { return std::chrono::milliseconds{0}; }

  // Tells every peer this process is giving up (they see peer_failed() soon after).
  virtual void abort(const std::string& reason) = 0;

  // The IP address (numeric) of this host as seen on the path to the coordinator. Fabric
  // endpoints bind to it so that tcp traffic uses the same interface (a veth in a namespace).
  virtual std::string local_address() const = 0;
};

// Typed all-gathers over Bootstrap::allgather, for plain values (trivially copyable: no
// pointers, nothing to fix up). Collective. A peer's blob of the wrong length throws PeerError
// naming `what` (e.g. "raw bench: phase report") and the rank; the values themselves come from
// a peer and are the caller's to range-check.
//
// One value per rank, indexed by rank.
template <class T>
std::vector<T> allgather_value(Bootstrap& boot, const T& mine, std::string_view what) {
  static_assert(std::is_trivially_copyable_v<T>, "allgather_value sends T as bytes");
  auto blobs = boot.allgather(std::as_bytes(std::span(&mine, 1)));
  std::vector<T> all(blobs.size());
  for (std::size_t r = 0; r < blobs.size(); ++r) {
    if (blobs[r].size() != sizeof(T))
      throw PeerError(static_cast<int>(r), std::string(what) + " from rank " + std::to_string(r) +
                                               " is malformed (" + std::to_string(blobs[r].size()) +
                                               " bytes, expected " + std::to_string(sizeof(T)) +
                                               ")");
    std::memcpy(&all[r], blobs[r].data(), sizeof(T));
  }
  return all;
}
// An array of values per rank (each rank's may differ in length), indexed by rank.
template <class T>
std::vector<std::vector<T>> allgather_values(Bootstrap& boot, std::span<const T> mine,
                                             std::string_view what) {
  static_assert(std::is_trivially_copyable_v<T>, "allgather_values sends T as bytes");
  auto blobs = boot.allgather(std::as_bytes(mine));
  std::vector<std::vector<T>> all(blobs.size());
  for (std::size_t r = 0; r < blobs.size(); ++r) {
    if (blobs[r].size() % sizeof(T) != 0)
      throw PeerError(static_cast<int>(r), std::string(what) + " from rank " + std::to_string(r) +
                                               " is malformed (" + std::to_string(blobs[r].size()) +
                                               " bytes, not a multiple of " +
                                               std::to_string(sizeof(T)) + ")");
    all[r].resize(blobs[r].size() / sizeof(T));
    if (!all[r].empty()) std::memcpy(all[r].data(), blobs[r].data(), blobs[r].size());
  }
  return all;
}

std::unique_ptr<Bootstrap> make_tcp_bootstrap(BootstrapConfig config);

// n connected bootstraps for n threads of one process (unit tests of multi-party logic).
std::vector<std::unique_ptr<Bootstrap>> make_thread_bootstraps(int n);

// Collective: true when every rank runs on this host, in this network and pid namespace, as
// this user: what the local transport needs (TransportOptions::same_host, which provider "auto"
// reads). Read from the kernel (the boot id, the namespaces' inodes), whatever started the
// ranks: fabflow's launcher, mpirun or srun on one node, or a shell.
bool ranks_share_this_host(Bootstrap& boot);

}  // namespace fabflow
