// The bytes of one bench bulk or bench xfer message, written by its sender and checked where
// it lands, so that a figure in bytes per second counts bytes that arrived (bench queue's rule,
// item_payload.h). Word k (bytes 8k .. 8k+7) of message `seq` is base(seq) + k * kStep, base
// an odd multiple of seq + 1: every word differs from message to message, and a word read back
// names the message that wrote it (seq_of), so a check can tell a later message's bytes from a
// corrupted or stale one. A message of up to one page (kWhole) is written and checked whole; a
// larger one in a sample of its pages, one in kShare (at least one, at most kMostPages), that
// rotates with seq so that every page is checked once in about kShare consecutive messages,
// plus its last page: checking reads about a sixteenth of a message up to 1 MiB and at most 17
// pages above, so that it stays small beside the copy it checks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>

namespace fabflow::bench {

class MessagePattern {
 public:
  static constexpr std::size_t kPage = 4096;
  static constexpr std::size_t kWhole = kPage;
  static constexpr std::size_t kShare = 16;
  static constexpr std::size_t kMostPages = 16;
  static constexpr std::uint64_t kStep = 0x9e3779b97f4a7c15;
  static constexpr std::uint64_t kMul = 0xd6e8feb86659fd93;  // odd: invertible mod 2^64

  // The word at word index k of message seq.
  static constexpr std::uint64_t word(std::uint64_t seq, std::uint64_t k) noexcept {
    return (seq + 1) * kMul + k * kStep;
  }
  // The message whose word index k reads `w`.
  static constexpr std::uint64_t seq_of(std::uint64_t w, std::uint64_t k) noexcept {
    return (w - k * kStep) * inverse(kMul) - 1;
  }

  // Calls f(offset, length) for each range of a `size`-byte message `seq` that is written and
  // checked, in ascending order, none empty.
  template <class F>
  static void ranges(std::size_t size, std::uint64_t seq, F&& f) {
    if (size == 0) return;
    if (size <= kWhole) {
      f(std::size_t{0}, size);
      return;
    }
    const std::size_t pages = (size + kPage - 1) / kPage;  // > 1
    const std::size_t count = std::clamp<std::size_t>(pages / kShare, 1, kMostPages);
    const std::size_t stride = (pages + count - 1) / count;  // count * stride >= pages
    const std::size_t turn = static_cast<std::size_t>(seq % stride);
    for (std::size_t j = 0; j < count; ++j) {
      const std::size_t p = j * stride + turn;
      if (p + 1 < pages) f(p * kPage, kPage);
    }
    f((pages - 1) * kPage, size - (pages - 1) * kPage);
  }

  // Writes message seq's pattern into the ranges above of `msg`.
  static void stamp(std::span<std::byte> msg, std::uint64_t seq) noexcept {
    ranges(msg.size(), seq, [&](std::size_t off, std::size_t len) { put(msg, seq, off, len); });
  }
  // Writes into the ranges above of `msg` what message seq would never hold there (each
  // word's complement): a copy that skips them leaves them failing the check.
  static void spoil(std::span<std::byte> msg, std::uint64_t seq) noexcept {
    ranges(msg.size(), seq, [&](std::size_t off, std::size_t len) {
      put(msg, seq, off, len);
      for (std::size_t i = off; i < off + len; ++i) msg[i] = ~msg[i];
    });
  }

  struct Mismatch {
    std::size_t offset;  // in the message
    std::uint8_t got, want;
  };

  // The first byte of message seq's ranges in `msg` that holds neither message seq's pattern
  // nor, where `later` is given, that of a message later(seq') accepts (a sender that may
  // already have overwritten the bytes with a later message's, bench xfer's writes). Words are
  // compared whole; a partial last word bytewise, and not at all where `later` is given.
  static std::optional<Mismatch> check(
      std::span<const std::byte> msg, std::uint64_t seq,
      const std::function<bool(std::uint64_t)>& later = {}) noexcept {
    std::optional<Mismatch> bad;
    ranges(msg.size(), seq, [&](std::size_t off, std::size_t len) {
      if (!bad) bad = check_range(msg, seq, off, len, later);
    });
    return bad;
  }

 private:
  static constexpr std::uint64_t inverse(std::uint64_t m) noexcept {
    std::uint64_t x = m;  // Newton's iteration: each step doubles the correct low bits
    for (int i = 0; i < 5; ++i) x *= 2 - m * x;
    return x;
  }
  // `off` is a multiple of 8 (ranges start on pages).
  static void put(std::span<std::byte> msg, std::uint64_t seq, std::size_t off,
                  std::size_t len) noexcept {
    std::byte* out = msg.data();
    const std::size_t end = off + len;
    std::size_t i = off;
    std::uint64_t w = word(seq, i / 8);
    for (; i + 8 <= end; i += 8, w += kStep) std::memcpy(out + i, &w, 8);
    if (i < end) std::memcpy(out + i, &w, end - i);
  }

  static std::optional<Mismatch> check_range(std::span<const std::byte> msg, std::uint64_t seq,
                                             std::size_t off, std::size_t len,
                                             const std::function<bool(std::uint64_t)>& later) {
    const std::byte* in = msg.data();
    const std::size_t end = off + len;
    std::size_t i = off;
    std::uint64_t want = word(seq, i / 8), got = 0;
    for (;;) {
      for (; i + 8 <= end; i += 8, want += kStep) {  // the common case: a tight scan
        std::memcpy(&got, in + i, 8);
        if (got != want) break;
      }
      if (i + 8 > end) break;
      if (!later || !later(seq_of(got, i / 8))) return at(i, got, want, 8);
      i += 8;
      want += kStep;
    }
    if (i == end || later) return std::nullopt;  // a partial last word names no message
    const std::size_t n = end - i;
    got = 0;
    std::memcpy(&got, in + i, n);
    want &= (std::uint64_t{1} << (8 * n)) - 1;
    if (got == want) return std::nullopt;
    return at(i, got, want, n);
  }

  // The first differing byte of the n-byte word at offset i.
  static Mismatch at(std::size_t i, std::uint64_t got, std::uint64_t want, std::size_t n) {
    std::size_t b = 0;
    while (b + 1 < n && ((got >> (8 * b)) & 0xff) == ((want >> (8 * b)) & 0xff)) ++b;
    return Mismatch{i + b, static_cast<std::uint8_t>(got >> (8 * b)),
                    static_cast<std::uint8_t>(want >> (8 * b))};
  }
};

static_assert(MessagePattern::seq_of(MessagePattern::word(12345, 678), 678) == 12345);

}  // namespace fabflow::bench
