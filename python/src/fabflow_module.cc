// fabflow's Python module (_fabflow, wrapped by python/fabflow/__init__.py): ranks from the
// launcher's environment or as threads of one process, and flow queues whose ends open their
// own transport. Every call that waits releases the GIL; fabflow's errors become fabflow.Error.
#include <fabflow/bootstrap.h>
#include <fabflow/flow.h>
#include <fabflow/launcher.h>
#include <fabflow/transport.h>
#include <fabflow/version.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

using fabflow::Bootstrap;
using fabflow::Status;

// One rank: its bootstrap, shared with the queue ends opened on it.
struct Rank {
  std::shared_ptr<Bootstrap> boot;
  int rank() const { return boot->rank(); }
  int size() const { return boot->size(); }
  void barrier() {
    py::gil_scoped_release unlocked;
    boot->barrier();
  }
};

Rank rank_from_environment() {
  if (!fabflow::started_by_launcher())
    throw fabflow::UsageError(
        "fabflow.Rank(): this process was not started as a rank (run it with fabflow launch, "
        "mpirun or srun)");
  fabflow::BootstrapConfig config;
  config.fill_from_env();
  py::gil_scoped_release unlocked;
  return Rank{std::shared_ptr<Bootstrap>(fabflow::make_tcp_bootstrap(config))};
}

std::vector<Rank> thread_ranks(int n) {
  if (n < 1 || n > 64) throw fabflow::UsageError("fabflow.thread_ranks: n must be in 1..64");
  std::vector<Rank> out;
  for (auto& b : fabflow::make_thread_bootstraps(n)) out.push_back(Rank{std::move(b)});
  return out;
}

fabflow::flow::QueueOptions queue_options(const std::string& design, std::size_t item_bytes,
                                          std::size_t capacity) {
  fabflow::flow::QueueOptions o;
  o.item_bytes = item_bytes;
  o.capacity = capacity;
  if (design == "auto") {
    o.automatic = true;
  } else if (design == "socket") {
    o.socket = true;
  } else if (auto d = fabflow::flow::Design::parse(design)) {
    o.design = *d;
  } else {
    throw fabflow::UsageError("fabflow: unknown design '" + design +
                              "' (auto, socket or <data>-<transfer>-<space>)");
  }
  return o;
}

// A queue end with the transport it opened (collective over the rank's bootstrap).
template <class End>
struct QueueEnd {
  std::shared_ptr<Bootstrap> boot;
  std::unique_ptr<fabflow::Transport> transport;
  std::unique_ptr<End> end;
  std::chrono::milliseconds timeout;
  std::string why;  // auto's choice, kept past the end's close

  void open(Rank& r, const std::string& provider, const fabflow::flow::QueueOptions& o) {
    boot = r.boot;
    fabflow::TransportOptions to;
    to.provider = provider;
    to.same_host = fabflow::ranks_share_this_host(*boot);
    to.ops = fabflow::flow::required_ops(o);
    to.rx_depth = std::max(to.rx_depth, fabflow::flow::required_rx_depth(o));
    to.node = boot->local_address();
    transport = fabflow::open_transport(to);
    transport->connect(*boot);
  }
  void check(Status s, const char* what) const {
    if (s != Status::ok)
      throw fabflow::Error(std::string("fabflow: ") + what + ": " +
                           std::string(fabflow::to_string(s)) + ": " + end->error());
  }
  // The ends stay until the peer is done with them too.
  void finish() {
    if (!end) return;
    py::gil_scoped_release unlocked;
    boot->barrier([this] { transport->progress(); });
    end.reset();
  }
};

struct Producer : QueueEnd<fabflow::flow::Producer> {
  Producer(Rank& r, int peer, const std::string& design, const std::string& provider,
           std::size_t item_bytes, std::size_t capacity, double timeout_s) {
    const auto o = queue_options(design, item_bytes, capacity);
    timeout = std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
    py::gil_scoped_release unlocked;
    open(r, provider, o);
    end = fabflow::flow::make_producer(*transport, *boot, peer, o);
    why = end->why();
  }
  void enqueue(py::buffer item) {
    if (!end) throw fabflow::UsageError("fabflow: the producer is closed");
    py::buffer_info b = item.request();
    if (!PyBuffer_IsContiguous(b.view(), 'C'))
      throw fabflow::UsageError("fabflow: enqueue takes a contiguous buffer");
    const std::span<const std::byte> bytes(static_cast<const std::byte*>(b.ptr),
                                           static_cast<std::size_t>(b.size * b.itemsize));
    Status s;
    {
      py::gil_scoped_release unlocked;
      s = end->enqueue(bytes, timeout);
    }
    check(s, "enqueue");
  }
  // Sends the end of stream, waits until the consumer has every item, then leaves with it.
  void close() {
    if (!end) return;
    Status s;
    {
      py::gil_scoped_release unlocked;
      s = end->close(timeout);
    }
    check(s, "close");
    finish();
  }
};

struct Consumer : QueueEnd<fabflow::flow::Consumer> {
  std::vector<std::byte> buf;
  std::size_t item_bytes;
  Consumer(Rank& r, int peer, const std::string& design, const std::string& provider,
           std::size_t item_bytes_, std::size_t capacity, double timeout_s)
      : item_bytes(item_bytes_) {
    const auto o = queue_options(design, item_bytes, capacity);
    timeout = std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
    buf.resize(item_bytes);
    py::gil_scoped_release unlocked;
    open(r, provider, o);
    end = fabflow::flow::make_consumer(*transport, *boot, peer, o);
    why = end->why();
  }
  // The next item as bytes, or None once the producer closed (the end then leaves).
  py::object dequeue() {
    if (!end) return py::none();
    std::size_t len = 0;
    Status s;
    {
      py::gil_scoped_release unlocked;
      s = end->dequeue(buf, &len, timeout);
    }
    if (s == Status::closed) {
      finish();
      return py::none();
    }
    check(s, "dequeue");
    return py::bytes(reinterpret_cast<const char*>(buf.data()), len);
  }
};

}  // namespace

PYBIND11_MODULE(_fabflow, m) {
  m.doc() = "fabflow's C++ core: ranks and flow queues (see the fabflow package)";
  static py::exception<fabflow::Error> error(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const fabflow::Error& e) {
      error(e.what());
    }
  });
  m.def("version", [] { return std::string(FABFLOW_VERSION); });

  py::class_<Rank>(m, "Rank", "One rank of a job: its number, the job's size, a barrier.")
      .def(py::init(&rank_from_environment),
           "The rank this process is, from its launcher's environment (fabflow launch, mpirun, "
           "srun).")
      .def_property_readonly("rank", &Rank::rank)
      .def_property_readonly("size", &Rank::size)
      .def("barrier", &Rank::barrier, "Waits until every rank reached it.");
  m.def("thread_ranks", &thread_ranks, py::arg("n"),
        "n ranks of this one process, each to be used by its own thread (tests, notebooks).");

  py::class_<Producer>(m, "Producer", "The producer end of a flow queue (docs/flow-queues.md).")
      .def(py::init<Rank&, int, const std::string&, const std::string&, std::size_t, std::size_t,
                    double>(),
           py::arg("rank"), py::arg("peer"), py::arg("design") = "auto",
           py::arg("provider") = "auto", py::arg("item_bytes") = 4096, py::arg("capacity") = 1024,
           py::arg("timeout") = 10.0)
      .def("enqueue", &Producer::enqueue, py::arg("item"),
           "Enqueues the bytes of a buffer (bytes, bytearray, memoryview, numpy array).")
      .def("close", &Producer::close, "Ends the stream once the consumer has every item.")
      .def_readonly("why", &Producer::why,
                    "auto: the design this end opened and why; empty when one was named.");

  py::class_<Consumer>(m, "Consumer", "The consumer end of a flow queue.")
      .def(py::init<Rank&, int, const std::string&, const std::string&, std::size_t, std::size_t,
                    double>(),
           py::arg("rank"), py::arg("peer"), py::arg("design") = "auto",
           py::arg("provider") = "auto", py::arg("item_bytes") = 4096, py::arg("capacity") = 1024,
           py::arg("timeout") = 10.0)
      .def("dequeue", &Consumer::dequeue, "The next item as bytes, or None at the end.")
      .def_readonly("why", &Consumer::why, "As Producer.why.");
}
