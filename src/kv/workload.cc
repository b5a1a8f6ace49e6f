// Keys, verifiable values and the workload generator of the key-value store (docs/kv-workload.md).
#include <fabflow/kv_workload.h>
#include <fabflow/status.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

namespace fabflow::kv {
namespace {

__extension__ typedef unsigned __int128 u128;  // -Wpedantic: a GCC/Clang extension

constexpr std::uint64_t kKeySalt = 0x6b65792d66616266ull;    // "key-fabf"
constexpr std::uint64_t kValueSalt = 0x76616c75652d6b76ull;  // "value-kv"

std::uint64_t load64(const std::byte* p) noexcept {
  std::uint64_t x;
  std::memcpy(&x, p, 8);
  return x;
}

// The pattern word i of the value tagged (key, writer, version).
std::uint64_t pattern(std::uint64_t seed, std::size_t i) noexcept { return mix64(seed + i); }

std::uint64_t pattern_seed(std::uint64_t key, std::uint32_t writer,
                           std::uint64_t version) noexcept {
  return mix64(key ^ kValueSalt) ^ mix64(version + (std::uint64_t{writer} << 40));
}

// 32 bits of check over the tag, so that even a value of the tag alone verifies itself.
std::uint32_t tag_check(std::uint64_t seed) noexcept {
  return static_cast<std::uint32_t>(mix64(seed ^ kKeySalt) >> 32);
}

// The tag's 24 bytes: key id, writer, the tag's check, version.
std::array<std::byte, kMinValueBytes> tag_bytes(std::uint64_t key, std::uint32_t writer,
                                                std::uint64_t version) noexcept {
  std::array<std::byte, kMinValueBytes> t{};
  const std::uint32_t check = tag_check(pattern_seed(key, writer, version));
  std::memcpy(t.data(), &key, 8);
  std::memcpy(t.data() + 8, &writer, 4);
  std::memcpy(t.data() + 12, &check, 4);
  std::memcpy(t.data() + 16, &version, 8);
  return t;
}

// |x| small: the series, where the closed forms lose their precision.
double log1p_over_x(double x) noexcept {
  return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1 - x / 2 + x * x / 3;
}
double expm1_over_x(double x) noexcept {
  return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1 + x / 2 + x * x / 6;
}

}  // namespace

Key key_of(std::uint64_t id) noexcept {
  Key k;
  const std::uint64_t check = mix64(id ^ kKeySalt);
  std::memcpy(k.data(), &id, 8);
  std::memcpy(k.data() + 8, &check, 8);
  return k;
}

std::optional<std::uint64_t> id_of(const Key& key) noexcept {
  const std::uint64_t id = load64(key.data());
  if (load64(key.data() + 8) != mix64(id ^ kKeySalt)) return std::nullopt;
  return id;
}

std::uint64_t hash_key(const Key& key) noexcept {
  return mix64(load64(key.data()) * 0x9e3779b97f4a7c15ull ^ mix64(load64(key.data() + 8)));
}

void fill_value(std::span<std::byte> out, std::uint64_t key, std::uint32_t writer,
                std::uint64_t version) noexcept {
  const auto tag = tag_bytes(key, writer, version);
  const std::size_t head = std::min(out.size(), tag.size());
  std::memcpy(out.data(), tag.data(), head);
  const std::uint64_t seed = pattern_seed(key, writer, version);
  for (std::size_t at = head, i = 0; at < out.size(); at += 8, ++i) {
    const std::uint64_t w = pattern(seed, i);
    std::memcpy(out.data() + at, &w, std::min<std::size_t>(8, out.size() - at));
  }
}

std::optional<ValueTag> check_value(std::span<const std::byte> value) noexcept {
  if (value.size() < kMinValueBytes) return std::nullopt;
  ValueTag t;
  t.key = load64(value.data());
  std::memcpy(&t.writer, value.data() + 8, 4);
  t.version = load64(value.data() + 16);
  const std::uint64_t seed = pattern_seed(t.key, t.writer, t.version);
  std::uint32_t check;
  std::memcpy(&check, value.data() + 12, 4);
  if (check != tag_check(seed)) return std::nullopt;
  for (std::size_t at = kMinValueBytes, i = 0; at < value.size(); at += 8, ++i) {
    const std::uint64_t w = pattern(seed, i);
    if (std::memcmp(value.data() + at, &w, std::min<std::size_t>(8, value.size() - at)) != 0)
      return std::nullopt;
  }
  return t;
}

void validate(const WorkloadOptions& o) {
  if (o.keys < 1 || o.keys > (std::uint64_t{1} << 40))
    throw UsageError("kv workload: keys must be in 1..2^40, got " + std::to_string(o.keys));
  if (!(o.put_fraction >= 0 && o.put_fraction <= 1))
    throw UsageError("kv workload: the PUT fraction must be in 0..1");
  if (!(o.zipf >= 0 && o.zipf < 1))
    throw UsageError("kv workload: the Zipf skew must be in [0, 1) (0: uniform)");
}

// Rejection-inversion: h(x) = x^-theta is the density's envelope, H its integral; a uniform
// point under H between the ranks' cell edges is inverted and accepted when it falls in the
// cell of the rank it rounds to (the shortcut s_ accepts most draws without evaluating H).
ZipfSampler::ZipfSampler(std::uint64_t n, double theta) : n_(n), theta_(theta) {
  if (n < 1) throw UsageError("Zipf sampler: needs at least one rank");
  if (!(theta >= 0 && theta < 1)) throw UsageError("Zipf sampler: theta must be in [0, 1)");
  h_x1_ = h_integral(1.5) - 1;
  h_n_ = h_integral(static_cast<double>(n) + 0.5);
  s_ = 2 - h_integral_inverse(h_integral(2.5) - h(2));
}

double ZipfSampler::h(double x) const noexcept { return std::exp(-theta_ * std::log(x)); }

double ZipfSampler::h_integral(double x) const noexcept {
  const double lx = std::log(x);
  return expm1_over_x((1 - theta_) * lx) * lx;
}

double ZipfSampler::h_integral_inverse(double x) const noexcept {
  double t = x * (1 - theta_);
  if (t < -1) t = -1;  // rounding near the lower end
  return std::exp(log1p_over_x(t) * x);
}

std::uint64_t ZipfSampler::try_sample(double u) const noexcept {
  const double v = h_n_ + u * (h_x1_ - h_n_);
  const double x = h_integral_inverse(v);
  double k = std::floor(x + 0.5);
  if (k < 1) k = 1;
  if (k > static_cast<double>(n_)) k = static_cast<double>(n_);
  if (k - x <= s_ || v >= h_integral(k + 0.5) - h(k)) return static_cast<std::uint64_t>(k);
  return 0;
}

Workload::Workload(const WorkloadOptions& o, std::uint64_t client)
    : o_(o), state_(mix64(o.seed * 0x9e3779b97f4a7c15ull + mix64(client + kKeySalt))) {
  validate(o);
  if (o.zipf > 0) zipf_.emplace(o.keys, o.zipf);
  // A multiplier coprime with `keys` makes rank -> (rank - 1) * stride mod keys a permutation.
  stride_ = o.keys > 1 ? 0x9e3779b97f4a7c15ull % o.keys : 1;
  while (o.keys > 1 && (stride_ == 0 || std::gcd(stride_, o.keys) != 1)) ++stride_;
}

std::uint64_t Workload::random() noexcept {
  state_ += 0x9e3779b97f4a7c15ull;
  return mix64(state_);
}

double Workload::uniform01() noexcept { return static_cast<double>(random() >> 11) * 0x1.0p-53; }

std::uint64_t Workload::key_of_rank(std::uint64_t rank) const noexcept {
  return static_cast<std::uint64_t>(static_cast<u128>(rank - 1) * stride_ % o_.keys);
}

Workload::Op Workload::next() noexcept {
  Op op;
  op.kind = uniform01() < o_.put_fraction ? OpKind::put : OpKind::get;
  if (zipf_) {
    std::uint64_t rank = 0;
    while (rank == 0) rank = zipf_->try_sample(uniform01());
    op.key = key_of_rank(rank);
  } else {
    op.key = static_cast<std::uint64_t>(static_cast<u128>(random()) * o_.keys >> 64);
  }
  return op;
}

}  // namespace fabflow::kv
