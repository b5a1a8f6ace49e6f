// The bulk channel's plan: the options' defaults and limits, the pipeline's fragments and the
// cost model auto chooses by (docs/bulk.md, "auto").
#include <algorithm>
#include <cmath>
#include <string>

#include "bulk/channel_impl.h"

namespace fabflow::bulk {

using detail::kPage;

ChannelOptions resolve(const ChannelOptions& in, const Capabilities& caps) {
  ChannelOptions o = in;
  auto dflt = [](auto& v, auto d) {
    if (v == 0) v = d;
  };
  dflt(o.eager_limit, std::size_t{16} << 10);
  dflt(o.bounce_size, std::max<std::size_t>(std::size_t{64} << 10, o.eager_limit));
  dflt(o.frag_size, std::size_t{1} << 20);
  dflt(o.max_frag, std::max<std::size_t>(std::size_t{16} << 20, o.frag_size));
  dflt(o.depth, 4u);
  dflt(o.copy_ahead, o.bounce_size);
  dflt(o.copy_limit, std::size_t{256} << 10);
  dflt(o.rx_buffers, 32u);
  dflt(o.cache_entries, std::size_t{1024});
  dflt(o.cache_bytes, std::size_t{1} << 30);
  auto bad = [](const std::string& what) { throw UsageError("bulk: " + what); };
  if (o.eager_limit > o.bounce_size)
    bad("the eager limit (" + std::to_string(o.eager_limit) + ") is above the bounce size (" +
        std::to_string(o.bounce_size) + ")");
  const std::size_t max_bounce =
      std::min<std::size_t>(std::size_t{16} << 20, caps.max_msg_size - kHeader);
  if (o.bounce_size > max_bounce || o.bounce_size < 1024)
    bad("bounce size " + std::to_string(o.bounce_size) + " is outside [1024, " +
        std::to_string(max_bounce) + "] (" + caps.provider + "'s largest message)");
  if (o.frag_size < kPage || o.frag_size % kPage != 0 || o.frag_size > (std::size_t{1} << 30))
    bad("fragment size " + std::to_string(o.frag_size) + " must be a multiple of 4096 up to 1 GiB");
  if (o.max_frag < o.frag_size || o.max_frag % kPage != 0 || o.max_frag > (std::size_t{1} << 30))
    bad("the largest fragment (" + std::to_string(o.max_frag) +
        ") must be a multiple of 4096, at least the fragment size, at most 1 GiB");
  if (!(o.frag_growth >= 1.0 && o.frag_growth <= 16.0)) bad("fragment growth must be in [1, 16]");
  if (o.depth > 64) bad("depth " + std::to_string(o.depth) + " is above 64");
  if (o.rx_buffers < 2 || o.rx_buffers > 1024)
    bad("receive buffers " + std::to_string(o.rx_buffers) + " outside [2, 1024]");
  if (o.copy_ahead > (std::size_t{1} << 30)) bad("copy-ahead is above 1 GiB");
  return o;
}

// The pipeline's fragments of [begin, size): the first frag_size long, each next one
// frag_growth times the one before (rounded down to pages, at most max_frag), the last cut.
std::vector<std::pair<std::uint64_t, std::uint64_t>> fragments(const ChannelOptions& o,
                                                               std::uint64_t begin,
                                                               std::uint64_t size) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> f;
  double len = static_cast<double>(o.frag_size);
  for (std::uint64_t at = begin; at < size;) {
    auto l = static_cast<std::uint64_t>(len) / kPage * kPage;
    l = std::min<std::uint64_t>({l, o.max_frag, size - at});
    f.emplace_back(at, l);
    at += l;
    len = std::min(len * o.frag_growth, static_cast<double>(o.max_frag));
  }
  return f;
}

double estimate_ns(const Costs& c, const ChannelOptions& o, Protocol p, std::size_t bytes) {
  const double s = static_cast<double>(bytes), rt = c.round_trip_ns;
  auto copy = [&](double n) { return n * c.memcpy_byte_ns; };
  auto reg = [&](double n) { return c.registration_free ? 0 : c.reg_call_ns + n * c.reg_byte_ns; };
  const double wire = s * c.wire_byte_ns;
  const double bounce = static_cast<double>(o.bounce_size);
  switch (p) {
    case Protocol::eager:
      if (bytes > o.eager_limit) return HUGE_VAL;
      return rt / 2 + 2 * copy(s) + wire;
    case Protocol::copy:  // pieces overlap: the first and last copies are not hidden
      return rt / 2 + (s > bounce ? rt : 0) + std::max(wire, copy(s)) +
             2 * copy(std::min(s, bounce));
    case Protocol::rndv_write: return 1.5 * rt + 2 * reg(s) + wire;
    case Protocol::pipeline: {
      const double head = std::min(s, static_cast<double>(o.eager_limit + o.copy_ahead));
      if (s <= head) return estimate_ns(c, o, Protocol::copy, bytes);
      const double f = std::min(s - head, static_cast<double>(o.frag_size));
      const double n = std::ceil((s - head) / static_cast<double>(o.frag_size));
      // The first fragment's registrations (both sides) are exposed; the others overlap the
      // transfer of the ones before.
      return 1.5 * rt + 2 * reg(f) + std::max(wire, n * reg(f)) + 2 * copy(head);
    }
    default: return HUGE_VAL;
  }
}

Protocol cheapest(const Costs& c, const ChannelOptions& o, std::size_t bytes) {
  Protocol best = Protocol::copy;
  double best_ns = HUGE_VAL;
  for (Protocol p : kAutoCandidates) {
    const double e = estimate_ns(c, o, p, bytes);
    if (e < best_ns) {
      best_ns = e;
      best = p;
    }
  }
  return best;
}

}  // namespace fabflow::bulk
