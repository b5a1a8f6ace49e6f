// fabflow's Python module (_fabflow, wrapped by python/fabflow/__init__.py): ranks from the
// launcher's environment or as threads of one process, fabflow.info(), fabflow.Error, and the
// parts registered by flow.cc, rr.cc, bulk.cc and kv.cc. Every call that waits releases the GIL
// and honours KeyboardInterrupt; fabflow's errors become fabflow.Error with the C++ message.
#include <fabflow/launcher.h>
#include <fabflow/node.h>
#include <fabflow/version.h>

#include <pybind11/stl.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "common.h"

namespace fabflow::python {

std::unique_ptr<Transport> open_connected(Bootstrap& boot, const std::string& provider,
                                          std::vector<Op> ops, std::size_t rx_depth) {
  TransportOptions to;
  to.provider = provider;
  to.ops = std::move(ops);
  to.rx_depth = std::max(to.rx_depth, rx_depth);
  return connect_transport(to, boot);  // "auto": local when every rank shares this host
}

Buffer::Buffer(const py::handle& obj, bool writable, const char* what) {
  const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
    PyErr_Clear();
    const std::string type = py::str(py::type::handle_of(obj).attr("__name__"));
    if (!PyObject_CheckBuffer(obj.ptr()))
      throw UsageError(std::string("fabflow: ") + what + " takes a buffer (bytes, bytearray, " +
                       "memoryview, a numpy array), not " + type);
    if (writable && PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_C_CONTIGUOUS) == 0) {
      PyBuffer_Release(&view_);
      throw UsageError(std::string("fabflow: ") + what + " needs a writable buffer; this " + type +
                       " is read-only");
    }
    PyErr_Clear();
    throw UsageError(std::string("fabflow: ") + what + " takes a contiguous buffer; this " + type +
                     " is not");
  }
  held_ = true;
}

Buffer::~Buffer() {
  if (held_) PyBuffer_Release(&view_);
}

Wait::Wait(std::optional<double> timeout_s) {
  if (timeout_s) {
    timeout_s_ = *timeout_s;
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(*timeout_s));
  }
}

std::chrono::milliseconds Wait::slice() const noexcept {
  if (!deadline_) return kSlice;
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(*deadline_ - std::chrono::steady_clock::now());
  return std::clamp(left, std::chrono::milliseconds(0), kSlice);
}

bool Wait::expired() const noexcept {
  return deadline_ && std::chrono::steady_clock::now() >= *deadline_;
}

void Wait::check(const std::string& what) const {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  if (expired()) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", timeout_s_);
    throw Error("fabflow: " + what + ": timed out after " + seconds + " s");
  }
}

void raise_failure(Bootstrap& boot, const std::string& what, const std::string& text) {
  if (boot.peer_failed()) {
    const auto f = boot.failure();
    throw PeerError(f ? f->rank : -1, "fabflow: " + what + ": " + (f ? f->what : text));
  }
  throw Error("fabflow: " + what + ": " + text);
}

std::optional<double> checked_timeout(std::optional<double> seconds, const char* what) {
  if (seconds && !(*seconds > 0 && std::isfinite(*seconds)))
    throw UsageError(std::string("fabflow: ") + what +
                     ": timeout must be a number of seconds above 0, or None");
  return seconds;
}

namespace {

Rank rank_from_environment() {
  if (!started_by_launcher())
    throw UsageError(
        "fabflow.Rank(): this process was not started as a rank (run it with fabflow launch, "
        "mpirun or srun)");
  BootstrapConfig config;
  config.fill_from_env();
  py::gil_scoped_release unlocked;
  return Rank{std::shared_ptr<Bootstrap>(make_tcp_bootstrap(config))};
}

std::vector<Rank> thread_ranks(int n) {
  if (n < 1 || n > 64) throw UsageError("fabflow.thread_ranks: n must be in 1..64");
  std::vector<Rank> out;
  for (auto& b : make_thread_bootstraps(n)) out.push_back(Rank{std::move(b)});
  return out;
}

// A Node's connection as a Rank of a two-rank job: every pattern opens over it as between the
// ranks of a job. `rank`: this side's rank in the session (None: 0 accepting, 1 connecting); the
// other side must take the other one. The Rank keeps its Peer alive.
Rank rank_of_peer(std::unique_ptr<Peer> peer, std::optional<int> rank) {
  std::shared_ptr<Peer> owner(std::move(peer));
  Bootstrap& session = rank ? owner->bootstrap_as(*rank) : owner->bootstrap();
  return Rank{std::shared_ptr<Bootstrap>(owner, &session)};
}

std::chrono::milliseconds node_ms(double seconds, const char* what) {
  checked_timeout(seconds, what);
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}

std::unique_ptr<Node> make_node(std::optional<std::string> secret, double timeout) {
  NodeOptions o;
  if (secret) o.secret = *secret;
  o.timeout = node_ms(timeout, "Node");
  return std::make_unique<Node>(std::move(o));
}

std::string node_listen(Node& n, const std::string& address) {
  py::gil_scoped_release unlocked;
  n.listen(address);
  return n.address();
}

std::optional<Rank> node_accept(Node& n, double timeout, std::optional<int> rank) {
  const auto ms = node_ms(timeout, "Node.accept");
  std::unique_ptr<Peer> peer;
  {
    py::gil_scoped_release unlocked;
    peer = n.accept(ms);
  }
  if (!peer) return std::nullopt;
  return rank_of_peer(std::move(peer), rank);
}

Rank node_connect(Node& n, const std::string& address, double timeout, std::optional<int> rank) {
  const auto ms = node_ms(timeout, "Node.connect");
  std::unique_ptr<Peer> peer;
  {
    py::gil_scoped_release unlocked;
    peer = n.connect(address, ms);
  }
  return rank_of_peer(std::move(peer), rank);
}

void barrier(Rank& r) {
  py::gil_scoped_release unlocked;
  r.boot->barrier();
}

// The providers libfabric finds here and what each can do, as `fabflow info --json` lists them.
py::dict info() {
  std::vector<Capabilities> all;
  std::string libfabric;
  {
    py::gil_scoped_release unlocked;
    all = discover_libfabric();
    libfabric = libfabric_version();
  }
  py::list providers;
  for (const Capabilities& c : all) {
    py::dict d;
    d["provider"] = c.provider;
    d["endpoint"] = std::string(to_string(c.endpoint));
    d["fabric"] = c.fabric;
    d["domain"] = c.domain;
    d["inject_size"] = c.inject_size;
    d["max_msg_size"] = c.max_msg_size;
    d["cq_data_size"] = c.cq_data_size;
    d["rma"] = c.rma;
    d["atomics_u64"] = c.atomics_u64;
    d["shared_rx"] = c.shared_rx;
    d["multi_recv"] = c.multi_recv;
    d["in_order_data"] = c.in_order_data;
    d["data_progress"] = c.data_progress_manual ? "manual" : "auto";
    d["control_progress"] = c.control_progress_manual ? "manual" : "auto";
    py::list ops;
    for (Op op : {Op::write, Op::read, Op::send, Op::writedata, Op::fadd, Op::cswap})
      if (c.supports(op)) ops.append(std::string(to_string(op)));
    d["ops"] = ops;
    providers.append(d);
  }
  py::dict out;
  out["fabflow"] = std::string(FABFLOW_VERSION);
  out["libfabric"] = libfabric;
  out["providers"] = providers;
  return out;
}

}  // namespace

}  // namespace fabflow::python

PYBIND11_MODULE(_fabflow, m) {
  namespace py = pybind11;
  using namespace fabflow::python;
  m.doc() = "fabflow's C++ core: ranks, flow queues, request-response, bulk, key-value";
  static py::exception<fabflow::Error> error(m, "Error", PyExc_RuntimeError);
  error.doc() = "A fabflow failure; the message is the C++ library's.";
  error.attr("__module__") = "fabflow";  // tracebacks say fabflow.Error, not fabflow._fabflow.Error
  static py::exception<fabflow::PeerError> peer_error(m, "PeerError", error.ptr());
  peer_error.doc() = "A peer of this process vanished, stopped answering or broke the protocol.";
  peer_error.attr("__module__") = "fabflow";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const fabflow::PeerError& e) {
      peer_error(e.what());
    } catch (const fabflow::Error& e) {
      error(e.what());
    }
  });
  m.def(
      "version", [] { return std::string(FABFLOW_VERSION); }, "fabflow's version.");
  m.def("info", &info,
        "The libfabric providers found here and their capabilities (as `fabflow info --json`): "
        "{'fabflow': version, 'libfabric': version, 'providers': [dict, ...]}.");

  py::class_<Rank>(m, "Rank", "One rank of a job: its number, the job's size, a barrier.")
      .def(py::init(&rank_from_environment),
           "The rank this process is, from its launcher's environment (fabflow launch, mpirun, "
           "srun). Raises fabflow.Error outside any launcher.")
      .def_property_readonly("rank", &Rank::rank, "This rank's number, 0..size-1.")
      .def_property_readonly("size", &Rank::size, "How many ranks the job has.")
      .def("barrier", &barrier, "Waits until every rank reached it.");
  py::class_<fabflow::Node>(
      m, "Node",
      "Run-time connections (docs/bootstrap.md): listen and accept, or connect, for "
      "as long as it lives; each connection is a Rank of a two-rank job over which "
      "every pattern opens.")
      .def(py::init(&make_node), py::arg("secret") = py::none(), py::arg("timeout") = 8.0,
           "secret: the shared secret (None: FABFLOW_SECRET or FABFLOW_SECRET_FILE). timeout: "
           "a session's bound in seconds, its silence bound too.")
      .def("listen", &node_listen, py::arg("address"),
           "Listens on 'host:port' (port 0: any free one); returns the address it listens on.")
      .def_property_readonly("address", &fabflow::Node::address,
                             "Where it listens ('' before listen).")
      .def("accept", &node_accept, py::arg("timeout") = 30.0, py::arg("rank") = py::none(),
           "The next peer that connects and proves the secret, as a Rank (0 unless `rank` "
           "says otherwise), or None when none came within `timeout` seconds.")
      .def("connect", &node_connect, py::arg("address"), py::arg("timeout") = 10.0,
           py::arg("rank") = py::none(),
           "Connects to a listening Node; the session as a Rank (1 unless `rank` says otherwise).")
      .def_property_readonly("refused", &fabflow::Node::refused,
                             "Connections dropped during their handshake so far.");
  m.def("thread_ranks", &thread_ranks, py::arg("n"),
        "n ranks of this one process, each to be used by its own thread (tests, notebooks).");

  bind_flow(m);
  bind_rr(m);
  bind_bulk(m);
  bind_kv(m);
}
