// Runs one child program in its own process group with a time bound, streaming its stdout line
// by line; for the experiment runner (bench children, the Python plot module), advise and the
// CLI's helpers (tc, iptables). Also the one line fabflow prints for an error.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fabflow::tools {

struct ChildOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  std::vector<std::pair<std::string, std::string>> env;  // set in the child only
  std::chrono::seconds timeout{0};                       // 0: none
  bool capture_stderr = false;                           // false: the child's stderr is ours
};

struct ChildResult {
  int status = -1;  // exit code, 128+signal; 127: could not be started
  bool timed_out = false;
  std::string err;  // stderr, when captured
};

// Runs the child to the end (or to its timeout: SIGTERM to its group, SIGKILL 5 s later) and
// calls `on_line` for every line of its stdout, without the newline. While it runs, SIGINT and
// SIGTERM sent to this process are passed on to the child's group and remembered (see
// interrupted()). Not thread-safe: one child at a time.
ChildResult run_child(const ChildOptions& options,
                      const std::function<void(const std::string&)>& on_line);

// The signal (SIGINT or SIGTERM) this process received while a child ran, or 0.
int interrupted();

// Prints "fabflow: error: <msg>" on one line (the launcher shows only the first such line of a
// run; child_error reads it back).
void print_error(const std::string& msg);

// What a fabflow child said went wrong, from its captured stderr: its first "fabflow: error:"
// line without that prefix, else its last non-empty line, else "no message".
std::string child_error(const std::string& err);

// The path of an executable: `name` itself when it holds a '/', else the first match on PATH
// and then in `also` (colon-separated, for tools in /usr/sbin that a user's PATH may lack).
// Empty when there is none.
std::string find_binary(const std::string& name, const std::string& also = "");

}  // namespace fabflow::tools
