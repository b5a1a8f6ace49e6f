// The atomic sequencer: clients fetch-add the server's counter with fabric atomics (CPU
// atomics across processes on local). The server owns the counter and a done word per client,
// and only drives progress (software providers apply atomics when the target progresses)
// until every client has written its done word. One lane: workers and queues do not apply.
#include <cstring>
#include <thread>

#include "common/bounded_wait.h"
#include "seq/internal.h"

namespace fabflow::seq::detail {
namespace {

constexpr std::uint32_t kMagic = 0x41544f4d;  // "ATOM"
constexpr std::size_t kDoneOff = 64;          // the counter has line 0 to itself

std::size_t server_bytes(int clients) { return kDoneOff + 8 * static_cast<std::size_t>(clients); }

struct Hello {
  std::uint32_t magic = kMagic;
  std::uint32_t key_len = 0;
  std::uint64_t region_bytes = 0;
};

class AtomicServer final : public Server {
 public:
  AtomicServer(const TransportOptions& to, Bootstrap& boot, const Options& o)
      : boot_(boot), o_(o), clients_(client_count(boot)) {
    t_ = open_lane(to, boot, o.design);
    mr_ = t_->allocate(server_bytes(clients_), kAllAccess);
    std::memcpy(mr_->data(), &o.first_value, 8);
    auto key = t_->export_key(*mr_);
    Hello h;
    h.key_len = static_cast<std::uint32_t>(key.size());
    h.region_bytes = mr_->size();
    std::vector<std::byte> blob(sizeof h + key.size());
    std::memcpy(blob.data(), &h, sizeof h);
    std::memcpy(blob.data() + sizeof h, key.data(), key.size());
    boot.allgather(blob);  // the clients publish nothing
  }

  ServerStats run() override {
    ServerStats s;
    Options one = o_;
    one.workers = 1;
    std::atomic<bool> stop{false};
    s.cpu_s = run_workers(one, stop, [&](unsigned) {
      BoundedWait watch(o_.peer_timeout, &boot_, {}, 256);
      watch.yield_when_idle(o_.yield_when_idle);
      const bool manual = t_->caps().data_progress_manual || t_->caps().control_progress_manual;
      int done = 0;
      while (done < clients_) {
        Completion c[16];
        if (t_->poll_rx(c) < 0) throw Error("seq: " + t_->last_error());
        t_->progress();
        const int before = done;
        done = 0;
        for (int k = 0; k < clients_; ++k) done += load(kDoneOff + 8 * k) != 0;
        if (done != before || counter() != last_) {
          last_ = counter();
          watch.reset();
        } else {
          watch.idle("seq server", "waiting for the clients' atomics");
        }
        // Where the atomics land without the target's help (local), the server has nothing
        // to drive: it looks at the done words now and then instead of taking a CPU.
        if (!manual) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    s.counter = counter();
    s.served = s.counter - o_.first_value;
    return s;
  }
  std::uint64_t counter() const noexcept override { return load(0); }

 private:
  std::uint64_t load(std::size_t off) const noexcept {
    return __atomic_load_n(reinterpret_cast<const std::uint64_t*>(mr_->data() + off),
                           __ATOMIC_ACQUIRE);
  }

  Bootstrap& boot_;
  Options o_;
  int clients_;
  std::unique_ptr<Transport> t_;
  std::unique_ptr<MemoryRegion> mr_;
  std::uint64_t last_ = 0;
};

class AtomicClient final : public SlotClient {
 public:
  AtomicClient(const TransportOptions& to, Bootstrap& boot, const Options& o)
      : SlotClient(o), me_(boot.rank()), server_(server_rank(boot)) {
    t_ = open_lane(to, boot, o.design);
    // One result word per request in flight, then the done word's source.
    mr_ = t_->allocate(8 * (o.outstanding + 1), kAllAccess);
    auto all = boot.allgather({});
    const auto& blob = all[static_cast<std::size_t>(server_)];
    Hello h;
    if (blob.size() < sizeof h) throw PeerError(server_, "seq: the server sent a malformed hello");
    std::memcpy(&h, blob.data(), sizeof h);
    if (h.magic != kMagic || blob.size() != sizeof h + h.key_len)
      throw PeerError(server_, "seq: the server sent a malformed hello");
    server_mem_ = t_->import_key(server_, {blob.data() + sizeof h, h.key_len});
    if (h.region_bytes < server_bytes(client_count(boot)) ||
        !server_mem_.contains(0, server_bytes(client_count(boot))))
      throw PeerError(server_, "seq: the server published a region too small for its counter");
  }

  Status issue() noexcept override {
    if (free_.empty()) return Status::again;
    const unsigned k = free_.back();
    auto* result = reinterpret_cast<std::uint64_t*>(mr_->data() + 8 * k);
    Status s = t_->post_atomic(server_, AtomicOp::fetch_add, 1, 0, result, mr_->desc(), server_mem_,
                               0, k, kSignal);
    if (s == Status::failed) return fail("fetch-add failed: " + t_->last_error());
    if (s != Status::ok) return s;
    free_.pop_back();
    tally_.issued();
    return Status::ok;
  }

  Status poll(std::uint64_t* value) noexcept override {
    Completion c;
    int n = t_->poll_tx({&c, 1});
    if (n < 0) return fail("fetch-add failed: " + t_->last_error());
    if (n == 0) return Status::empty;
    if (c.context >= o_.outstanding || c.kind != CompletionKind::atomic)
      return fail("a completion that answers no fetch-add");
    std::memcpy(value, mr_->data() + 8 * c.context, 8);
    free_.push_back(static_cast<unsigned>(c.context));
    tally_.received(*value, stats_);
    return Status::ok;
  }

 private:
  void say_goodbye(BoundedWait& watch) override {
    std::byte* one = mr_->data() + 8 * o_.outstanding;
    const std::uint64_t done = 1;
    std::memcpy(one, &done, 8);
    const std::uint64_t off = kDoneOff + 8 * static_cast<std::uint64_t>(me_);
    post_and_complete(*t_, watch, o_.outstanding, "seq client", "closing",
                      "seq: closing failed: ", [&] {
                        return t_->post_write(server_, one, 8, mr_->desc(), server_mem_, off,
                                              o_.outstanding, kSignal);
                      });
  }

  int me_, server_;
  std::unique_ptr<Transport> t_;
  std::unique_ptr<MemoryRegion> mr_;
  RemoteMemory server_mem_;
};

}  // namespace

const Ends kAtomicEnds = ends_of<AtomicServer, AtomicClient>();

}  // namespace fabflow::seq::detail
