// One configuration of the request-response benchmark (rr.cc runs them): its lanes, the
// requester threads over private channels or a dispatcher, the responder loop, and what each
// rank measured. The code is in rr_config.cc.
#pragma once

#include <fabflow/bench/rr.h>
#include <fabflow/bootstrap.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "bench/callgrind.h"
#include "common/perf.h"

namespace fabflow::bench_rr {

// What one thread measured.
struct ThreadLoad {
  double cpu_s = 0;
  std::uint64_t messages = 0;
  std::optional<CounterValues> counters;
};

// What one requester thread measured (its round trips and CPU).
struct WorkerResult {
  std::vector<double> samples;  // round trips, ns
  double seconds = 0;           // measured phase
  ThreadLoad load;
  std::uint64_t idle_turns = 0;  // measured phase: waits instead of requests
};

// What one requester thread is given.
struct WorkerSetup {
  const RrParams& p;
  const rr::ChannelOptions& o;
  const Clock& clock;
  Bootstrap* boot;                // liveness checks; one thread per process at a time may use it
  const std::atomic<bool>* stop;  // another thread of this rank failed
  bool yield;
  std::uint64_t tag_base;  // rank and thread, for --verify tags
  std::uint64_t seed;
};

// One channel of a configuration: a transport and this rank's end of the channel over it.
struct Lane {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<rr::Requester> requester;
  std::unique_ptr<rr::Responder> responder;
};

// What each rank sends rank 0 after a configuration (fixed-size part).
struct RankSummary {
  std::uint32_t role = 0;  // 0 requester, 1 responder
  std::uint32_t counters_ok = 1;
  double cpu_s = 0;
  std::uint64_t messages = 0;
  std::uint64_t instructions = 0, cycles = 0;
  double rate = 0;     // requester: sum of its threads' rates
  double seconds = 0;  // requester: longest thread's measured time
  std::uint64_t measured = 0;
  std::uint64_t served = 0;      // responder: requests answered
  std::uint64_t idle_turns = 0;  // requester: its threads' idle waits (measured phase)
  // Responder: its rounds of looking for requests, those that found none, and for WRITE
  // requests the mailboxes read and those that held a new request (rr::ChannelStats).
  std::uint64_t scans = 0, empty_scans = 0, mailboxes_read = 0, mailboxes_with_request = 0;
  double callgrind_ir = -1;  // whole process during the run; < 0: not measured
};

// Runs one configuration (pattern, model, response size) on this rank. Not thread-safe: one
// thread calls run(), which starts and joins the configuration's own threads.
class Config {
 public:
  Config(const RrParams& p, Bootstrap& boot, const Clock& clock, const rr::ChannelOptions& o,
         rr::Model model);

  RankSummary run(const TransportOptions& to);

  std::vector<double> samples;  // requester ranks: every measured round trip
  callgrind::Profile profile;   // --callgrind: this process during run()

 private:
  WorkerSetup setup(unsigned thread, Bootstrap* boot);
  void add(RankSummary& s, const WorkerResult& w);
  // Runs `n` threads of `body(i)`, pinned next to this rank's CPU. The first failure is
  // rethrown after all joined; it sets stop_ so that the other threads give up at once.
  template <class Body>
  void run_threads(unsigned n, unsigned first_cpu, Body&& body);
  RankSummary request(std::vector<Lane>& lane);
  // The dispatcher thread: drives the channel until every worker is done.
  void dispatch(rr::DispatcherRequester& d, std::atomic<unsigned>& running, std::uint64_t& moved);
  void close(rr::Requester& r);
  RankSummary serve(std::vector<Lane>& lane);

  const RrParams& p_;
  Bootstrap& boot_;
  const Clock& clock_;
  const rr::ChannelOptions& o_;
  rr::Model model_;
  bool requester_;
  bool yield_ = false;
  std::atomic<bool> stop_{false};
};

}  // namespace fabflow::bench_rr
