// The key-value store from Python (docs/kv.md): ranks [0, size - servers) are clients, the last
// `servers` ranks servers. Keys are up to 16 bytes (zero-padded), values exactly value_bytes.
// A server loads keys, then start() serves on its own threads until every client closed.
#include <fabflow/kv.h>

#include <pybind11/stl.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "common.h"

namespace fabflow::python {
namespace {

kv::Options store_options(const std::string& design, std::size_t value_bytes,
                          std::uint64_t capacity) {
  kv::Options o;
  if (design == "auto") {
    o.automatic = true;
  } else if (auto d = kv::parse_design(design)) {
    o.design = *d;
  } else {
    throw UsageError("fabflow: unknown design '" + design + "' (auto, herd, read or atomic)");
  }
  o.value_bytes = value_bytes;
  o.capacity = capacity;
  return o;
}

TransportOptions store_transport(Bootstrap& /*boot*/, const std::string& provider) {
  TransportOptions to;
  to.provider = provider;
  return to;  // kv's setup finds the host out for "auto" (for_ranks_of)
}

void check_servers(const Rank& r, int servers, const char* what) {
  if (servers < 1 || servers >= r.size())
    throw UsageError(std::string("fabflow: ") + what + ": servers must be in 1.." +
                     std::to_string(r.size() - 1) + " (the other ranks are clients)");
}

kv::Key key_from(const py::handle& obj, const char* what) {
  kv::Key key{};
  if (py::isinstance<py::str>(obj)) {
    const std::string s = obj.cast<std::string>();
    if (s.size() > key.size())
      throw UsageError(std::string("fabflow: ") + what + ": a key is at most 16 bytes; '" + s +
                       "' is " + std::to_string(s.size()));
    std::memcpy(key.data(), s.data(), s.size());
    return key;
  }
  const Buffer b(obj, false, what);
  if (b.bytes().size() > key.size())
    throw UsageError(std::string("fabflow: ") + what + ": a key is at most 16 bytes; this one is " +
                     std::to_string(b.bytes().size()));
  if (!b.bytes().empty()) std::memcpy(key.data(), b.bytes().data(), b.bytes().size());
  return key;
}

struct KVServer {
  std::shared_ptr<Bootstrap> boot;
  std::unique_ptr<kv::Server> server;
  std::size_t value_bytes = 0;
  std::thread runner;
  std::atomic<bool> finished{false};
  kv::ServerStats stats;
  std::string failure;

  KVServer(Rank& r, int servers, const std::string& design, const std::string& provider,
           std::size_t value_bytes_, std::uint64_t capacity)
      : boot(r.boot), value_bytes(value_bytes_) {
    check_servers(r, servers, "KVServer");
    if (r.rank() < r.size() - servers)
      throw UsageError("fabflow: KVServer: rank " + std::to_string(r.rank()) +
                       " is a client (the last " + std::to_string(servers) + " ranks serve)");
    const auto o = store_options(design, value_bytes, capacity);
    py::gil_scoped_release unlocked;
    kv::validate(o, r.size() - servers, servers);
    server = kv::make_server(store_transport(*boot, provider), *boot, servers, o);
  }
  ~KVServer() {
    if (runner.joinable()) {
      py::gil_scoped_release unlocked;
      runner.join();
    }
  }

  // Before start(): stores `value` under `key` (a key of this server's partition).
  std::string load(const py::handle& key, const py::handle& value) {
    if (runner.joinable()) throw UsageError("fabflow: load: the server has started");
    const kv::Key k = key_from(key, "load");
    const Buffer v(value, false, "load");
    if (v.bytes().size() != value_bytes)
      throw UsageError("fabflow: load: a value is " + std::to_string(value_bytes) +
                       " bytes (value_bytes); this one is " + std::to_string(v.bytes().size()));
    return std::string(kv::to_string(server->load(k, v.bytes())));
  }
  // Serves on the server's own threads until every client closed.
  void start() {
    if (runner.joinable()) throw UsageError("fabflow: start: the server has started");
    runner = std::thread([this] {
      try {
        stats = server->run();
      } catch (const std::exception& e) {
        failure = e.what();
      }
      finished.store(true, std::memory_order_release);
    });
  }
  // Waits until the server finished: {'served', 'rounds', 'items', 'cpu_s'}.
  py::dict wait(std::optional<double> timeout_s) {
    if (!runner.joinable() && !finished)
      throw UsageError("fabflow: wait: start() the server first");
    Wait w(checked_timeout(timeout_s, "wait"));
    wait_until(w, "KVServer.wait", [this] {
      if (finished.load(std::memory_order_acquire)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return false;
    });
    if (runner.joinable()) {
      py::gil_scoped_release unlocked;
      runner.join();
    }
    if (!failure.empty()) throw Error("fabflow: KVServer: " + failure);
    py::dict d;
    d["served"] = stats.served;
    d["rounds"] = stats.rounds;
    d["items"] = stats.items;
    d["cpu_s"] = stats.cpu_s;
    return d;
  }
};

struct KVClient {
  std::shared_ptr<Bootstrap> boot;
  std::unique_ptr<kv::Client> client;
  std::size_t value_bytes = 0;
  std::optional<double> timeout;
  std::string why;
  bool outstanding = false;
  bool indexed = false;  // atomic: the servers' index read once, at the first operation

  KVClient(Rank& r, int servers, const std::string& design, const std::string& provider,
           std::size_t value_bytes_, std::uint64_t capacity, std::optional<double> timeout_s)
      : boot(r.boot), value_bytes(value_bytes_), timeout(checked_timeout(timeout_s, "KVClient")) {
    check_servers(r, servers, "KVClient");
    if (r.rank() >= r.size() - servers)
      throw UsageError("fabflow: KVClient: rank " + std::to_string(r.rank()) +
                       " is a server (ranks 0.." + std::to_string(r.size() - servers - 1) +
                       " are clients)");
    const auto o = store_options(design, value_bytes, capacity);
    py::gil_scoped_release unlocked;
    kv::validate(o, r.size() - servers, servers);
    client = kv::make_client(store_transport(*boot, provider), *boot, servers, o);
    why = client->why();
  }

  kv::Client& live(const char* what) {
    if (!client) throw Error(std::string("fabflow: ") + what + ": the client is closed");
    if (outstanding)
      throw Error(std::string("fabflow: ") + what +
                  ": an earlier operation was interrupted before its answer came");
    return *client;
  }

  // One operation, waited for in slices; `value` is the GET's value when found.
  kv::Code run(kv::OpKind kind, const kv::Key& key, std::span<const std::byte> value,
               const char* what, py::object* got) {
    kv::Client& c = live(what);
    if (!indexed) {
      py::gil_scoped_release unlocked;
      c.cache_index(*boot);
      indexed = true;
    }
    Status submitted;
    {
      // Submitting may wait for the server's progress: never with the GIL.
      py::gil_scoped_release unlocked;
      submitted = c.submit(kind, key, value, 1);
    }
    if (submitted != Status::ok) throw Error(std::string("fabflow: ") + what + ": " + c.error());
    outstanding = true;
    kv::Result result;
    Status s = Status::empty;
    Wait w(timeout);
    unsigned polls = 0;
    bool peer_gone = false;
    wait_until(w, what, [&] {
      s = c.poll(&result);
      if (s == Status::empty && (++polls & 1023u) == 0 && boot->peer_failed()) peer_gone = true;
      return s != Status::empty || peer_gone;
    });
    if (peer_gone) raise_failure(*boot, what, "a peer vanished");
    if (s != Status::ok) raise_failure(*boot, what, c.error());
    outstanding = false;
    if (got && result.code == kv::Code::ok)
      *got = py::bytes(reinterpret_cast<const char*>(result.value.data()), result.value.size());
    return result.code;
  }

  // The value under `key` as bytes, or None.
  py::object get(const py::handle& key) {
    py::object value = py::none();
    run(kv::OpKind::get, key_from(key, "get"), {}, "get", &value);
    return value;
  }
  // Stores `value` (value_bytes long) under `key`; False when the key's server is full.
  bool put(const py::handle& key, const py::handle& value) {
    const kv::Key k = key_from(key, "put");
    const Buffer v(value, false, "put");
    if (v.bytes().size() != value_bytes)
      throw UsageError("fabflow: put: a value is " + std::to_string(value_bytes) +
                       " bytes (value_bytes); this one is " + std::to_string(v.bytes().size()));
    return run(kv::OpKind::put, k, v.bytes(), "put", nullptr) == kv::Code::ok;
  }
  // Deletes `key`; False when the store did not hold it.
  bool del(const py::handle& key) {
    return run(kv::OpKind::del, key_from(key, "delete"), {}, "delete", nullptr) == kv::Code::ok;
  }
  // Tells every server this client is done.
  void close() {
    if (!client) return;
    kv::Client& c = live("close");
    {
      py::gil_scoped_release unlocked;
      c.close(*boot);
    }
    client.reset();
  }
};

}  // namespace

void bind_kv(py::module_& m) {
  const char* args =
      " Collective over the rank's bootstrap: the last `servers` ranks construct KVServers, the "
      "others KVClients, with the same design, value_bytes and capacity. design: 'auto', "
      "'herd', 'read' or 'atomic' (docs/kv.md); value_bytes: the size of every value; "
      "capacity: keys each server holds.";
  py::class_<KVServer>(m, "KVServer", "A server of fabflow's key-value store (docs/kv.md).")
      .def(py::init<Rank&, int, const std::string&, const std::string&, std::size_t,
                    std::uint64_t>(),
           py::arg("rank"), py::arg("servers") = 1, py::arg("design") = "auto",
           py::arg("provider") = "auto", py::arg("value_bytes") = 32, py::arg("capacity") = 1024,
           (std::string("Opens a server.") + args).c_str())
      .def("load", &KVServer::load, py::arg("key"), py::arg("value"),
           "Before start(): stores a value under a key of this server's partition; 'ok' or "
           "'full'.")
      .def("start", &KVServer::start,
           "Serves on the server's own threads until every client closed.")
      .def("wait", &KVServer::wait, py::arg("timeout") = py::none(),
           "Waits until the server finished; returns its statistics as a dict.");
  py::class_<KVClient>(m, "KVClient", "A client of fabflow's key-value store.")
      .def(py::init<Rank&, int, const std::string&, const std::string&, std::size_t, std::uint64_t,
                    std::optional<double>>(),
           py::arg("rank"), py::arg("servers") = 1, py::arg("design") = "auto",
           py::arg("provider") = "auto", py::arg("value_bytes") = 32, py::arg("capacity") = 1024,
           py::arg("timeout") = 10.0,
           (std::string("Opens a client; timeout: seconds an operation may wait (None: no "
                        "bound).") +
            args)
               .c_str())
      .def("get", &KVClient::get, py::arg("key"),
           "The value under a key (str or bytes, up to 16 bytes) as bytes, or None.")
      .def("put", &KVClient::put, py::arg("key"), py::arg("value"),
           "Stores a value of value_bytes under a key; False when its server is full.")
      .def("delete", &KVClient::del, py::arg("key"),
           "Deletes a key; False when the store did not hold it.")
      .def("close", &KVClient::close, "Tells every server this client is done.")
      .def_readonly("why", &KVClient::why,
                    "auto: the design this end opened and why; empty when one was named.");
}

}  // namespace fabflow::python
