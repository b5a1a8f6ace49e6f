// What the sequencer's designs share: lanes (one transport per worker queue), the client's
// real-time-order and fingerprint tally, the base classes of the clients and of the servers
// whose workers serve lanes, and the table of each design's ends (rpc.cc, spec.cc, atomic.cc).
#pragma once

#include <fabflow/bootstrap.h>
#include <fabflow/seq.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/bounded_wait.h"
#include "common/workers.h"

namespace fabflow::seq::detail {

inline unsigned lane_count(const Options& o) { return o.workers * o.queues; }
inline int client_count(const Bootstrap& boot) { return boot.size() - 1; }
inline int server_rank(const Bootstrap& boot) { return boot.size() - 1; }
// The lane client `c` talks on.
inline unsigned lane_of(int c, const Options& o) {
  return static_cast<unsigned>(c) % lane_count(o);
}

// Opens and connects one transport (collective over `boot`).
std::unique_ptr<Transport> open_lane(const TransportOptions& to, Bootstrap& boot, Design d);

// The client's checks on what it receives: every value above the largest one it had seen
// when it issued its oldest request in flight (real-time order), and the fingerprint.
class Tally {
 public:
  void issued() { floors_.push_back(seen_ ? max_ + 1 : 0); }
  void received(std::uint64_t v, ClientStats& s) {
    std::uint64_t floor = 0;
    if (!floors_.empty()) {
      floor = floors_.front();
      floors_.pop_front();
    }
    if (v < floor) ++s.order_violations;
    if (!seen_ || v > max_) max_ = v;
    seen_ = true;
    ++s.received;
    fingerprint_add(v, s.fingerprint);
  }

 private:
  std::deque<std::uint64_t> floors_;  // least acceptable value, per request in flight
  bool seen_ = false;
  std::uint64_t max_ = 0;
};

// Waits for the answers to every request of `c` in flight (they still count in its tally),
// as a close must. Throws Error / PeerError after the peer timeout without progress.
void drain(Client& c, Bootstrap& boot, const Options& o);

// What every design's client shares: its options, the tally of what it received with its
// figures, its first error, and the close: the answers to every request in flight drained, then
// the design's own goodbye under a watch bounded by the peer timeout.
class ClientBase : public Client {
 public:
  explicit ClientBase(const Options& o) : o_(o) {}

  void close(Bootstrap& boot) final {
    drain(*this, boot, o_);
    BoundedWait watch(o_.peer_timeout, &boot, {}, 256);
    watch.yield_when_idle(o_.yield_when_idle);
    say_goodbye(watch);
  }
  const ClientStats& stats() const noexcept final { return stats_; }
  const std::string& error() const noexcept final { return error_; }

 protected:
  // The design's own steps of a close, once no request is in flight.
  virtual void say_goodbye(BoundedWait& watch) = 0;
  // Keeps the first error, "seq: <why>"; returns Status::failed.
  Status fail(const std::string& why) noexcept {
    if (error_.empty()) error_ = "seq: " + why;
    return Status::failed;
  }

  Options o_;
  Tally tally_;
  ClientStats stats_;
  std::string error_;
};

// A client whose requests in flight hold slots [0, outstanding); free_ keeps the idle ones.
class SlotClient : public ClientBase {
 public:
  explicit SlotClient(const Options& o) : ClientBase(o) {
    for (unsigned k = o.outstanding; k-- > 0;) free_.push_back(k);
  }
  unsigned in_flight() const noexcept final {
    return o_.outstanding - static_cast<unsigned>(free_.size());
  }

 protected:
  std::vector<unsigned> free_;  // slots with no request in flight
};

// The shared counter, on a cache line of its own.
struct alignas(64) Counter {
  std::atomic<std::uint64_t> value{0};
};

// The server's worker crew (common/workers.h) with the options' worker count and init.
inline double run_workers(const Options& o, std::atomic<bool>& stop,
                          const std::function<void(unsigned)>& body) {
  return fabflow::run_workers(o.workers, o.worker_init, stop, body);
}

// A server whose workers each serve their own lanes (rpc, spec) around the shared counter, which
// starts at the options' first value. run() sums what the workers served.
class CrewServer : public Server {
 public:
  explicit CrewServer(const Options& o) : o_(o) { counter_.value.store(o.first_value); }

  ServerStats run() final {
    ServerStats total;
    std::mutex m;
    std::atomic<bool> stop{false};
    total.cpu_s = run_workers(o_, stop, [&](unsigned w) {
      ServerStats mine = serve(w, stop);
      std::lock_guard<std::mutex> lock(m);
      total.served += mine.served;
      total.rounds += mine.rounds;
      total.full_responses += mine.full_responses;
      total.rejected += mine.rejected;
      if (total.first_rejection.empty()) total.first_rejection = mine.first_rejection;
    });
    total.counter = counter_.value.load();
    return total;
  }
  std::uint64_t counter() const noexcept final { return counter_.value.load(); }

 protected:
  // Worker w's loop until its lanes close; it ends each round with end_round.
  virtual ServerStats serve(unsigned w, const std::atomic<bool>& stop) = 0;

  // Throws once another worker failed (`stop`); else the watch starts again after a round that
  // moved, and waits a little after one that did not.
  static void end_round(const std::atomic<bool>& stop, bool moved, BoundedWait& watch) {
    if (stop.load(std::memory_order_relaxed))
      throw Error("seq: stopped after another worker failed");
    if (moved)
      watch.reset();
    else
      watch.idle("seq server", "waiting for requests");
  }

  Options o_;
  Counter counter_;
};

// Spec-S0's setup, one lane at a time: every rank publishes its region in a hello; the
// regions of the ranks `wanted` names are imported, checked to agree on `outstanding` and to
// hold bytes_of(rank). Spec regions start with a landing line for the 0-byte writes, then the
// 8-byte receive buffers.
inline constexpr std::uint32_t kSpecMagic = 0x53504543;  // "SPEC"
inline constexpr std::size_t kSpecLanding = 64;
struct SpecHello {
  std::uint32_t magic = kSpecMagic;
  std::uint32_t outstanding = 0;
  std::uint64_t region_bytes = 0;
  std::uint32_t key_len = 0;
  std::uint32_t pad = 0;
};
// A rank's hello from the all-gather, checked (magic, length, the requests in flight every
// rank must agree on); returns the hello and, in *key, its memory key blob (borrowed). Throws
// PeerError naming `rank`.
SpecHello decode_spec_hello(std::span<const std::byte> blob, int rank, unsigned outstanding,
                            std::span<const std::byte>* key);
std::vector<RemoteMemory> spec_exchange(Transport& t, Bootstrap& boot, const MemoryRegion& mr,
                                        unsigned outstanding,
                                        const std::function<bool(int)>& wanted,
                                        const std::function<std::size_t(int)>& bytes_of);

// How one design builds its two ends over `to` (rpc.cc, spec.cc, atomic.cc each define one).
struct Ends {
  std::unique_ptr<Server> (*server)(const TransportOptions& to, Bootstrap& boot, const Options& o);
  std::unique_ptr<Client> (*client)(const TransportOptions& to, Bootstrap& boot, const Options& o);
};

// The ends whose server is S and whose client is C, each constructed from (to, boot, o).
template <class S, class C>
constexpr Ends ends_of() {
  return {
      [](const TransportOptions& to, Bootstrap& boot, const Options& o) -> std::unique_ptr<Server> {
        return std::make_unique<S>(to, boot, o);
      },
      [](const TransportOptions& to, Bootstrap& boot, const Options& o) -> std::unique_ptr<Client> {
        return std::make_unique<C>(to, boot, o);
      }};
}

extern const Ends kRpcEnds;  // rpc and rpc-batch
extern const Ends kSpecEnds;
extern const Ends kAtomicEnds;

}  // namespace fabflow::seq::detail
