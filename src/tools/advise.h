// `fabflow advise`: which design wins a workload here, measured within a budget, and the
// profile that keeps the answer (docs/advise.md). The CLI parses the flags into a request; the
// search, the answer, the map and `--design auto`'s reading of a profile live here.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace fabflow::tools {

// One advise invocation, as the flags give it (empty: the workload file's, else the default).
struct AdviseRequest {
  std::string family;
  std::string providers;  // empty: the workload file's, else shm
  std::string objective;  // empty: the workload file's, else throughput
  std::string budget;     // empty: the workload file's, else 2m
  std::string size;
  std::string candidates;  // empty: every candidate of the family
  std::string passive;     // queue: consumer, producer or both must stay passive (or empty)
  std::string profile;     // empty: the cache folder's advise-<family>.json
  bool no_profile = false;
  bool json = false;
  std::string show;                   // print a saved profile instead of measuring
  std::string map;                    // BASE of a map over sizes x objectives
  std::string vary;                   // NAME=V1,V2: the map over sizes x values of a bench flag
  std::string workload_file;          // what the command line leaves out comes from here
  std::vector<std::string> workload;  // after "--": passed to the bench as given
};

// Runs the search (or --show, or --map) and prints the answer; the exit status. Throws
// UsageError for a request that cannot be run, Error when nothing could be measured.
int run_advise(AdviseRequest r);

// `fabflow advise FAMILY --map BASE`: one search per size and objective, kept in BASE.json and
// drawn in BASE.png and BASE.svg (advise_map.cc). The request is checked by the caller but for
// the grid's own limits.
struct AdviseMapRequest {
  std::string family, providers, candidates;
  std::vector<std::string> sizes, objectives, workload;
  std::string passive;  // queue: the end(s) that must stay passive in every cell, or empty
  // --vary NAME=V1,V2: the map's columns are these values of the bench flag NAME (-N for a
  // one-letter name, --NAME else) for the one objective, instead of the objectives.
  std::string vary_flag;
  std::vector<std::string> vary_values;
  double budget_s = 0;
  std::string out;  // BASE
  bool json = false;
};
int run_advise_map(const AdviseMapRequest& r);

// `--design auto`: the best design on `provider` from the family's advise profile when it was
// measured on this machine, by this version, for this size and one of the objectives
// (comma-separated) and no other bench flags; else `fallback`. `why` says which, and from what.
struct AutoChoice {
  std::string design;
  std::string why;
};
// `allowed(design)`: "" when the run can take that profile design, else why not.
AutoChoice choose_design(const std::string& family, const std::string& provider,
                         const std::string& size, const std::string& objective,
                         const std::string& fallback, const std::string& fallback_rule,
                         const std::function<std::string(const std::string&)>& allowed = {});

}  // namespace fabflow::tools
