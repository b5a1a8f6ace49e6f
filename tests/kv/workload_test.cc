// The key-value workload: keys and their ids, verifiable values, the Zipf sampler's
// distribution against the exact probabilities, the rank permutation, the operation mix and
// the determinism every store's comparison relies on.
#include <gtest/gtest.h>

#include <fabflow/kv_workload.h>
#include <fabflow/status.h>

#include <cmath>
#include <set>
#include <vector>

namespace fabflow::kv {
namespace {

TEST(KvKeys, IdsRoundTripAndForeignKeysAreNotRecognised) {
  for (std::uint64_t id : {0ull, 1ull, 12345ull, ~0ull}) {
    const Key k = key_of(id);
    ASSERT_TRUE(id_of(k).has_value());
    EXPECT_EQ(*id_of(k), id);
  }
  Key k = key_of(42);
  k[9] ^= std::byte{1};
  EXPECT_FALSE(id_of(k).has_value());
  EXPECT_NE(hash_key(key_of(1)), hash_key(key_of(2)));
}

TEST(KvKeys, HashesSpreadConsecutiveIdsOverServersEvenly) {
  constexpr int kServers = 4;
  std::vector<int> count(kServers);
  for (std::uint64_t id = 0; id < 40000; ++id) ++count[hash_key(key_of(id)) % kServers];
  for (int c : count) EXPECT_NEAR(c, 10000, 400);
}

TEST(KvValues, AWholeValueChecksAndAnyChangedByteDoesNot) {
  for (std::size_t size : {24u, 25u, 32u, 100u, 4096u}) {
    std::vector<std::byte> v(size);
    fill_value(v, 77, 3, 9);
    auto tag = check_value(v);
    ASSERT_TRUE(tag.has_value()) << size;
    EXPECT_EQ(tag->key, 77u);
    EXPECT_EQ(tag->writer, 3u);
    EXPECT_EQ(tag->version, 9u);
    for (std::size_t at : {std::size_t{0}, std::size_t{12}, std::size_t{23}, size / 2, size - 1}) {
      std::vector<std::byte> bad = v;
      bad[at] ^= std::byte{0x10};
      EXPECT_FALSE(check_value(bad).has_value()) << size << " byte " << at;
    }
  }
  // Half of one write and half of another is no write at all.
  std::vector<std::byte> a(64), b(64);
  fill_value(a, 5, 1, 1);
  fill_value(b, 5, 1, 2);
  std::copy(b.begin() + 32, b.end(), a.begin() + 32);
  EXPECT_FALSE(check_value(a).has_value());
  // Too short to carry the tag.
  std::vector<std::byte> tiny(16);
  fill_value(tiny, 5, 1, 1);
  EXPECT_FALSE(check_value(tiny).has_value());
}

// Empirical frequencies of ranks 1..n against P(k) = k^-theta / sum_j j^-theta: the top ranks
// each within a few standard deviations, and a chi-square over the whole range.
void expect_zipf(std::uint64_t n, double theta, int samples) {
  ZipfSampler z(n, theta);
  std::vector<double> seen(n + 1);
  std::uint64_t state = 12345;
  auto uniform = [&] {
    state += 0x9e3779b97f4a7c15ull;
    return static_cast<double>(mix64(state) >> 11) * 0x1.0p-53;
  };
  for (int i = 0; i < samples;) {
    const std::uint64_t k = z.try_sample(uniform());
    if (k == 0) continue;
    ASSERT_GE(k, 1u);
    ASSERT_LE(k, n);
    ++seen[k];
    ++i;
  }
  double zeta = 0;
  for (std::uint64_t k = 1; k <= n; ++k) zeta += std::pow(static_cast<double>(k), -theta);
  double chi2 = 0;
  for (std::uint64_t k = 1; k <= n; ++k) {
    const double expected = samples * std::pow(static_cast<double>(k), -theta) / zeta;
    chi2 += (seen[k] - expected) * (seen[k] - expected) / expected;
    if (k <= 5) {
      EXPECT_NEAR(seen[k], expected, 5 * std::sqrt(expected)) << "rank " << k << " theta " << theta;
    }
  }
  // n - 1 degrees of freedom: mean n - 1, sd sqrt(2(n - 1)); 6 sd is far beyond chance.
  const double dof = static_cast<double>(n - 1);
  EXPECT_LE(chi2, dof + 6 * std::sqrt(2 * dof)) << "theta " << theta;
}

TEST(KvZipf, MatchesTheExactDistribution) {
  expect_zipf(1000, 0.99, 2'000'000);
  expect_zipf(1000, 0.5, 2'000'000);
  expect_zipf(2, 0.9, 200'000);
  expect_zipf(1, 0.9, 1000);
}

TEST(KvZipf, RejectsBadParameters) {
  EXPECT_THROW(ZipfSampler(0, 0.5), UsageError);
  EXPECT_THROW(ZipfSampler(10, 1.0), UsageError);
  EXPECT_THROW(ZipfSampler(10, -0.1), UsageError);
}

TEST(KvWorkload, ZipfRanksArePermutedOverEveryKey) {
  for (std::uint64_t keys : {1ull, 2ull, 7ull, 1000ull, 4096ull, 999983ull}) {
    Workload w({keys, 0.05, 0.9, 1}, 0);
    std::set<std::uint64_t> ids;
    const std::uint64_t check = std::min<std::uint64_t>(keys, 5000);
    for (std::uint64_t r = 1; r <= check; ++r) {
      const std::uint64_t id = w.key_of_rank(r);
      EXPECT_LT(id, keys);
      ids.insert(id);
    }
    EXPECT_EQ(ids.size(), check) << keys;
  }
}

TEST(KvWorkload, MixAndUniformKeysAreAsAsked) {
  constexpr int kOps = 400000;
  for (double put : {0.0, 0.05, 0.5, 1.0}) {
    Workload w({100, put, 0, 7}, 3);
    int puts = 0;
    std::vector<int> per_key(100);
    for (int i = 0; i < kOps; ++i) {
      const Workload::Op op = w.next();
      ASSERT_LT(op.key, 100u);
      ASSERT_NE(op.kind, OpKind::del);
      puts += op.kind == OpKind::put;
      ++per_key[op.key];
    }
    EXPECT_NEAR(puts, put * kOps, 5 * std::sqrt(kOps * put * (1 - put)) + 1e-9) << put;
    for (int c : per_key) EXPECT_NEAR(c, kOps / 100, 300);
  }
}

TEST(KvWorkload, TheSameSeedAndClientGiveTheSameStream) {
  Workload a({1 << 20, 0.05, 0.99, 9}, 2), b({1 << 20, 0.05, 0.99, 9}, 2);
  Workload other_client({1 << 20, 0.05, 0.99, 9}, 3), other_seed({1 << 20, 0.05, 0.99, 10}, 2);
  int same_client = 0, same_seed = 0;
  for (int i = 0; i < 1000; ++i) {
    const auto x = a.next(), y = b.next();
    ASSERT_EQ(x.key, y.key);
    ASSERT_EQ(x.kind, y.kind);
    same_client += other_client.next().key == x.key;
    same_seed += other_seed.next().key == x.key;
  }
  // Zipf(0.99) over 2^20 keys: the hottest key takes about 7 % of draws.
  EXPECT_LT(same_client, 100);
  EXPECT_LT(same_seed, 100);
}

TEST(KvWorkload, OptionsOutOfRangeAreRefused) {
  EXPECT_THROW(validate(WorkloadOptions{0, 0.05, 0, 1}), UsageError);
  EXPECT_THROW(validate(WorkloadOptions{10, 1.5, 0, 1}), UsageError);
  EXPECT_THROW(validate(WorkloadOptions{10, std::nan(""), 0, 1}), UsageError);
  EXPECT_THROW(validate(WorkloadOptions{10, 0.05, 1.0, 1}), UsageError);
  EXPECT_NO_THROW(validate(WorkloadOptions{10, 1.0, 0.99, 1}));
}

}  // namespace
}  // namespace fabflow::kv
