// The key-value store's server: one hash table partition in memory the clients can READ (and
// lock with compare-and-swap in the atomic design), and the RPC workers (HERD's pattern).
// Every design runs the same server; what the clients do one-sided differs.
#include <fabflow/bootstrap.h>
#include <fabflow/rr.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "common/bounded_wait.h"
#include "common/workers.h"
#include "kv/internal.h"
#include "kv/table.h"
#include "rr/lane.h"

namespace fabflow::kv::detail {
namespace {

class TableServer final : public Server {
 public:
  TableServer(const TransportOptions& given, Bootstrap& boot, int servers, const Options& o)
      : boot_(boot),
        o_(o),
        servers_(servers),
        me_(boot.rank() - (boot.size() - servers)),
        layout_(Layout::for_capacity(o.capacity, o.value_bytes)) {
    const int clients = boot.size() - servers;
    TransportOptions to = given;
    to.ops = required_ops(o.design);
    for (unsigned w = 0; w < o.workers; ++w) {
      auto t = open_transport(to);
      t->connect(boot);
      lanes_.push_back(rr::responder_lane(std::move(t), boot, channel_options(o), clients));
    }
    std::byte* base = nullptr;
    if (o.design == Design::herd) {
      plain_.reset(new std::byte[layout_.region_bytes + 64]());
      base = plain_.get() + (64 - reinterpret_cast<std::uintptr_t>(plain_.get()) % 64) % 64;
    } else {
      data_ = open_transport(to);
      data_->connect(boot);
      region_ = data_->allocate(layout_.region_bytes, kAllAccess);
      base = region_->data();
      publish_table();
    }
    table_ = std::make_unique<Table>(base, layout_);
    exec_ = std::make_unique<Executor>(*table_, o_, me_, servers_);
  }

  Code load(const Key& key, std::span<const std::byte> value) override {
    if (value.size() != o_.value_bytes)
      throw UsageError("kv: a " + std::to_string(value.size()) + "-byte value for a store of " +
                       std::to_string(o_.value_bytes) + "-byte values");
    if (server_of(key) != me_) throw UsageError("kv: load of a key another server holds");
    return exec_->put(key, value.data());
  }

  int server_of(const Key& key) const noexcept override { return detail::server_of(key, servers_); }

  ServerStats run() override {
    ServerStats total;
    std::mutex m;
    std::atomic<bool> stop{false};
    total.cpu_s = run_workers(o_.workers, o_.worker_init, stop, [&](unsigned w) {
      ServerStats mine = serve(w, stop);
      std::lock_guard<std::mutex> lock(m);
      total.served += mine.served;
      total.rounds += mine.rounds;
    });
    total.items = table_->live_items();
    return total;
  }

 private:
  // Every rank learns the table's layout and key (clients import it; servers ignore theirs).
  void publish_table() {
    auto key = data_->export_key(*region_);
    TableHello h;
    h.key_len = static_cast<std::uint32_t>(key.size());
    h.layout = layout_;
    std::vector<std::byte> blob(sizeof h + key.size());
    std::memcpy(blob.data(), &h, sizeof h);
    std::memcpy(blob.data() + sizeof h, key.data(), key.size());
    boot_.allgather(blob);
  }

  ServerStats serve(unsigned w, const std::atomic<bool>& stop) {
    ServerStats s;
    const rr::Handler one = [this](int, std::span<const std::byte> req, std::span<std::byte> ans) {
      return exec_->execute(req, ans);
    };
    const rr::BatchHandler many = [this](std::span<rr::BatchRequest> batch) {
      // The batch's buckets are fetched while the first requests execute.
      for (rr::BatchRequest& b : batch)
        if (b.request.size() >= kRpcHeader) {
          Key key;
          std::memcpy(key.data(), b.request.data() + 8, kKeyBytes);
          table_->prefetch(key);
        }
      for (rr::BatchRequest& b : batch) b.response_len = exec_->execute(b.request, b.response);
    };
    // Worker 0 watches the bootstrap for vanished clients and drives the table's transport
    // (software providers place READs and atomics only when the target drives progress).
    // Clients may be quiet for as long as they like (one-sided designs send no RPCs at all):
    // the wait ends only when the bootstrap reports a vanished peer.
    BoundedWait watch(std::chrono::hours(24 * 365), w == 0 ? &boot_ : nullptr, {}, 256);
    watch.yield_when_idle(o_.yield_when_idle);
    Transport* data = w == 0 ? data_.get() : nullptr;
    rr::Responder& r = *lanes_[w].end;
    for (;;) {
      if (data) data->progress();
      if (stop.load(std::memory_order_relaxed))
        throw Error("kv: stopped after another worker failed");
      if (r.done()) {
        // Worker 0 keeps driving the table's transport while other workers' clients run.
        if (!data || finished_.load(std::memory_order_acquire) + 1 >= o_.workers) {
          finished_.fetch_add(1, std::memory_order_acq_rel);
          return s;
        }
        std::this_thread::yield();
        continue;
      }
      unsigned n = 0;
      Status st = o_.batch > 1 ? r.serve_batch(many, o_.batch, &n) : r.serve(&one, &n);
      if (st == Status::failed) throw Error("kv: worker " + std::to_string(w) + ": " + r.error());
      s.served += n;
      // Unbatched, serve() answers each request it finds before looking at the next: every
      // request is a round of its own.
      s.rounds += o_.batch > 1 ? (n > 0) : n;
      if (st == Status::ok)
        watch.reset();
      else
        watch.idle("kv server", "waiting for requests");
    }
  }

  Bootstrap& boot_;
  Options o_;
  int servers_;
  int me_;
  Layout layout_;
  std::vector<rr::Lane<rr::Responder>> lanes_;
  std::unique_ptr<Transport> data_;
  std::unique_ptr<MemoryRegion> region_;
  std::unique_ptr<std::byte[]> plain_;
  std::unique_ptr<Table> table_;
  std::unique_ptr<Executor> exec_;
  std::atomic<unsigned> finished_{0};
};

}  // namespace

std::unique_ptr<Server> make_table_server(const TransportOptions& to, Bootstrap& boot, int servers,
                                          const Options& o) {
  check_end(to, boot, servers, o, /*server=*/true);
  return std::make_unique<TableServer>(to, boot, servers, o);
}

}  // namespace fabflow::kv::detail
