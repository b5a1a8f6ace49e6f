// Error and status types shared by every fabflow component.
//
// Setup paths throw fabflow::Error with a message that names the component, the call and the
// reason. Data paths return a Status: "try again" (resources busy, queue full or empty) is a
// normal state, not an error.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace fabflow {

// A setup or protocol failure, already formatted as one line for the user.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failure caused by the user's input (bad flag, unknown provider, size above a limit).
// The CLI prints it as one line and exits with status 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

// A peer process vanished or broke the protocol; carries the rank when known.
class PeerError : public Error {
 public:
  PeerError(int rank, const std::string& what) : Error(what), rank_(rank) {}
  int rank() const noexcept { return rank_; }

 private:
  int rank_;
};

enum class Status : int {
  ok = 0,
  again,    // transient: post queue or provider resources full, retry after progress
  empty,    // nothing to take
  full,     // no room
  closed,   // orderly end of stream
  timeout,  // a bounded wait expired
  failed,   // permanent failure; details were logged where classified
};

constexpr std::string_view to_string(Status s) noexcept {
  switch (s) {
    case Status::ok: return "ok";
    case Status::again: return "again";
    case Status::empty: return "empty";
    case Status::full: return "full";
    case Status::closed: return "closed";
    case Status::timeout: return "timeout";
    case Status::failed: return "failed";
  }
  return "?";
}

}  // namespace fabflow
