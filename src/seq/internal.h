// What the sequencer's designs share: lanes (one transport per worker queue), the client's
// real-time-order and fingerprint tally, the server's worker crew, and the factories of each
// design (rpc.cc, spec.cc, atomic.cc).
#pragma once

#include <fabflow/bootstrap.h>
#include <fabflow/seq.h>

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <vector>

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

// The shared counter, on a cache line of its own.
struct alignas(64) Counter {
  std::atomic<std::uint64_t> value{0};
};

// The server's worker crew (common/workers.h) with the options' worker count and init.
inline double run_workers(const Options& o, std::atomic<bool>& stop,
                          const std::function<void(unsigned)>& body) {
  return fabflow::run_workers(o.workers, o.worker_init, stop, body);
}

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

std::unique_ptr<Server> make_rpc_server(const TransportOptions& to, Bootstrap& boot,
                                        const Options& o);
std::unique_ptr<Client> make_rpc_client(const TransportOptions& to, Bootstrap& boot,
                                        const Options& o);
std::unique_ptr<Server> make_spec_server(const TransportOptions& to, Bootstrap& boot,
                                         const Options& o);
std::unique_ptr<Client> make_spec_client(const TransportOptions& to, Bootstrap& boot,
                                         const Options& o);
std::unique_ptr<Server> make_atomic_server(const TransportOptions& to, Bootstrap& boot,
                                           const Options& o);
std::unique_ptr<Client> make_atomic_client(const TransportOptions& to, Bootstrap& boot,
                                           const Options& o);

}  // namespace fabflow::seq::detail
