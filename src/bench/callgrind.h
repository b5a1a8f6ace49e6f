// Reading valgrind's callgrind output: a process's instructions executed (Ir) in total and per
// function, for `bench rr --callgrind` (instructions per message, and where the responder's go).
// The format is valgrind's "Callgrind Format Specification"; only what callgrind writes with
// its default options is read (positions "line" or "instr line", any list of events of which
// Ir is one, compressed names, relative positions, calls).
#pragma once

#include <sys/types.h>

#include <iosfwd>
#include <string>
#include <vector>

namespace fabflow::callgrind {

// Instructions executed in one function itself (its callees not counted).
struct FunctionCost {
  std::string name;    // as callgrind names it (a C++ name demangled, or "0x..." when unknown)
  std::string object;  // the file it was loaded from, base name (libfabric.so.1, fabflow, ...)
  double ir = 0;
};

struct Profile {
  double total = 0;                     // the dump's totals (or summary) line
  std::vector<FunctionCost> functions;  // every function with Ir, the most first
};

// Parses one dump. `what` names it in errors. Throws Error on anything malformed: a cost line
// before any function, an unknown compressed name, a missing Ir event, non-numeric costs.
Profile parse(std::istream& in, const std::string& what);

// The newest dump of process `pid` in `dir` (files "cg.<pid>", "cg.<pid>.<n>"); throws Error
// when there is none.
Profile read_newest(const std::string& dir, pid_t pid);

// The share of `p.total` spent in the functions of objects whose base name starts with one of
// `prefixes` (0 when the total is 0).
double share_of_objects(const Profile& p, const std::vector<std::string>& prefixes);

// Adds `more` to `into`: totals, and each function's Ir by (name, object); the most first.
void merge(Profile& into, const Profile& more);

// Where a function's code lives, for the shares of a profile: the transport (libfabric and its
// providers, or fabflow's own transports: functions of fabflow::local and fabflow::ofi), the C
// library and loader (locks, copies, system call wrappers), the rest of fabflow (the CLI, the
// test binary or libfabflow), or anything else (the C++ runtime, valgrind's preloads).
enum class Place { transport, libc, fabflow, other };
Place place_of(const FunctionCost& f);

}  // namespace fabflow::callgrind
