// One server's partition of the table as its CPU sees it (Table: lookups, inserts, seqlocked
// item reads and writes) and the RPC requests it executes (Executor). Used by the server's
// workers (server.cc) and fuzzed with hostile requests (fuzz/kv_rpc.cc).
#pragma once

#include <atomic>
#include <cstring>
#include <mutex>
#include <span>

#include "kv/internal.h"

namespace fabflow::kv::detail {

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

// Executes RPC requests (internal.h's wire format) against one partition. Nothing in a request
// is trusted: a request of the wrong length, for another server, or of an operation the design
// does not take by RPC is answered kMalformed.
class Executor {
 public:
  Executor(Table& t, const Options& o, int me, int servers)
      : t_(t), o_(o), me_(me), servers_(servers) {}

  // PUT (value) or DELETE (null) by the CPU; inserts a new key under the insert lock.
  Code put(const Key& key, const std::byte* value) {
    std::int64_t i = t_.find(key);
    if (i < 0) {
      if (!value) return Code::not_found;
      std::lock_guard<std::mutex> lock(t_.insert_lock());
      i = t_.find(key);
      if (i < 0) return t_.insert(key, value) < 0 ? Code::full : Code::ok;
    }
    return t_.write(static_cast<std::uint64_t>(i), key, value);
  }

  // atomic design: only new keys come by RPC (clients lock existing items themselves).
  std::uint8_t insert(const Key& key, const std::byte* value) {
    std::lock_guard<std::mutex> lock(t_.insert_lock());
    if (t_.find(key) >= 0) return kExists;
    return static_cast<std::uint8_t>(t_.insert(key, value) < 0 ? Code::full : Code::ok);
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
      const bool mine = server_of(key, servers_) == me_;
      const bool one_sided_puts = o_.design == Design::atomic;
      if (!mine) {
        code = kMalformed;
      } else if (op == RpcOp::get && req.size() == kRpcHeader && !one_sided_puts) {
        std::int64_t i = t_.find(key);
        Code c = i < 0 ? Code::not_found
                       : t_.read(static_cast<std::uint64_t>(i), ans.data() + kAnswerHeader);
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

 private:
  Table& t_;
  const Options o_;
  int me_;
  int servers_;
};

}  // namespace fabflow::kv::detail
