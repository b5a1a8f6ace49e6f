// Bulk transfer from Python (docs/bulk.md): a channel between every pair of ranks that sends
// and receives Python buffers of any size in place, with the protocol that fits the size. The
// non-blocking forms return a BulkRequest to wait() for or test(); its buffer stays borrowed
// (and alive) until the transfer completed or the channel is gone.
#include <fabflow/bulk.h>

#include <pybind11/stl.h>

#include <list>
#include <optional>
#include <string>

#include "common.h"

namespace fabflow::python {
namespace {

// The channel and the buffers its requests use. Buffers are given back once their request
// completed, or when the channel is dropped (after it, so nothing writes into them any more).
struct BulkState {
  std::shared_ptr<Bootstrap> boot;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<bulk::Channel> channel;
  std::optional<double> timeout;
  struct Pending {
    bulk::RequestPtr request;
    Buffer buffer;
  };
  std::list<Pending> pending;

  ~BulkState() {
    channel.reset();
    transport.reset();
    pending.clear();
  }
  bulk::Channel& live(const char* what) {
    if (!channel) throw Error(std::string("fabflow: ") + what + ": the bulk channel is closed");
    return *channel;
  }
};

void check_peer_and_tag(const BulkState& s, int peer, long long tag, const char* what) {
  if (peer < 0 || peer >= s.boot->size() || peer == s.boot->rank())
    throw UsageError(std::string("fabflow: ") + what +
                     ": peer must be another rank of this job (0.." +
                     std::to_string(s.boot->size() - 1) + ")");
  if (tag < 0 || tag >= 0xffffffffLL)
    throw UsageError(std::string("fabflow: ") + what + ": tag must be in 0..4294967294");
}

// One non-blocking send or receive.
struct BulkRequest {
  std::shared_ptr<BulkState> state;
  bulk::RequestPtr request;
  bool completed = false;
  std::size_t bytes = 0;

  // True once the transfer completed (driving the channel once).
  bool test() {
    if (completed) return true;
    bulk::Channel& ch = state->live("test");
    bool finished;
    {
      py::gil_scoped_release unlocked;
      finished = ch.test(request);
    }
    if (finished) complete();
    return finished;
  }
  // Waits until the transfer completed; returns the bytes it moved. timeout: seconds, None for
  // the channel's own (the handle's timeout given at open).
  std::size_t wait(std::optional<double> timeout_s) {
    if (completed) return bytes;
    bulk::Channel& ch = state->live("wait");
    Wait w(timeout_s ? checked_timeout(timeout_s, "wait") : state->timeout);
    bool finished = false;
    wait_until(w, "bulk wait", [&] { return finished = ch.test(request); });
    complete();
    return bytes;
  }
  void complete() {
    completed = true;
    bytes = request_bytes(request);
    for (auto it = state->pending.begin(); it != state->pending.end(); ++it)
      if (it->request == request) {
        state->pending.erase(it);
        break;
      }
  }
};

struct Bulk {
  std::shared_ptr<BulkState> state = std::make_shared<BulkState>();

  Bulk(Rank& r, const std::string& provider, const std::string& protocol,
       std::optional<double> timeout_s) {
    state->boot = r.boot;
    state->timeout = checked_timeout(timeout_s, "Bulk");
    bulk::ChannelOptions o;
    const auto p = bulk::parse_protocol(protocol);
    if (!p)
      throw UsageError("fabflow: unknown protocol '" + protocol +
                       "' (auto, copy, eager, rndv-write, rndv-read, leave-pinned, pipeline, "
                       "pipeline-read, caching-pipeline)");
    o.protocol = *p;
    // None: no bound on a silent peer (a vanished one is still reported by the bootstrap).
    o.peer_timeout = timeout_s ? std::chrono::milliseconds(static_cast<long>(*timeout_s * 1000))
                               : std::chrono::milliseconds(std::chrono::hours(24 * 365));
    py::gil_scoped_release unlocked;
    state->transport = open_connected(*state->boot, provider, {Op::send, Op::write, Op::read});
    state->channel = bulk::open_channel(*state->transport, *state->boot, o);
  }

  BulkRequest post(const py::handle& buffer, int peer, long long tag, bool send) {
    const char* what = send ? "isend" : "irecv";
    bulk::Channel& ch = state->live(what);
    check_peer_and_tag(*state, peer, tag, what);
    Buffer b(buffer, !send, what);
    bulk::RequestPtr r;
    {
      // Posting may wait for the peer's progress: never with the GIL, which its thread may need.
      py::gil_scoped_release unlocked;
      r = send ? ch.isend(peer, static_cast<std::uint32_t>(tag), b.bytes())
               : ch.irecv(peer, static_cast<std::uint32_t>(tag), b.writable());
    }
    state->pending.push_back({r, std::move(b)});
    return BulkRequest{state, std::move(r)};
  }
  BulkRequest isend(const py::handle& buffer, int peer, long long tag) {
    return post(buffer, peer, tag, true);
  }
  BulkRequest irecv(const py::handle& buffer, int peer, long long tag) {
    return post(buffer, peer, tag, false);
  }
  std::size_t send(const py::handle& buffer, int peer, long long tag) {
    return isend(buffer, peer, tag).wait(std::nullopt);
  }
  std::size_t recv_into(const py::handle& buffer, int peer, long long tag) {
    return irecv(buffer, peer, tag).wait(std::nullopt);
  }
  std::string choose(std::size_t bytes) {
    return std::string(bulk::to_string(state->live("choose").choose(bytes)));
  }
  // Leaves with every rank (collective): the channel is closed afterwards.
  void close() {
    if (!state->channel) return;
    {
      py::gil_scoped_release unlocked;
      state->boot->barrier([this] { state->channel->progress(); });
    }
    state->channel.reset();
    state->transport.reset();
    state->pending.clear();
  }
};

}  // namespace

void bind_bulk(py::module_& m) {
  py::class_<BulkRequest>(m, "BulkRequest", "A non-blocking send or receive of a Bulk channel.")
      .def("test", &BulkRequest::test, "True once the transfer completed (drives the channel).")
      .def("wait", &BulkRequest::wait, py::arg("timeout") = py::none(),
           "Waits until the transfer completed; returns the bytes it moved (for a receive, the "
           "message's size). timeout: seconds, None for the channel's.")
      .def_property_readonly(
          "done", [](const BulkRequest& r) { return r.completed; },
          "Whether test() or wait() saw it complete.");
  py::class_<Bulk>(m, "Bulk",
                   "A bulk-transfer channel between every pair of ranks (docs/bulk.md): buffers "
                   "of any size, sent and received in place.")
      .def(py::init<Rank&, const std::string&, const std::string&, std::optional<double>>(),
           py::arg("rank"), py::arg("provider") = "auto", py::arg("protocol") = "auto",
           py::arg("timeout") = 10.0,
           "Opens the channel (collective: every rank of the job at the same time). protocol: "
           "'auto' (by size) or one of docs/bulk.md's; timeout: seconds a wait may last without "
           "progress (None: no bound).")
      .def("send", &Bulk::send, py::arg("buffer"), py::arg("peer"), py::arg("tag") = 0,
           "Sends a contiguous buffer to `peer` under `tag` and waits until it is sent; returns "
           "its size.")
      .def("recv_into", &Bulk::recv_into, py::arg("buffer"), py::arg("peer"), py::arg("tag") = 0,
           "Receives the next message of `peer` under `tag` into a writable buffer (at least "
           "the message's size) and waits for it; returns the message's size.")
      .def("isend", &Bulk::isend, py::arg("buffer"), py::arg("peer"), py::arg("tag") = 0,
           "send without waiting: a BulkRequest. The buffer must not change until it completed.")
      .def("irecv", &Bulk::irecv, py::arg("buffer"), py::arg("peer"), py::arg("tag") = 0,
           "recv_into without waiting: a BulkRequest.")
      .def("choose", &Bulk::choose, py::arg("bytes"),
           "The protocol 'auto' picks for a message of this size.")
      .def("close", &Bulk::close, "Leaves with every rank (collective).");
}

}  // namespace fabflow::python
