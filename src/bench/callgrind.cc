#include "bench/callgrind.h"

#include <fabflow/status.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>
#include <tuple>
#include <utility>

namespace fabflow::callgrind {
namespace {

// Callgrind compresses a repeated name to "(id)" after its first "(id) name"; files, functions
// and objects have one table each.
class Names {
 public:
  // `spec` is the text after "fn=" (or ob=, fl=...): "(id) name", "(id)" or "name".
  std::string resolve(std::string_view spec, const std::string& where) {
    if (spec.empty() || spec.front() != '(') return std::string(spec);
    const auto close = spec.find(')');
    if (close == std::string_view::npos) throw Error(where + ": a name without its ')'");
    const std::string id(spec.substr(1, close - 1));
    std::string_view rest = spec.substr(close + 1);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    if (!rest.empty()) return names_[id] = std::string(rest);
    const auto it = names_.find(id);
    if (it == names_.end())
      throw Error(where + ": the name (" + id + ") is used before it is given");
    return it->second;
  }

 private:
  std::unordered_map<std::string, std::string> names_;
};

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

double number(std::string_view token, const std::string& where) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
  if (ec != std::errc() || end != token.data() + token.size())
    throw Error(where + ": '" + std::string(token) + "' is not a count");
  return static_cast<double>(v);
}

// The most Ir first; equal costs by object and name (a total order: the same dump gives the
// same list).
bool most_first(const FunctionCost& a, const FunctionCost& b) {
  if (a.ir != b.ir) return a.ir > b.ir;
  return std::tie(a.object, a.name) < std::tie(b.object, b.name);
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

Profile parse(std::istream& in, const std::string& what) {
  Names files, functions, objects;
  std::size_t positions = 1;  // "positions: line" unless the header says "instr line"
  int ir_column = -1;         // index of Ir among the events
  double totals = 0, summary = 0;
  bool have_totals = false;
  std::string object;  // ob= in force
  bool in_function = false;
  bool call_cost_next = false;  // the next cost line is a call's inclusive cost, not self cost
  std::map<std::pair<std::string, std::string>, double> self;  // (object, function) -> Ir
  std::string fn_name;

  std::string line;
  std::size_t number_of_line = 0;
  while (std::getline(in, line)) {
    ++number_of_line;
    const std::string where = what + ":" + std::to_string(number_of_line);
    std::string_view l = line;
    if (l.empty() || l.front() == '#') continue;
    const char c = l.front();
    if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '*') {
      if (ir_column < 0) throw Error(where + ": a cost line before the events: line");
      std::istringstream tokens{std::string(l)};
      std::string token;
      std::size_t column = 0;
      double ir = 0;
      while (tokens >> token) {
        if (column >= positions && static_cast<int>(column - positions) == ir_column)
          ir = number(token, where);
        ++column;
      }
      if (column < positions) throw Error(where + ": a cost line without its position");
      if (call_cost_next) {
        call_cost_next = false;
        continue;
      }
      if (!in_function) throw Error(where + ": a cost line before any fn=");
      self[{object, fn_name}] += ir;
      continue;
    }
    if (starts_with(l, "calls=")) {
      call_cost_next = true;
      continue;
    }
    const auto eq = l.find('=');
    const auto colon = l.find(':');
    if (eq != std::string_view::npos && (colon == std::string_view::npos || eq < colon)) {
      const std::string_view key = l.substr(0, eq), value = l.substr(eq + 1);
      if (key == "ob") {
        object = base_name(objects.resolve(value, where));
      } else if (key == "cob") {
        objects.resolve(value, where);
      } else if (key == "fl" || key == "fi" || key == "fe" || key == "cfi" || key == "cfl") {
        files.resolve(value, where);
      } else if (key == "fn") {
        fn_name = functions.resolve(value, where);
        in_function = true;
      } else if (key == "cfn") {
        functions.resolve(value, where);
      }
      continue;  // jump=, jcnd= and others carry no self cost
    }
    if (colon == std::string_view::npos) throw Error(where + ": a line callgrind does not write");
    const std::string_view key = l.substr(0, colon);
    std::string value(l.substr(colon + 1));
    if (key == "positions") {
      std::istringstream kinds(value);
      std::string kind;
      positions = 0;
      while (kinds >> kind) ++positions;
      if (positions == 0 || positions > 2) throw Error(where + ": positions '" + value + "'");
    } else if (key == "events") {
      std::istringstream events(value);
      std::string event;
      for (int i = 0; events >> event; ++i)
        if (event == "Ir") ir_column = i;
      if (ir_column < 0) throw Error(what + ": no Ir among the events (" + value + ")");
    } else if (key == "totals" || key == "summary") {
      std::istringstream costs(value);
      std::string token;
      double ir = 0;
      for (int i = 0; costs >> token; ++i)
        if (i == ir_column) ir = number(token, where);
      if (key == "totals") {
        totals += ir;
        have_totals = true;
      } else {
        summary += ir;
      }
    }
  }
  if (ir_column < 0) throw Error(what + ": not a callgrind dump (no events: line)");
  Profile p;
  p.total = have_totals ? totals : summary;
  for (const auto& [key, ir] : self)
    if (ir > 0) p.functions.push_back({key.second, key.first, ir});
  std::sort(p.functions.begin(), p.functions.end(), most_first);
  return p;
}

Profile read_newest(const std::string& dir, pid_t pid) {
  namespace fs = std::filesystem;
  const std::string name = "cg." + std::to_string(pid);
  fs::path newest;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (f != name && !starts_with(f, name + ".")) continue;
    if (newest.empty() || f.size() > newest.filename().string().size() ||
        (f.size() == newest.filename().string().size() && f > newest.filename().string()))
      newest = e.path();
  }
  if (newest.empty())
    throw Error("no callgrind dump of process " + std::to_string(pid) + " in " + dir +
                " (not run under callgrind?)");
  std::ifstream in(newest);
  if (!in) throw Error("cannot read " + newest.string());
  return parse(in, newest.string());
}

double share_of_objects(const Profile& p, const std::vector<std::string>& prefixes) {
  if (p.total <= 0) return 0;
  double ir = 0;
  for (const auto& f : p.functions)
    for (const auto& prefix : prefixes)
      if (starts_with(f.object, prefix)) {
        ir += f.ir;
        break;
      }
  return ir / p.total;
}

void merge(Profile& into, const Profile& more) {
  into.total += more.total;
  std::map<std::pair<std::string, std::string>, double> ir;
  for (const Profile* p : {static_cast<const Profile*>(&into), &more})
    for (const auto& f : p->functions) ir[{f.object, f.name}] += f.ir;
  into.functions.clear();
  for (const auto& [key, v] : ir) into.functions.push_back({key.second, key.first, v});
  std::sort(into.functions.begin(), into.functions.end(), most_first);
}

Place place_of(const FunctionCost& f) {
  if (starts_with(f.object, "libfabric")) return Place::transport;
  for (const char* c : {"libc.", "libc-", "ld-linux", "libpthread", "libm.", "librt."})
    if (starts_with(f.object, c)) return Place::libc;
  if (f.object == "fabflow" || f.object == "fabflow_tests" || starts_with(f.object, "libfabflow")) {
    if (starts_with(f.name, "fabflow::local::") || starts_with(f.name, "fabflow::ofi::"))
      return Place::transport;
    return Place::fabflow;
  }
  return Place::other;
}

}  // namespace fabflow::callgrind
