// errno as text for one-line error messages: the one helper every part of fabflow uses.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

namespace fabflow {

// strerror(err), thread-safe: "Connection refused".
inline std::string errno_text(int err) {
  char buf[128];
  return strerror_r(err, buf, sizeof buf);  // GNU: returns the message, maybe not in buf
}

// "what: strerror(err)", e.g. "launcher: pipe2: Too many open files".
inline std::string errno_text(std::string_view what, int err = errno) {
  return std::string(what) + ": " + errno_text(err);
}

}  // namespace fabflow
