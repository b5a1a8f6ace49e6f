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

namespace fabflow::kv::detail {
namespace {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The CPU's view of the table: lookups, inserts (one at a time) and seqlocked item reads and
// writes. Remote readers copy items without any lock; the item check catches what they tear.
class Table {
 public:
  Table(std::byte* base, const Layout& l) : base_(base), l_(l) {}

  std::byte* bucket(std::uint64_t b) const noexcept { return base_ + l_.bucket_offset(b); }
  std::byte* item(std::uint64_t i) const noexcept { return base_ + l_.item_offset(i); }
  const Layout& layout() const noexcept { return l_; }

  static std::atomic_ref<std::uint64_t> word_at(std::byte* p) noexcept {
    return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(p));
  }
  std::atomic_ref<std::uint64_t> ref(std::uint64_t b, unsigned e) const noexcept {
    return word_at(bucket(b) + 8 + e * kEntryBytes + kKeyBytes);
  }
  std::atomic_ref<std::uint64_t> overflow(std::uint64_t b) const noexcept {
    return word_at(bucket(b));
  }

  void prefetch(const Key& key) const noexcept {
    __builtin_prefetch(bucket(l_.home(hash_key(key))));
  }

  // The key's item, or -1.
  std::int64_t find(const Key& key) const noexcept {
    const std::uint64_t home = l_.home(hash_key(key));
    for (unsigned p = 0; p < kMaxProbe; ++p) {
      const std::uint64_t b = (home + p) & (l_.buckets - 1);
      for (unsigned e = 0; e < kWays; ++e) {
        const std::uint64_t r = ref(b, e).load(std::memory_order_acquire);
        if (r != 0 && std::memcmp(bucket(b) + 8 + e * kEntryBytes, key.data(), kKeyBytes) == 0)
          return static_cast<std::int64_t>(r - 1);
      }
      if (overflow(b).load(std::memory_order_acquire) == 0) return -1;
    }
    return -1;
  }

  // A new item for `key` holding `value` (caller holds the insert lock and checked find()).
  // -1: no room.
  std::int64_t insert(const Key& key, const std::byte* value) noexcept {
    if (next_item_ >= l_.items) return -1;
    const std::uint64_t home = l_.home(hash_key(key));
    for (unsigned p = 0; p < kMaxProbe; ++p) {
      const std::uint64_t b = (home + p) & (l_.buckets - 1);
      for (unsigned e = 0; e < kWays; ++e) {
        if (ref(b, e).load(std::memory_order_relaxed) != 0) continue;
        const std::uint64_t i = next_item_++;
        write_item(item(i), l_, next_word(0, false), key, value);
        std::memcpy(bucket(b) + 8 + e * kEntryBytes, key.data(), kKeyBytes);
        // Every bucket passed on the way tells lookups to go on; then the entry appears.
        for (unsigned q = 0; q < p; ++q)
          overflow((home + q) & (l_.buckets - 1)).fetch_add(1, std::memory_order_release);
        ref(b, e).store(i + 1, std::memory_order_release);
        return static_cast<std::int64_t>(i);
      }
    }
    return -1;
  }

  // Writes `value` (null: deletes) into item i under its lock word. not_found: a delete of a
  // deleted item.
  Code write(std::uint64_t i, const Key& key, const std::byte* value) noexcept {
    std::atomic_ref<std::uint64_t> w = word_at(item(i));
    std::uint64_t cur = w.load(std::memory_order_acquire);
    for (;;) {
      if (locked(cur)) {
        cpu_relax();
        cur = w.load(std::memory_order_acquire);
        continue;
      }
      if (w.compare_exchange_weak(cur, locked_by(cur, kServerOwner), std::memory_order_acquire))
        break;
    }
    if (!value && deleted(cur)) {
      w.store(cur, std::memory_order_release);
      return Code::not_found;
    }
    const std::uint64_t next = next_word(cur, value == nullptr);
    // The body, then the word: a remote copy that sees the new check with the old word (or the
    // reverse) fails the check.
    write_body(item(i), l_, next, key, value);
    w.store(next, std::memory_order_release);
    return Code::ok;
  }

  // Copies item i's value into `out` (seqlock read). not_found: deleted.
  Code read(std::uint64_t i, std::byte* out) const noexcept {
    std::atomic_ref<std::uint64_t> w = word_at(item(i));
    for (;;) {
      const std::uint64_t before = w.load(std::memory_order_acquire);
      if (locked(before)) {
        cpu_relax();
        continue;
      }
      if (deleted(before)) return Code::not_found;
      std::memcpy(out, item(i) + l_.value_offset(), l_.value_bytes);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (w.load(std::memory_order_relaxed) == before) return Code::ok;
    }
  }

  std::uint64_t live_items() const noexcept {
    std::uint64_t n = 0;
    for (std::uint64_t i = 0; i < next_item_; ++i)
      n += !deleted(word_at(item(i)).load(std::memory_order_acquire));
    return n;
  }

  std::mutex& insert_lock() noexcept { return insert_lock_; }

 private:
  std::byte* base_;
  Layout l_;
  std::uint64_t next_item_ = 0;  // under insert_lock_
  std::mutex insert_lock_;
};

struct Lane {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<rr::Responder> responder;
};

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
      Lane lane;
      lane.transport = open_transport(to);
      lane.transport->connect(boot);
      lane.responder = rr::make_responder(*lane.transport, boot, channel_options(o), clients);
      lanes_.push_back(std::move(lane));
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
  }

  Code load(const Key& key, std::span<const std::byte> value) override {
    if (value.size() != o_.value_bytes)
      throw UsageError("kv: a " + std::to_string(value.size()) + "-byte value for a store of " +
                       std::to_string(o_.value_bytes) + "-byte values");
    if (server_of(key) != me_) throw UsageError("kv: load of a key another server holds");
    return put(key, value.data());
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

  // PUT (value) or DELETE (null) by the CPU; inserts a new key under the insert lock.
  Code put(const Key& key, const std::byte* value) {
    std::int64_t i = table_->find(key);
    if (i < 0) {
      if (!value) return Code::not_found;
      std::lock_guard<std::mutex> lock(table_->insert_lock());
      i = table_->find(key);
      if (i < 0) return table_->insert(key, value) < 0 ? Code::full : Code::ok;
    }
    return table_->write(static_cast<std::uint64_t>(i), key, value);
  }

  // atomic design: only new keys come by RPC (clients lock existing items themselves).
  std::uint8_t insert(const Key& key, const std::byte* value) {
    std::lock_guard<std::mutex> lock(table_->insert_lock());
    if (table_->find(key) >= 0) return kExists;
    return static_cast<std::uint8_t>(table_->insert(key, value) < 0 ? Code::full : Code::ok);
  }

  // Executes one request; returns the answer's length.
  std::size_t execute(std::span<const std::byte> req, std::span<std::byte> ans) {
    const std::size_t v = o_.value_bytes;
    std::uint8_t code = kMalformed;
    std::size_t len = kAnswerHeader;
    if (req.size() >= kRpcHeader && ans.size() >= kAnswerHeader + v) {
      const auto op = static_cast<RpcOp>(req[0]);
      Key key;
      std::memcpy(key.data(), req.data() + 8, kKeyBytes);
      const bool has_value = req.size() == kRpcHeader + v;
      const bool mine = server_of(key) == me_;
      const bool one_sided_puts = o_.design == Design::atomic;
      if (!mine) {
        code = kMalformed;
      } else if (op == RpcOp::get && req.size() == kRpcHeader && !one_sided_puts) {
        std::int64_t i = table_->find(key);
        Code c = i < 0 ? Code::not_found
                       : table_->read(static_cast<std::uint64_t>(i), ans.data() + kAnswerHeader);
        code = static_cast<std::uint8_t>(c);
        if (c == Code::ok) len += v;
      } else if (op == RpcOp::put && has_value && !one_sided_puts) {
        code = static_cast<std::uint8_t>(put(key, req.data() + kRpcHeader));
      } else if (op == RpcOp::del && req.size() == kRpcHeader && !one_sided_puts) {
        code = static_cast<std::uint8_t>(put(key, nullptr));
      } else if (op == RpcOp::insert && has_value && one_sided_puts) {
        code = insert(key, req.data() + kRpcHeader);
      }
    }
    std::memset(ans.data(), 0, kAnswerHeader);
    ans[0] = static_cast<std::byte>(code);
    return len;
  }

  ServerStats serve(unsigned w, const std::atomic<bool>& stop) {
    ServerStats s;
    const rr::Handler one = [this](int, std::span<const std::byte> req, std::span<std::byte> ans) {
      return execute(req, ans);
    };
    const rr::BatchHandler many = [this](std::span<rr::BatchRequest> batch) {
      // The batch's buckets are fetched while the first requests execute.
      for (rr::BatchRequest& b : batch)
        if (b.request.size() >= kRpcHeader) {
          Key key;
          std::memcpy(key.data(), b.request.data() + 8, kKeyBytes);
          table_->prefetch(key);
        }
      for (rr::BatchRequest& b : batch) b.response_len = execute(b.request, b.response);
    };
    // Worker 0 watches the bootstrap for vanished clients and drives the table's transport
    // (software providers place READs and atomics only when the target drives progress).
    // Clients may be quiet for as long as they like (one-sided designs send no RPCs at all):
    // the wait ends only when the bootstrap reports a vanished peer.
    BoundedWait watch(std::chrono::hours(24 * 365), w == 0 ? &boot_ : nullptr, {}, 256);
    watch.yield_when_idle(o_.yield_when_idle);
    Transport* data = w == 0 ? data_.get() : nullptr;
    rr::Responder& r = *lanes_[w].responder;
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
  std::vector<Lane> lanes_;
  std::unique_ptr<Transport> data_;
  std::unique_ptr<MemoryRegion> region_;
  std::unique_ptr<std::byte[]> plain_;
  std::unique_ptr<Table> table_;
  std::atomic<unsigned> finished_{0};
};

}  // namespace

std::unique_ptr<Server> make_table_server(const TransportOptions& to, Bootstrap& boot, int servers,
                                          const Options& o) {
  if (boot.rank() < boot.size() - servers)
    throw UsageError("kv: rank " + std::to_string(boot.rank()) + " is a client");
  TransportOptions probe = to;
  probe.ops = required_ops(o.design);
  if (std::string why = why_unsupported(probe_transport(probe), o); !why.empty())
    throw UsageError("kv: " + why);
  return std::make_unique<TableServer>(to, boot, servers, o);
}

}  // namespace fabflow::kv::detail
