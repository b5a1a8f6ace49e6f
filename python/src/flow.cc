// Flow queues from Python (docs/flow-queues.md): each end opens its own transport on its rank.
// Items go in from any contiguous buffer and come out copied (dequeue, dequeue_many,
// dequeue_into) or in place in the consumer's ring (peek: a memoryview valid inside a `with`).
#include <fabflow/flow.h>

#include <pybind11/stl.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common.h"

namespace fabflow::python {
namespace {

flow::QueueOptions queue_options(const std::string& design, std::size_t item_bytes,
                                 std::size_t capacity) {
  if (item_bytes < 1 || item_bytes > (std::size_t{1} << 26))
    throw UsageError("fabflow: item_bytes must be in 1..64 MiB");
  if (capacity < 2 || capacity > (std::size_t{1} << 24))
    throw UsageError("fabflow: capacity must be in 2..16777216 items");
  flow::QueueOptions o;
  o.item_bytes = item_bytes;
  o.capacity = capacity;
  if (design == "auto") {
    o.automatic = true;
  } else if (design == "socket") {
    o.socket = true;
  } else if (auto d = flow::Design::parse(design)) {
    o.design = *d;
  } else {
    throw UsageError("fabflow: unknown design '" + design +
                     "' (auto, socket or <data>-<transfer>-<space>)");
  }
  return o;
}

// One thread at a time in an end: a second thread calling while the first waits is refused.
class InUse {
 public:
  explicit InUse(std::atomic<bool>& flag, const char* what) : flag_(flag) {
    if (flag_.exchange(true))
      throw UsageError(std::string("fabflow: ") + what +
                       ": this queue end is in use by another thread");
  }
  ~InUse() { flag_.store(false); }
  InUse(const InUse&) = delete;
  InUse& operator=(const InUse&) = delete;

 private:
  std::atomic<bool>& flag_;
};

// A queue end with the transport it opened (collective over the rank's bootstrap).
template <class End>
struct QueueEnd {
  std::shared_ptr<Bootstrap> boot;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<End> end;
  std::optional<double> timeout;
  std::string why;  // auto's choice, kept past the end's close
  std::atomic<bool> busy{false};

  void open(Rank& r, const std::string& provider, const flow::QueueOptions& o) {
    boot = r.boot;
    transport = open_connected(*boot, provider, flow::required_ops(o), flow::required_rx_depth(o));
  }
  void check(Status s, const char* what) const {
    if (s == Status::failed) raise_failure(*boot, what, end->error());
    if (s != Status::ok)
      throw Error(std::string("fabflow: ") + what + ": " + std::string(to_string(s)));
  }
  End& live(const char* what, const char* gone) {
    if (!end) throw Error(std::string("fabflow: ") + what + ": " + gone);
    return *end;
  }
  // The ends stay until the peer is done with them too.
  void finish() {
    if (!end) return;
    py::gil_scoped_release unlocked;
    boot->barrier([this] { transport->progress(); });
    end.reset();
  }
};

// An item longer than the queue's items is refused before the queue sees it.
void check_length(std::size_t len, std::size_t item_bytes, const char* what) {
  if (len > item_bytes)
    throw UsageError(std::string("fabflow: ") + what + ": the item is " + std::to_string(len) +
                     " bytes; items are at most " + std::to_string(item_bytes) + " (item_bytes)");
}

struct Producer : QueueEnd<flow::Producer> {
  std::size_t item_bytes = 0;

  Producer(Rank& r, int peer, const std::string& design, const std::string& provider,
           std::size_t item_bytes_, std::size_t capacity, std::optional<double> timeout_s) {
    const auto o = queue_options(design, item_bytes_, capacity);
    timeout = checked_timeout(timeout_s, "Producer");
    item_bytes = item_bytes_;
    if (peer < 0 || peer >= r.size() || peer == r.rank())
      throw UsageError("fabflow: Producer: peer must be another rank of this job (0.." +
                       std::to_string(r.size() - 1) + ")");
    py::gil_scoped_release unlocked;
    open(r, provider, o);
    end = flow::make_producer(*transport, *boot, peer, o);
    why = end->why();
  }

  void enqueue(const py::handle& item) {
    InUse in_use(busy, "enqueue");
    flow::Producer& q = live("enqueue", "the producer is closed");
    const Buffer b(item, false, "enqueue");
    check_length(b.bytes().size(), item_bytes, "enqueue");
    Wait wait(timeout);
    Status s = Status::timeout;
    for (;;) {
      {
        py::gil_scoped_release unlocked;
        s = q.enqueue(b.bytes(), wait.slice());
      }
      if (s != Status::timeout) break;
      wait.check("enqueue");
    }
    check(s, "enqueue");
  }

  // Every item of `items`, in order: a sequence of buffers, or one buffer of two or more
  // dimensions whose rows are the items (a 2-D numpy array: no Python object per item). Runs
  // of items of one length go in batches of reserved slots (reserve_many / commit_many), one
  // copy each, the queue's per-call work paid per batch.
  void enqueue_many(const py::object& items) {
    InUse in_use(busy, "enqueue_many");
    flow::Producer& q = live("enqueue_many", "the producer is closed");
    std::vector<Buffer> held;
    std::vector<std::span<const std::byte>> views;
    if (PyObject_CheckBuffer(items.ptr())) {
      const Buffer& block = held.emplace_back(items, false, "enqueue_many");
      const std::size_t rows = block.rows();
      if (rows == 0)
        throw UsageError(
            "fabflow: enqueue_many takes a sequence of buffers, or a buffer of two or more "
            "dimensions (one item per row); this one has one");
      const std::size_t row = block.bytes().size() / rows;
      check_length(row, item_bytes, "enqueue_many");
      views.reserve(rows);
      for (std::size_t i = 0; i < rows; ++i) views.push_back(block.bytes().subspan(i * row, row));
    } else {
      const py::sequence seq = py::reinterpret_borrow<py::sequence>(items);
      held.reserve(py::len(seq));
      for (const py::handle item : seq) {
        views.push_back(held.emplace_back(item, false, "enqueue_many").bytes());
        check_length(views.back().size(), item_bytes, "enqueue_many");
      }
    }
    Wait wait(timeout);
    std::vector<std::span<std::byte>> slots(std::min<std::size_t>(views.size(), 1024));
    std::size_t next = 0;
    while (next < views.size()) {
      Status s = Status::ok;
      {
        py::gil_scoped_release unlocked;
        const auto until = std::chrono::steady_clock::now() + wait.slice();
        while (next < views.size()) {
          const std::size_t len = views[next].size();
          std::size_t run = 1;
          while (next + run < views.size() && run < slots.size() && views[next + run].size() == len)
            ++run;
          std::size_t granted = 0;
          s = q.reserve_many(len, std::span(slots.data(), run), &granted);
          if (s == Status::full) {
            if (std::chrono::steady_clock::now() >= until) break;
            continue;
          }
          if (s != Status::ok) break;
          for (std::size_t i = 0; i < granted; ++i)
            if (len) std::memcpy(slots[i].data(), views[next + i].data(), len);
          s = q.commit_many(granted);
          if (s != Status::ok) break;
          next += granted;
        }
      }
      if (s != Status::ok && s != Status::full) check(s, "enqueue_many");
      if (next < views.size()) wait.check("enqueue_many");
    }
  }

  // Sends the end of stream, waits until the consumer has every item, then leaves with it.
  void close() {
    InUse in_use(busy, "close");
    if (!end) return;
    Wait wait(timeout);
    Status s = Status::timeout;
    for (;;) {
      {
        py::gil_scoped_release unlocked;
        s = end->close(wait.slice());
      }
      if (s != Status::timeout) break;
      wait.check("close");
    }
    check(s, "close");
    finish();
  }
};

struct Consumer : QueueEnd<flow::Consumer> {
  std::vector<std::byte> buf;
  bool peeked = false;  // a peek's item is held until its `with` block ends

  Consumer(Rank& r, int peer, const std::string& design, const std::string& provider,
           std::size_t item_bytes, std::size_t capacity, std::optional<double> timeout_s) {
    const auto o = queue_options(design, item_bytes, capacity);
    timeout = checked_timeout(timeout_s, "Consumer");
    if (peer < 0 || peer >= r.size() || peer == r.rank())
      throw UsageError("fabflow: Consumer: peer must be another rank of this job (0.." +
                       std::to_string(r.size() - 1) + ")");
    buf.resize(item_bytes);
    py::gil_scoped_release unlocked;
    open(r, provider, o);
    end = flow::make_consumer(*transport, *boot, peer, o);
    why = end->why();
  }

  void not_peeked(const char* what) const {
    if (peeked)
      throw UsageError(std::string("fabflow: ") + what +
                       ": an item is still held by peek(); leave its `with` block first");
  }

  // Copies the next item into `out`: its length, or nullopt at the end of the stream (the end
  // then leaves with the producer).
  std::optional<std::size_t> next_into(std::span<std::byte> out, const char* what) {
    flow::Consumer& q = *end;
    Wait wait(timeout);
    std::size_t len = 0;
    Status s = Status::timeout;
    for (;;) {
      {
        py::gil_scoped_release unlocked;
        s = q.dequeue(out, &len, wait.slice());
      }
      if (s != Status::timeout) break;
      wait.check(what);
    }
    if (s == Status::closed) {
      finish();
      return std::nullopt;
    }
    check(s, what);
    return len;
  }

  // The next item as a memoryview over its own copy, or None at the end.
  py::object dequeue() {
    InUse in_use(busy, "dequeue");
    if (!end) return py::none();
    not_peeked("dequeue");
    const auto len = next_into(buf, "dequeue");
    if (!len) return py::none();
    py::bytes copy(reinterpret_cast<const char*>(buf.data()), *len);
    return py::memoryview(copy);
  }

  // Copies the next item into `out` (writable, at least as long as the item): its length, or
  // None at the end. A buffer shorter than item_bytes is refused before anything is taken.
  py::object dequeue_into(const py::handle& out) {
    InUse in_use(busy, "dequeue_into");
    const Buffer b(out, true, "dequeue_into");
    if (!end) return py::none();
    not_peeked("dequeue_into");
    if (b.writable().size() < buf.size())
      throw UsageError("fabflow: dequeue_into: the buffer holds " +
                       std::to_string(b.writable().size()) + " bytes; items may be " +
                       std::to_string(buf.size()) + " (item_bytes)");
    const auto len = next_into(b.writable(), "dequeue_into");
    if (!len) return py::none();
    return py::int_(*len);
  }

  // Waits for at least one item, then copies up to `max_items` that are there into one bytes
  // object: a list of memoryviews over it, one per item; an empty list at the end.
  py::list dequeue_many(std::size_t max_items) {
    InUse in_use(busy, "dequeue_many");
    if (max_items < 1 || max_items > 65536)
      throw UsageError("fabflow: dequeue_many: max_items must be in 1..65536");
    py::list out;
    if (!end) return out;
    not_peeked("dequeue_many");
    flow::Consumer& q = *end;
    std::vector<std::span<const std::byte>> items(max_items);
    std::size_t n = 0;
    Status s = Status::empty;
    Wait wait(timeout);
    wait_until(wait, "dequeue_many", [&] {
      s = q.peek_many(items, &n);
      return s != Status::empty;
    });
    if (s == Status::closed) {
      finish();
      return out;
    }
    check(s, "dequeue_many");
    std::size_t total = 0;
    for (std::size_t i = 0; i < n; ++i) total += items[i].size();
    PyObject* raw = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(total));
    if (!raw) throw py::error_already_set();
    const auto block = py::reinterpret_steal<py::bytes>(raw);
    char* dst = PyBytes_AsString(raw);
    std::vector<std::size_t> lengths(n);
    {
      // Releasing may post (space notifications) and wait for the peer: without the GIL.
      py::gil_scoped_release unlocked;
      for (std::size_t i = 0; i < n; ++i) {
        lengths[i] = items[i].size();
        if (lengths[i]) std::memcpy(dst, items[i].data(), lengths[i]);
        dst += lengths[i];
      }
      s = q.release_many(n);
    }
    check(s, "dequeue_many");
    const py::memoryview whole(block);
    PyObject* view = whole.ptr();
    Py_ssize_t at = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const Py_ssize_t len = static_cast<Py_ssize_t>(lengths[i]);
      PyObject* slice = PySlice_New(py::int_(at).ptr(), py::int_(at + len).ptr(), nullptr);
      if (!slice) throw py::error_already_set();
      PyObject* item = PyObject_GetItem(view, slice);
      Py_DECREF(slice);
      if (!item) throw py::error_already_set();
      out.append(py::reinterpret_steal<py::object>(item));
      at += len;
    }
    return out;
  }

  // Waits for at least one item, then copies up to one per row of `out` (a writable buffer of
  // two or more dimensions, rows of at least item_bytes: a 2-D numpy array) that are there,
  // item i into row i (the rest of a row left as it was): how many, 0 at the end.
  std::size_t dequeue_many_into(const py::handle& out) {
    InUse in_use(busy, "dequeue_many_into");
    const Buffer b(out, true, "dequeue_many_into");
    const std::size_t rows = b.rows();
    if (rows == 0)
      throw UsageError(
          "fabflow: dequeue_many_into takes a buffer of two or more dimensions (one item per "
          "row)");
    const std::size_t row = b.writable().size() / rows;
    if (row < buf.size())
      throw UsageError("fabflow: dequeue_many_into: rows of " + std::to_string(row) +
                       " bytes; items may be " + std::to_string(buf.size()) + " (item_bytes)");
    if (!end) return 0;
    not_peeked("dequeue_many_into");
    flow::Consumer& q = *end;
    std::vector<std::span<const std::byte>> items(std::min<std::size_t>(rows, 65536));
    std::size_t n = 0;
    Status s = Status::empty;
    Wait wait(timeout);
    wait_until(wait, "dequeue_many_into", [&] {
      s = q.peek_many(items, &n);
      if (s != Status::ok) return s != Status::empty;
      for (std::size_t i = 0; i < n; ++i)
        if (!items[i].empty())
          std::memcpy(b.writable().data() + i * row, items[i].data(), items[i].size());
      s = q.release_many(n);
      return true;
    });
    if (s == Status::closed) {
      finish();
      return 0;
    }
    check(s, "dequeue_many_into");
    return n;
  }

  // Zero-copy: waits for the next item and returns a read-only memoryview of it where it lies
  // in this end's ring, or None at the end; release_peeked() hands the slot back.
  py::object peek_view() {
    InUse in_use(busy, "peek");
    if (!end) return py::none();
    not_peeked("peek");
    flow::Consumer& q = *end;
    std::span<const std::byte> item;
    Status s = Status::empty;
    Wait wait(timeout);
    wait_until(wait, "peek", [&] {
      s = q.peek(&item);
      return s != Status::empty;
    });
    if (s == Status::closed) {
      finish();
      return py::none();
    }
    check(s, "peek");
    peeked = true;
    PyObject* view =
        PyMemoryView_FromMemory(reinterpret_cast<char*>(const_cast<std::byte*>(item.data())),
                                static_cast<Py_ssize_t>(item.size()), PyBUF_READ);
    if (!view) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(view);
  }

  void release_peeked() {
    InUse in_use(busy, "release");
    if (!peeked || !end) return;
    peeked = false;
    Status s;
    {
      py::gil_scoped_release unlocked;
      s = end->release();
    }
    check(s, "release");
  }
};

}  // namespace

void bind_flow(py::module_& m) {
  const char* open_doc =
      "Opens this end of a flow queue with `peer` (collective over the rank's bootstrap: the "
      "other end is constructed at the same time). design: 'auto' (the library's choice; .why "
      "says what and why), 'socket', or a design point such as 'push1-watermark-pull'; "
      "provider: 'auto', 'local', or a libfabric provider ('shm', 'tcp', ...); item_bytes: the "
      "largest item; capacity: items the ring holds; timeout: seconds any one call may wait "
      "(None: no bound).";
  py::class_<Producer>(m, "Producer", "The producer end of a flow queue (docs/flow-queues.md).")
      .def(py::init<Rank&, int, const std::string&, const std::string&, std::size_t, std::size_t,
                    std::optional<double>>(),
           py::arg("rank"), py::arg("peer"), py::arg("design") = "auto",
           py::arg("provider") = "auto", py::arg("item_bytes") = 4096, py::arg("capacity") = 1024,
           py::arg("timeout") = 10.0, open_doc)
      .def("enqueue", &Producer::enqueue, py::arg("item"),
           "Enqueues a copy of the bytes of a contiguous buffer (bytes, bytearray, memoryview, a "
           "numpy array), waiting for room.")
      .def("enqueue_many", &Producer::enqueue_many, py::arg("items"),
           "Enqueues every buffer of a sequence, or every row of a buffer of two or more "
           "dimensions (a 2-D numpy array), in order, batching items of equal length.")
      .def("close", &Producer::close,
           "Ends the stream and waits until the consumer has every item; the end then leaves.")
      .def_readonly("why", &Producer::why,
                    "auto: the design this end opened and why; empty when one was named.");

  py::class_<Consumer>(m, "Consumer", "The consumer end of a flow queue.")
      .def(py::init<Rank&, int, const std::string&, const std::string&, std::size_t, std::size_t,
                    std::optional<double>>(),
           py::arg("rank"), py::arg("peer"), py::arg("design") = "auto",
           py::arg("provider") = "auto", py::arg("item_bytes") = 4096, py::arg("capacity") = 1024,
           py::arg("timeout") = 10.0, open_doc)
      .def("dequeue", &Consumer::dequeue,
           "The next item as a memoryview of its own copy, or None at the end of the stream.")
      .def("dequeue_into", &Consumer::dequeue_into, py::arg("buffer"),
           "Copies the next item into a writable buffer of at least item_bytes: its length, or "
           "None at the end.")
      .def("dequeue_many", &Consumer::dequeue_many, py::arg("max_items") = 256,
           "Waits for an item, then takes up to max_items that are there: a list of memoryviews "
           "(over one copy), empty at the end.")
      .def("dequeue_many_into", &Consumer::dequeue_many_into, py::arg("out"),
           "Waits for an item, then copies up to one per row of a writable buffer of two or "
           "more dimensions (a 2-D numpy array, rows of at least item_bytes): how many, 0 at "
           "the end.")
      .def("_peek", &Consumer::peek_view)
      .def("_release", &Consumer::release_peeked)
      .def_readonly("why", &Consumer::why, "As Producer.why.");
}

}  // namespace fabflow::python
