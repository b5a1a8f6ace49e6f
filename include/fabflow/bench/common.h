// The benchmark engine's shared vocabulary: sample statistics, the sample clock, size lists,
// and the environment every result carries. One header per family sits beside this one
// (raw.h, queue.h, rr.h); each family is run(params) -> result plus reporters.
// Field meanings: docs/bench-output.md. Adding a family: docs/adding-a-benchmark.md.
#pragma once

#include <fabflow/names.h>
#include <fabflow/transport.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fabflow {

class Bootstrap;

// One bucket of a latency histogram: the samples in [lower_ns, upper_ns).
struct HistogramBucket {
  double lower_ns = 0, upper_ns = 0;
  std::uint64_t count = 0;
};

// The buckets per power of two of the log-bucketed histogram: each bucket is 2^(1/8), about
// 9 %, wider than the one below it. Bucket k >= 0 holds [2^(k/8), 2^((k+1)/8)) ns; one more
// bucket holds [0, 1) ns.
inline constexpr int kBucketsPerOctave = 8;

// A set of samples summarised, in nanoseconds. Percentiles are nearest-rank: p is the smallest
// sample with at least p of all samples at or below it, so with fewer than 1/(1-p) samples
// (10,000 for p99.99) it is the maximum. stdev is the sample standard deviation (n - 1).
// Trivially copyable: what one rank tells another about its samples.
struct LatencyFigures {
  double mean = 0, stdev = 0, min = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, p9999 = 0, max = 0;
  std::uint64_t samples = 0;
};

// The figures and, where the samples were summarised in this process, their histogram (empty
// for figures received from a peer).
struct LatencyStats : LatencyFigures {
  std::vector<HistogramBucket> histogram;  // the non-empty buckets, ascending

  // Every figure times k > 0 (half round trips made whole). The histogram stays exact for
  // k = 2^(n/8) (2 moves each sample eight buckets up); other factors scale its edges.
  LatencyStats scaled(double k) const;
};

// Sorts `samples` in place and summarises them.
LatencyStats summarize(std::vector<double>& samples);

// The median of `v` (the mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> v);

// Parses "64", "4K", "1M", lists "64,4096" and power-of-two sweeps "4:64K" into sizes.
// Throws UsageError on malformed input.
std::vector<std::size_t> parse_sizes(const std::string& text);

// Time source for samples: the invariant TSC when the CPU has one, else CLOCK_MONOTONIC. The
// TSC is calibrated against CLOCK_MONOTONIC_RAW (the hardware clock without NTP's slewing)
// over two back-to-back 10 ms windows; how far the two windows' rates disagree is reported as
// the calibration error. Thread-safe after construction. The only type fabflow calls Clock:
// deadlines and timeouts elsewhere use std::chrono::steady_clock (SteadyClock where aliased).
class Clock {
 public:
  Clock();
  std::uint64_t now() const noexcept;  // ticks
  double to_ns(std::uint64_t ticks) const noexcept {
    return static_cast<double>(ticks) * ns_per_tick_;
  }
  // "TSC (2.596 GHz, calibrated against CLOCK_MONOTONIC_RAW, windows agree within 3 ppm)"
  const std::string& name() const noexcept { return name_; }
  bool tsc() const noexcept { return tsc_; }
  double calibration_error_ppm() const noexcept { return error_ppm_; }  // 0 without the TSC

 private:
  bool tsc_ = false;
  double ns_per_tick_ = 1.0;
  double error_ppm_ = 0;
  std::string name_;
};

// The machine and the build, gathered once per process (machine_environment()), plus what one
// run chose: the provider's capabilities, the clock, pinning and progress threads. Every
// family's result carries one; reporters print it as the header and the JSON "environment".
struct RunEnvironment {
  // The machine ("n/a" where the kernel does not say).
  std::string cpu_model;
  unsigned cores = 0;          // online CPUs
  std::string governor;        // cpufreq scaling governor of cpu0
  std::string smt;             // "on", "off", "n/a"
  bool tsc_invariant = false;  // constant_tsc and nonstop_tsc
  std::string kernel;          // uname -r
  double load_start = 0;       // 1-minute load average when the run started
  double load_end = -1;        // ... and when it was reported (-1: not yet)
  // CPU time that processes outside this run used while it ran (from this process' first read
  // of the machine to finish_environment), in cores on average: the machine's busy time (user,
  // nice, system, irq, softirq in /proc/stat) less this run's own processes' (this process, and
  // under a launcher its parent and the parent's other children: the ranks of this host); -1
  // until finished or when /proc cannot tell.
  double others_cpu = -1;
  double cpu_window_s = 0;  // the span others_cpu covers, in seconds
  // Where that span starts (start_others_cpu): CLOCK_MONOTONIC seconds and the CPU ticks then.
  double cpu_window_start_s = 0;
  std::uint64_t machine_busy_ticks_start = 0;
  std::uint64_t own_ticks_start = 0;
  // The software.
  std::string fabflow_version;
  std::string git_revision;  // of the source tree built, or "unknown"
  std::string libfabric_version;
  std::vector<std::string> providers_found;  // fi_getinfo's providers, each once
  std::string build_type;
  std::string sanitizer;
  std::string launcher;  // slurm, openmpi, pmi, pmix, fabflow
  // This run.
  Capabilities caps;
  std::string clock;
  bool pinned = false;
  int cpu_initiator = -1;
  int cpu_target = -1;
  bool pinned_smt_siblings = false;  // ranks 0 and 1 pinned to two threads of one core
  // Device interrupts (the numbered lines of /proc/interrupts) of each CPU when this process
  // first read the machine, and on the pinned CPUs from then to finish_environment (-1: not
  // known).
  std::vector<std::uint64_t> device_irqs_start;
  double irq_window_start_s = 0;     // CLOCK_MONOTONIC seconds of that first read
  std::int64_t irqs_on_pinned = -1;  // device interrupts on the pinned CPUs in the window
  double irqs_per_s_on_pinned = 0;
  bool progress_thread_initiator = false;
  bool progress_thread_target = false;
  // What idle CPUs of rank 0's host did during the run: "poll" (a PM QoS request of 0 us held,
  // common/idle_poll.h), "default" (they may halt; cpu_idle_why_not says why no request was
  // held), or empty when not recorded.
  std::string cpu_idle;
  std::string cpu_idle_why_not;

  // Whether other processes took CPU time from the run: at least a quarter of a core on average
  // (others_cpu). Where that is not measured (a run shorter than half a second, /proc silent), a
  // load average above the number of cores at the end of the run; before the run has ended (a
  // table's header) nothing is judged, since the load average then is mostly the runs before.
  bool busy() const noexcept;
};

// Records in `env` what idle CPUs of this process' host do now (cpu_idle, cpu_idle_why_not).
void note_cpu_idle(RunEnvironment& env);

// The machine and software fields, gathered on the first call (thread-safe); the run fields
// are left at their defaults for the engine to fill.
const RunEnvironment& machine_environment();

// Collective: every rank tells the CPU it is pinned to (-1: none); `env` gets pinned (all
// ranks are) and cpu_initiator / cpu_target (ranks 0 and 1). Throws PeerError on a malformed
// answer.
void gather_pinning(RunEnvironment& env, Bootstrap& boot, int cpu);

// Starts the span of others_cpu now (machine_environment() starts it at its first read).
void start_others_cpu(RunEnvironment& env);
// Measures others_cpu (and cpu_window_s) from the span's start until now; leaves them as they
// are when the span is under 0.5 s or /proc cannot tell.
void measure_others_cpu(RunEnvironment& env);

// Refreshes load_end and measures others_cpu; call when the result is reported.
void finish_environment(RunEnvironment& env);

// Whether numbers from this environment deserve a warning, one line each: a debug build, a
// sanitizer, unpinned threads, a busy machine, a TSC that is not invariant.
std::vector<std::string> environment_warnings(const RunEnvironment& env);

namespace bench {

// The benchmark families, each a `fabflow bench <name>` subcommand, run_<name>() and its
// reporters; in the order `fabflow bench --help` lists them. The CLI registers exactly these
// (checked at compile time in src/cli/main.cc) and catalogue entries may name only these.
inline constexpr std::string_view kFamilies[] = {"raw", "queue", "rr",   "seq",  "inbound", "kv",
                                                 "lat", "bulk",  "beff", "xfer", "connect"};

// Where a benchmark runs: the provider and endpoint type it opens, this rank's place on the
// host, and how long it waits for a peer. Every family's params carry one; the CLI's rank
// runner fills it once (a library caller sets it by hand).
struct Target {
  std::string provider = "auto";  // "local", a libfabric provider name, or "auto"
  EndpointType endpoint = EndpointType::automatic;
  bool same_host = false;  // every rank shares this host's memory (TransportOptions::same_host)
  int cpu = -1;            // the CPU this rank's main thread is pinned to (-1: not pinned)
  std::vector<int> cpus;   // the host's CPUs this rank may use (empty: ask the OS now; give
                           // them when the caller has already pinned itself)
  bool pin = true;         // pin the threads a family starts next to `cpu`
  std::uint64_t timeout_ms = 10000;  // no progress for this long: fail
  std::string profile;  // a provider profile the transports are held to (TransportOptions::profile)
  // Put around each transport the families that move bulk data (bulk, xfer) open, before it
  // connects: a test's fault wrapper (fabflow/fault.h). Empty: none.
  std::function<std::unique_ptr<Transport>(std::unique_ptr<Transport>)> wrap;

  // Options for a transport of this target that performs `ops`, bound to the bootstrap's
  // address (`node`: a veth in a namespace); depths and threading stay the defaults.
  TransportOptions transport(std::vector<Op> ops, const std::string& node) const;
  // A worker_init for a server's threads: worker w is pinned to the w-th of `cpus` counted
  // from this rank's own CPU (wrapping). Empty when this rank is not pinned or must not pin.
  std::function<void(unsigned worker)> worker_pinning() const;
};

// A design point probed before it runs: the provider's capabilities, and why the point cannot
// run there (empty: it can).
struct ProbedPoint {
  Capabilities caps;  // empty provider when the probe itself failed
  std::string unsupported;
};

// Probes `to` and asks `why(caps)` whether the point can run on it; a probe that fails (an
// unknown provider, an operation the provider lacks) gives its one-line error as the reason.
// Local to this rank: ranks probe the same way and agree.
template <class Why>
ProbedPoint probe_point(const TransportOptions& to, Why&& why) {
  ProbedPoint p;
  try {
    p.caps = probe_transport(to);
    p.unsupported = why(p.caps);
  } catch (const UsageError& e) {
    p.unsupported = e.what();
  }
  return p;
}

// The run's environment takes the capabilities of the first point that probed.
inline void note_caps(RunEnvironment& env, const Capabilities& caps) {
  if (env.caps.provider.empty() && !caps.provider.empty()) env.caps = caps;
}

}  // namespace bench

enum class Switch : std::uint8_t { off, on };
inline constexpr NameTable<Switch, 2> kSwitchNames{{{{"off", Switch::off}, {"on", Switch::on}}}};
constexpr const auto& name_table(Switch) noexcept { return kSwitchNames; }

}  // namespace fabflow
