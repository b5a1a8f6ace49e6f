// Helpers for the flow queue tests: two ranks as threads, deterministic items, fake queue ends.
#pragma once

#include <gtest/gtest.h>

#include <fabflow/bootstrap.h>
#include <fabflow/flow.h>
#include <fabflow/transport.h>

#include <array>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flow/layout.h"
#include "support/ranks.h"

namespace fabflow::flow::test {

struct Provider {
  const char* name;
  EndpointType endpoint;
  SlotFormat slots = SlotFormat::automatic;  // forced on every queue of the tests that run on it
};

inline const Provider kShm{"shm", EndpointType::rdm};
inline const Provider kTcp{"tcp", EndpointType::msg};
inline const Provider kRxm{"tcp", EndpointType::rdm};  // tcp;ofi_rxm
inline const Provider kLocal{"local", EndpointType::rdm};
// Every transport a flow queue must run on.
inline const std::vector<Provider> kAll{kShm, kTcp, kRxm, kLocal};
// local with framed slots where it would use compact ones (push1 data): with kAll, both slot
// formats on a transport that places writes in order, and framed on those that do not.
inline const Provider kLocalFramed{"local", EndpointType::rdm, SlotFormat::framed};
inline const std::vector<Provider> kAllFormats{kShm, kTcp, kRxm, kLocal, kLocalFramed};

// `o` as the tests run it on `p` (its forced slot format).
inline QueueOptions on(const Provider& p, QueueOptions o) {
  if (p.slots != SlotFormat::automatic) o.slot_format = p.slots;
  return o;
}

inline TransportOptions transport_options(const Provider& p, const QueueOptions& o) {
  TransportOptions t;
  t.provider = p.name;
  t.endpoint = p.endpoint;
  t.ops = required_ops(o);
  if (t.ops.empty()) t.ops.push_back(Op::send);
  // A helper thread pumps while the test's own thread may drive progress (barriers).
  t.thread_safe = o.active_producer || o.active_consumer;
  return t;
}

// The second transport of a queue with separate_notify_endpoint: same provider, the
// notifications' operations.
inline TransportOptions notify_transport_options(const Provider& p, const QueueOptions& o) {
  TransportOptions t = transport_options(p, o);
  t.ops = required_notify_ops(o);
  return t;
}

// Opens and connects (collectively over `boot`) the notify transport of `o`; null when the
// notifications share the data transport.
inline std::unique_ptr<Transport> open_notify(const Provider& p, const QueueOptions& o,
                                              Bootstrap& boot) {
  if (!o.separate_notify_endpoint || o.socket) return nullptr;
  auto n = open_transport(notify_transport_options(p, o));
  n->connect(boot);
  return n;
}

// make_producer / make_consumer over one transport, or two when `notify` is set.
inline std::unique_ptr<Producer> producer_on(Transport& t, Transport* notify, Bootstrap& boot,
                                             int peer, const QueueOptions& o) {
  return notify ? make_producer(t, *notify, boot, peer, o) : make_producer(t, boot, peer, o);
}
inline std::unique_ptr<Consumer> consumer_on(Transport& t, Transport* notify, Bootstrap& boot,
                                             int peer, const QueueOptions& o) {
  return notify ? make_consumer(t, *notify, boot, peer, o) : make_consumer(t, boot, peer, o);
}

// Slots that end a stream: one marker, or two where the producer reads the consumer's head
// (space pull: the second says it has read the head that covers the first; flow.h, close()).
inline std::uint64_t end_markers(const Design& d) { return d.space == SpaceNotify::pull ? 2 : 1; }

// Test-name-safe labels: "shm_rdm", "push1_watermark_pull_tcp_msg".
inline std::string safe_name(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}
inline std::string label_of(const Provider& p) {
  std::string s = std::string(p.name) + "_" + std::string(to_string(p.endpoint));
  if (p.slots != SlotFormat::automatic) s += "_" + std::string(to_string(p.slots));
  return safe_name(s);
}
inline std::string label(const Design& d, const Provider& p) {
  return safe_name(d.name() + "_") + label_of(p);
}

// A design point on a transport: the parameter of the per-point suites.
struct Point {
  Design design;
  Provider provider;
};

inline std::vector<Point> points(const std::vector<Provider>& providers) {
  std::vector<Point> out;
  for (const auto& p : providers)
    for (const auto& d : Design::all())
      // A forced format is a variant of the points that would use the other one: push1 data.
      if (p.slots == SlotFormat::automatic || d.data == DataFlow::push1) out.push_back({d, p});
  return out;
}

inline std::string point_name(const ::testing::TestParamInfo<Point>& info) {
  return label(info.param.design, info.param.provider);
}

// How GoogleTest prints a point or a provider (the "GetParam() = ..." of the test list and
// failure messages): by its label. Without these it prints their bytes, and the ~1100 points'
// byte dumps were most of the test binary's start-up, paid by every test process. (CTest's
// names leave the GetParam() part out: NO_PRETTY_VALUES in cmake/FabflowTests.cmake.)
inline void PrintTo(const Point& p, std::ostream* os) { *os << label(p.design, p.provider); }
inline void PrintTo(const Provider& p, std::ostream* os) { *os << label_of(p); }

// Runs body(rank, transport, boot) on two threads (testing::run_ranks), each transport passed
// through `wrap` when given.
inline std::string run_pair(const TransportOptions& opts,
                            const std::function<void(int, Transport&, Bootstrap&)>& body,
                            const fabflow::testing::WrapTransport& wrap = {}) {
  return fabflow::testing::run_ranks(2, opts, body, wrap);
}

// Item i of a stream seeded with `seed`: its length and bytes follow from (seed, i) alone.
inline std::size_t item_len(std::uint64_t seed, std::uint64_t i, std::size_t max) {
  std::uint64_t x = (seed ^ (i * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
  return static_cast<std::size_t>((x >> 29) % (max + 1));
}
inline void fill_item(std::uint64_t seed, std::uint64_t i, std::byte* p, std::size_t len) {
  std::uint64_t x = seed * 31 + i;
  for (std::size_t j = 0; j < len; ++j) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    p[j] = static_cast<std::byte>(x >> 56);
  }
}

inline std::size_t env_count(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : fallback;
}

// A hand-made queue end that takes part in the key exchange like a real one, for tests that
// play a misbehaving peer. Owns its region(s). With separate_notify_endpoint, `notify` is its
// second transport: the cells live in `nmr`, the peer's in `nremote`. It writes its slots
// through the transport: compact ones word last, unless `word_first` (a producer's claim in
// its hello: the consumer then reads the word at the slot's start).
struct FakeEnd {
  detail::Layout layout;
  std::unique_ptr<MemoryRegion> mr, nmr;
  RemoteMemory remote, nremote;

  FakeEnd(Transport& t, Bootstrap& boot, int peer, const QueueOptions& o, int role,
          Transport* notify = nullptr, bool word_first = false) {
    const bool separate = o.separate_notify_endpoint;
    const SlotFormat format = slot_format(t.caps(), o);
    layout = detail::Layout::make(o.capacity, o.item_bytes, 0, separate, false, format);
    layout.sum = !layout.compact &&
                 detail::needs_sum(
                     o.design.data, o.design.transfer, t.caps().in_order_data,
                     detail::coalesces_writes(o.design.transfer, o.batching, o.active_producer));
    layout.word_first = word_first && layout.compact;
    mr = t.allocate(layout.region_bytes, kAllAccess);
    if (separate) nmr = notify->allocate(layout.notify_bytes, kAllAccess);
    detail::Hello h;
    h.role = static_cast<std::uint8_t>(role);
    h.data = static_cast<std::uint8_t>(o.design.data);
    h.transfer = static_cast<std::uint8_t>(o.design.transfer);
    h.space = static_cast<std::uint8_t>(o.design.space);
    h.separate = separate ? 1 : 0;
    h.format = static_cast<std::uint8_t>(format);
    h.sum = layout.sum ? 1 : 0;
    h.word_first = layout.word_first ? 1 : 0;
    h.capacity = o.capacity;
    h.item_bytes = o.item_bytes;
    h.region_bytes = layout.region_bytes;
    h.rank = boot.rank();
    h.peer = peer;
    std::vector<std::byte> nkey;
    if (separate) nkey = notify->export_key(*nmr);
    auto all = boot.allgather(detail::encode_hello(h, t.export_key(*mr), nkey));
    std::span<const std::byte> peer_nkey;
    auto key = detail::decode_hello(all[static_cast<std::size_t>(peer)], peer, h, &peer_nkey);
    remote = t.import_key(peer, key);
    nremote = separate ? notify->import_key(peer, peer_nkey) : remote;
  }
};

// Streams of random-size items, checked one by one: FIFO order, exactly once, contents.
struct Stream {
  std::size_t items = 0;
  std::uint64_t seed = 1;
  bool pauses = true;
  // > 0: the batched calls with up to this many items per call (reserve_many / commit_many,
  // peek_many / release_many, random batch sizes, partial commits and releases, mixed with
  // the one-item calls); item lengths then change every 7 items, so batches of one length form.
  std::size_t burst = 0;
  // > 0: the consumer also sleeps 100 us after every this many items, so the producer gets
  // ahead and the ring fills (single-item calls).
  std::size_t consumer_rest = 0;
};

// The length of item i of stream `s`.
inline std::size_t stream_len(const Stream& s, std::uint64_t i, std::size_t max) {
  return item_len(s.seed, s.burst ? i / 7 : i, max);
}

// Checks item i of stream `s` as dequeued: its length and contents.
inline void check_item(const Stream& s, std::uint64_t i, std::span<const std::byte> got,
                       std::size_t item_bytes) {
  const std::size_t len = got.size();
  const std::size_t expect = stream_len(s, i, item_bytes);
  if (len != expect)
    throw Error("item " + std::to_string(i) + " has " + std::to_string(len) + " bytes, want " +
                std::to_string(expect));
  std::vector<std::byte> want(item_bytes);
  fill_item(s.seed, i, want.data(), len);
  if (len == 0 || std::memcmp(got.data(), want.data(), len) == 0) return;
  std::size_t first = 0;
  while (first < len && got[first] == want[first]) ++first;
  std::size_t last = len;
  while (last > first && got[last - 1] == want[last - 1]) --last;
  std::string like;
  std::vector<std::byte> other(item_bytes);
  for (std::uint64_t k = i >= 32 ? i - 32 : 0; k < i + 32; ++k) {
    fill_item(s.seed, k, other.data(), item_bytes);
    if (std::memcmp(got.data() + first, other.data() + first, last - first) == 0)
      like += " " + std::to_string(k);
  }
  throw Error("item " + std::to_string(i) + " corrupted (len " + std::to_string(len) + ", bytes " +
              std::to_string(first) + ".." + std::to_string(last) + " differ, match items" + like +
              ")");
}

// Producer of a batched stream: enqueues items [i, ...) with one call, batched or not (random),
// until it timed out; returns how many it took (0: full). Throws on failure.
inline std::size_t enqueue_some(Producer& prod, const Stream& s, std::uint64_t i,
                                std::size_t item_bytes, std::mt19937_64& rng,
                                std::vector<std::byte>& buf) {
  const std::size_t len = stream_len(s, i, item_bytes);
  if (rng() % 5 == 0) {  // now and then the one-item call
    fill_item(s.seed, i, buf.data(), len);
    Status st = prod.try_enqueue({buf.data(), len});
    if (st == Status::full) return 0;
    if (st != Status::ok)
      throw Error("enqueue " + std::to_string(i) + ": " + std::string(to_string(st)) + " " +
                  prod.error());
    return 1;
  }
  // Up to a random batch size, within the items left of this length: reserve more than that
  // now and then, and commit only the prefix of this length (a partial commit).
  std::size_t same = 1;
  while (same < s.items - i && stream_len(s, i + same, item_bytes) == len) ++same;
  std::vector<std::span<std::byte>> slots(1 + rng() % s.burst);
  std::size_t granted = 0;
  Status st = prod.reserve_many(len, slots, &granted);
  if (st == Status::full) return 0;
  if (st != Status::ok || granted == 0 || granted > slots.size())
    throw Error("reserve_many " + std::to_string(i) + ": " + std::string(to_string(st)) + " " +
                prod.error());
  const std::size_t n = std::min(granted, same);
  for (std::size_t k = 0; k < n; ++k) {
    if (slots[k].size() != len) throw Error("reserve_many gave a slot of the wrong size");
    fill_item(s.seed, i + k, slots[k].data(), len);
  }
  if ((st = prod.commit_many(n)) != Status::ok)
    throw Error("commit_many " + std::to_string(i) + ": " + std::string(to_string(st)) + " " +
                prod.error());
  return n;
}

// Consumer of a batched stream: takes what one call gives from item i on (batched or not,
// random), checks each, releases some or all of them; returns how many it released (0: empty).
inline std::size_t dequeue_some(Consumer& cons, const Stream& s, std::uint64_t i,
                                std::size_t item_bytes, std::mt19937_64& rng,
                                std::vector<std::byte>& buf) {
  if (rng() % 5 == 0) {
    std::size_t len = 0;
    Status st = cons.try_dequeue(buf, &len);
    if (st == Status::empty) return 0;
    if (st != Status::ok)
      throw Error("dequeue " + std::to_string(i) + ": " + std::string(to_string(st)) + " " +
                  cons.error());
    check_item(s, i, {buf.data(), len}, item_bytes);
    return 1;
  }
  std::vector<std::span<const std::byte>> items(1 + rng() % s.burst);
  std::size_t n = 0;
  Status st = cons.peek_many(items, &n);
  if (st == Status::empty) return 0;
  if (st != Status::ok || n == 0 || n > items.size() || i + n > s.items)
    throw Error("peek_many " + std::to_string(i) + ": " + std::string(to_string(st)) + " " +
                cons.error() + " (" + std::to_string(n) + " items)");
  for (std::size_t k = 0; k < n; ++k) check_item(s, i + k, items[k], item_bytes);
  const std::size_t release = rng() % 4 == 0 ? rng() % (n + 1) : n;  // sometimes a part, or none
  if ((st = cons.release_many(release)) != Status::ok)
    throw Error("release_many " + std::to_string(i) + ": " + std::string(to_string(st)) + " " +
                cons.error());
  return release;
}

// Enqueues `item` (a full ring counts as going on) until the producer answers something else
// or `limit` passes: the victim side of the misbehaving-consumer tests. Bounded by time, not by
// a count of calls: a full pull-data ring answers try_enqueue without a fabric operation, faster
// than the fake consumer gets to its bad write.
inline Status enqueue_until_failure(Producer& prod, std::span<const std::byte> item,
                                    std::chrono::milliseconds limit) {
  Status st = Status::ok;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (st == Status::ok && std::chrono::steady_clock::now() < deadline) {
    st = prod.try_enqueue(item);
    if (st == Status::full) st = Status::ok;
  }
  return st;
}

struct Result {
  QueueStats producer, consumer;
};

// Streams `s.items` items from rank 0 to rank 1 and checks every one; then close / closed.
// With separate_notify_endpoint each rank opens its notify transport too. `wrap`: around each
// rank's (data) transport, before it connects.
inline std::string stream(const Provider& p, const QueueOptions& options, const Stream& s,
                          Result* res = nullptr, const fabflow::testing::WrapTransport& wrap = {}) {
  using namespace std::chrono_literals;
  const QueueOptions o = on(p, options);
  // The notify transports outlive both ranks, as run_pair's do: a rank that fails must not
  // close an shm endpoint its peer (same process) still reads.
  std::unique_ptr<Transport> notify[2];
  const auto body = [&](int rank, Transport& t, Bootstrap& boot) {
    std::mt19937_64 rng(s.seed * 7 + static_cast<std::uint64_t>(rank));
    std::vector<std::byte> buf(o.item_bytes);
    auto pause = [&] {
      if (s.pauses && (rng() & 255) == 0)
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
    };
    auto& n = notify[rank];
    n = open_notify(p, o, boot);
    auto settle = [&] {
      boot.barrier([&] {
        t.progress();
        if (n) n->progress();
      });
    };
    if (rank == 0) {
      auto prod = producer_on(t, n.get(), boot, 1, o);
      auto moved = std::chrono::steady_clock::now();  // 5 s without an item taken: fail
      for (std::uint64_t i = 0; s.burst && i < s.items;) {
        const std::size_t took = enqueue_some(*prod, s, i, o.item_bytes, rng, buf);
        if (took > 0)
          moved = std::chrono::steady_clock::now();
        else if (std::chrono::steady_clock::now() - moved > 5s)
          throw Error("enqueue " + std::to_string(i) + ": full for 5 s");
        i += took;
        pause();
      }
      for (std::uint64_t i = 0; !s.burst && i < s.items; ++i) {
        const std::size_t len = item_len(s.seed, i, o.item_bytes);
        fill_item(s.seed, i, buf.data(), len);
        Status st = prod->enqueue({buf.data(), len}, 5s);
        if (st != Status::ok)
          throw Error("enqueue " + std::to_string(i) + ": " + std::string(to_string(st)) + " " +
                      prod->error());
        pause();
      }
      Status st = prod->close(5s);
      if (st != Status::ok)
        throw Error("close: " + std::string(to_string(st)) + " " + prod->error());
      if (prod->stats().items != s.items)
        throw Error("producer counted " + std::to_string(prod->stats().items));
      if (res) res->producer = prod->stats();
      settle();
    } else {
      auto cons = consumer_on(t, n.get(), boot, 0, o);
      auto moved = std::chrono::steady_clock::now();
      for (std::uint64_t i = 0; s.burst && i < s.items;) {
        const std::size_t took = dequeue_some(*cons, s, i, o.item_bytes, rng, buf);
        if (took > 0)
          moved = std::chrono::steady_clock::now();
        else if (std::chrono::steady_clock::now() - moved > 5s)
          throw Error("dequeue " + std::to_string(i) + ": nothing for 5 s");
        i += took;
        pause();
      }
      for (std::uint64_t i = 0; !s.burst && i < s.items; ++i) {
        std::size_t len = 0;
        Status st = cons->dequeue(buf, &len, 5s);
        if (st != Status::ok)
          throw Error("dequeue " + std::to_string(i) + ": " + std::string(to_string(st)) + " " +
                      cons->error());
        check_item(s, i, {buf.data(), len}, o.item_bytes);
        pause();
        if (s.consumer_rest && i % s.consumer_rest == 0)
          std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      std::size_t len = 0;
      Status st = cons->dequeue(buf, &len, 5s);
      if (st != Status::closed)
        throw Error("after the last item: " + std::string(to_string(st)) + " " + cons->error());
      if (cons->try_dequeue(buf, &len) != Status::closed) throw Error("closed is not sticky");
      if (cons->stats().items != s.items)
        throw Error("consumer counted " + std::to_string(cons->stats().items));
      if (res) res->consumer = cons->stats();
      settle();
    }
  };
  return run_pair(transport_options(p, o), body, wrap);
}

}  // namespace fabflow::flow::test
