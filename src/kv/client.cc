// The key-value store's client: RPCs over a request-response channel (herd; PUT and DELETE of
// read; inserts of atomic) and the one-sided paths of read and atomic, one small state machine
// per operation in flight. Nothing a server sends is trusted: item references are
// range-checked against its table and every item copy is checked before it is used.
#include <fabflow/bootstrap.h>
#include <fabflow/rr.h>

#include <deque>
#include <map>

#include "common/bounded_wait.h"
#include "kv/internal.h"
#include "rr/lane.h"

namespace fabflow::kv::detail {
namespace {

enum class Step : std::uint8_t {
  idle,
  rpc,           // waiting for the server's answer
  read_bucket,   // READ of index bucket `probe` after the home bucket
  read_item,     // READ of the item
  lock,          // compare-and-swap taking the item's lock
  write,         // WRITE of the item's body (atomic)
  unlock,        // compare-and-swap releasing it
  steal,         // compare-and-swap taking over an abandoned lock
  repair_read,   // READ of the item behind an abandoned lock
  repair_write,  // WRITE of a deleted item's body over a torn one
  repair_unlock,
  done,
};

struct Slot {
  OpKind kind = OpKind::get;
  Key key{};
  int server = 0;
  std::uint64_t tag = 0;
  Step step = Step::idle;
  unsigned probe = 0;
  std::uint64_t item = 0;
  bool insert = false;       // atomic: the PUT went to the server as an insert
  std::uint64_t expect = 0;  // the settled word a compare-and-swap expects
  std::uint64_t mine = 0;    // the locked word this slot installed
  std::uint64_t final = 0;   // the word its release installs
  std::uint64_t stuck = 0;   // a locked word seen ...
  std::chrono::steady_clock::time_point stuck_since{};  // ... since then
  Code code = Code::ok;
  std::vector<std::byte> value;  // PUT: the value to write
};

struct Remote {
  RemoteMemory mem;
  Layout layout;
  // atomic: the cached index, one {tag, ref} per entry, and the overflow flags.
  std::vector<std::uint64_t> cache;
  std::vector<std::uint8_t> spills;
};

class TableClient final : public Client {
 public:
  TableClient(const TransportOptions& given, Bootstrap& boot, int servers, const Options& o)
      : o_(o), servers_(servers), me_(boot.rank()), slots_(o.outstanding) {
    const int clients = boot.size() - servers;
    clients_ = clients;
    TransportOptions to = given;
    to.ops = required_ops(o.design);
    for (unsigned w = 0; w < o.workers; ++w) {
      auto t = open_transport(to);
      t->connect(boot);
      lanes_.push_back(
          rr::requester_lane(std::move(t), boot, channel_options(o), clients, o.outstanding));
    }
    rpc_ = lanes_[static_cast<unsigned>(me_) % o.workers].end.get();
    if (o.design != Design::herd) {
      data_ = open_transport(to);
      data_->connect(boot);
      import_tables(boot, clients);
      const Layout& l = remote_[0].layout;
      slot_bytes_ = (kBucketBytes + l.item_bytes + 64 + 63) / 64 * 64;
      mr_ = data_->allocate(slot_bytes_ * o.outstanding, kLocalRead | kLocalWrite);
    }
    for (Slot& s : slots_) s.value.resize(o.value_bytes);
    for (unsigned k = o.outstanding; k-- > 0;) free_.push_back(k);
    value_out_.resize(o.value_bytes);
  }

  Status submit(OpKind kind, const Key& key, std::span<const std::byte> value,
                std::uint64_t tag) noexcept override {
    if (!error_.empty()) return Status::failed;
    if (kind == OpKind::put && value.size() != o_.value_bytes)
      return fail("a " + std::to_string(value.size()) + "-byte value for a store of " +
                  std::to_string(o_.value_bytes) + "-byte values");
    if (kind != OpKind::put && !value.empty()) return fail("a value given with a GET or DELETE");
    if (free_.empty()) return Status::again;
    const unsigned k = free_.back();
    free_.pop_back();
    Slot& s = slots_[k];
    s.kind = kind;
    s.key = key;
    s.server = server_of(key, servers_);
    s.tag = tag;
    s.insert = false;
    s.stuck = 0;
    if (kind == OpKind::put) std::memcpy(s.value.data(), value.data(), o_.value_bytes);
    count(kind);
    return start(k);
  }

  Status poll(Result* out) noexcept override {
    if (!error_.empty()) return Status::failed;
    // Drive until an operation finishes or nothing moves: an operation's next step (the WRITE
    // after its lock, the item after its bucket) is posted as the last one completes, and
    // on local it completes at once; "empty" means nothing is left to do now.
    while (done_.empty()) {
      const Status a = advance();
      if (a == Status::failed || !error_.empty()) return Status::failed;
      if (a == Status::empty) return Status::empty;
    }
    const unsigned k = done_.front();
    done_.pop_front();
    Slot& s = slots_[k];
    out->tag = s.tag;
    out->kind = s.kind;
    out->code = s.code;
    out->value = {};
    if (s.kind == OpKind::get && s.code == Code::ok) {
      std::memcpy(value_out_.data(), found_[k].data(), o_.value_bytes);
      if (stale_reads_) [[unlikely]] {  // the broken client of the linearizability tests
        auto [at, fresh] = stale_cache_.try_emplace(s.key, found_[k]);
        if (!fresh) std::memcpy(value_out_.data(), at->second.data(), o_.value_bytes);
      }
      out->value = {value_out_.data(), value_out_.size()};
    }
    s.step = Step::idle;
    free_.push_back(k);
    return Status::ok;
  }

  unsigned in_flight() const noexcept override {
    return o_.outstanding - static_cast<unsigned>(free_.size());
  }

  void close(Bootstrap& boot) override {
    BoundedWait watch(o_.peer_timeout, &boot, {}, 256);
    watch.yield_when_idle(o_.yield_when_idle);
    while (in_flight() > 0) {
      Result r;
      Status s = poll(&r);
      if (s == Status::failed) throw Error(error_);
      if (s == Status::ok)
        watch.reset();
      else
        watch.idle("kv client", "draining before close");
    }
    rr::close_requesters(lanes_, watch, "kv");
  }

  const ClientStats& stats() const noexcept override { return stats_; }
  const std::string& error() const noexcept override { return error_; }

 private:
  void count(OpKind k) noexcept {
    if (k == OpKind::get) ++stats_.gets;
    if (k == OpKind::put) ++stats_.puts;
    if (k == OpKind::del) ++stats_.dels;
  }

  // Every server publishes its table (TableHello + key); the clients check and import them.
  void import_tables(Bootstrap& boot, int clients) {
    auto all = boot.allgather({});
    for (int s = 0; s < servers_; ++s) {
      const int rank = server_rank(clients, s);
      auto bad = [&](const std::string& why) {
        return PeerError(rank, "kv: server rank " + std::to_string(rank) + " " + why);
      };
      const auto& blob = all[static_cast<std::size_t>(rank)];
      TableHello h;
      if (blob.size() < sizeof h) throw bad("sent a malformed table hello");
      std::memcpy(&h, blob.data(), sizeof h);
      if (h.magic != kTableMagic || blob.size() != sizeof h + h.key_len)
        throw bad("sent a malformed table hello");
      Remote r;
      r.mem = data_->import_key(rank, {blob.data() + sizeof h, h.key_len});
      r.layout = h.layout;
      if (std::string why = r.layout.check(o_.value_bytes, r.mem.length); !why.empty())
        throw bad(why);
      remote_.push_back(std::move(r));
    }
  }

  std::byte* bucket_buf(unsigned k) const noexcept { return mr_->data() + k * slot_bytes_; }
  std::byte* item_buf(unsigned k) const noexcept { return bucket_buf(k) + kBucketBytes; }
  std::uint64_t* cas_buf(unsigned k) const noexcept {
    return reinterpret_cast<std::uint64_t*>(item_buf(k) + remote_[0].layout.item_bytes);
  }
  int rank_of(const Slot& s) const noexcept { return server_rank(clients_, s.server); }

  Status fail(const std::string& why) noexcept {
    if (error_.empty()) error_ = "kv: " + why;
    return Status::failed;
  }

  // ---- starting an operation ----
  Status start(unsigned k) noexcept {
    Slot& s = slots_[k];
    s.probe = 0;
    if (o_.design == Design::herd || (o_.design == Design::read && s.kind != OpKind::get))
      return send_rpc(k, static_cast<RpcOp>(static_cast<int>(s.kind) + 1));
    if (o_.design == Design::atomic && cached(s)) {
      if (s.kind == OpKind::get) return post_read_item(k);
      return post_lock(k, first_expect(s));
    }
    return post_read_bucket(k);
  }

  Status send_rpc(unsigned k, RpcOp op) noexcept {
    Slot& s = slots_[k];
    std::span<std::byte> buf = rpc_->request_buffer(k);
    std::memset(buf.data(), 0, kRpcHeader);
    buf[0] = static_cast<std::byte>(op);
    std::memcpy(buf.data() + 8, s.key.data(), kKeyBytes);
    std::size_t len = kRpcHeader;
    if (op == RpcOp::put || op == RpcOp::insert) {
      std::memcpy(buf.data() + kRpcHeader, s.value.data(), o_.value_bytes);
      len += o_.value_bytes;
    }
    for (;;) {
      Status st = rpc_->submit(k, s.server, len);
      if (st == Status::ok) break;
      if (st == Status::failed) return fail(rpc_->error());
      // The slot's previous answer is still being taken: drive the channel and retry.
      Status a = advance(/*channel=*/true);
      if (a == Status::failed) return a;
    }
    ++stats_.rpcs;
    ++rpcs_in_flight_;
    s.step = Step::rpc;
    return Status::ok;
  }

  template <class Post>
  Status post(unsigned k, Step next, Post&& fn) noexcept {
    for (;;) {
      Status st = fn();
      if (st == Status::ok) break;
      if (st == Status::failed) return fail(data_->last_error());
      Status a = advance();
      if (a == Status::failed) return a;
    }
    slots_[k].step = next;
    return Status::ok;
  }

  Status post_read_bucket(unsigned k) noexcept {
    Slot& s = slots_[k];
    const Remote& r = remote_[s.server];
    const std::uint64_t b = (r.layout.home(hash_key(s.key)) + s.probe) & (r.layout.buckets - 1);
    ++stats_.reads;
    return post(k, Step::read_bucket, [&] {
      return data_->post_read(rank_of(s), bucket_buf(k), kBucketBytes, mr_->desc(), r.mem,
                              r.layout.bucket_offset(b), k, kSignal);
    });
  }

  Status post_read_item(unsigned k, Step next = Step::read_item) noexcept {
    Slot& s = slots_[k];
    const Remote& r = remote_[s.server];
    ++stats_.reads;
    return post(k, next, [&] {
      return data_->post_read(rank_of(s), item_buf(k), r.layout.item_bytes, mr_->desc(), r.mem,
                              r.layout.item_offset(s.item), k, kSignal);
    });
  }

  Status post_cas(unsigned k, Step next, std::uint64_t compare, std::uint64_t swap) noexcept {
    Slot& s = slots_[k];
    const Remote& r = remote_[s.server];
    ++stats_.atomics;
    return post(k, next, [&] {
      return data_->post_atomic(rank_of(s), AtomicOp::compare_swap, swap, compare, cas_buf(k),
                                mr_->desc(), r.mem, r.layout.item_offset(s.item), k, kSignal);
    });
  }

  // The word a PUT's or DELETE's first lock compare-and-swap expects. The client caches no
  // item's word: the default expects 0, which no item has, so that CAS fails and returns the
  // word, and a second one takes the lock (a PUT is CAS, CAS, WRITE, CAS). The two-atomics
  // emulation's PUTs never change a word, so they expect the word every item is inserted with:
  // right for every item no write has touched since, and a miss costs the same retry.
  std::uint64_t first_expect(const Slot& s) const noexcept {
    return s.kind == OpKind::put && o_.put_emulation == PutEmulation::two_atomics
               ? next_word(0, false)
               : 0;
  }

  Status post_lock(unsigned k, std::uint64_t expect) noexcept {
    Slot& s = slots_[k];
    s.expect = settled(expect);
    s.mine = locked_by(s.expect, owner());
    return post_cas(k, Step::lock, s.expect, s.mine);
  }

  Status post_body(unsigned k, Step next, std::uint64_t word, const std::byte* value) noexcept {
    Slot& s = slots_[k];
    const Remote& r = remote_[s.server];
    write_body(item_buf(k), r.layout, word, s.key, value);
    ++stats_.writes;
    return post(k, next, [&] {
      return data_->post_write(rank_of(s), item_buf(k) + 8, r.layout.item_bytes - 8, mr_->desc(),
                               r.mem, r.layout.item_offset(s.item) + 8, k, kSignal);
    });
  }

  std::uint32_t owner() const noexcept { return static_cast<std::uint32_t>(me_) + 1; }

  // ---- the cached index (atomic) ----
  static std::uint64_t entry(std::uint32_t tag, std::uint64_t item) noexcept {
    return std::uint64_t{tag} << 32 | (item + 1);
  }
  bool cached(Slot& s) noexcept {
    Remote& r = remote_[s.server];
    if (r.cache.empty()) return false;
    const std::uint64_t h = hash_key(s.key);
    const auto tag = static_cast<std::uint32_t>(h);
    const std::uint64_t home = r.layout.home(h);
    for (unsigned p = 0; p < kMaxProbe; ++p) {
      const std::uint64_t b = (home + p) & (r.layout.buckets - 1);
      for (unsigned e = 0; e < kWays; ++e) {
        const std::uint64_t c = r.cache[b * kWays + e];
        if (c != 0 && c >> 32 == tag) {
          s.item = (c & 0xffffffffu) - 1;
          return true;
        }
      }
      if (!r.spills[b]) break;
    }
    ++stats_.cache_misses;
    return false;
  }
  void remember(const Slot& s, std::uint64_t b, unsigned e) noexcept {
    Remote& r = remote_[s.server];
    if (r.cache.empty()) return;
    r.cache[b * kWays + e] = entry(static_cast<std::uint32_t>(hash_key(s.key)), s.item);
  }

 public:
  // atomic: reads every server's whole index once (the seed's clients cache it).
  void cache_index(Bootstrap& boot) override {
    if (o_.design != Design::atomic) return;
    BoundedWait watch(o_.peer_timeout, &boot, {}, 256);
    for (int sv = 0; sv < servers_; ++sv) {
      Remote& r = remote_[sv];
      const Layout& l = r.layout;
      const std::uint64_t per_read = std::max<std::uint64_t>(1, (1u << 20) / kBucketBytes);
      auto chunk = data_->allocate(per_read * kBucketBytes, kLocalWrite);
      std::vector<std::uint64_t> cache(l.buckets * kWays, 0);
      std::vector<std::uint8_t> spills(l.buckets, 0);
      for (std::uint64_t b0 = 0; b0 < l.buckets; b0 += per_read) {
        const std::uint64_t n = std::min(per_read, l.buckets - b0);
        post_and_complete(
            *data_, watch, ~0ull, "kv client", "reading the index", "kv: reading the index: ", [&] {
              return data_->post_read(server_rank(clients_, sv), chunk->data(), n * kBucketBytes,
                                      chunk->desc(), r.mem, l.bucket_offset(b0), ~0ull, kSignal);
            });
        for (std::uint64_t i = 0; i < n; ++i) {
          const std::byte* bk = chunk->data() + i * kBucketBytes;
          std::uint64_t spill;
          std::memcpy(&spill, bk, 8);
          spills[b0 + i] = spill != 0;
          for (unsigned e = 0; e < kWays; ++e) {
            const std::byte* en = bk + 8 + e * kEntryBytes;
            std::uint64_t ref;
            std::memcpy(&ref, en + kKeyBytes, 8);
            if (ref == 0) continue;
            if (ref > l.items)
              throw PeerError(server_rank(clients_, sv),
                              "kv: the server's index refers to an item outside its table");
            Key key;
            std::memcpy(key.data(), en, kKeyBytes);
            cache[(b0 + i) * kWays + e] = entry(static_cast<std::uint32_t>(hash_key(key)), ref - 1);
          }
        }
      }
      r.cache = std::move(cache);
      r.spills = std::move(spills);
    }
  }

 private:
  // ---- completions ----
  // Drives the RPC channel (when an answer is due, or `channel` asks for it: a submit waiting
  // for its slot) and the table's transport.
  Status advance(bool channel = false) noexcept {
    bool moved = false;
    if (rpcs_in_flight_ > 0 || channel) {
      rr::Response resp;
      Status st = rpc_->poll(&resp);
      if (st == Status::failed) return fail(rpc_->error());
      if (st == Status::ok) {
        moved = true;
        Status a = answered(resp);
        rpc_->release(resp);
        if (a == Status::failed) return a;
      }
    }
    if (data_) {
      std::span<Completion> c(completions_);
      int n = data_->poll_tx(c);
      if (n < 0) return fail(data_->last_error());
      for (int i = 0; i < n; ++i) {
        moved = true;
        if (c[i].context >= slots_.size() || slots_[c[i].context].step == Step::idle)
          return fail("a completion that belongs to no operation");
        if (completed(static_cast<unsigned>(c[i].context)) == Status::failed) return Status::failed;
      }
    }
    return moved ? Status::ok : Status::empty;
  }

  void finish(unsigned k, Code code) {
    slots_[k].code = code;
    slots_[k].step = Step::done;
    done_.push_back(k);
  }

  Status answered(const rr::Response& resp) noexcept {
    const unsigned k = resp.slot;
    if (k >= slots_.size() || slots_[k].step != Step::rpc)
      return fail("an answer to no request in flight");
    --rpcs_in_flight_;
    Slot& s = slots_[k];
    if (resp.data.size() < kAnswerHeader) return fail("a malformed answer");
    const auto code = static_cast<std::uint8_t>(resp.data[0]);
    if (code == kMalformed)
      return fail("server " + std::to_string(s.server) + " rejected a request as malformed");
    if (code == kExists && s.insert) {
      s.insert = false;  // somebody inserted it first: lock it like any item
      s.probe = 0;
      return post_read_bucket(k);
    }
    if (code > static_cast<std::uint8_t>(Code::full)) return fail("an answer with a bad code");
    const Code c = static_cast<Code>(code);
    if (s.kind == OpKind::get && c == Code::ok) {
      if (resp.data.size() != kAnswerHeader + o_.value_bytes)
        return fail("a GET answer of " + std::to_string(resp.data.size()) + " bytes");
      keep(k, resp.data.data() + kAnswerHeader);
    }
    finish(k, c);
    return Status::ok;
  }

  void keep(unsigned k, const std::byte* value) {
    if (found_.size() <= k) found_.resize(slots_.size());
    found_[k].assign(value, value + o_.value_bytes);
  }

  // Whether the lock word `w` has been the same for longer than the lease.
  bool abandoned(Slot& s, std::uint64_t w) noexcept {
    const auto now = std::chrono::steady_clock::now();
    if (s.stuck != w) {
      s.stuck = w;
      s.stuck_since = now;
      return false;
    }
    return now - s.stuck_since > o_.lock_lease;
  }

  Status completed(unsigned k) noexcept {
    Slot& s = slots_[k];
    const Remote& r = remote_[s.server];
    const Layout& l = r.layout;
    switch (s.step) {
      case Step::read_bucket: {
        const std::byte* bk = bucket_buf(k);
        const std::uint64_t b = (l.home(hash_key(s.key)) + s.probe) & (l.buckets - 1);
        for (unsigned e = 0; e < kWays; ++e) {
          const std::byte* en = bk + 8 + e * kEntryBytes;
          std::uint64_t ref;
          std::memcpy(&ref, en + kKeyBytes, 8);
          if (ref == 0 || std::memcmp(en, s.key.data(), kKeyBytes) != 0) continue;
          if (ref > l.items)
            return fail("server " + std::to_string(s.server) +
                        " sent an item reference outside its table");
          s.item = ref - 1;
          remember(s, b, e);
          return s.kind == OpKind::get ? post_read_item(k) : post_lock(k, first_expect(s));
        }
        std::uint64_t spill;
        std::memcpy(&spill, bk, 8);
        if (spill != 0 && s.probe + 1 < kMaxProbe) {
          ++s.probe;
          return post_read_bucket(k);
        }
        if (s.kind == OpKind::put) {  // atomic: a new key, inserted by the server
          s.insert = true;
          return send_rpc(k, RpcOp::insert);
        }
        finish(k, Code::not_found);
        return Status::ok;
      }
      case Step::read_item: {
        std::uint64_t w;
        ItemState st = inspect(item_buf(k), l, &w);
        if (st == ItemState::valid && std::memcmp(item_buf(k) + 8, s.key.data(), kKeyBytes) != 0) {
          // A cached reference of another key (a tag collision): look the key up.
          if (o_.design != Design::atomic) return fail("an item holds another key");
          s.probe = 0;
          return post_read_bucket(k);
        }
        if (st == ItemState::valid) {
          if (deleted(w)) {
            finish(k, Code::not_found);
          } else {
            keep(k, item_buf(k) + l.value_offset());
            finish(k, Code::ok);
          }
          return Status::ok;
        }
        ++stats_.retries;
        if (st == ItemState::locked && o_.design == Design::atomic && abandoned(s, w))
          return post_steal(k, w);
        return post_read_item(k);
      }
      case Step::lock: {
        const std::uint64_t old = *cas_buf(k);
        if (old == s.expect) return write_locked(k);
        if (!locked(old)) return post_lock(k, old);
        ++stats_.lock_waits;
        if (abandoned(s, old)) return post_steal(k, old);
        return post_lock(k, settled(old));
      }
      case Step::write:
        if (abandon_ == Abandon::after_write) {
          finish(k, s.code);
          return Status::ok;
        }
        return post_cas(k, Step::unlock, s.mine, s.final);
      case Step::unlock:
        if (*cas_buf(k) != s.mine)
          return fail("lost the lock of an item (held past the lease of " +
                      std::to_string(o_.lock_lease.count()) + " ms)");
        finish(k, s.code);
        return Status::ok;
      case Step::steal:
        if (*cas_buf(k) != s.stuck) return start(k);  // it moved on: begin again
        s.mine = locked_by(s.stuck, owner());
        return post_read_item(k, Step::repair_read);
      case Step::repair_read: {
        // The dead writer's item: keep what its body says if it is whole (old or new version,
        // deleted or not), else drop the key (docs/kv.md).
        const std::byte* it = item_buf(k);
        std::uint64_t c;
        std::memcpy(&c, it + l.check_offset(), 8);
        const std::uint64_t old = settled(s.stuck);
        for (std::uint64_t cand : {old, next_word(old, false), next_word(old, true)})
          if (item_check(cand, it + 8, it + l.value_offset(), l.value_bytes) == c &&
              std::memcmp(it + 8, s.key.data(), kKeyBytes) == 0) {
            s.final = cand;
            return post_cas(k, Step::repair_unlock, s.mine, s.final);
          }
        s.final = next_word(old, true);
        return post_body(k, Step::repair_write, s.final, nullptr);
      }
      case Step::repair_write: return post_cas(k, Step::repair_unlock, s.mine, s.final);
      case Step::repair_unlock:
        if (*cas_buf(k) != s.mine) return start(k);
        ++stats_.recovered;
        s.stuck = 0;
        return start(k);
      default: return fail("a completion in an unexpected state");
    }
  }

  Status post_steal(unsigned k, std::uint64_t w) noexcept {
    Slot& s = slots_[k];
    s.stuck = w;
    return post_cas(k, Step::steal, w, locked_by(w, owner()));
  }

  // The lock is ours: write the new body (PUT: the value; DELETE: nothing, marked deleted).
  Status write_locked(unsigned k) noexcept {
    Slot& s = slots_[k];
    s.stuck = 0;
    if (abandon_ == Abandon::after_lock) {
      finish(k, Code::ok);
      return Status::ok;
    }
    if (s.kind == OpKind::del && deleted(s.expect)) {
      s.code = Code::not_found;
      s.final = s.expect;
      return post_cas(k, Step::unlock, s.mine, s.final);
    }
    s.code = Code::ok;
    if (s.kind == OpKind::put && o_.put_emulation == PutEmulation::two_atomics) {
      // The seed's emulation: the unlock puts the old word back, nothing is written.
      s.final = s.expect;
      return post_cas(k, Step::unlock, s.mine, s.final);
    }
    s.final = next_word(s.expect, s.kind == OpKind::del);
    return post_body(k, Step::write, s.final, s.kind == OpKind::put ? s.value.data() : nullptr);
  }

  Options o_;
  int servers_;
  int me_;
  int clients_ = 0;

 public:
  Abandon abandon_ = Abandon::never;
  bool stale_reads_ = false;
  std::map<Key, std::vector<std::byte>> stale_cache_;  // stale_reads_: each key's first value

 private:
  std::vector<rr::Lane<rr::Requester>> lanes_;
  rr::Requester* rpc_ = nullptr;
  std::unique_ptr<Transport> data_;
  std::unique_ptr<MemoryRegion> mr_;
  std::size_t slot_bytes_ = 0;
  std::vector<Remote> remote_;
  std::vector<Slot> slots_;
  std::vector<unsigned> free_;
  std::deque<unsigned> done_;
  unsigned rpcs_in_flight_ = 0;                // requests whose answer has not come yet
  std::array<Completion, 16> completions_;     // reused: no array to clear per poll
  std::vector<std::vector<std::byte>> found_;  // per slot: the value a GET found
  std::vector<std::byte> value_out_;
  ClientStats stats_;
  std::string error_;
};

}  // namespace

void abandon_locks(Client& c, Abandon when) {
  auto* t = dynamic_cast<TableClient*>(&c);
  if (!t) throw UsageError("kv: abandon_locks needs a table client");
  t->abandon_ = when;
}

void serve_stale_reads(Client& c) {
  auto* t = dynamic_cast<TableClient*>(&c);
  if (!t) throw UsageError("kv: serve_stale_reads needs a table client");
  t->stale_reads_ = true;
}

std::unique_ptr<Client> make_table_client(const TransportOptions& to, Bootstrap& boot, int servers,
                                          const Options& o) {
  check_end(to, boot, servers, o, /*server=*/false);
  return std::make_unique<TableClient>(to, boot, servers, o);
}

}  // namespace fabflow::kv::detail
