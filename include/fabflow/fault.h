// A fault-injecting Transport wrapper (leveldb's FaultInjectionTestEnv, eRPC's FakeTransport):
// it forwards to another transport and, driven by a seeded plan, makes posts return again or
// failed, holds completions back, reorders them and corrupts received bytes, so that protocol
// code above the transport can be tested against every outcome the interface allows.
#pragma once

#include <fabflow/transport.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

namespace fabflow {

// What to inject. The same plan (seed included) over the same call sequence injects the same
// faults. Every knob off (the default) makes the wrapper a plain pass-through.
struct FaultPlan {
  std::uint64_t seed = 1;
  double again_probability = 0;    // a post returns again without reaching the inner one
  unsigned delay_completions = 0;  // a completion reaped at poll k is delivered at k + n
  unsigned reorder_window = 0;     // > 1: shuffle each run of this many in one poll's output
  std::optional<std::uint64_t> fail_after_posts;  // after n successful posts every post fails
  double corrupt_recv_probability = 0;            // flip one received byte when delivering a recv
  // Flip one byte of the data the n-th RMA write, RMA read or peer copy moves (counted from 1
  // over all three, zero-length ones aside; an unsignalled write or read passes the turn to the
  // next): a write's source byte is flipped while the write is in flight and restored when its
  // completion is delivered, a read's landed byte when its completion is delivered, a copy's
  // within the call. Once per transport.
  std::optional<std::uint64_t> corrupt_rma_op;
  std::optional<std::uint64_t> kill_after_posts;  // call on_kill right after the n-th post
  std::function<void()> on_kill;  // e.g. [] { std::_Exit(1); } in a multi-process test
};

// What was injected so far.
struct FaultCounters {
  std::uint64_t posts = 0;        // posts the inner transport accepted
  std::uint64_t agains = 0;       // posts answered again by the plan
  std::uint64_t failures = 0;     // posts answered failed by the plan
  std::uint64_t corruptions = 0;  // received payloads and moved RMA data with a flipped byte
  std::uint64_t rma_ops = 0;      // RMA writes, reads and peer copies the inner one accepted
  std::uint64_t delayed = 0;      // completions held back for at least one poll
  std::uint64_t reordered = 0;    // completions delivered at another place than they arrived
};

// Wraps `inner` (which must not be used directly afterwards). Throws UsageError for a plan out
// of range (a probability outside [0, 1], kill_after_posts without on_kill).
std::unique_ptr<Transport> make_fault_transport(std::unique_ptr<Transport> inner, FaultPlan plan);

// The counters of a transport made by make_fault_transport; nullptr for any other transport.
const FaultCounters* fault_counters(const Transport& transport) noexcept;

}  // namespace fabflow
