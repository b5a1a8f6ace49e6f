// Experiments as data: the catalogue of a paper's figures (experiments/<seed>.json), each entry
// a `fabflow bench` command, the variables it sweeps, and the plot and claim to check.
// The runner (`fabflow experiment run`) expands an entry into bench command lines and writes
// their rows as DIR/<id>.jsonl; python/fabflow_plot draws and checks them. Schema and output:
// docs/experiments.md.
#pragma once

#include <fabflow/model/pcie.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fabflow::bench {

// Flags in the catalogue's order; value "" is a flag given without a value.
using FlagValues = std::vector<std::pair<std::string, std::string>>;

// One swept variable: the flag and its values, in the order they run.
struct SweepVariable {
  std::string flag;
  std::vector<std::string> values;
};

// How closely an entry reproduces its paper's experiment.
//   faithful:       the paper's quantity and the paper's claim;
//   substitute:     another quantity or mechanism (the note says which, and why the paper's
//                   cannot be reached on these providers); its verdict says "substitute holds";
//   not_measurable: cannot be measured on a machine like this one (the note says why); not run.
enum class Fidelity { faithful, substitute, not_measurable };

// "faithful", "substitute", "not_measurable".
const char* fidelity_name(Fidelity f);

// A computed series drawn beside the measured rows (the entry's "reference"; docs/experiments.md,
// "Reference series"): a model of fabflow's evaluated at the entry's x values, one curve per
// series it belongs to. The model's inputs are its own command's flags (`fabflow model pcie`),
// so that the same numbers come from that command.
struct ReferenceCurve {
  nlohmann::ordered_json series;  // {row field: value}: the measured series the curve belongs to
  FlagValues args;                // the curve's own model flags, after the reference's
};
struct Reference {
  std::string model;   // "pcie"
  std::string label;   // the legend's and the table's name for it
  std::string x_flag;  // the entry's flag whose values are the model's x (-S or --batch)
  std::string value = "ceiling_ops_per_s";  // the model's field drawn as the plot's y
  FlagValues args;                          // model flags common to every curve
  std::vector<ReferenceCurve> curves;
};

// One catalogue entry as validated by load_catalogue. Plain data.
struct ExperimentEntry {
  std::string id;  // starts with "<seed>-"; also the output file's name
  std::string title;
  std::string caption;
  Fidelity fidelity = Fidelity::faithful;
  std::string fidelity_note;  // required for substitute and not_measurable
  std::string bench;          // a family of kFamilies
  FlagValues args;
  std::vector<SweepVariable> sweep;        // outermost first
  FlagValues quick_args;                   // --quick: override or extend args
  std::vector<SweepVariable> quick_sweep;  // --quick: replace the values of these swept flags
  nlohmann::json rows, plot, claim;        // for the plot module, checked only for shape
  std::optional<Reference> reference;      // a model's series drawn beside the measured rows
  nlohmann::ordered_json source;           // the entry as written in the file
  std::string file;                        // the catalogue file it came from
};

// One catalogue file: the experiments of one seed paper.
struct Catalogue {
  std::string seed;
  std::string paper;
  std::vector<ExperimentEntry> entries;
  std::string file;
};

// Reads and validates one catalogue file. Throws UsageError with one line naming the file, the
// entry (id, or #index when the id is missing) and what is wrong.
Catalogue load_catalogue(const std::filesystem::path& path);
// The same for a catalogue's text; `file` names it in the messages.
Catalogue parse_catalogue(std::string_view text, const std::string& file);

// Every *.json in `dir`, in file-name order; also rejects an id used twice across files.
std::vector<Catalogue> load_catalogues(const std::filesystem::path& dir);

// The entry with this id, or nullptr.
const ExperimentEntry* find_experiment(const std::vector<Catalogue>& catalogues,
                                       std::string_view id);

bool runnable(const ExperimentEntry& e);

// "runnable" or "not measurable here: <reason>".
std::string status_text(const ExperimentEntry& e);

// The entry as it runs on `cores` CPUs: with `quick`, quick args override same-named args (new
// ones are appended) and quick sweep values replace the named variables' values; then values
// relative to the machine ("cores-1", "1..cores x2"; docs/experiments.md) are resolved. Throws
// UsageError when a sweep is left with no value (e.g. "2..cores-1" on 2 cores).
ExperimentEntry effective(const ExperimentEntry& e, bool quick, unsigned cores);

// One run of the bench: the argv after `fabflow bench <bench>` and the swept values.
struct SweepPoint {
  std::vector<std::string> args;  // fixed args, then the swept flags
  FlagValues values;              // swept flag -> value, outermost first
};

// The cartesian product of the (effective) sweep, outermost variable varying slowest; an empty
// sweep is one point.
std::vector<SweepPoint> expand(const ExperimentEntry& e, bool quick, unsigned cores);

// The catalogue entry as written, with args and sweep replaced by the effective ones (and
// "quick" dropped once applied): line 1's "entry" of DIR/<id>.jsonl.
nlohmann::ordered_json entry_json(const ExperimentEntry& e, bool quick, unsigned cores);

// The model command of a reference curve on `cores` CPUs: {"model", "pcie", flags..., x_flag,
// the entry's x values as one comma list}; `fabflow model pcie` takes exactly these.
std::vector<std::string> reference_argv(const ExperimentEntry& e, std::size_t curve, bool quick,
                                        unsigned cores);
// The model's rows of a reference curve (what reference_argv's command prints). Throws
// UsageError naming the entry when an input is malformed (load_catalogue already checked).
std::vector<model::PcieRow> reference_rows(const ExperimentEntry& e, std::size_t curve, bool quick,
                                           unsigned cores);

// The machine and build an experiment ran on (line 1's "environment").
nlohmann::json experiment_environment();

// Adds the runner's keys to one bench row (kept in the bench's key order): experiment,
// point_index, point, repeat_index and "point.<flag>" copies of the swept values.
void tag_row(nlohmann::ordered_json& row, const std::string& id, std::size_t point_index,
             const FlagValues& point, unsigned repeat_index);

}  // namespace fabflow::bench
