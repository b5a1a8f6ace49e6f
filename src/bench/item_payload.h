// The bytes of one benchmark item: what a producer writes whole into its slot and what a
// consumer reads whole back, so that a throughput in bytes per second counts bytes that moved.
// Word k of item `seq` (its k-th 8 bytes) is `seq + k * kStep`, so word 0 is `seq` itself;
// the tail bytes of a length that is not a multiple of 8 are fixed. The words are computed,
// not copied from a pattern (a copy's speed would depend on how the pattern and the slot
// happen to lie against each other in the cache). Every word differs from item to item, so a
// slot left as an earlier item wrote it is caught, and the item's sum (wrapping, of its words
// and tail bytes) has a closed form: a consumer checks every byte by reading the item once.
// Immutable after construction; safe to share between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace fabflow::bench {

class ItemPayload {
 public:
  static constexpr std::uint64_t kStep = 0x9e3779b97f4a7c15;  // odd: words differ in every byte

  explicit ItemPayload(std::size_t bytes) : bytes_(bytes), words_(bytes / 8) {
    for (std::size_t k = 0; k < words_; ++k) base_ += k * kStep;
    for (std::size_t i = words_ * 8; i < bytes_; ++i) base_ += tail_byte(i);
  }

  std::size_t size() const noexcept { return bytes_; }

  // Writes item `seq` whole into `slot` (of size() bytes).
  void fill(std::span<std::byte> slot, std::uint64_t seq) const noexcept {
    std::byte* out = slot.data();
    const std::size_t words = words_, bytes = bytes_;  // locals: `out` may alias *this
    std::uint64_t w = seq;
    for (std::size_t k = 0; k < words; ++k, w += kStep) std::memcpy(out + 8 * k, &w, 8);
    for (std::size_t i = words * 8; i < bytes; ++i) out[i] = static_cast<std::byte>(tail_byte(i));
  }

  // Writes only `seq` into the first 8 bytes of `slot` (items of 8 bytes or more): what
  // bench queue's seq-only API moves.
  void stamp(std::span<std::byte> slot, std::uint64_t seq) const noexcept {
    if (words_ > 0) std::memcpy(slot.data(), &seq, 8);
  }

  // The sequence number an item carries (items of 8 bytes or more; else `expected`).
  static std::uint64_t seq_of(std::span<const std::byte> item, std::uint64_t expected) noexcept {
    if (item.size() >= 8) std::memcpy(&expected, item.data(), 8);
    return expected;
  }

  // Whether `item` is item `seq` whole, every byte read.
  bool intact(std::span<const std::byte> item, std::uint64_t seq) const noexcept {
    return item.size() == bytes_ && sum(item) == base_ + words_ * seq;
  }

  static std::uint64_t sum(std::span<const std::byte> b) noexcept {
    // Four sums, so that the loop is not one chain of dependent adds.
    std::uint64_t s[4] = {0, 0, 0, 0};
    std::size_t i = 0;
    for (; i + 32 <= b.size(); i += 32)
      for (int k = 0; k < 4; ++k) {
        std::uint64_t w;
        std::memcpy(&w, b.data() + i + 8 * k, 8);
        s[k] += w;
      }
    for (; i + 8 <= b.size(); i += 8) {
      std::uint64_t w;
      std::memcpy(&w, b.data() + i, 8);
      s[0] += w;
    }
    for (; i < b.size(); ++i) s[1] += static_cast<std::uint64_t>(b[i]);
    return s[0] + s[1] + s[2] + s[3];
  }

 private:
  // Byte i (past the last whole word) of every item.
  static std::uint64_t tail_byte(std::size_t i) noexcept { return (i * 131 + 7) & 0xff; }

  std::size_t bytes_, words_;
  std::uint64_t base_ = 0;  // the sum of item 0
};

}  // namespace fabflow::bench
