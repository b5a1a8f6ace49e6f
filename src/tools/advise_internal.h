// What `fabflow advise`'s files share: advise.cc (the families and the search), advise_answer.cc
// (the answer, its table, the profile file and --design auto's reading of it) and advise_map.cc.
#pragma once

#include <fabflow/advice.h>
#include <fabflow/bench/advise.h>

#include <nlohmann/json.hpp>

#include "tools/advise.h"

#include <array>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

namespace fabflow::tools::advise_detail {

using bench::advise::Better;
using bench::advise::Candidate;
using ojson = nlohmann::ordered_json;

// The field of the cpu objective: the family's two cpu_fields added (CPU per operation, both
// sides together).
inline constexpr const char* kBothSides = "cpu_fields";

struct Objective {
  const char* name;   // throughput | p50 | p99 | cpu
  const char* field;  // the row field compared (dots descend), or kBothSides
  const char* unit;   // for the table
  Better better;
  std::vector<const char*> extra;  // bench flags this objective needs
  const char* effort_flag;         // the work per run, doubled every round
  std::uint64_t effort;            // its first value
};

struct Family {
  const char* name;
  const char* candidate_flag;  // how the bench is told the designs to run
  std::vector<std::string> (*candidates)();
  std::string (*name_of)(const ojson& row);  // the candidate a row belongs to
  std::vector<Objective> objectives;
  // CPU time per operation on each side, where the bench measures it (not for queue: both
  // ends busy-poll): the sides' names, the row fields (dots descend) and the unit.
  std::array<const char*, 2> cpu_sides{};
  std::array<const char*, 2> cpu_fields{};
  const char* cpu_unit = nullptr;
  // The design the family's paper recommends, and where it says so: shown beside the answer
  // (is it the winner here, tied, behind?), never used as one.
  const char* prior = nullptr;
  const char* prior_source = nullptr;
};

using tools::AdviseRequest;

// Splits "a,b,,c" into {"a", "b", "c"}.
std::vector<std::string> split(const std::string& s, char sep);

// What a search found: every candidate with its samples, the environment of the first row
// seen, notes for the reader.
struct SearchOutcome {
  std::vector<Candidate> candidates;
  std::array<std::string, 2> cpu_sides;  // empty: the family measures no CPU per side
  std::string cpu_unit;
  std::string prior, prior_source;  // the family's paper's design (Family::prior)
  ojson environment;
  std::vector<std::string> notes;
  int rounds = 0;
  double seconds = 0;
};

using advice::default_profile;
using advice::value_text;

// The answer (the profile's content): ranked candidates, ties, refusals, the fingerprint.
ojson answer_json(const AdviseRequest& f, const Objective& obj, const SearchOutcome& s,
                  double budget_s);

// The answer as a table, the refusals, notes and the one-line recommendation.
void print_answer(const ojson& a, std::ostream& out);

// Writes the profile (default_profile(family) unless the user says where) atomically.
void write_profile(const ojson& a, const std::filesystem::path& path);
// Throws UsageError when `path` cannot be read or is not an advise answer.
ojson read_profile(const std::string& path);

}  // namespace fabflow::tools::advise_detail
