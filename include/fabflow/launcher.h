// The local launcher: starts the N processes of an experiment on this host, optionally each in
// its own network namespace joined by veth so that tcp traffic crosses a (virtual) network, and
// cleans up children and namespaces on exit, Ctrl-C and failure.
//
// On a cluster the same binary runs under srun / mpirun instead; BootstrapConfig::fill_from_env
// reads rank and size from the launcher's environment and no local launch happens.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace fabflow {

struct LaunchConfig {
  int nprocs = 2;
  std::vector<std::string> argv;  // argv[0] is the executable to run (usually /proc/self/exe)
  bool netns = false;             // one network namespace per process, joined by veth
  // How long the survivors get after one process fails before they are killed.
  std::chrono::milliseconds grace{2000};
  // Bound on the whole run; 0 = none.
  std::chrono::milliseconds deadline{0};
  // A rank stopped (SIGSTOP, SIGTSTP, a debugger) for this long fails the run, named in one
  // error line, and is killed; 0 = never. Its peers normally say so first, through the
  // bootstrap's liveness; this is for a peer trapped where it cannot (libfabric's shm provider
  // spins on a lock in shared memory that the stopped rank holds).
  std::chrono::milliseconds stopped_bound{0};
  // Relays every line of each rank's stdout and stderr under a "[rank] " prefix, stdout to
  // stdout and stderr to stderr, each line whole, and shows every error line rather than only
  // the run's first (`fabflow launch`, whose ranks may be any program). Off: stdout is passed
  // through as it is and stderr relayed unlabelled.
  bool label_output = false;
  // The CPUs to pin the ranks to, round robin: rank r runs on cpus[r % cpus.size()] only, set
  // before its program starts (values 0..CPU_SETSIZE-1). Empty: not pinned.
  std::vector<int> cpus;
};

// The program a launch execs for argv[0]: "/proc/self/exe" becomes the path it links to, so
// ranks show under their program's name in ps and top rather than as "exe" (kept as it is when
// the binary was replaced or removed since it started); any other argv[0] unchanged.
std::string resolved_program(const std::string& argv0);

// Runs the experiment and returns the exit status to give the user: 0 when every process
// exited 0, else the first failing process' status (128+signal for a signal). Children get
// FABFLOW_RANK, FABFLOW_SIZE, FABFLOW_LOCAL_RANK, FABFLOW_COORD, FABFLOW_SECRET (random per
// launch) and, for rank 0 outside namespaces, FABFLOW_COORD_FD (a listening socket the launcher
// bound, so there is no port race). Children's stdout is passed through; of their error lines
// only the first is shown (unless label_output). Throws Error when namespaces cannot be created
// (the message says why, e.g. not root) or a rank's program cannot be started.
int launch_local(const LaunchConfig& config);

// True when this process was started by a launcher (fabflow's own, Slurm, mpirun, PMI/PMIx)
// and should act as one rank rather than launch others.
bool started_by_launcher();

// True when fabflow's own launcher started this process on this host without network
// namespaces, so every rank shares this host's memory (FABFLOW_SAME_HOST=1, which only the
// launcher sets and only this reads). ranks_share_this_host() (fabflow/bootstrap.h) tells the
// same under any launcher.
bool launched_on_one_host();

// Whether this machine allows creating network namespaces; when not, `why` says why.
bool netns_available(std::string* why);

// Removes namespaces and veths left by launches whose launcher process is gone.
void cleanup_stale_netns();

}  // namespace fabflow
