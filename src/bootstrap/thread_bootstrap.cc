// make_thread_bootstraps: n ranks as threads of one process, with the TCP bootstrap's semantics.
#include <condition_variable>
#include <mutex>
#include <optional>

#include "bootstrap/net.h"
#include "bootstrap/wire.h"
#include "fabflow/bootstrap.h"
#include "fabflow/status.h"

namespace fabflow {
namespace {

using bootstrap_detail::Bytes;
using bootstrap_detail::Collective;
using bootstrap_detail::collective_name;
using SteadyClock = std::chrono::steady_clock;

// What the n thread bootstraps share: the collective in progress and the first failure.
// Every member is guarded by mu.
struct Hub {
  struct Failure {
    int rank;
    std::string what;
    int skip;  // the rank not told (an aborting rank knows)
  };

  explicit Hub(int n) : size(n), blobs(n), contributed(n, false), left(n, false) {}

  // Completes or fails the collective in progress. Caller holds mu.
  void settle() {
    if (failure || contributions == 0) return;
    for (int r = 0; r < size; ++r) {
      if (left[r] && !contributed[r]) {
        fail(r,
             "rank " + std::to_string(r) + " exited without entering the " + collective_name(kind),
             -1);
        return;
      }
    }
    if (contributions < size) return;
    result = std::make_shared<const std::vector<Bytes>>(std::move(blobs));
    blobs.assign(size, {});
    contributed.assign(size, false);
    contributions = 0;
    ++generation;
    cv.notify_all();
  }

  void fail(int rank, std::string what, int skip) {
    if (!failure) failure = Failure{rank, "bootstrap: " + std::move(what), skip};
    cv.notify_all();
  }

  std::mutex mu;
  std::condition_variable cv;
  const int size;
  std::vector<Bytes> blobs;
  std::vector<bool> contributed;
  int contributions = 0;
  Collective kind = Collective::allgather;
  int first = -1;
  std::uint64_t generation = 0;
  std::shared_ptr<const std::vector<Bytes>> result;  // of the last completed collective
  std::vector<bool> left;
  std::optional<Failure> failure;
};

// One thread's rank on a shared Hub. Move-less; one thread at a time per object, different
// objects concurrently.
class ThreadBootstrap final : public Bootstrap {
 public:
  ThreadBootstrap(std::shared_ptr<Hub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  ~ThreadBootstrap() override {
    std::lock_guard lock(hub_->mu);
    hub_->left[rank_] = true;
    hub_->settle();
    hub_->cv.notify_all();
  }
  ThreadBootstrap(const ThreadBootstrap&) = delete;
  ThreadBootstrap& operator=(const ThreadBootstrap&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return hub_->size; }
  int local_rank() const override { return rank_; }

  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> mine) override {
    return collective(Collective::allgather, mine, {});
  }

  void barrier(const std::function<void()>& while_waiting) override {
    collective(Collective::barrier, {}, while_waiting);
  }

  bool peer_failed() override {
    std::lock_guard lock(hub_->mu);
    return visible_failure();
  }

  std::optional<Failure> failure() override {
    std::lock_guard lock(hub_->mu);
    if (!visible_failure()) return std::nullopt;
    return Failure{hub_->failure->rank, hub_->failure->what};
  }

  void abort(const std::string& reason) override {
    if (unusable_.empty()) unusable_ = "bootstrap: this process aborted (" + reason + ")";
    std::lock_guard lock(hub_->mu);
    hub_->fail(rank_, "rank " + std::to_string(rank_) + " aborted: " + reason, rank_);
  }

  std::string local_address() const override { return "127.0.0.1"; }

 private:
  bool visible_failure() const { return hub_->failure && hub_->failure->skip != rank_; }

  [[noreturn]] void throw_failure() const {
    const auto& f = *hub_->failure;
    if (f.rank >= 0) throw PeerError(f.rank, f.what);
    throw Error(f.what);
  }

  std::vector<Bytes> collective(Collective kind, std::span<const std::byte> blob,
                                const std::function<void()>& while_waiting) {
    if (!unusable_.empty()) throw Error(unusable_);
    const auto deadline = SteadyClock::now() + BootstrapConfig{}.timeout;
    std::unique_lock lock(hub_->mu);
    Hub& h = *hub_;
    if (visible_failure()) throw_failure();
    if (h.contributions > 0 && kind != h.kind) {
      h.fail(rank_,
             "rank " + std::to_string(rank_) + " entered " + collective_name(kind) +
                 " while rank " + std::to_string(h.first) + " entered " + collective_name(h.kind),
             -1);
      throw_failure();
    }
    if (h.contributions == 0) {
      h.kind = kind;
      h.first = rank_;
    }
    h.blobs[rank_].assign(blob.begin(), blob.end());
    h.contributed[rank_] = true;
    ++h.contributions;
    const auto generation = h.generation;
    h.settle();
    for (;;) {
      if (h.generation != generation) return *h.result;
      if (visible_failure()) throw_failure();
      if (while_waiting) {
        lock.unlock();
        while_waiting();
        lock.lock();
      } else if (h.cv.wait_until(lock, deadline) == std::cv_status::timeout &&
                 h.generation == generation && !visible_failure()) {
        unusable_ = std::string("bootstrap: unusable after an earlier ") + collective_name(kind) +
                    " timed out";
        throw Error(std::string("bootstrap: ") + collective_name(kind) + " timed out after " +
                    bootstrap_detail::seconds_text(BootstrapConfig{}.timeout) +
                    " waiting for the other ranks");
      }
    }
  }

  std::shared_ptr<Hub> hub_;
  const int rank_;
  std::string unusable_;  // set after this rank aborted or timed out
};

}  // namespace

std::vector<std::unique_ptr<Bootstrap>> make_thread_bootstraps(int n) {
  if (n < 1)
    throw UsageError("bootstrap: need at least one thread rank (got " + std::to_string(n) + ")");
  auto hub = std::make_shared<Hub>(n);
  std::vector<std::unique_ptr<Bootstrap>> out;
  out.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<ThreadBootstrap>(hub, r));
  return out;
}

}  // namespace fabflow
