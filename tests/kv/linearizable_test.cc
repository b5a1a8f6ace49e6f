// The key-value store's linearizability check (check_linearizable): hand-written histories on
// both of its paths (unique values: zones; deletes or repeated values: search), malformed input,
// a comparison with a brute-force checker on thousands of small random histories, and the size
// the benchmark hands it (a million operations with one hot key).
#include <gtest/gtest.h>

#include <fabflow/kv.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace fabflow::kv::linearizable_test {
namespace {

constexpr std::uint32_t kL = 99;  // the loader

HistoryEntry put(std::uint64_t key, std::uint32_t writer, std::uint64_t version, std::uint64_t s,
                 std::uint64_t e, Code code = Code::ok) {
  return {OpKind::put, code, key, writer, version, s, e};
}
HistoryEntry get(std::uint64_t key, std::uint32_t writer, std::uint64_t version, std::uint64_t s,
                 std::uint64_t e) {
  return {OpKind::get, Code::ok, key, writer, version, s, e};
}
HistoryEntry get_none(std::uint64_t key, std::uint64_t s, std::uint64_t e) {
  return {OpKind::get, Code::not_found, key, 0, 0, s, e};
}
HistoryEntry del(std::uint64_t key, std::uint64_t s, std::uint64_t e, Code code = Code::ok) {
  return {OpKind::del, code, key, 0, 0, s, e};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- Hand-written histories ----------------------------------------------------------------

TEST(KvLinearizable, EmptyAndSequentialHistoriesPass) {
  EXPECT_EQ(check_linearizable({}, kL), "");
  const std::vector<HistoryEntry> h = {get(1, kL, 0, 0, 5),  put(1, 1, 1, 10, 20),
                                       get(1, 1, 1, 30, 40), put(1, 2, 1, 50, 60),
                                       get(1, 2, 1, 70, 80), get(2, kL, 0, 0, 100)};
  EXPECT_EQ(check_linearizable(h, kL), "");
}

TEST(KvLinearizable, NewOldInversionFailsWhereTheRegularCheckPasses) {
  // PUT W runs over [10, 100]; A at [20, 30] sees it; B at [40, 50], after A, sees the load.
  const std::vector<HistoryEntry> h = {put(7, 1, 1, 10, 100), get(7, 1, 1, 20, 30),
                                       get(7, kL, 0, 40, 50)};
  EXPECT_EQ(check_history(h, kL), "");
  const std::string why = check_linearizable(h, kL);
  EXPECT_TRUE(contains(why, "key 7: ")) << why;
  EXPECT_TRUE(contains(why, "GET [20, 30] returned writer 1 version 1")) << why;
  EXPECT_TRUE(contains(why, "GET [40, 50] returned the loaded value (writer 99 version 0)")) << why;
  // Without the second read, or with it overlapping the first, an order exists.
  EXPECT_EQ(check_linearizable(std::vector<HistoryEntry>(h.begin(), h.begin() + 2), kL), "");
  EXPECT_EQ(check_linearizable(std::vector<HistoryEntry>{h[0], h[1], get(7, kL, 0, 30, 50)}, kL),
            "");
}

TEST(KvLinearizable, StaleReadAfterACompletedPutFails) {
  const std::vector<HistoryEntry> h = {put(3, 1, 1, 10, 20), get(3, kL, 0, 30, 40)};
  const std::string why = check_linearizable(h, kL);
  EXPECT_TRUE(contains(why, "key 3: ")) << why;
  EXPECT_TRUE(contains(why, "PUT [10, 20] wrote writer 1 version 1")) << why;
  // A read that starts exactly when the PUT ends overlaps it (closed intervals).
  EXPECT_EQ(check_linearizable(std::vector<HistoryEntry>{h[0], get(3, kL, 0, 20, 40)}, kL), "");
}

TEST(KvLinearizable, ConcurrentPutsReadInEitherOrderPass) {
  const std::vector<HistoryEntry> puts = {put(4, 1, 1, 0, 100), put(4, 2, 1, 0, 100)};
  for (std::uint32_t last : {1u, 2u}) {
    auto h = puts;
    h.push_back(get(4, last, 1, 110, 120));
    EXPECT_EQ(check_linearizable(h, kL), "") << last;
  }
  // One reader sees 1 then 2 while they run, another (later) sees 2: one order, 1 then 2.
  auto h = puts;
  h.insert(h.end(), {get(4, 1, 1, 10, 20), get(4, 2, 1, 30, 40), get(4, 2, 1, 50, 60)});
  EXPECT_EQ(check_linearizable(h, kL), "");
  // ... and then back to 1: no order.
  h.push_back(get(4, 1, 1, 70, 80));
  EXPECT_NE(check_linearizable(h, kL), "");
}

TEST(KvLinearizable, TwoReadersSeeingConcurrentPutsInOppositeOrdersFail) {
  const std::vector<HistoryEntry> h = {put(5, 1, 1, 0, 100), put(5, 2, 1, 0, 100),
                                       // reader one: 1, then 2
                                       get(5, 1, 1, 10, 20), get(5, 2, 1, 30, 40),
                                       // reader two, at the same times: 2, then 1
                                       get(5, 2, 1, 10, 20), get(5, 1, 1, 30, 40)};
  EXPECT_EQ(check_history(h, kL), "");
  const std::string why = check_linearizable(h, kL);
  EXPECT_TRUE(contains(why, "key 5: ")) << why;
  EXPECT_TRUE(contains(why, "overlap")) << why;
  // Reads that touch (one ends at 30 when the next starts) overlap at that instant: both PUTs
  // and all four reads can take effect at 30, in the order 1, its reads, 2, its reads.
  const std::vector<HistoryEntry> touching = {put(5, 1, 1, 0, 100), put(5, 2, 1, 0, 100),
                                              get(5, 1, 1, 10, 30), get(5, 2, 1, 30, 40),
                                              get(5, 2, 1, 10, 30), get(5, 1, 1, 30, 40)};
  EXPECT_EQ(check_linearizable(touching, kL), "");
}

TEST(KvLinearizable, AWriteAtTheEdgeOfAnotherValuesStretchPasses) {
  // (1, 1) must stay the value from 1 to 5; PUT (2, 1) over [2, 5] can take effect at 5, just
  // after the GET that starts then.
  const std::vector<HistoryEntry> h = {put(2, 1, 1, 0, 1), get(2, 1, 1, 5, 6), put(2, 2, 1, 2, 5)};
  EXPECT_EQ(check_linearizable(h, kL), "");
  // Over [2, 4] it cannot.
  const std::string why =
      check_linearizable(std::vector<HistoryEntry>{h[0], h[1], put(2, 2, 1, 2, 4)}, kL);
  EXPECT_TRUE(contains(why, "writer 2 version 1 must be the value at some time in [2, 4]")) << why;
  EXPECT_TRUE(contains(why, "writer 1 version 1 must stay the value from 1")) << why;
}

TEST(KvLinearizable, ReadBeforeItsPutStartedFails) {
  const std::vector<HistoryEntry> h = {get(6, 1, 1, 10, 20), put(6, 1, 1, 30, 40)};
  const std::string why = check_linearizable(h, kL);
  EXPECT_TRUE(contains(why, "GET [10, 20] returned writer 1 version 1 before PUT [30, 40]")) << why;
  // Touching: the read may follow the write at the instant 20.
  EXPECT_EQ(
      check_linearizable(std::vector<HistoryEntry>{get(6, 1, 1, 10, 20), put(6, 1, 1, 20, 40)}, kL),
      "");
}

TEST(KvLinearizable, ReadOfAValueNeverWrittenFails) {
  const std::vector<HistoryEntry> h = {put(8, 1, 1, 0, 10), get(8, 1, 2, 20, 30)};
  const std::string why = check_linearizable(h, kL);
  EXPECT_TRUE(contains(why, "key 8: GET [20, 30] returned writer 1 version 2, a value no PUT"))
      << why;
  // A loaded value other than the loader's is never written either.
  EXPECT_NE(check_linearizable(std::vector<HistoryEntry>{get(8, kL, 1, 0, 1)}, kL), "");
  // And a key no DELETE removed is never absent.
  const std::string absent = check_linearizable(std::vector<HistoryEntry>{get_none(8, 0, 1)}, kL);
  EXPECT_TRUE(contains(absent, "no DELETE of it succeeded")) << absent;
}

TEST(KvLinearizable, PutFullHadNoEffect) {
  const std::vector<HistoryEntry> h = {put(9, 1, 1, 0, 10, Code::full), get(9, kL, 0, 20, 30)};
  EXPECT_EQ(check_linearizable(h, kL), "");
  const std::string why =
      check_linearizable(std::vector<HistoryEntry>{h[0], get(9, 1, 1, 20, 30)}, kL);
  EXPECT_TRUE(contains(why, "a value no PUT of the key wrote")) << why;
}

TEST(KvLinearizableSearch, DeletesAndNotFoundPass) {
  // Sequential: delete, absent, delete of nothing, re-insert.
  const std::vector<HistoryEntry> seq = {get(1, kL, 0, 0, 5),
                                         put(1, 1, 1, 10, 20),
                                         del(1, 30, 40),
                                         get_none(1, 50, 60),
                                         del(1, 70, 80, Code::not_found),
                                         put(1, 2, 1, 90, 100),
                                         get(1, 2, 1, 110, 120),
                                         del(1, 130, 140)};
  EXPECT_EQ(check_linearizable(seq, kL), "");
  // A DELETE running while a reader sees the value and then nothing.
  const std::vector<HistoryEntry> overlap = {del(2, 0, 100), get(2, kL, 0, 10, 20),
                                             get_none(2, 30, 40), del(2, 50, 60, Code::not_found)};
  EXPECT_EQ(check_linearizable(overlap, kL), "");
  // Two concurrent DELETEs: one removes, the other finds nothing.
  const std::vector<HistoryEntry> two = {del(3, 0, 100), del(3, 0, 100, Code::not_found),
                                         get_none(3, 110, 120)};
  EXPECT_EQ(check_linearizable(two, kL), "");
  // The same value written twice (a PUT of the loaded value, too): the search, which passes it.
  const std::vector<HistoryEntry> again = {
      put(4, 1, 1, 0, 10),  get(4, 1, 1, 20, 30),    put(4, 2, 1, 40, 50),   put(4, 1, 1, 60, 70),
      get(4, 1, 1, 80, 90), put(4, kL, 0, 100, 110), get(4, kL, 0, 120, 130)};
  EXPECT_EQ(check_linearizable(again, kL), "");
}

TEST(KvLinearizableSearch, DeletesAndNotFoundFail) {
  // The value after the DELETE completed.
  std::string why =
      check_linearizable(std::vector<HistoryEntry>{del(1, 0, 10), get(1, kL, 0, 20, 30)}, kL);
  EXPECT_TRUE(contains(why, "key 1: no order of its 2 operations is legal")) << why;
  // Nothing, then the value back with no PUT between.
  why = check_linearizable(
      std::vector<HistoryEntry>{del(2, 0, 100), get_none(2, 10, 20), get(2, kL, 0, 30, 40)}, kL);
  EXPECT_NE(why, "");
  // Two DELETEs that both removed the key, one after the other.
  why = check_linearizable(std::vector<HistoryEntry>{del(3, 0, 10), del(3, 20, 30)}, kL);
  EXPECT_NE(why, "");
  // Nothing before any DELETE started.
  why = check_linearizable(std::vector<HistoryEntry>{get_none(4, 0, 10), del(4, 20, 30)}, kL);
  EXPECT_TRUE(contains(why, "GET [0, 10] found nothing before any DELETE")) << why;
  // A DELETE that found nothing while the key was present.
  why =
      check_linearizable(std::vector<HistoryEntry>{put(5, 1, 1, 0, 10),
                                                   del(5, 20, 30, Code::not_found), del(5, 40, 50)},
                         kL);
  EXPECT_NE(why, "");
  // A repeated value: the second PUT of (1, 1) is over before the read of the loaded value.
  why = check_linearizable(
      std::vector<HistoryEntry>{put(6, 1, 1, 0, 10), put(6, 1, 1, 20, 30), get(6, kL, 0, 40, 50)},
      kL);
  EXPECT_NE(why, "");
}

TEST(KvLinearizableSearch, UndecidedIsReportedNotPassed) {
  // 20 PUTs and 20 DELETEs at once, then two reads no order explains: (1, 1) and later (2, 1)
  // with no PUT between; the search would need every subset of the 40 to see it.
  std::vector<HistoryEntry> h;
  for (std::uint32_t w = 1; w <= 20; ++w) {
    h.push_back(put(1, w, 1, 0, 100));
    h.push_back(del(1, 0, 100));
  }
  h.push_back(get(1, 1, 1, 200, 210));
  h.push_back(get(1, 2, 1, 220, 230));
  const std::string why = check_linearizable(h, kL);
  EXPECT_EQ(why, "key 1: not decided within the search budget (42 operations)");
}

TEST(KvLinearizable, MalformedEntriesAreReported) {
  std::string why = check_linearizable(std::vector<HistoryEntry>{get(1, kL, 0, 100, 50)}, kL);
  EXPECT_TRUE(contains(why, "key 1: malformed: GET [100, 50] starts after it ends")) << why;
  // An outcome the store never gives, and a kind or code out of range.
  why = check_linearizable(
      std::vector<HistoryEntry>{{OpKind::get, Code::full, 2, 0, 0, 1, 2},
                                {static_cast<OpKind>(7), Code::ok, 3, 0, 0, 1, 2},
                                {OpKind::put, static_cast<Code>(9), 4, 0, 0, 1, 2},
                                {OpKind::put, Code::not_found, 5, 0, 0, 1, 2}},
      kL);
  EXPECT_TRUE(contains(why, "key 2: malformed")) << why;
  EXPECT_TRUE(contains(why, "key 3: malformed")) << why;
  EXPECT_TRUE(contains(why, "key 4: malformed")) << why;
  EXPECT_TRUE(contains(why, "and 1 more keys")) << why;
  // A PUT answered full that starts after it ends is malformed too, and counted once per key.
  why = check_linearizable(
      std::vector<HistoryEntry>{put(6, 1, 1, 9, 3, Code::full), get(6, kL, 0, 9, 3)}, kL);
  EXPECT_TRUE(contains(why, "key 6: malformed: PUT [9, 3] starts after it ends (and 1 more)"))
      << why;
}

TEST(KvLinearizable, ReportsAtMostThreeKeysAndKeepsKeysApart) {
  std::vector<HistoryEntry> h;
  for (std::uint64_t k = 10; k < 16; ++k) {
    h.push_back(put(k, 1, 1, 0, 10));
    h.push_back(get(k, kL, 0, 20, 30));  // stale
  }
  h.push_back(get(100, kL, 0, 20, 30));  // a key of its own: fine
  const std::string why = check_linearizable(h, kL);
  EXPECT_TRUE(contains(why, "key 10: ")) << why;
  EXPECT_TRUE(contains(why, "key 12: ")) << why;
  EXPECT_FALSE(contains(why, "key 13: ")) << why;
  EXPECT_FALSE(contains(why, "key 100")) << why;
  EXPECT_TRUE(contains(why, "; and 3 more keys")) << why;
}

// ---- Against brute force -------------------------------------------------------------------

// Tries every order of the operations that keeps real time (one precedes another only when it
// ends strictly before the other starts), replaying a register: nothing or (writer, version).
bool brute_force(const std::vector<HistoryEntry>& h, std::uint32_t loader) {
  std::vector<HistoryEntry> ops;
  for (const HistoryEntry& e : h)
    if (!(e.kind == OpKind::put && e.code == Code::full)) ops.push_back(e);
  using Value = std::optional<std::pair<std::uint32_t, std::uint64_t>>;
  std::vector<bool> used(ops.size());
  auto step = [&](const HistoryEntry& e, Value& v) {
    if (e.kind == OpKind::put) {
      v = std::pair{e.writer, e.version};
      return true;
    }
    if (e.kind == OpKind::del && e.code == Code::ok) {
      if (!v) return false;
      v.reset();
      return true;
    }
    if (e.code == Code::not_found) return !v;
    return v == Value(std::pair{e.writer, e.version});
  };
  auto search = [&](auto& self, std::size_t done, Value v) -> bool {
    if (done == ops.size()) return true;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (used[i]) continue;
      bool first = true;  // no other pending operation ended before this one started
      for (std::size_t j = 0; j < ops.size(); ++j)
        if (!used[j] && j != i && ops[j].end_ns < ops[i].start_ns) first = false;
      Value next = v;
      if (!first || !step(ops[i], next)) continue;
      used[i] = true;
      const bool ok = self(self, done + 1, next);
      used[i] = false;
      if (ok) return true;
    }
    return false;
  };
  return search(search, 0, Value(std::pair{loader, std::uint64_t{0}}));
}

// A small random history of one key: 2 to max_ops operations starting in [0, span], lasting
// up to span / 2 (many touch or share endpoints), values from those written plus the load,
// DELETEs in some.
std::vector<HistoryEntry> random_history(std::mt19937_64& rng, std::uint64_t span,
                                         std::uint64_t max_ops = 7) {
  auto pick = [&](std::uint64_t n) {
    return std::uniform_int_distribution<std::uint64_t>(0, n)(rng);
  };
  const std::size_t n = 2 + pick(max_ops - 2);
  const bool deletes = pick(2) == 0;
  const bool repeats = pick(3) == 0;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> written = {{kL, 0}};
  std::vector<HistoryEntry> h;
  for (std::size_t i = 0; i < n; ++i) {
    HistoryEntry e;
    e.key = 1;
    e.start_ns = pick(span);
    e.end_ns = e.start_ns + pick(span / 2);
    const std::uint64_t what = pick(9);
    if (what < 3) {
      e.kind = OpKind::put;
      e.code = pick(9) == 0 ? Code::full : Code::ok;
      e.writer = static_cast<std::uint32_t>(i + 1);
      e.version = 1;
      if (repeats && pick(1) == 0) {
        const auto& v = written[pick(written.size() - 1)];
        e.writer = v.first;
        e.version = v.second;
      }
      written.push_back({e.writer, e.version});
    } else if (deletes && what < 5) {
      e.kind = OpKind::del;
      e.code = pick(1) == 0 ? Code::ok : Code::not_found;
    } else {
      e.kind = OpKind::get;
      e.code = Code::ok;
      if (deletes && pick(3) == 0) e.code = Code::not_found;
    }
    h.push_back(e);
  }
  // The reads' values, from every value written (PUTs later in the list included).
  for (HistoryEntry& e : h) {
    if (e.kind != OpKind::get || e.code != Code::ok) continue;
    const auto& v = written[pick(written.size() - 1)];
    e.writer = v.first;
    e.version = v.second;
  }
  return h;
}

std::string show(const std::vector<HistoryEntry>& h) {
  std::string out;
  for (const HistoryEntry& e : h)
    out += std::string(to_string(e.kind)) + " " + std::string(to_string(e.code)) + " (" +
           std::to_string(e.writer) + "," + std::to_string(e.version) + ") [" +
           std::to_string(e.start_ns) + "," + std::to_string(e.end_ns) + "]\n";
  return out;
}

TEST(KvLinearizableProperty, AgreesWithBruteForceOnSmallHistories) {
  std::mt19937_64 rng(20240611);
  int pass = 0, fail = 0;
  for (int round = 0; round < 6000; ++round) {
    // Half over [0, 12], half over [0, 6] (more ties).
    const std::vector<HistoryEntry> h = random_history(rng, round % 2 ? 12 : 6);
    const bool expect = brute_force(h, kL);
    const std::string got = check_linearizable(h, kL);
    ASSERT_EQ(got.empty(), expect) << "round " << round << ": " << got << "\n" << show(h);
    (expect ? pass : fail)++;
  }
  std::printf("linearizable %d, not %d\n", pass, fail);
  EXPECT_GT(pass, 600);
  EXPECT_GT(fail, 600);
}

// ---- Size --------------------------------------------------------------------------------------

// `count` operations of `clients` sequential clients over keys where key 0 takes 15% and the
// rest are uniform over 10000, each taking effect at a random instant inside its interval
// (so the history is linearizable by construction), replayed against a map.
std::vector<HistoryEntry> simulate(std::size_t count, bool deletes, std::uint64_t seed) {
  constexpr std::uint32_t kClients = 32;
  constexpr std::uint64_t kKeys = 10001;
  std::mt19937_64 rng(seed);
  auto pick = [&](std::uint64_t n) {
    return std::uniform_int_distribution<std::uint64_t>(0, n)(rng);
  };
  std::vector<HistoryEntry> h(count);
  std::vector<std::uint64_t> at(count), clock(kClients), version(kClients);
  for (std::size_t i = 0; i < count; ++i) {
    const auto c = static_cast<std::uint32_t>(i % kClients);
    HistoryEntry& e = h[i];
    e.key = pick(99) < 15 ? 0 : 1 + pick(kKeys - 2);
    const std::uint64_t what = pick(99);
    e.kind = what < 25 ? OpKind::put : deletes && what < 30 ? OpKind::del : OpKind::get;
    if (e.kind == OpKind::put) {
      e.writer = c + 1;
      e.version = ++version[c];
    }
    e.start_ns = clock[c] + pick(200);
    e.end_ns = e.start_ns + 100 + pick(2900);
    at[i] = e.start_ns + pick(e.end_ns - e.start_ns);
    clock[c] = e.end_ns;
  }
  std::vector<std::uint32_t> order(count);
  for (std::size_t i = 0; i < count; ++i) order[i] = static_cast<std::uint32_t>(i);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return std::pair{at[a], a} < std::pair{at[b], b};
  });
  struct Cell {
    bool present = true;
    std::uint32_t writer = kL;
    std::uint64_t version = 0;
  };
  std::vector<Cell> map(kKeys);
  for (std::uint32_t i : order) {
    HistoryEntry& e = h[i];
    Cell& cell = map[e.key];
    if (e.kind == OpKind::put) {
      cell = {true, e.writer, e.version};
    } else if (e.kind == OpKind::del) {
      e.code = cell.present ? Code::ok : Code::not_found;
      cell.present = false;
    } else {
      e.code = cell.present ? Code::ok : Code::not_found;
      e.writer = cell.present ? cell.writer : 0;
      e.version = cell.present ? cell.version : 0;
    }
  }
  return h;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A million operations in a release build (about 0.25 s here; the time is printed, not
// judged), a quarter of them under the sanitizers, whose tree runs every test at -O1.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::size_t kSizeOps = 250'000;
#else
constexpr std::size_t kSizeOps = 1'000'000;
#endif

TEST(KvLinearizableSize, AMillionOperationsWithAHotKey) {
  std::vector<HistoryEntry> h = simulate(kSizeOps, false, 7);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(check_linearizable(h, kL), "");
  std::printf("%zu operations (unique values): %.3f s\n", h.size(), seconds_since(t0));
  // One stale read of the hot key late in the run is found.
  for (std::size_t i = h.size(); i-- > 0;) {
    if (h[i].key == 0 && h[i].kind == OpKind::get) {
      h[i].writer = kL;
      h[i].version = 0;
      break;
    }
  }
  const std::string why = check_linearizable(h, kL);
  EXPECT_TRUE(contains(why, "key 0: ")) << why;
}

TEST(KvLinearizableSize, DeletesTakeTheSearch) {
  const std::vector<HistoryEntry> h = simulate(200'000, true, 8);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(check_linearizable(h, kL), "");
  std::printf("200,000 operations (deletes, searched): %.3f s\n", seconds_since(t0));
}

}  // namespace
}  // namespace fabflow::kv::linearizable_test
