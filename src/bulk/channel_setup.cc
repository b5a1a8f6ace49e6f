// The bulk channel's setup: every rank agrees on the parameters, probes cross-memory attach
// where the transport has it, and measures auto's costs. docs/bulk.md.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <sstream>

#include "bulk/channel_impl.h"

namespace fabflow::bulk::detail {

namespace {

struct Agreement {  // what every rank must agree on, plus what each tells the others
  std::uint64_t eager_limit, bounce_size, frag_size, max_frag, depth, copy_ahead, rx_buffers;
  double frag_growth;
  std::uint64_t probe_addr;  // a word this rank's peers read by cross-memory attach
  std::int32_t cma_refused;  // after the exchange: 0 when this rank read its right neighbour
  std::int32_t pad;
};

}  // namespace

// auto's costs (docs/bulk.md): registration and memcpy on every rank, the round trip and
// the rendezvous bandwidth between ranks 0 and 1 (the others take rank 0's). Collective.
void ChannelImpl::measure() {
  using clock = std::chrono::steady_clock;
  auto ns_since = [](clock::time_point t0) {
    return std::chrono::duration<double, std::nano>(clock::now() - t0).count();
  };
  constexpr std::size_t kSmall = 4096, kLarge = std::size_t{4} << 20;
  std::vector<std::byte> a(kLarge, std::byte{1}), b(kLarge, std::byte{2});
  Costs c;
  c.registration_free = cma_capable_;
  if (!cma_capable_) {
    auto reg = [&](std::size_t n, int reps) {
      register_buffer(t_, a.data(), n, kLocalRead | kRemoteWrite, o_.pin);  // warm
      const auto t0 = clock::now();
      for (int i = 0; i < reps; ++i)
        register_buffer(t_, a.data(), n, kLocalRead | kRemoteWrite, o_.pin);
      return ns_since(t0) / reps;
    };
    const double small = reg(kSmall, 20), large = reg(kLarge, 4);
    c.reg_byte_ns = std::max(0.0, (large - small) / static_cast<double>(kLarge - kSmall));
    c.reg_call_ns = std::max(0.0, small - c.reg_byte_ns * kSmall);
  }
  std::memcpy(b.data(), a.data(), kLarge);
  auto t0 = clock::now();
  for (int i = 0; i < 4; ++i) {
    std::memcpy(b.data(), a.data(), kLarge);
    asm volatile("" ::: "memory");
  }
  c.memcpy_byte_ns = ns_since(t0) / 4 / kLarge;
  // Ranks 0 and 1: zero-byte round trips, then 4 MiB by rendezvous-write (registration
  // taken out with the costs just measured).
  std::array<double, 2> shared{};
  if (rank_ < 2) {
    const int peer = 1 - rank_;
    std::byte none{};
    auto round = [&] {
      if (rank_ == 0) {
        send(peer, kMeasureTag, {&none, 0}, Protocol::eager);
        recv(peer, kMeasureTag, {&none, 0});
      } else {
        recv(peer, kMeasureTag, {&none, 0});
        send(peer, kMeasureTag, {&none, 0}, Protocol::eager);
      }
    };
    round();
    t0 = clock::now();
    for (int i = 0; i < 50; ++i) round();
    shared[0] = ns_since(t0) / 50;
    auto big = [&] {
      if (rank_ == 0) {
        send(peer, kMeasureTag, a, Protocol::rndv_write);
        recv(peer, kMeasureTag, {&none, 0});
      } else {
        recv(peer, kMeasureTag, b);
        send(peer, kMeasureTag, {&none, 0}, Protocol::eager);
      }
    };
    big();
    t0 = clock::now();
    for (int i = 0; i < 2; ++i) big();
    const double one = ns_since(t0) / 2 - shared[0] / 2;  // the zero-byte answer's half
    const double overhead = 1.5 * shared[0] + 2 * (c.reg_call_ns + c.reg_byte_ns * kLarge);
    shared[1] = std::max(0.0, one - overhead) / kLarge;
  }
  shared = allgather_value(boot_, shared, "bulk: costs")[0];
  c.round_trip_ns = shared[0];
  c.wire_byte_ns = shared[1];
  c.measured = true;
  costs_ = c;
  registrar_.reset();
  stats_ = Stats{};
  boot_.barrier([this] { t_.progress(); });
}

void ChannelImpl::exchange() {
  Agreement mine{};
  mine.eager_limit = o_.eager_limit;
  mine.bounce_size = o_.bounce_size;
  mine.frag_size = o_.frag_size;
  mine.max_frag = o_.max_frag;
  mine.depth = o_.depth;
  mine.copy_ahead = o_.copy_ahead;
  mine.rx_buffers = o_.rx_buffers;
  mine.frag_growth = o_.frag_growth;
  mine.probe_addr = reinterpret_cast<std::uint64_t>(&probe_);
  const auto a = allgather_value(boot_, mine, "bulk: channel hello");
  for (std::size_t r = 0; r < a.size(); ++r) {
    const Agreement& x = a[r];
    // Name every parameter that differs, with both values.
    std::string theirs, ours;
    auto differ = [&](const char* name, auto t, auto m) {
      if (t == m) return;
      std::ostringstream a, b;
      a << (theirs.empty() ? "" : ", ") << name << " " << t;
      b << (ours.empty() ? "" : ", ") << name << " " << m;
      theirs += a.str();
      ours += b.str();
    };
    differ("eager", x.eager_limit, mine.eager_limit);
    differ("bounce", x.bounce_size, mine.bounce_size);
    differ("fragment", x.frag_size, mine.frag_size);
    differ("largest fragment", x.max_frag, mine.max_frag);
    differ("growth", x.frag_growth, mine.frag_growth);
    differ("depth", x.depth, mine.depth);
    differ("copy-ahead", x.copy_ahead, mine.copy_ahead);
    differ("receive buffers", x.rx_buffers, mine.rx_buffers);
    if (!theirs.empty())
      throw PeerError(static_cast<int>(r), "bulk: ranks disagree on the channel's parameters: " +
                                               rank_str(static_cast<int>(r)) + " has " + theirs +
                                               "; " + rank_str(rank_) + " has " + ours);
  }
  if (!cma_capable_) {
    path_ = "fabric RMA";
    return;
  }
  // Cross-memory attach: each rank reads its right neighbour's probe word through the
  // transport; all must succeed. A refusal is named by the rank that met it.
  int verdict = 0;  // -1 turned off, 0 read, 1 refused
  std::string why;
  if (!o_.cross_memory_attach) {
    verdict = -1;
  } else if (ranks_ > 1) {
    const int right = (rank_ + 1) % ranks_;
    std::uint64_t got = 0;
    if (t_.copy_peer(right, Transport::PeerCopy::read, &got,
                     a[static_cast<std::size_t>(right)].probe_addr, sizeof got) != Status::ok) {
      verdict = 1;
      why = t_.last_error();
    } else if (got != kProbe) {
      verdict = 1;
      why = rank_str(right) + "'s probe word read back wrong";
    }
  }
  mine.cma_refused = verdict;
  const auto verdicts = allgather_value(boot_, mine, "bulk: cross-memory-attach verdict");
  for (std::size_t r = 0; r < verdicts.size() && verdict == 0; ++r) {
    verdict = verdicts[r].cma_refused;
    if (verdict > 0) why = "on " + rank_str(static_cast<int>(r));
  }
  cma_ok_ = verdict == 0;
  if (cma_ok_)
    path_ = "cross-memory attach (single copy; no registration)";
  else if (verdict < 0)
    path_ = "copy (cross-memory attach turned off)";
  else
    path_ = "copy (cross-memory attach refused: " + why + ")";
}

}  // namespace fabflow::bulk::detail
