// The key-value store's keys, verifiable values and workload generator (seed 001, section 4.3;
// docs/kv-workload.md). Shared by `fabflow bench kv`, its memcached reference and the tests, so
// that every store sees the same keys, values and operation mix for the same seed.
//
// Keys are 16 bytes made from a 64-bit key id: the id, then a mix of it (id_of() recognises a
// key fabflow made). A value names its key, writer and version and fills the rest with a
// pattern derived from them, so a GET's value can be checked whole, on its own.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include <fabflow/names.h>

namespace fabflow::kv {

inline constexpr std::size_t kKeyBytes = 16;
using Key = std::array<std::byte, kKeyBytes>;

// A 64-bit finaliser (splitmix64's): every input bit affects every output bit.
constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The key of key id `id`, and back (nullopt for a key fabflow did not make).
Key key_of(std::uint64_t id) noexcept;
std::optional<std::uint64_t> id_of(const Key& key) noexcept;
// The key's hash: its server (hash % servers) and its home bucket come from it.
std::uint64_t hash_key(const Key& key) noexcept;

enum class OpKind : std::uint8_t { get, put, del };
inline constexpr NameTable<OpKind, 3> kOpKindNames{
    {{{"get", OpKind::get}, {"put", OpKind::put}, {"del", OpKind::del}}}};
constexpr const auto& name_table(OpKind) noexcept { return kOpKindNames; }
constexpr std::string_view to_string(OpKind k) noexcept { return kOpKindNames.name(k); }

// Values of at least this size carry their tag (key id, writer, version) and can be verified.
inline constexpr std::size_t kMinValueBytes = 24;

struct ValueTag {
  std::uint64_t key = 0;
  std::uint32_t writer = 0;
  std::uint64_t version = 0;
};
// Writes the value of (key, writer, version) into `out` (any size; under kMinValueBytes only a
// prefix of the tag fits and check_value cannot verify it).
void fill_value(std::span<std::byte> out, std::uint64_t key, std::uint32_t writer,
                std::uint64_t version) noexcept;
// The tag of a value fill_value wrote, or nullopt when any byte differs from what that tag
// implies (a torn or foreign value) or the value is under kMinValueBytes.
std::optional<ValueTag> check_value(std::span<const std::byte> value) noexcept;

struct WorkloadOptions {
  std::uint64_t keys = 1000;  // key ids [0, keys)
  double put_fraction = 0.05;
  double zipf = 0;  // 0: uniform; else Zipf(theta), 0 < theta < 1
  std::uint64_t seed = 1;
};
// Throws UsageError naming the first field out of range.
void validate(const WorkloadOptions& o);

// Zipf(theta) over ranks [1, n], P(k) proportional to k^-theta, drawn exactly and in O(1) by
// rejection-inversion (Hoermann and Derflinger, 1996): no table, no zeta(n) to precompute.
class ZipfSampler {
 public:
  ZipfSampler(std::uint64_t n, double theta);
  // `u` uniform in [0, 1); may reject and ask for another (returns 0 then).
  std::uint64_t try_sample(double u) const noexcept;
  std::uint64_t n() const noexcept { return n_; }

 private:
  double h(double x) const noexcept;
  double h_integral(double x) const noexcept;
  double h_integral_inverse(double x) const noexcept;
  std::uint64_t n_;
  double theta_;
  double h_x1_ = 0, h_n_ = 0, s_ = 0;
};

// One client's stream of operations: a deterministic function of (options, client).
// GET or PUT (put_fraction of them), key uniform or Zipf; Zipf ranks are spread over the key
// ids by a fixed permutation, so the hottest keys are not all on one server or bucket.
class Workload {
 public:
  Workload(const WorkloadOptions& o, std::uint64_t client);
  struct Op {
    OpKind kind = OpKind::get;
    std::uint64_t key = 0;
  };
  Op next() noexcept;
  // The key id of Zipf rank r in [1, keys] (a permutation of [0, keys)).
  std::uint64_t key_of_rank(std::uint64_t rank) const noexcept;

 private:
  std::uint64_t random() noexcept;  // splitmix64
  double uniform01() noexcept;
  WorkloadOptions o_;
  std::uint64_t state_;
  std::optional<ZipfSampler> zipf_;
  std::uint64_t stride_ = 1;  // coprime with keys
};

}  // namespace fabflow::kv
