// What the key-value store's server and client share: the table layout in the server's
// registered region, the item's lock word, the item checksum, the RPC wire format and the
// table hello. docs/kv.md draws them.
#pragma once

#include <fabflow/kv.h>
#include <fabflow/rr.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace fabflow::kv::detail {

inline int server_rank(int clients, int s) { return clients + s; }

// ---- the table ----
// index: `buckets` buckets (a power of two) of bucket_bytes: an 8-byte overflow count (keys
// whose home bucket is this one or an earlier one but which live further on) and kWays
// entries {key, ref}; ref = item + 1, 0 for an empty entry. Entries are never removed: a
// deleted key keeps its entry and item (the item says deleted) and a later PUT revives it.
// items: `items` items of item_bytes: {word, key, value, check}.
inline constexpr unsigned kWays = 8;
inline constexpr unsigned kMaxProbe = 8;  // buckets an insert may move on to
inline constexpr std::size_t kEntryBytes = kKeyBytes + 8;
inline constexpr std::size_t kBucketBytes = 256;  // 8 + 8 x 24 = 200, padded to 4 lines
inline constexpr std::size_t kItemHeader = 8 + kKeyBytes;
inline constexpr std::uint32_t kTableMagic = 0x4b565442;  // "KVTB"

constexpr std::size_t item_bytes_for(std::size_t value_bytes) noexcept {
  return (kItemHeader + value_bytes + 8 + 63) / 64 * 64;
}

struct Layout {
  std::uint64_t value_bytes = 0;
  std::uint64_t buckets = 0;
  std::uint64_t items = 0;
  std::uint64_t item_bytes = 0;
  std::uint64_t index_offset = 0;
  std::uint64_t items_offset = 0;
  std::uint64_t region_bytes = 0;

  // A table for `capacity` keys: one bucket per four keys (half the ways used on average).
  static Layout for_capacity(std::uint64_t capacity, std::size_t value_bytes);
  // "" when this layout (sent by a peer) is one this client can use with `value_bytes`
  // inside a region of `region_bytes`, else why not.
  std::string check(std::size_t value_bytes, std::uint64_t region_bytes) const;

  std::uint64_t bucket_offset(std::uint64_t b) const noexcept {
    return index_offset + b * kBucketBytes;
  }
  std::uint64_t item_offset(std::uint64_t i) const noexcept {
    return items_offset + i * item_bytes;
  }
  std::uint64_t home(std::uint64_t hash) const noexcept { return (hash >> 17) & (buckets - 1); }
  std::uint64_t value_offset() const noexcept { return kItemHeader; }
  std::uint64_t check_offset() const noexcept { return kItemHeader + value_bytes; }
};

struct TableHello {
  std::uint32_t magic = kTableMagic;
  std::uint32_t key_len = 0;
  Layout layout;
};

// ---- the item's lock word: [version:48 | owner:14 | deleted:1 | locked:1] ----
inline constexpr std::uint64_t kLocked = 1;
inline constexpr std::uint64_t kDeleted = 2;
inline constexpr std::uint32_t kServerOwner = 0x3fff;  // clients lock as rank + 1
constexpr std::uint64_t owner_of(std::uint64_t w) noexcept { return w >> 2 & 0x3fff; }
constexpr std::uint64_t version_of(std::uint64_t w) noexcept { return w >> 16; }
constexpr bool locked(std::uint64_t w) noexcept { return (w & kLocked) != 0; }
constexpr bool deleted(std::uint64_t w) noexcept { return (w & kDeleted) != 0; }
// The word as its checksum sees it: no lock, no owner.
constexpr std::uint64_t settled(std::uint64_t w) noexcept { return w & ~std::uint64_t{0xfffd}; }
constexpr std::uint64_t locked_by(std::uint64_t w, std::uint32_t owner) noexcept {
  return settled(w) | std::uint64_t{owner & 0x3fffu} << 2 | kLocked;
}
// The settled word after a write: the next version, deleted or not.
constexpr std::uint64_t next_word(std::uint64_t w, bool del) noexcept {
  return (version_of(w) + 1) << 16 | (del ? kDeleted : 0);
}

// The item checksum over the settled word, the key and the value.
std::uint64_t item_check(std::uint64_t settled_word, const std::byte* key, const std::byte* value,
                         std::size_t value_bytes) noexcept;

// Fills an item image (item_bytes long) but its word: key, value (zero when null) and the
// check for `word`; write_item() writes the word too.
void write_body(std::byte* item, const Layout& l, std::uint64_t word, const Key& key,
                const std::byte* value) noexcept;
void write_item(std::byte* item, const Layout& l, std::uint64_t word, const Key& key,
                const std::byte* value) noexcept;

enum class ItemState : std::uint8_t { valid, locked, torn };
// What a copy of an item (read remotely, so possibly torn) holds.
ItemState inspect(const std::byte* item, const Layout& l, std::uint64_t* word) noexcept;

// ---- the RPC wire format (requests by WRITE, answers by SEND: rr's WriteSend) ----
// request: op:1 | pad:7 | key:16 | value (PUT: value_bytes)
// answer:  code:1 | pad:7 | value (GET ok: value_bytes)
enum class RpcOp : std::uint8_t { get = 1, put = 2, del = 3, insert = 4 };
// Answer codes beyond Code: the key already exists (insert), the request was malformed.
inline constexpr std::uint8_t kExists = 0x40;
inline constexpr std::uint8_t kMalformed = 0x41;
inline constexpr std::size_t kRpcHeader = 8 + kKeyBytes;
inline constexpr std::size_t kAnswerHeader = 8;

// The channel both ends open per worker lane: requests written, answers sent.
inline rr::ChannelOptions channel_options(const Options& o) {
  rr::ChannelOptions c;
  c.pattern = rr::Pattern::write_send;
  c.request_bytes = kRpcHeader + o.value_bytes;
  c.response_bytes = kAnswerHeader + o.value_bytes;
  c.peer_timeout = o.peer_timeout;
  return c;
}

// auto: `o` with the design chosen for the provider `to` names (choose_design), and the line
// that says so.
Options resolve_auto(const TransportOptions& to, const Options& o, std::string* why);
// Collective: every rank's design equals `mine`, else PeerError naming the rank and both.
void agree_on_design(Bootstrap& boot, Design mine);

// Sets an end's why() (a friend of Server and Client).
struct AutoNote {
  template <class End>
  static std::unique_ptr<End> note(std::unique_ptr<End> end, std::string why) {
    end->why_ = std::move(why);
    return end;
  }
};

// Throws UsageError unless this rank of `boot` is a server (`server`) or a client as asked, the
// last `servers` ranks being the servers, and the provider of `to` can run design o.
void check_end(const TransportOptions& to, Bootstrap& boot, int servers, const Options& o,
               bool server);

std::unique_ptr<Server> make_table_server(const TransportOptions& to, Bootstrap& boot, int servers,
                                          const Options& o);
std::unique_ptr<Client> make_table_client(const TransportOptions& to, Bootstrap& boot, int servers,
                                          const Options& o);

// For the recovery tests: the atomic client's PUTs from now on stop after taking the item's
// lock (after_lock) or after writing the item (after_write) and report success, leaving the
// lock held as a client that died there would.
enum class Abandon : std::uint8_t { never, after_lock, after_write };
void abandon_locks(Client& c, Abandon when);

// For the linearizability tests, a broken store: from now on every GET of a key this client
// has read before returns the value it read first (a cache never invalidated), whatever was
// written since, this client's own PUTs included.
void serve_stale_reads(Client& c);

// Which server holds `key`.
inline int server_of(const Key& key, int servers) noexcept {
  return static_cast<int>(hash_key(key) % static_cast<std::uint64_t>(servers));
}

}  // namespace fabflow::kv::detail
