// The checks of `fabflow doctor`: what decides whether fabflow will run, and run well, on this
// host, each ok / warn / fail / n/a with a one-line fix. What can be tried is tried (a
// userfaultfd, a cross-memory read of a child, a loopback connection), not guessed from
// versions. docs/portability.md, "fabflow doctor".
#pragma once

#include <string>
#include <vector>

namespace fabflow::tools {

struct Check {
  std::string name;
  std::string status;  // ok, warn, fail, n/a
  std::string detail;
  std::string fix;  // empty when there is nothing to do
};

// Every check, in the order the doctor prints them.
std::vector<Check> check_host();

// "N MiB", rounded.
std::string mib(unsigned long long bytes);

}  // namespace fabflow::tools
