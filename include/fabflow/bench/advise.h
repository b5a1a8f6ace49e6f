// The search behind `fabflow advise`: which candidate design wins a workload on this machine,
// and which ones the measurements cannot tell from it.
//
// Every candidate collects samples (one per bench run) in rounds. After a round, a candidate
// whose interval (the range of its samples in that round) lies wholly on the worse side of the
// leader's interval is dropped: more runs would not make it the winner. The survivors run again
// with twice the work per run, as long as the budget allows (successive halving, with the
// measurements' own spread as the cut). At the end the survivors are ranked by median; those
// whose interval overlaps the winner's are tied with it. Plain data and pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace fabflow::bench::advise {

enum class Better { higher, lower };  // throughput is better higher, latency lower

struct Candidate {
  std::string provider;
  std::string name;             // the design as the bench names it
  std::vector<double> samples;  // the latest round this candidate ran in
  // CPU time per operation on each side in the same runs, where the bench measures it (the
  // family names the sides: requester and responder, client and server, sender and receiver).
  std::array<std::vector<double>, 2> cpu;
  int rounds = 0;         // rounds it ran in
  int dropped_after = 0;  // the round after which it was dropped (0: still in)
  std::string refused;    // non-empty: the provider or bench refused it, and why
  std::string failed;     // non-empty: a run of it failed, and how

  bool live() const { return refused.empty() && failed.empty() && dropped_after == 0; }
};

struct Summary {
  double median = 0;
  double low = 0;   // smallest sample
  double high = 0;  // largest sample
  std::size_t n = 0;
};

// Median and range of the samples (n = 0 when there are none).
Summary summarize(const std::vector<double>& samples);

// Whether a's interval lies wholly on the better side of b's.
bool clearly_better(const Summary& a, const Summary& b, Better better);

// The live candidate with the best median (npos when none is live and measured).
std::size_t leader(const std::vector<Candidate>& candidates, Better better);

// Drops every live candidate whose interval lies wholly on the worse side of the leader's, and
// every live one without samples (its runs gave no row: failed); `round` is recorded. Returns
// how many were dropped.
std::size_t drop_clear_losers(std::vector<Candidate>& candidates, Better better, int round);

struct Ranking {
  std::vector<std::size_t> order;  // measured candidates: live by median, then dropped ones
  std::size_t winner = static_cast<std::size_t>(-1);  // npos when nothing was measured
  std::vector<std::size_t> tied;  // live ones whose interval overlaps the winner's
};

Ranking rank(const std::vector<Candidate>& candidates, Better better);

}  // namespace fabflow::bench::advise
