// The table layout a server announces and the item format both ends read and write
// (internal.h; docs/kv.md draws them). Pure functions of bytes: what a client reads from a
// server goes through Layout::check and inspect.
#include <algorithm>
#include <bit>
#include <cstring>

#include "kv/internal.h"

namespace fabflow::kv {

namespace detail {

Layout Layout::for_capacity(std::uint64_t capacity, std::size_t value_bytes) {
  Layout l;
  l.value_bytes = value_bytes;
  l.items = capacity;
  l.item_bytes = item_bytes_for(value_bytes);
  l.buckets = 1;
  while (l.buckets * 4 < capacity) l.buckets *= 2;
  l.index_offset = 64;
  l.items_offset = l.index_offset + l.buckets * kBucketBytes;
  l.region_bytes = l.items_offset + l.items * l.item_bytes;
  return l;
}

std::string Layout::check(std::size_t want_value_bytes, std::uint64_t region) const {
  if (value_bytes != want_value_bytes)
    return "holds " + std::to_string(value_bytes) + "-byte values, not " +
           std::to_string(want_value_bytes);
  if (buckets == 0 || (buckets & (buckets - 1)) != 0 || buckets > (std::uint64_t{1} << 40))
    return "sent a malformed bucket count";
  if (items == 0 || items > kMaxCapacity || item_bytes != item_bytes_for(value_bytes))
    return "sent a malformed item count or size";
  // Each part inside the region, computed without overflow (every factor is bounded above).
  if (index_offset > region || buckets * kBucketBytes > region - index_offset ||
      items_offset < index_offset + buckets * kBucketBytes || items_offset > region ||
      items * item_bytes > region - items_offset || region_bytes > region)
    return "sent a table layout that does not fit its region";
  return {};
}

std::uint64_t item_check(std::uint64_t word, const std::byte* key, const std::byte* value,
                         std::size_t value_bytes) noexcept {
  std::uint64_t h = mix64(word ^ 0x6b76636865636b31ull);
  auto add = [&](const std::byte* p, std::size_t n) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      std::uint64_t x;
      std::memcpy(&x, p + i, 8);
      h = mix64(h ^ x) + i;
    }
    if (i < n) {
      std::uint64_t x = 0;
      std::memcpy(&x, p + i, n - i);
      h = mix64(h ^ x ^ (n - i) << 56);
    }
  };
  add(key, kKeyBytes);
  add(value, value_bytes);
  return h;
}

void write_item(std::byte* item, const Layout& l, std::uint64_t word, const Key& key,
                const std::byte* value) noexcept {
  std::memcpy(item, &word, 8);
  write_body(item, l, word, key, value);
}

void write_body(std::byte* item, const Layout& l, std::uint64_t word, const Key& key,
                const std::byte* value) noexcept {
  std::memcpy(item + 8, key.data(), kKeyBytes);
  std::byte* v = item + l.value_offset();
  if (value)
    std::memcpy(v, value, l.value_bytes);
  else
    std::memset(v, 0, l.value_bytes);
  const std::uint64_t c = item_check(settled(word), key.data(), v, l.value_bytes);
  std::memcpy(item + l.check_offset(), &c, 8);
}

ItemState inspect(const std::byte* item, const Layout& l, std::uint64_t* word) noexcept {
  std::uint64_t w, c;
  std::memcpy(&w, item, 8);
  std::memcpy(&c, item + l.check_offset(), 8);
  *word = w;
  if (locked(w)) return ItemState::locked;
  if (item_check(settled(w), item + 8, item + l.value_offset(), l.value_bytes) != c)
    return ItemState::torn;
  return ItemState::valid;
}

}  // namespace detail

}  // namespace fabflow::kv
