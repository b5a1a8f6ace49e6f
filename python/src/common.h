// What the parts of fabflow's Python module share: a rank (its bootstrap), transports opened on
// it, buffers taken from Python objects, and waits that release the GIL and stay interruptible.
#pragma once

#include <fabflow/bootstrap.h>
#include <fabflow/status.h>
#include <fabflow/transport.h>

#include <pybind11/pybind11.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace fabflow::python {

namespace py = pybind11;

// One rank: its bootstrap, shared with every queue, channel and store opened on it.
struct Rank {
  std::shared_ptr<Bootstrap> boot;
  int rank() const { return boot->rank(); }
  int size() const { return boot->size(); }
};

// A call's failure as the exception Python sees: fabflow.PeerError naming the peer when the
// bootstrap knows one vanished or went silent (its word, else `text`), fabflow.Error otherwise.
[[noreturn]] void raise_failure(Bootstrap& boot, const std::string& what, const std::string& text);

// A connected transport for `ops` over every rank of `boot` (collective). Call without the GIL.
std::unique_ptr<Transport> open_connected(Bootstrap& boot, const std::string& provider,
                                          std::vector<Op> ops, std::size_t rx_depth = 256);

// A contiguous buffer borrowed from a Python object for the length of one call (held with the
// GIL, used without it). `writable` asks for a buffer the call may fill: a read-only one
// (bytes, a read-only memoryview) is refused with `what` naming the call.
class Buffer {
 public:
  Buffer(const py::handle& obj, bool writable, const char* what);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : view_(o.view_), held_(o.held_) { o.held_ = false; }

  std::span<const std::byte> bytes() const noexcept {
    return {static_cast<const std::byte*>(view_.buf), static_cast<std::size_t>(view_.len)};
  }
  std::span<std::byte> writable() const noexcept {
    return {static_cast<std::byte*>(view_.buf), static_cast<std::size_t>(view_.len)};
  }
  // A buffer of two or more dimensions as rows (its first dimension): how many, 0 otherwise.
  std::size_t rows() const noexcept {
    return view_.ndim >= 2 && view_.shape ? static_cast<std::size_t>(view_.shape[0]) : 0;
  }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

// A bound on a wait, from a timeout in seconds (None: no bound), checked in slices: each slice
// runs without the GIL, and between two slices check() takes it back to run Python's signal
// handlers (a KeyboardInterrupt raised there propagates) and throws Error once the bound passed.
class Wait {
 public:
  static constexpr std::chrono::milliseconds kSlice{50};
  explicit Wait(std::optional<double> timeout_s);
  // The next slice: kSlice, or what is left of the bound when less.
  std::chrono::milliseconds slice() const noexcept;
  // With the GIL: raises a pending signal's exception, or Error("<what>: timed out ...").
  void check(const std::string& what) const;
  bool expired() const noexcept;

 private:
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  double timeout_s_ = 0;
};

// A timeout argument: None (no bound) or seconds > 0; anything else is a UsageError.
std::optional<double> checked_timeout(std::optional<double> seconds, const char* what);

// Waits until done() is true, calling it without the GIL in slices of `wait`, and checking
// for signals and the bound between them (Wait::check). done() must not touch Python.
template <class Done>
void wait_until(Wait& wait, const std::string& what, Done&& done) {
  for (;;) {
    bool finished = false;
    {
      py::gil_scoped_release unlocked;
      const auto until = std::chrono::steady_clock::now() + wait.slice();
      do {
        finished = done();
      } while (!finished && std::chrono::steady_clock::now() < until);
    }
    if (finished) return;
    wait.check(what);
  }
}

// Registers the parts on the module.
void bind_flow(py::module_& m);
void bind_rr(py::module_& m);
void bind_bulk(py::module_& m);
void bind_kv(py::module_& m);

}  // namespace fabflow::python
