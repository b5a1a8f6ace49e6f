// The advise search: interval summaries, dropping clear losers, the ranking with its ties.
#include <fabflow/bench/advise.h>

#include <algorithm>

namespace fabflow::bench::advise {

namespace {
constexpr std::size_t kNone = static_cast<std::size_t>(-1);

bool better_median(double a, double b, Better better) {
  return better == Better::higher ? a > b : a < b;
}
}  // namespace

Summary summarize(const std::vector<double>& samples) {
  Summary s;
  s.n = samples.size();
  if (samples.empty()) return s;
  std::vector<double> v = samples;
  std::sort(v.begin(), v.end());
  const std::size_t mid = v.size() / 2;
  s.median = v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  s.low = v.front();
  s.high = v.back();
  return s;
}

bool clearly_better(const Summary& a, const Summary& b, Better better) {
  if (a.n == 0 || b.n == 0) return false;
  return better == Better::higher ? a.low > b.high : a.high < b.low;
}

std::size_t leader(const std::vector<Candidate>& candidates, Better better) {
  std::size_t best = kNone;
  double best_median = 0;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    if (!c.live() || c.samples.empty()) continue;
    const double m = summarize(c.samples).median;
    if (best == kNone || better_median(m, best_median, better)) {
      best = i;
      best_median = m;
    }
  }
  return best;
}

std::size_t drop_clear_losers(std::vector<Candidate>& candidates, Better better, int round) {
  std::size_t dropped = 0;
  for (Candidate& c : candidates)
    if (c.live() && c.samples.empty()) {
      c.failed = "no result in round " + std::to_string(round);
      ++dropped;
    }
  const std::size_t lead = leader(candidates, better);
  if (lead == kNone) return dropped;
  const Summary top = summarize(candidates[lead].samples);
  for (Candidate& c : candidates)
    if (c.live() && clearly_better(top, summarize(c.samples), better)) {
      c.dropped_after = round;
      ++dropped;
    }
  return dropped;
}

Ranking rank(const std::vector<Candidate>& candidates, Better better) {
  Ranking r;
  std::vector<std::size_t> live, dropped;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    if (c.samples.empty() || !c.refused.empty() || !c.failed.empty()) continue;
    (c.dropped_after == 0 ? live : dropped).push_back(i);
  }
  // Equal medians keep the candidates' order (a total order, so std::sort needs no buffer).
  auto by_median = [&](std::size_t a, std::size_t b) {
    const double ma = summarize(candidates[a].samples).median;
    const double mb = summarize(candidates[b].samples).median;
    if (better_median(ma, mb, better)) return true;
    if (better_median(mb, ma, better)) return false;
    return a < b;
  };
  std::sort(live.begin(), live.end(), by_median);
  // Dropped later means it held on longer: it ranks higher.
  std::sort(dropped.begin(), dropped.end(), [&](std::size_t a, std::size_t b) {
    if (candidates[a].dropped_after != candidates[b].dropped_after)
      return candidates[a].dropped_after > candidates[b].dropped_after;
    return by_median(a, b);
  });
  r.order = live;
  r.order.insert(r.order.end(), dropped.begin(), dropped.end());
  if (live.empty()) return r;
  r.winner = live.front();
  const Summary top = summarize(candidates[r.winner].samples);
  for (std::size_t i = 1; i < live.size(); ++i)
    if (!clearly_better(top, summarize(candidates[live[i]].samples), better))
      r.tied.push_back(live[i]);
  return r;
}

}  // namespace fabflow::bench::advise
