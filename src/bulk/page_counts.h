// A page-granular refcount over address ranges: an interval map [start, end) -> count with
// disjoint intervals. Pinning uses it so that munlock happens only for pages no pinned
// registration covers any more. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace fabflow::bulk {

class PageCounts {
 public:
  using Range = std::pair<std::uintptr_t, std::uintptr_t>;  // [first, second)

  // Counts [a, b) once more; returns the subranges that were at 0 before.
  std::vector<Range> add(std::uintptr_t a, std::uintptr_t b) {
    std::vector<Range> fresh;
    split(a);
    split(b);
    std::uintptr_t at = a;
    auto it = map_.lower_bound(a);
    while (at < b) {
      if (it == map_.end() || it->first >= b) {
        fresh.emplace_back(at, b);
        map_.emplace_hint(it, at, Interval{b, 1});
        covered_ += b - at;
        break;
      }
      if (it->first > at) {
        fresh.emplace_back(at, it->first);
        map_.emplace_hint(it, at, Interval{it->first, 1});
        covered_ += it->first - at;
      }
      ++it->second.count;
      at = it->second.end;
      ++it;
    }
    return fresh;
  }

  // Counts [a, b) once less (pages not counted are left alone); returns the subranges that
  // dropped to 0.
  std::vector<Range> remove(std::uintptr_t a, std::uintptr_t b) {
    std::vector<Range> gone;
    split(a);
    split(b);
    for (auto it = map_.lower_bound(a); it != map_.end() && it->first < b;) {
      if (--it->second.count == 0) {
        if (!gone.empty() && gone.back().second == it->first) {
          gone.back().second = it->second.end;
        } else {
          gone.emplace_back(it->first, it->second.end);
        }
        covered_ -= it->second.end - it->first;
        it = map_.erase(it);
      } else {
        ++it;
      }
    }
    return gone;
  }

  // Bytes of [a, b) with a count of 0: what add(a, b) would newly count.
  std::size_t uncovered(std::uintptr_t a, std::uintptr_t b) const {
    std::size_t counted = 0;
    auto it = map_.upper_bound(a);
    if (it != map_.begin()) --it;
    for (; it != map_.end() && it->first < b; ++it) {
      const std::uintptr_t x = it->first > a ? it->first : a;
      const std::uintptr_t y = it->second.end < b ? it->second.end : b;
      if (x < y) counted += y - x;
    }
    return (b - a) - counted;
  }

  std::size_t covered() const noexcept { return covered_; }  // bytes with a count above 0
  std::size_t intervals() const noexcept { return map_.size(); }

 private:
  struct Interval {
    std::uintptr_t end;
    std::uint32_t count;
  };

  // Makes `at` an interval boundary.
  void split(std::uintptr_t at) {
    auto it = map_.upper_bound(at);
    if (it == map_.begin()) return;
    --it;
    if (it->first < at && at < it->second.end) {
      map_.emplace(at, Interval{it->second.end, it->second.count});
      it->second.end = at;
    }
  }

  std::map<std::uintptr_t, Interval> map_;
  std::size_t covered_ = 0;
};

}  // namespace fabflow::bulk
