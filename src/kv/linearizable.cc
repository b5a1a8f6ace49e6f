// The verifying mode's linearizability check (check_linearizable). Linearizability is
// compositional, so each key is checked alone as a register holding a value or nothing:
//  - keys whose written values are all distinct (no DELETE succeeded, no value written twice)
//    by Gibbons & Korach's cluster / zone test ("Testing shared memories", 1997), exact and in
//    O(n log n);
//  - the others by a depth-first search over orders (Wing & Gong, with Lowe's and Porcupine's
//    memo of (operations placed, register state)), under a step budget.
// Times are closed intervals: two operations are ordered only when one ends strictly before the
// other starts.
#include <fabflow/kv.h>

#include <algorithm>
#include <compare>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace fabflow::kv {
namespace {

constexpr std::uint32_t kLinLoad = std::numeric_limits<std::uint32_t>::max();    // "entry": load
constexpr std::uint32_t kLinAbsent = std::numeric_limits<std::uint32_t>::max();  // state: none
constexpr std::uint64_t kLinBudget = 2'000'000;  // search steps per key, plus kLinBudgetPerOp
constexpr std::uint64_t kLinBudgetPerOp = 64;    // per operation of the key
constexpr std::size_t kLinMaxKeys = 3;           // keys described

// A point in time, or the load's: before every operation.
struct LinTime {
  bool real = false;  // false: the load
  std::uint64_t ns = 0;
  friend auto operator<=>(const LinTime&, const LinTime&) = default;
};
constexpr LinTime lin_at(std::uint64_t ns) noexcept { return {true, ns}; }

// What an entry does to its key's register.
enum class LinClass : std::uint8_t {
  put,        // PUT ok: writes (writer, version)
  read,       // GET ok: read (writer, version)
  del,        // DELETE ok: the key was present; now absent
  absent,     // GET / DELETE not_found: read absence
  malformed,  // start after end, or an outcome the store never gives
  none,       // PUT full: no effect
};

LinClass lin_classify(const HistoryEntry& e) noexcept {
  if (e.start_ns > e.end_ns) return LinClass::malformed;
  switch (e.kind) {
    case OpKind::get:
      if (e.code == Code::ok) return LinClass::read;
      if (e.code == Code::not_found) return LinClass::absent;
      return LinClass::malformed;
    case OpKind::put:
      if (e.code == Code::ok) return LinClass::put;
      if (e.code == Code::full) return LinClass::none;
      return LinClass::malformed;
    case OpKind::del:
      if (e.code == Code::ok) return LinClass::del;
      if (e.code == Code::not_found) return LinClass::absent;
      return LinClass::malformed;
  }
  return LinClass::malformed;
}

// One entry, sorted by key, then the entries carrying a value grouped by value (the PUT
// first), then the others.
struct LinRec {
  std::uint64_t key;
  std::uint64_t version;  // put / read; 0 for the others
  std::uint32_t writer;   // put / read; 0 for the others
  std::uint32_t entry;    // index into the history
  LinClass cls;
};
struct LinRecLess {
  bool operator()(const LinRec& a, const LinRec& b) const noexcept {
    const bool av = a.cls != LinClass::put && a.cls != LinClass::read;
    const bool bv = b.cls != LinClass::put && b.cls != LinClass::read;
    return std::tie(a.key, av, a.writer, a.version, a.cls, a.entry) <
           std::tie(b.key, bv, b.writer, b.version, b.cls, b.entry);
  }
};

std::string lin_value(std::uint32_t writer, std::uint64_t version, std::uint32_t loader) {
  std::string v = "writer " + std::to_string(writer) + " version " + std::to_string(version);
  return writer == loader && version == 0 ? "the loaded value (" + v + ")" : v;
}

std::string lin_interval(const HistoryEntry& e) {
  return "[" + std::to_string(e.start_ns) + ", " + std::to_string(e.end_ns) + "]";
}

std::string lin_kind(OpKind k) {
  switch (k) {
    case OpKind::get: return "GET";
    case OpKind::put: return "PUT";
    case OpKind::del: return "DELETE";
  }
  return "an operation of kind " + std::to_string(static_cast<unsigned>(k));
}

// "GET [20, 30] returned writer 1 version 1", or the load's description.
std::string lin_describe(std::span<const HistoryEntry> h, std::uint32_t entry,
                         std::uint32_t loader) {
  if (entry == kLinLoad) return "the load (writer " + std::to_string(loader) + " version 0)";
  const HistoryEntry& e = h[entry];
  const std::string op = lin_kind(e.kind) + " " + lin_interval(e);
  if (e.start_ns > e.end_ns) return op + " starts after it ends";
  switch (lin_classify(e)) {
    case LinClass::put: return op + " wrote " + lin_value(e.writer, e.version, loader);
    case LinClass::read: return op + " returned " + lin_value(e.writer, e.version, loader);
    case LinClass::del: return op + " removed it";
    case LinClass::absent: return op + " found nothing";
    case LinClass::none: return op + " found the table full";
    case LinClass::malformed: break;
  }
  return op + " answered " + std::to_string(static_cast<unsigned>(e.code)) + " (" +
         std::string(to_string(e.code)) + "), which the store never answers to it";
}

// ---- Unique values: clusters and zones --------------------------------------------------------

// A cluster: one value's PUT (or the load) and the GETs that returned it. All its operations
// take effect in one stretch with no other value's in between; that stretch must reach back to
// f (the earliest end among them) and forward to s (the latest start).
struct LinZone {
  LinTime f, s;
  std::uint32_t f_entry, s_entry;  // operations ending at f, starting at s (kLinLoad: the load)
  std::uint32_t write_entry;       // the PUT, or kLinLoad
  std::uint32_t writer;
  std::uint64_t version;
};

std::string lin_time(LinTime t) { return t.real ? std::to_string(t.ns) : "the load"; }

// "writer 2 version 1 must stay the value from 30 (the end of GET [20, 30] ...) to 40 (...)".
std::string lin_forward(std::span<const HistoryEntry> h, const LinZone& z, std::uint32_t loader) {
  std::string out = lin_value(z.writer, z.version, loader) + " must stay the value from ";
  out += z.f.real ? lin_time(z.f) + " (the end of " + lin_describe(h, z.f_entry, loader) + ")"
                  : std::string("the load");
  return out + " to " + lin_time(z.s) + " (the start of " + lin_describe(h, z.s_entry, loader) +
         ")";
}

std::string lin_backward(std::span<const HistoryEntry> h, const LinZone& z, std::uint32_t loader) {
  std::vector<std::uint32_t> ops{z.write_entry};
  if (z.s_entry != z.write_entry) ops.push_back(z.s_entry);
  if (z.f_entry != z.write_entry && z.f_entry != z.s_entry) ops.push_back(z.f_entry);
  std::string list;
  for (std::uint32_t e : ops) list += (list.empty() ? "" : "; ") + lin_describe(h, e, loader);
  return lin_value(z.writer, z.version, loader) + " must be the value at some time in [" +
         lin_time(z.s) + ", " + lin_time(z.f) + "] (" + list + ")";
}

// Reused across keys (a Zipf history has many small ones).
struct LinZoneScratch {
  std::vector<LinZone> forward, backward;
};

// One key's entries (sorted by LinRecLess, no DELETE ok, no malformed entry, no value
// written twice). "" when linearizable, else why not.
std::string lin_check_zones(std::span<const HistoryEntry> h, std::span<const LinRec> recs,
                            std::uint32_t loader, LinZoneScratch& z) {
  z.forward.clear();
  z.backward.clear();
  std::size_t i = 0;
  while (i < recs.size() && (recs[i].cls == LinClass::put || recs[i].cls == LinClass::read)) {
    // [i, j): the cluster of recs[i]'s value; its PUT (if any) sorts first.
    const std::uint32_t writer = recs[i].writer;
    const std::uint64_t version = recs[i].version;
    std::size_t j = i;
    while (j < recs.size() && (recs[j].cls == LinClass::put || recs[j].cls == LinClass::read) &&
           recs[j].writer == writer && recs[j].version == version)
      ++j;
    const bool loaded = writer == loader && version == 0;
    const bool has_put = recs[i].cls == LinClass::put;
    if (!has_put && !loaded)
      return lin_describe(h, recs[i].entry, loader) + ", a value no PUT of the key wrote";
    LinZone zone{};
    zone.writer = writer;
    zone.version = version;
    if (has_put) {
      const HistoryEntry& w = h[recs[i].entry];
      zone.f = lin_at(w.end_ns);
      zone.s = lin_at(w.start_ns);
      zone.f_entry = zone.s_entry = zone.write_entry = recs[i].entry;
    } else {
      zone.f = zone.s = LinTime{};
      zone.f_entry = zone.s_entry = zone.write_entry = kLinLoad;
    }
    for (std::size_t k = has_put ? i + 1 : i; k < j; ++k) {
      const HistoryEntry& r = h[recs[k].entry];
      if (has_put && r.end_ns < h[recs[i].entry].start_ns)
        return lin_describe(h, recs[k].entry, loader) + " before " +
               lin_describe(h, recs[i].entry, loader) + " started";
      if (lin_at(r.end_ns) < zone.f) {
        zone.f = lin_at(r.end_ns);
        zone.f_entry = recs[k].entry;
      }
      if (lin_at(r.start_ns) > zone.s) {
        zone.s = lin_at(r.start_ns);
        zone.s_entry = recs[k].entry;
      }
    }
    (zone.f < zone.s ? z.forward : z.backward).push_back(zone);
    i = j;
  }
  // The rest are reads of absence (the caller sends no DELETE ok here).
  if (i < recs.size())
    return lin_describe(h, recs[i].entry, loader) +
           ", but the key was loaded and no DELETE of it succeeded";

  // A forward zone [f, s] needs its value over all of (f, s): two of them must not overlap.
  // Sorted by f, overlapping zones include two neighbours. Zones that only touch (s1 == f2)
  // are fine: the operations at that instant are all concurrent.
  std::sort(z.forward.begin(), z.forward.end(),
            [](const LinZone& a, const LinZone& b) { return a.f < b.f; });
  for (std::size_t k = 1; k < z.forward.size(); ++k)
    if (z.forward[k].f < z.forward[k - 1].s)
      return lin_forward(h, z.forward[k - 1], loader) + ", and " +
             lin_forward(h, z.forward[k], loader) + ": the two overlap";
  // A backward zone [s, f] takes effect at one instant in it, which must not lie strictly
  // inside a forward zone: only the forward zone with the largest f' < s can contain it.
  for (const LinZone& b : z.backward) {
    auto it = std::lower_bound(z.forward.begin(), z.forward.end(), b.s,
                               [](const LinZone& a, LinTime t) { return a.f < t; });
    if (it == z.forward.begin()) continue;
    const LinZone& a = *(it - 1);
    if (b.f < a.s)
      return lin_backward(h, b, loader) + ", all of it while " + lin_forward(h, a, loader);
  }
  return {};
}

// ---- Deletes or repeated values: search --------------------------------------------------------

struct LinOp {
  std::uint64_t start, end;
  std::uint32_t entry;
  std::uint32_t value;  // put / read: an index into the key's values
  LinClass cls;
};

bool lin_apply(const LinOp& op, std::uint32_t state, std::uint32_t* next) noexcept {
  *next = state;
  switch (op.cls) {
    case LinClass::put: *next = op.value; return true;
    case LinClass::read: return state == op.value;
    case LinClass::del: *next = kLinAbsent; return state != kLinAbsent;
    case LinClass::absent: return state == kLinAbsent;
    case LinClass::malformed:
    case LinClass::none: break;
  }
  return false;
}

// The configurations the search has reached: (operations placed, state). The placed set is
// closed under real-time order, so it is written as p (every operation before the first one
// not placed, in start order) plus the few placed after it, all of which start before p ends.
class LinMemo {
 public:
  // false when (p, state, extras) was there already.
  bool add(std::uint32_t p, std::uint32_t state, std::span<const std::uint32_t> extras) {
    std::uint64_t hash = mix64(p ^ (std::uint64_t{state} << 32));
    for (std::uint32_t x : extras) hash = mix64(hash ^ x);
    if ((items_.size() + 1) * 2 > slots_.size()) grow();
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t at = hash & mask;; at = (at + 1) & mask) {
      const std::size_t slot = slots_[at];
      if (slot == 0) {
        slots_[at] = items_.size() + 1;
        items_.push_back({hash, pool_.size(), extras.size(), p, state});
        pool_.insert(pool_.end(), extras.begin(), extras.end());
        return true;
      }
      const Item& it = items_[slot - 1];
      if (it.hash == hash && it.p == p && it.state == state && it.len == extras.size() &&
          std::equal(extras.begin(), extras.end(),
                     pool_.begin() + static_cast<std::ptrdiff_t>(it.off)))
        return false;
    }
  }

 private:
  struct Item {
    std::uint64_t hash;
    std::size_t off, len;
    std::uint32_t p, state;
  };
  void grow() {
    slots_.assign(std::max<std::size_t>(1024, slots_.size() * 2), 0);
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t k = 0; k < items_.size(); ++k) {
      std::size_t at = items_[k].hash & mask;
      while (slots_[at] != 0) at = (at + 1) & mask;
      slots_[at] = k + 1;
    }
  }
  std::vector<Item> items_;
  std::vector<std::uint32_t> pool_;
  std::vector<std::size_t> slots_;  // 0: empty, else an index into items_ plus one
};

// One key's entries (sorted by LinRecLess, no malformed entry). "" when linearizable.
std::string lin_check_search(std::span<const HistoryEntry> h, std::span<const LinRec> recs,
                             std::uint32_t loader) {
  // The values: the load's and every PUT's, each once; a GET of another value cannot be
  // explained, nor one that ended before every PUT of its value started.
  struct Value {
    std::uint32_t writer;
    std::uint64_t version;
    LinTime first_start;  // the earliest start among its writes
  };
  std::vector<Value> values{{loader, 0, LinTime{}}};
  LinTime first_del{true, std::numeric_limits<std::uint64_t>::max()};
  bool any_del = false;
  for (const LinRec& r : recs) {
    const HistoryEntry& e = h[r.entry];
    if (r.cls == LinClass::put) values.push_back({r.writer, r.version, lin_at(e.start_ns)});
    if (r.cls == LinClass::del) {
      any_del = true;
      first_del = std::min(first_del, lin_at(e.start_ns));
    }
  }
  auto value_less = [](const Value& a, const Value& b) {
    return std::tie(a.writer, a.version, a.first_start) <
           std::tie(b.writer, b.version, b.first_start);
  };
  std::sort(values.begin(), values.end(), value_less);
  values.erase(std::unique(values.begin(), values.end(),
                           [](const Value& a, const Value& b) {
                             return a.writer == b.writer && a.version == b.version;
                           }),
               values.end());
  auto find = [&](std::uint32_t writer, std::uint64_t version) -> std::uint32_t {
    auto it = std::lower_bound(values.begin(), values.end(), Value{writer, version, LinTime{}},
                               value_less);
    if (it == values.end() || it->writer != writer || it->version != version) return kLinAbsent;
    return static_cast<std::uint32_t>(it - values.begin());
  };

  std::vector<LinOp> ops;
  ops.reserve(recs.size());
  for (const LinRec& r : recs) {
    const HistoryEntry& e = h[r.entry];
    LinOp op{e.start_ns, e.end_ns, r.entry, kLinAbsent, r.cls};
    if (r.cls == LinClass::put || r.cls == LinClass::read) op.value = find(r.writer, r.version);
    if (r.cls == LinClass::read) {
      if (op.value == kLinAbsent)
        return lin_describe(h, r.entry, loader) + ", a value no PUT of the key wrote";
      if (lin_at(e.end_ns) < values[op.value].first_start)
        return lin_describe(h, r.entry, loader) + " before any PUT of that value started";
    }
    if (r.cls == LinClass::absent) {
      if (!any_del)
        return lin_describe(h, r.entry, loader) +
               ", but the key was loaded and no DELETE of it succeeded";
      if (lin_at(e.end_ns) < first_del)
        return lin_describe(h, r.entry, loader) + " before any DELETE of the key started";
    }
    ops.push_back(op);
  }
  if (ops.size() >= std::numeric_limits<std::uint32_t>::max() / 2)
    return "not decided within the search budget (" + std::to_string(ops.size()) + " operations)";
  std::sort(ops.begin(), ops.end(), [](const LinOp& a, const LinOp& b) {
    return std::tie(a.start, a.end, a.entry) < std::tie(b.start, b.end, b.entry);
  });
  const auto n = static_cast<std::uint32_t>(ops.size());
  if (n == 0) return {};
  const std::uint32_t loaded = find(loader, 0);

  // The pending operations' calls (node 2i) and returns (2i + 1) in time order, a call before a
  // return at the same time (those overlap), in a circular list through the head node 2n.
  // Placing an operation unlinks both nodes; taking it back relinks them (dancing links).
  const std::uint32_t head = 2 * n;
  std::vector<std::uint32_t> next(2 * std::size_t{n} + 1), prev(2 * std::size_t{n} + 1);
  {
    std::vector<std::uint32_t> returns(n);
    for (std::uint32_t i = 0; i < n; ++i) returns[i] = i;
    std::sort(returns.begin(), returns.end(), [&](std::uint32_t a, std::uint32_t b) {
      return std::tie(ops[a].end, a) < std::tie(ops[b].end, b);
    });
    std::uint32_t last = head, c = 0, r = 0;
    auto link = [&](std::uint32_t node) {
      next[last] = node;
      prev[node] = last;
      last = node;
    };
    while (c < n || r < n) {
      if (c < n && (r == n || ops[c].start <= ops[returns[r]].end)) {
        link(2 * c++);
      } else {
        link(2 * returns[r++] + 1);
      }
    }
    link(head);
  }
  auto lift = [&](std::uint32_t i) {
    for (std::uint32_t node : {2 * i, 2 * i + 1}) {
      next[prev[node]] = next[node];
      prev[next[node]] = prev[node];
    }
  };
  auto unlift = [&](std::uint32_t i) {
    for (std::uint32_t node : {2 * i + 1, 2 * i}) {
      next[prev[node]] = node;
      prev[next[node]] = node;
    }
  };

  std::vector<std::uint64_t> placed((std::size_t{n} + 63) / 64);
  auto is_placed = [&](std::uint32_t i) { return (placed[i / 64] >> (i % 64)) & 1; };
  auto flip = [&](std::uint32_t i) { placed[i / 64] ^= std::uint64_t{1} << (i % 64); };
  struct Frame {
    std::uint32_t op, state;
    bool read_first;  // placed ahead of the others: no alternative to try
  };
  std::vector<Frame> stack;
  std::vector<std::uint32_t> extras;
  LinMemo memo;
  const std::uint64_t budget = kLinBudget + kLinBudgetPerOp * n;
  std::uint64_t steps = 0;
  std::uint32_t state = loaded;
  enum class Placed { pushed, seen, all };
  // Places operation i (taking the state to `after`) unless that configuration was reached
  // before, which means it led nowhere (a configuration on the current path has fewer placed).
  auto place = [&](std::uint32_t i, std::uint32_t after, bool read_first) {
    lift(i);
    flip(i);
    if (next[head] == head) return Placed::all;
    const std::uint32_t p = next[head] / 2;  // the first not placed (a call leads the list)
    const std::size_t want = stack.size() + 1 - p;
    extras.clear();
    for (std::uint32_t k = p + 1; extras.size() < want && k < n; ++k, ++steps)
      if (is_placed(k)) extras.push_back(k);
    if (memo.add(p, after, extras)) {
      stack.push_back({i, state, read_first});
      state = after;
      return Placed::pushed;
    }
    flip(i);
    unlift(i);
    return Placed::seen;
  };
  // The deepest dead end, for the report.
  std::size_t best_depth = 0;
  std::uint32_t best_state = loaded, best_op = kLinAbsent;
  std::uint32_t cur = head;
  bool fresh = true;  // a new configuration: look for a read first
  for (;;) {
    if (++steps > budget)
      return "not decided within the search budget (" + std::to_string(n) + " operations)";
    bool dead = false;
    if (fresh) {
      fresh = false;
      cur = next[head];
      // A candidate read of the current state goes first, alone: moved to the front of any
      // order of the pending operations it precedes none of them and changes nothing, so an
      // order exists after it exactly when one exists now.
      for (std::uint32_t node = next[head]; node != head && node % 2 == 0;
           node = next[node], ++steps) {
        const LinOp& op = ops[node / 2];
        std::uint32_t after;
        if ((op.cls != LinClass::read && op.cls != LinClass::absent) ||
            !lin_apply(op, state, &after))
          continue;
        const Placed r = place(node / 2, after, true);
        if (r == Placed::all) return {};
        if (r == Placed::pushed) fresh = true;
        if (r == Placed::seen) dead = true;
        break;
      }
      if (fresh) continue;
    }
    if (!dead && cur != head && cur % 2 == 0) {
      const std::uint32_t i = cur / 2;
      std::uint32_t after;
      if (lin_apply(ops[i], state, &after)) {
        const Placed r = place(i, after, false);
        if (r == Placed::all) return {};
        if (r == Placed::pushed) {
          fresh = true;
          continue;
        }
      }
      cur = next[cur];
      continue;
    }
    // A pending operation ends at cur (or this configuration is known to lead nowhere): no
    // candidate before it led anywhere; take the last placement back.
    if (!dead && cur != head && (stack.size() > best_depth || best_op == kLinAbsent)) {
      best_depth = stack.size();
      best_state = state;
      best_op = cur / 2;
    }
    bool resumed = false;
    while (!resumed && !stack.empty()) {
      const Frame f = stack.back();
      stack.pop_back();
      flip(f.op);
      unlift(f.op);
      state = f.state;
      // A read placed first had no alternative: its configuration fails with it.
      if (!f.read_first) {
        cur = next[2 * f.op];
        resumed = true;
      }
    }
    if (!resumed) break;
  }
  std::string out = "no order of its " + std::to_string(n) + " operations is legal";
  if (best_op != kLinAbsent)
    out += ": the longest legal orders place " + std::to_string(best_depth) +
           " of them, after which the key holds " +
           (best_state == kLinAbsent
                ? std::string("nothing")
                : lin_value(values[best_state].writer, values[best_state].version, loader)) +
           " and " + lin_describe(h, ops[best_op].entry, loader) + " cannot be placed";
  return out;
}

// One key: "" when linearizable, else why not.
std::string lin_check_key(std::span<const HistoryEntry> h, std::span<const LinRec> recs,
                          std::uint32_t loader, LinZoneScratch& scratch) {
  bool search = false;
  std::size_t malformed = 0;
  std::uint32_t first_bad = 0;  // they sort by entry
  for (std::size_t i = 0; i < recs.size(); ++i) {
    const LinRec& r = recs[i];
    if (r.cls == LinClass::malformed && malformed++ == 0) first_bad = r.entry;
    if (r.cls == LinClass::del) search = true;
    if (r.cls == LinClass::put &&
        ((r.writer == loader && r.version == 0) ||
         (i > 0 && recs[i - 1].cls == LinClass::put && recs[i - 1].writer == r.writer &&
          recs[i - 1].version == r.version)))
      search = true;
  }
  if (malformed)
    return "malformed: " + lin_describe(h, first_bad, loader) +
           (malformed > 1 ? " (and " + std::to_string(malformed - 1) + " more)" : "");
  return search ? lin_check_search(h, recs, loader) : lin_check_zones(h, recs, loader, scratch);
}

}  // namespace

std::string check_linearizable(std::span<const HistoryEntry> history, std::uint32_t loader) {
  if (history.size() >= kLinLoad)
    return "history of " + std::to_string(history.size()) +
           " operations: too long to check (at most " + std::to_string(kLinLoad - 1) + ")";
  std::vector<LinRec> recs;
  recs.reserve(history.size());
  for (std::size_t i = 0; i < history.size(); ++i) {
    const HistoryEntry& e = history[i];
    const LinClass cls = lin_classify(e);
    if (cls == LinClass::none) continue;
    const bool valued = cls == LinClass::put || cls == LinClass::read;
    recs.push_back(
        {e.key, valued ? e.version : 0, valued ? e.writer : 0, static_cast<std::uint32_t>(i), cls});
  }
  std::sort(recs.begin(), recs.end(), LinRecLess{});

  std::string out;
  std::size_t bad = 0;
  LinZoneScratch scratch;
  const std::span<const LinRec> all(recs);
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i + 1;
    while (j < all.size() && all[j].key == all[i].key) ++j;
    const std::string why = lin_check_key(history, all.subspan(i, j - i), loader, scratch);
    if (!why.empty() && ++bad <= kLinMaxKeys)
      out +=
          (out.empty() ? "" : "; ") + std::string("key ") + std::to_string(all[i].key) + ": " + why;
    i = j;
  }
  if (bad > kLinMaxKeys) out += "; and " + std::to_string(bad - kLinMaxKeys) + " more keys";
  return out;
}

}  // namespace fabflow::kv
