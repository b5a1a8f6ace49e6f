// Helpers for the flow queue tests: two ranks as threads, deterministic items, fake queue ends.
#pragma once

#include <gtest/gtest.h>

#include <fabflow/bootstrap.h>
#include <fabflow/flow.h>
#include <fabflow/transport.h>

#include <array>
#include <cctype>
#include <cstdint>
#include <cstdlib>
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
};

inline const Provider kShm{"shm", EndpointType::rdm};
inline const Provider kTcp{"tcp", EndpointType::msg};
inline const Provider kRxm{"tcp", EndpointType::rdm};  // tcp;ofi_rxm
inline const Provider kLocal{"local", EndpointType::rdm};
// Every transport a flow queue must run on.
inline const std::vector<Provider> kAll{kShm, kTcp, kRxm, kLocal};

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

// Test-name-safe labels: "shm_rdm", "push1_watermark_pull_tcp_msg".
inline std::string safe_name(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}
inline std::string label_of(const Provider& p) {
  return safe_name(std::string(p.name) + "_" + std::string(to_string(p.endpoint)));
}
inline std::string label(const Design& d, const Provider& p) { return safe_name(d.name() + "_") + label_of(p); }

// A design point on a transport: the parameter of the per-point suites.
struct Point {
  Design design;
  Provider provider;
};

inline std::vector<Point> points(const std::vector<Provider>& providers) {
  std::vector<Point> out;
  for (const auto& p : providers)
    for (const auto& d : Design::all()) out.push_back({d, p});
  return out;
}

inline std::string point_name(const ::testing::TestParamInfo<Point>& info) {
  return label(info.param.design, info.param.provider);
}

// Runs body(rank, transport, boot) on two threads (testing::run_ranks).
inline std::string run_pair(const TransportOptions& opts,
                            const std::function<void(int, Transport&, Bootstrap&)>& body) {
  return fabflow::testing::run_ranks(2, opts, body);
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
// play a misbehaving peer. Owns its region.
struct FakeEnd {
  detail::Layout layout;
  std::unique_ptr<MemoryRegion> mr;
  RemoteMemory remote;

  FakeEnd(Transport& t, Bootstrap& boot, int peer, const QueueOptions& o, int role) {
    layout = detail::Layout::make(o.capacity, o.item_bytes, 0);
    mr = t.allocate(layout.region_bytes, kAllAccess);
    detail::Hello h;
    h.role = static_cast<std::uint8_t>(role);
    h.data = static_cast<std::uint8_t>(o.design.data);
    h.transfer = static_cast<std::uint8_t>(o.design.transfer);
    h.space = static_cast<std::uint8_t>(o.design.space);
    h.capacity = o.capacity;
    h.item_bytes = o.item_bytes;
    h.region_bytes = layout.region_bytes;
    auto all = boot.allgather(detail::encode_hello(h, t.export_key(*mr)));
    auto key = detail::decode_hello(all[static_cast<std::size_t>(peer)], peer, h);
    remote = t.import_key(peer, key);
  }
};

}  // namespace fabflow::flow::test
