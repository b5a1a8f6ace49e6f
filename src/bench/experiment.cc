// Catalogue loading and validation, sweep expansion and the runner's row tagging.
#include <fabflow/bench/common.h>
#include <fabflow/bench/experiment.h>
#include <fabflow/status.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

#include "bench/experiment_model.h"
#include "bench/report.h"

namespace fabflow::bench {
namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* kPlotKinds[] = {"line", "bar", "table"};
constexpr const char* kCheckKinds[] = {"at_most", "at_least", "greater",   "less",    "trend",
                                       "similar", "differ",   "crossover", "earlier", "all"};
// Every field an entry may have; any other is a mistake (a misspelt field would else be
// ignored, and the entry run as if it were not there).
constexpr const char* kEntryFields[] = {"id",    "title", "caption", "fidelity",
                                        "bench", "args",  "sweep",   "quick",
                                        "rows",  "plot",  "claim",   "reference"};
constexpr const char* kFidelityKinds[] = {"faithful", "substitute", "not_measurable"};
constexpr const char* kFidelityFields[] = {"kind", "note"};
constexpr const char* kPaperFields[] = {"place", "quote"};
constexpr const char* kReferenceFields[] = {"model", "label", "x", "value", "args", "curves"};
// The model's outputs a reference may draw: operations/s, or payload MB/s at that rate.
constexpr const char* kReferenceValues[] = {"ceiling_ops_per_s", "payload_MBps"};
constexpr const char* kReferenceCurveFields[] = {"series", "args"};
constexpr const char* kReferenceModels[] = {"pcie"};
constexpr const char* kPcieListFlags[] = {"-S", "--batch"};
// The runner sets these itself: an entry that set them would fight it.
constexpr const char* kRunnerFlags[] = {"-p", "--provider", "--json"};

template <class Name, std::size_t N>
bool one_of(const std::string& s, const Name (&names)[N]) {
  return std::any_of(std::begin(names), std::end(names), [&](const Name& n) { return s == n; });
}

template <class Name, std::size_t N>
std::string joined(const Name (&names)[N]) {
  std::string out;
  for (const Name& n : names) {
    if (!out.empty()) out += '|';
    out += n;
  }
  return out;
}

// ---- values relative to the machine ----
// A value that names `cores` is an integer expression over the CPUs the run may use ("cores",
// "cores-1", "cores/2", "2*cores+1", "max(4, cores/4)", with + - * /, parentheses, max and min;
// / rounds down); a sweep value
// may also be a range "A..B" of two such expressions (or numbers): A, A+1, ..., B, or with " x2"
// after it A, 2A, 4A, ... and then B.

class CoreExpression {
 public:
  CoreExpression(std::string_view text, long cores) : s_(text), cores_(cores) {}
  long value() {
    const long v = sum();
    skip_space();
    if (at_ < s_.size())
      throw std::invalid_argument("unexpected '" + std::string(s_.substr(at_)) + "'");
    return v;
  }

 private:
  void skip_space() {
    while (at_ < s_.size() && s_[at_] == ' ') ++at_;
  }
  bool take(char c) {
    skip_space();
    if (at_ < s_.size() && s_[at_] == c) return ++at_, true;
    return false;
  }
  long sum() {
    long v = product();
    while (true) {
      if (take('+'))
        v += product();
      else if (take('-'))
        v -= product();
      else
        return v;
    }
  }
  long product() {
    long v = factor();
    while (true) {
      if (take('*')) {
        v *= factor();
      } else if (take('/')) {
        const long d = factor();
        if (d == 0) throw std::invalid_argument("division by zero");
        v = v / d;
      } else {
        return v;
      }
    }
  }
  long factor() {
    if (take('(')) {
      const long v = sum();
      if (!take(')')) throw std::invalid_argument("a '(' without its ')'");
      return v;
    }
    skip_space();
    if (s_.substr(at_, 5) == "cores") return at_ += 5, cores_;
    for (const char* fn : {"max", "min"})
      if (s_.substr(at_, 3) == fn) {
        at_ += 3;
        if (!take('(')) throw std::invalid_argument(std::string(fn) + " needs (a, b)");
        const long a = sum();
        if (!take(',')) throw std::invalid_argument(std::string(fn) + " needs (a, b)");
        const long b = sum();
        if (!take(')')) throw std::invalid_argument("a '(' without its ')'");
        return fn[1] == 'a' ? std::max(a, b) : std::min(a, b);
      }
    std::size_t end = at_;
    while (end < s_.size() && std::isdigit(static_cast<unsigned char>(s_[end]))) ++end;
    if (end == at_ || end - at_ > 6) throw std::invalid_argument("expected a number or 'cores'");
    const long v = std::stol(std::string(s_.substr(at_, end - at_)));
    at_ = end;
    return v;
  }

  std::string_view s_;
  long cores_;
  std::size_t at_ = 0;
};

bool relative(const std::string& value) {
  return value.find("cores") != std::string::npos || value.find("..") != std::string::npos;
}

// The values one written value stands for on `cores` CPUs (itself when not relative). Throws
// std::invalid_argument naming what is wrong.
std::vector<std::string> resolve_value(const std::string& value, long cores, bool range_ok) {
  if (!relative(value)) return {value};
  const auto dots = value.find("..");
  if (dots == std::string::npos) return {std::to_string(CoreExpression(value, cores).value())};
  if (!range_ok) throw std::invalid_argument("a range is a sweep's, not an arg's");
  std::string high = value.substr(dots + 2);
  bool doubling = false;
  if (const auto x = high.rfind(" x2"); x != std::string::npos && x + 3 == high.size()) {
    doubling = true;
    high.resize(x);
  }
  const long a = CoreExpression(value.substr(0, dots), cores).value();
  const long b = CoreExpression(high, cores).value();
  if (doubling && a < 1) throw std::invalid_argument("a doubling range must start at 1 or more");
  std::vector<std::string> out;
  for (long v = a; v <= b && out.size() < 4096; v = doubling ? v * 2 : v + 1)
    out.push_back(std::to_string(v));
  if (doubling && a <= b && out.back() != std::to_string(b)) out.push_back(std::to_string(b));
  return out;
}

// A sweep's values on `cores` CPUs: relative ones resolved, those below 1 dropped (there is no
// zeroth worker), duplicates dropped, the order kept.
std::vector<std::string> resolve_values(const std::vector<std::string>& values, long cores) {
  std::vector<std::string> out;
  for (const auto& v : values)
    for (auto& r : resolve_value(v, cores, true)) {
      if (relative(v) && std::stol(r) < 1) continue;
      if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(std::move(r));
    }
  return out;
}

// Throws the one-line error for the entry being read: "<file>: entry '<id>': <what>".
class EntryContext {
 public:
  EntryContext(std::string file, std::size_t index) : file_(std::move(file)), index_(index) {}
  void set_id(const std::string& id) { id_ = id; }
  [[noreturn]] void fail(const std::string& what) const {
    std::string entry = id_.empty() ? "entry #" + std::to_string(index_) : "entry '" + id_ + "'";
    throw UsageError(file_ + ": " + entry + ": " + what);
  }

 private:
  std::string file_;
  std::size_t index_;
  std::string id_;
};

std::string required_text(const ojson& e, const char* key, const EntryContext& ctx) {
  if (!e.contains(key)) ctx.fail(std::string("missing \"") + key + "\"");
  const ojson& v = e[key];
  if (!v.is_string()) ctx.fail(std::string("\"") + key + "\" must be a string");
  if (v.get<std::string>().empty()) ctx.fail(std::string("\"") + key + "\" is empty");
  return v.get<std::string>();
}

std::string optional_text(const ojson& e, const char* key, const EntryContext& ctx) {
  if (!e.contains(key)) return {};
  if (!e[key].is_string() || e[key].get<std::string>().empty())
    ctx.fail(std::string("\"") + key + "\" must be a non-empty string when present");
  return e[key].get<std::string>();
}

const ojson& required_object(const ojson& e, const char* key, const EntryContext& ctx) {
  if (!e.contains(key)) ctx.fail(std::string("missing \"") + key + "\"");
  if (!e[key].is_object()) ctx.fail(std::string("\"") + key + "\" must be an object");
  return e[key];
}

// Catalogue values are strings; plain numbers are accepted and kept as written.
std::string value_text(const ojson& v, const std::string& where, const EntryContext& ctx) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number()) return v.dump();
  ctx.fail(where + ": values must be strings");
}

void check_flag_name(const std::string& flag, const std::string& where, const EntryContext& ctx) {
  if (flag.size() < 2 || flag[0] != '-')
    ctx.fail(where + ": '" + flag + "' is not a flag (flags start with '-')");
  if (one_of(flag, kRunnerFlags))
    ctx.fail(where + " sets " + flag + ": the runner sets -p and --json itself");
}

// A relative value must resolve: checked for one CPU and for many.
void check_relative(const std::string& value, const std::string& where, bool range_ok,
                    const EntryContext& ctx) {
  if (!relative(value)) return;
  try {
    for (long cores : {1L, 2L, 64L}) resolve_value(value, cores, range_ok);
  } catch (const std::exception& e) {
    ctx.fail(where + ": '" + value + "': " + e.what());
  }
}

FlagValues read_args(const ojson& obj, const std::string& where, const EntryContext& ctx) {
  if (!obj.is_object()) ctx.fail(where + " must be an object {flag: value}");
  FlagValues out;
  for (const auto& [flag, v] : obj.items()) {
    check_flag_name(flag, where, ctx);
    out.emplace_back(flag, value_text(v, where + " " + flag, ctx));
    check_relative(out.back().second, where + " " + flag, false, ctx);
  }
  return out;
}

std::vector<std::string> read_values(const ojson& v, const std::string& where,
                                     const EntryContext& ctx) {
  if (!v.is_array() || v.empty()) ctx.fail(where + " has no values");
  std::vector<std::string> out;
  for (const auto& x : v) {
    out.push_back(value_text(x, where, ctx));
    check_relative(out.back(), where, true, ctx);
  }
  return out;
}

bool has_flag(const FlagValues& args, const std::string& flag) {
  return std::any_of(args.begin(), args.end(), [&](const auto& a) { return a.first == flag; });
}

SweepVariable* find_variable(std::vector<SweepVariable>& sweep, const std::string& flag) {
  for (auto& v : sweep)
    if (v.flag == flag) return &v;
  return nullptr;
}

void check_id(const std::string& id, const std::string& seed, const EntryContext& ctx) {
  // The id names the output files and is given on the command line in comma lists.
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
      ctx.fail("id may contain only letters, digits, '.', '-' and '_'");
  if (id.rfind(seed + "-", 0) != 0)
    ctx.fail("id does not start with the file's seed '" + seed + "-'");
}

void refuse_unknown_fields(const ojson& obj, const std::string& where, const auto& known,
                           const EntryContext& ctx) {
  for (const auto& field : obj.items())
    if (!one_of(field.key(), known))
      ctx.fail("unknown field \"" + field.key() + "\" in " + where + " (fields: " + joined(known) +
               ")");
}

void read_fidelity(const ojson& f, ExperimentEntry& x, const EntryContext& ctx) {
  refuse_unknown_fields(f, "fidelity", kFidelityFields, ctx);
  if (!f.contains("kind") || !f["kind"].is_string() ||
      !one_of(f["kind"].get<std::string>(), kFidelityKinds))
    ctx.fail("fidelity.kind must be one of " + joined(kFidelityKinds));
  const std::string kind = f["kind"].get<std::string>();
  x.fidelity = kind == "faithful"     ? Fidelity::faithful
               : kind == "substitute" ? Fidelity::substitute
                                      : Fidelity::not_measurable;
  x.fidelity_note = optional_text(f, "note", ctx);
  if (x.fidelity != Fidelity::faithful && x.fidelity_note.empty())
    ctx.fail("fidelity " + kind + " needs a \"note\" saying " +
             (x.fidelity == Fidelity::substitute
                  ? "what it measures instead, and why the paper's mechanism is out of reach"
                  : "why it cannot be measured"));
}

// claim.paper: where in the paper the claim stands, and its sentence as the paper words it.
void check_paper_quote(const ojson& claim, const EntryContext& ctx) {
  if (!claim.contains("paper") || !claim["paper"].is_object())
    ctx.fail(
        "claim.paper is missing: {\"place\": section, figure and line, \"quote\": the "
        "paper's sentence}");
  const ojson& paper = claim["paper"];
  refuse_unknown_fields(paper, "claim.paper", kPaperFields, ctx);
  for (const char* key : kPaperFields)
    if (!paper.contains(key) || !paper[key].is_string() || paper[key].get<std::string>().empty())
      ctx.fail(std::string("claim.paper.") + key + " is missing or empty");
}

void check_plot_and_claim(const ExperimentEntry& x, const EntryContext& ctx) {
  if (!x.plot.contains("kind") || !x.plot["kind"].is_string() ||
      !one_of(x.plot["kind"].get<std::string>(), kPlotKinds))
    ctx.fail("plot.kind must be one of " + joined(kPlotKinds));
  if (!x.claim.contains("text") || !x.claim["text"].is_string() ||
      x.claim["text"].get<std::string>().empty())
    ctx.fail("claim.text is missing or empty");
  check_paper_quote(x.claim, ctx);
  if (!x.claim.contains("check")) return;
  const auto& check = x.claim["check"];
  if (!check.is_object() || !check.contains("kind") || !check["kind"].is_string() ||
      !one_of(check["kind"].get<std::string>(), kCheckKinds))
    ctx.fail("claim.check.kind must be one of " + joined(kCheckKinds));
}

// The entry's "reference": its shape, its model and flags, and that every curve evaluates at the
// entry's x values (with and without --quick) to rates the model gives.
void read_reference(const ojson& r, ExperimentEntry& x, const EntryContext& ctx) {
  if (!r.is_object()) ctx.fail("reference must be an object {model, label, x, args, curves}");
  refuse_unknown_fields(r, "reference", kReferenceFields, ctx);
  Reference ref;
  if (!r.contains("model") || !r["model"].is_string())
    ctx.fail("reference.model is missing (models: " + joined(kReferenceModels) + ")");
  ref.model = r["model"].get<std::string>();
  if (!one_of(ref.model, kReferenceModels))
    ctx.fail("reference: unknown model '" + ref.model + "' (models: " + joined(kReferenceModels) +
             ")");
  if (!r.contains("label") || !r["label"].is_string() || r["label"].get<std::string>().empty())
    ctx.fail("reference.label is missing or empty (the legend's name for the series)");
  ref.label = r["label"].get<std::string>();
  if (!r.contains("x") || !r["x"].is_string() || !one_of(r["x"].get<std::string>(), kPcieListFlags))
    ctx.fail("reference.x must name the entry's flag whose values the model takes: " +
             joined(kPcieListFlags));
  ref.x_flag = r["x"].get<std::string>();
  if (!has_flag(x.args, ref.x_flag) && !find_variable(x.sweep, ref.x_flag))
    ctx.fail("reference.x is " + ref.x_flag + ", which the entry neither sets nor sweeps");
  if (r.contains("value")) {
    if (!r["value"].is_string() || !one_of(r["value"].get<std::string>(), kReferenceValues))
      ctx.fail("reference.value must be one of " + joined(kReferenceValues) +
               " (the model's output drawn as the plot's y)");
    ref.value = r["value"].get<std::string>();
  }
  if (x.plot.contains("y_divide_by"))
    ctx.fail("reference: plot.y_divide_by would divide the model's rate by a field it lacks");
  auto read_model_args = [&](const ojson& obj, const std::string& where) {
    FlagValues out = read_args(obj, where, ctx);
    for (const auto& [flag, value] : out) {
      if (!one_of(flag, kPcieFlags))
        ctx.fail(where + ": 'fabflow model " + ref.model + "' has no flag " + flag + " (" +
                 joined(kPcieFlags) + ")");
      if (flag == ref.x_flag || (ref.x_flag == "-S" && flag == "--size"))
        ctx.fail(where + " sets " + flag + ", the x the entry's values give");
      if (relative(value)) ctx.fail(where + " " + flag + ": a model input is not relative");
    }
    return out;
  };
  if (r.contains("args")) ref.args = read_model_args(r["args"], "reference.args");
  if (!r.contains("curves") || !r["curves"].is_array() || r["curves"].empty())
    ctx.fail(
        "reference.curves must list the curves: {series: {field: value}, args: {flag: value}}");
  for (std::size_t i = 0; i < r["curves"].size(); ++i) {
    const ojson& c = r["curves"][i];
    const std::string where = "reference.curves[" + std::to_string(i) + "]";
    if (!c.is_object()) ctx.fail(where + " must be an object {series, args}");
    refuse_unknown_fields(c, where, kReferenceCurveFields, ctx);
    ReferenceCurve curve;
    if (!c.contains("series") || !c["series"].is_object() || c["series"].empty())
      ctx.fail(where + ".series must name the measured series it belongs to {field: value}");
    for (const auto& [field, value] : c["series"].items())
      if (value.is_structured()) ctx.fail(where + ".series." + field + " must be a plain value");
    curve.series = c["series"];
    if (c.contains("args")) curve.args = read_model_args(c["args"], where + ".args");
    ref.curves.push_back(std::move(curve));
  }
  x.reference = std::move(ref);
  for (bool quick : {false, true})
    for (std::size_t i = 0; i < x.reference->curves.size(); ++i) {
      std::vector<model::PcieRow> rows;
      try {
        rows = model_rows(x, i, quick, 64);
      } catch (const std::invalid_argument& e) {
        ctx.fail("reference: " + std::string(e.what()));
      }
      for (const auto& row : rows)
        if (!row.cost.unsupported.empty())
          ctx.fail("reference.curves[" + std::to_string(i) + "]: " + row.cost.unsupported);
    }
}

ExperimentEntry read_entry(const ojson& e, const std::string& seed, const EntryContext& ctx_in) {
  EntryContext ctx = ctx_in;
  if (!e.is_object()) ctx.fail("not an object");
  ExperimentEntry x;
  x.id = required_text(e, "id", ctx);
  ctx.set_id(x.id);
  check_id(x.id, seed, ctx);
  x.title = required_text(e, "title", ctx);
  x.caption = required_text(e, "caption", ctx);
  for (const auto& field : e.items())
    if (!one_of(field.key(), kEntryFields))
      ctx.fail("unknown field \"" + field.key() + "\" (fields: " + joined(kEntryFields) + ")");
  read_fidelity(required_object(e, "fidelity", ctx), x, ctx);
  x.bench = required_text(e, "bench", ctx);
  if (!one_of(x.bench, kFamilies))
    ctx.fail("unknown bench '" + x.bench + "' (use " + joined(kFamilies) + ")");

  if (e.contains("args")) x.args = read_args(e["args"], "args", ctx);
  if (e.contains("sweep")) {
    if (!e["sweep"].is_array()) ctx.fail("sweep must be a list of {flag, values}");
    for (const auto& s : e["sweep"]) {
      if (!s.is_object() || !s.contains("flag") || !s["flag"].is_string())
        ctx.fail("sweep: every variable needs a \"flag\"");
      SweepVariable v{s["flag"].get<std::string>(), {}};
      check_flag_name(v.flag, "sweep", ctx);
      if (!s.contains("values")) ctx.fail("sweep " + v.flag + " has no values");
      v.values = read_values(s["values"], "sweep " + v.flag, ctx);
      if (find_variable(x.sweep, v.flag)) ctx.fail("sweep names " + v.flag + " twice");
      if (has_flag(x.args, v.flag)) ctx.fail(v.flag + " is both in args and swept");
      x.sweep.push_back(std::move(v));
    }
  }
  if (e.contains("quick")) {
    const ojson& q = e["quick"];
    if (!q.is_object()) ctx.fail("quick must be an object {args, sweep}");
    if (q.contains("args")) x.quick_args = read_args(q["args"], "quick.args", ctx);
    for (const auto& [flag, value] : x.quick_args)
      if (find_variable(x.sweep, flag))
        ctx.fail("quick.args sets swept flag " + flag + " (use quick.sweep)");
    if (q.contains("sweep")) {
      if (!q["sweep"].is_object()) ctx.fail("quick.sweep must be an object {flag: [values]}");
      for (const auto& [flag, values] : q["sweep"].items()) {
        if (!find_variable(x.sweep, flag))
          ctx.fail("quick.sweep names " + flag + ", which is not swept");
        x.quick_sweep.push_back({flag, read_values(values, "quick.sweep " + flag, ctx)});
      }
    }
  }
  if (e.contains("rows")) {
    if (!e["rows"].is_object()) ctx.fail("rows must be an object {field: value}");
    x.rows = e["rows"];
  } else {
    x.rows = nlohmann::json::object();
  }
  x.plot = required_object(e, "plot", ctx);
  x.claim = required_object(e, "claim", ctx);
  check_plot_and_claim(x, ctx);
  if (e.contains("reference")) read_reference(e["reference"], x, ctx);
  x.source = e;
  return x;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path.string() + ": cannot read: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Catalogue load_catalogue(const std::filesystem::path& path) {
  return parse_catalogue(read_file(path), path.string());
}

Catalogue parse_catalogue(std::string_view text, const std::string& file) {
  ojson doc;
  try {
    doc = ojson::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // what() starts with "[json.exception.parse_error.101] "; the rest is the useful part. Not
    // only parse errors: a number too large for a double is out_of_range (found by fuzzing).
    std::string what = e.what();
    const auto end = what.find("] ");
    if (what.rfind("[json.exception", 0) == 0 && end != std::string::npos) what.erase(0, end + 2);
    const auto* pe = dynamic_cast<const nlohmann::json::parse_error*>(&e);
    throw UsageError(file + ": not JSON" + (pe ? " (byte " + std::to_string(pe->byte) + ")" : "") +
                     ": " + what);
  }
  if (!doc.is_object())
    throw UsageError(file + ": not a catalogue (expected an object with seed and experiments)");
  Catalogue c;
  c.file = file;
  if (!doc.contains("seed") || !doc["seed"].is_string() || doc["seed"].get<std::string>().empty())
    throw UsageError(file + ": missing \"seed\"");
  c.seed = doc["seed"].get<std::string>();
  if (doc.contains("paper") && doc["paper"].is_string()) c.paper = doc["paper"].get<std::string>();
  if (!doc.contains("experiments") || !doc["experiments"].is_array())
    throw UsageError(file + ": missing \"experiments\" (a list of entries)");
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < doc["experiments"].size(); ++i) {
    EntryContext ctx(file, i);
    ExperimentEntry x = read_entry(doc["experiments"][i], c.seed, ctx);
    if (auto [it, fresh] = seen.emplace(x.id, i); !fresh) {
      ctx.set_id(x.id);
      ctx.fail("duplicate id (also entry #" + std::to_string(it->second) + ")");
    }
    x.file = file;
    c.entries.push_back(std::move(x));
  }
  return c;
}

std::vector<Catalogue> load_catalogues(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw UsageError("catalogue folder " + dir.string() + " does not exist");
  std::vector<std::filesystem::path> files;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec))
    if (f.path().extension() == ".json") files.push_back(f.path());
  if (ec) throw UsageError("catalogue folder " + dir.string() + ": " + ec.message());
  if (files.empty()) throw UsageError("catalogue folder " + dir.string() + " has no *.json");
  std::sort(files.begin(), files.end());
  std::vector<Catalogue> out;
  std::map<std::string, std::string> owner;  // id -> file
  for (const auto& f : files) {
    Catalogue c = load_catalogue(f);
    for (const auto& x : c.entries)
      if (auto [it, fresh] = owner.emplace(x.id, c.file); !fresh)
        throw UsageError(c.file + ": entry '" + x.id + "': duplicate id (also in " + it->second +
                         ")");
    out.push_back(std::move(c));
  }
  return out;
}

const ExperimentEntry* find_experiment(const std::vector<Catalogue>& catalogues,
                                       std::string_view id) {
  for (const auto& c : catalogues)
    for (const auto& x : c.entries)
      if (x.id == id) return &x;
  return nullptr;
}

const char* fidelity_name(Fidelity f) { return kFidelityKinds[static_cast<std::size_t>(f)]; }

bool runnable(const ExperimentEntry& e) { return e.fidelity != Fidelity::not_measurable; }

std::string status_text(const ExperimentEntry& e) {
  if (!runnable(e)) return "not measurable here: " + e.fidelity_note;
  return "runnable";
}

// --quick: quick args override same-named args (new ones appended), quick sweeps replace values.
static void apply_quick(ExperimentEntry& x) {
  const ExperimentEntry e = x;
  for (const auto& quick_arg : e.quick_args) {
    const auto& [flag, value] = quick_arg;
    auto it = std::find_if(x.args.begin(), x.args.end(),
                           [&](const auto& a) { return a.first == quick_arg.first; });
    if (it != x.args.end())
      it->second = value;
    else
      x.args.emplace_back(flag, value);
  }
  for (const auto& q : e.quick_sweep) find_variable(x.sweep, q.flag)->values = q.values;
  x.quick_args.clear();
  x.quick_sweep.clear();
}

ExperimentEntry effective(const ExperimentEntry& e, bool quick, unsigned cores) {
  ExperimentEntry x = e;
  if (quick) apply_quick(x);
  const long n = std::max(1u, cores);
  for (auto& [flag, value] : x.args)
    if (relative(value)) value = resolve_value(value, n, false).front();
  for (auto& v : x.sweep) {
    v.values = resolve_values(v.values, n);
    if (v.values.empty())
      throw UsageError(e.id + ": sweep " + v.flag + " has no values on " + std::to_string(n) +
                       " core(s)");
  }
  return x;
}

std::vector<SweepPoint> expand(const ExperimentEntry& entry, bool quick, unsigned cores) {
  const ExperimentEntry e = effective(entry, quick, cores);
  std::vector<std::string> fixed;
  for (const auto& [flag, value] : e.args) {
    fixed.push_back(flag);
    if (!value.empty()) fixed.push_back(value);
  }
  std::vector<SweepPoint> points;
  std::vector<std::size_t> at(e.sweep.size(), 0);  // an odometer, last variable fastest
  while (true) {
    SweepPoint p{fixed, {}};
    for (std::size_t i = 0; i < e.sweep.size(); ++i) {
      const std::string& value = e.sweep[i].values[at[i]];
      p.args.push_back(e.sweep[i].flag);
      if (!value.empty()) p.args.push_back(value);
      p.values.emplace_back(e.sweep[i].flag, value);
    }
    points.push_back(std::move(p));
    std::size_t i = e.sweep.size();
    while (i > 0 && ++at[i - 1] == e.sweep[i - 1].values.size()) at[--i] = 0;
    if (i == 0) return points;
  }
}

nlohmann::ordered_json entry_json(const ExperimentEntry& entry, bool quick, unsigned cores) {
  const ExperimentEntry e = effective(entry, quick, cores);
  ojson j = e.source;
  ojson args = ojson::object();
  for (const auto& [flag, value] : e.args) args[flag] = value;
  ojson sweep = ojson::array();
  for (const auto& v : e.sweep) sweep.push_back({{"flag", v.flag}, {"values", v.values}});
  j["args"] = std::move(args);
  j["sweep"] = std::move(sweep);
  if (quick) j.erase("quick");
  return j;
}

std::vector<std::string> reference_argv(const ExperimentEntry& entry, std::size_t curve, bool quick,
                                        unsigned cores) {
  const Reference& ref = entry.reference.value();
  const ExperimentEntry e = effective(entry, quick, cores);
  std::string xs;
  for (const auto& [flag, value] : e.args)
    if (flag == ref.x_flag) xs = value;
  for (const auto& v : e.sweep)
    if (v.flag == ref.x_flag)
      for (const auto& value : v.values) xs += (xs.empty() ? "" : ",") + value;
  std::vector<std::string> argv = {"model", ref.model};
  for (const FlagValues* args : {&ref.args, &ref.curves.at(curve).args})
    for (const auto& [flag, value] : *args) argv.insert(argv.end(), {flag, value});
  argv.insert(argv.end(), {ref.x_flag, xs});
  return argv;
}

std::vector<model::PcieRow> reference_rows(const ExperimentEntry& entry, std::size_t curve,
                                           bool quick, unsigned cores) {
  try {
    return model_rows(entry, curve, quick, cores);
  } catch (const std::invalid_argument& e) {
    throw UsageError(entry.file + ": entry '" + entry.id + "': reference: " + e.what());
  }
}

nlohmann::json experiment_environment() {
  RunEnvironment env = machine_environment();
  finish_environment(env);
  return report::environment_json(env);
}

void tag_row(nlohmann::ordered_json& row, const std::string& id, std::size_t point_index,
             const FlagValues& point, unsigned repeat_index) {
  ojson values = ojson::object();
  for (const auto& [flag, value] : point) values[flag] = value;
  row["experiment"] = id;
  row["point_index"] = point_index;
  row["point"] = values;
  row["repeat_index"] = repeat_index;
  for (const auto& [flag, value] : point) row["point." + flag] = value;
}

}  // namespace fabflow::bench
