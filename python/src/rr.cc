// Request-response channels from Python (docs/request-response.md): ranks [0, requesters) are
// requesters, the others responders. A requester's call() sends one request and waits for its
// response; a responder's serve() answers with a Python handler until every requester closed.
#include <fabflow/rr.h>

#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>

#include "common.h"

namespace fabflow::python {
namespace {

rr::ChannelOptions channel_options(const std::string& pattern, std::size_t request_bytes,
                                   std::size_t response_bytes) {
  if (request_bytes < 1 || request_bytes > rr::kMaxPayload || response_bytes < 1 ||
      response_bytes > rr::kMaxPayload)
    throw UsageError("fabflow: request_bytes and response_bytes must be in 1..4 MiB");
  rr::ChannelOptions o;
  o.request_bytes = request_bytes;
  o.response_bytes = response_bytes;
  if (pattern == "auto") {
    o.automatic = true;
  } else if (auto p = rr::parse_pattern(pattern)) {
    o.pattern = *p;
  } else {
    throw UsageError("fabflow: unknown pattern '" + pattern +
                     "' (auto, WriteWrite, SendSend, WriteSend or SendWrite)");
  }
  return o;
}

void check_requesters(const Rank& r, int requesters, const char* what) {
  if (requesters < 1 || requesters >= r.size())
    throw UsageError(std::string("fabflow: ") + what + ": requesters must be in 1.." +
                     std::to_string(r.size() - 1) + " (the other ranks respond)");
}

// The bootstrap's word on a vanished peer, as a PeerError; nothing while every peer is there.
void check_peers(Bootstrap& boot, const char* what) {
  if (boot.peer_failed()) raise_failure(boot, what, "a peer vanished");
}

struct Requester {
  std::shared_ptr<Bootstrap> boot;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<rr::Requester> channel;
  std::optional<double> timeout;
  std::size_t request_bytes = 0;
  std::string why;
  bool outstanding = false;  // a call was interrupted or timed out before its response

  Requester(Rank& r, int requesters, const std::string& pattern, const std::string& provider,
            std::size_t request_bytes_, std::size_t response_bytes, std::optional<double> timeout_s)
      : boot(r.boot),
        timeout(checked_timeout(timeout_s, "Requester")),
        request_bytes(request_bytes_) {
    const auto o = channel_options(pattern, request_bytes, response_bytes);
    check_requesters(r, requesters, "Requester");
    if (r.rank() >= requesters)
      throw UsageError("fabflow: Requester: rank " + std::to_string(r.rank()) +
                       " is a responder (ranks 0.." + std::to_string(requesters - 1) + " request)");
    py::gil_scoped_release unlocked;
    transport = open_connected(*boot, provider, rr::required_ops(o));
    channel = rr::make_requester(*transport, *boot, o, requesters, /*slots=*/1);
    why = channel->why();
  }

  rr::Requester& live(const char* what) {
    if (!channel) throw Error(std::string("fabflow: ") + what + ": the requester is closed");
    return *channel;
  }

  // Sends `request` to responder `responder` (0-based among the responders) and returns the
  // response.
  py::bytes call(const py::handle& request, int responder) {
    rr::Requester& ch = live("call");
    const Buffer b(request, false, "call");
    if (b.bytes().size() > request_bytes)
      throw UsageError("fabflow: call: the request is " + std::to_string(b.bytes().size()) +
                       " bytes; this channel takes up to " + std::to_string(request_bytes) +
                       " (request_bytes)");
    if (responder < 0 || responder >= ch.responders())
      throw UsageError("fabflow: call: responder must be in 0.." +
                       std::to_string(ch.responders() - 1));
    if (outstanding)
      throw Error("fabflow: call: an earlier call was interrupted before its response came");
    if (!b.bytes().empty())
      std::memcpy(ch.request_buffer(0).data(), b.bytes().data(), b.bytes().size());
    Status s;
    {
      // Posting may wait for the responder's progress, and its thread may need the GIL.
      py::gil_scoped_release unlocked;
      s = ch.submit(0, responder, b.bytes().size());
    }
    if (s != Status::ok) raise_failure(*boot, "call", ch.error());
    outstanding = true;
    rr::Response response;
    Wait wait(timeout);
    unsigned polls = 0;
    bool peer_gone = false;
    wait_until(wait, "call", [&] {
      s = ch.poll(&response);
      if (s == Status::empty && (++polls & 1023u) == 0 && boot->peer_failed()) peer_gone = true;
      return s != Status::empty || peer_gone;
    });
    if (peer_gone) check_peers(*boot, "call");
    if (s != Status::ok) raise_failure(*boot, "call", ch.error());
    outstanding = false;
    py::bytes out(reinterpret_cast<const char*>(response.data.data()), response.data.size());
    {
      py::gil_scoped_release unlocked;
      ch.release(response);
    }
    return out;
  }

  // Tells every responder this requester is done.
  void close() {
    if (!channel) return;
    if (outstanding) throw Error("fabflow: close: a call is still waiting for its response");
    Status s;
    {
      py::gil_scoped_release unlocked;
      s = channel->close();
    }
    if (s != Status::ok) throw Error("fabflow: close: " + channel->error());
    {
      py::gil_scoped_release unlocked;
      boot->barrier([this] { transport->progress(); });
    }
    channel.reset();
  }
};

struct Responder {
  std::shared_ptr<Bootstrap> boot;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<rr::Responder> channel;
  std::string why;

  Responder(Rank& r, int requesters, const std::string& pattern, const std::string& provider,
            std::size_t request_bytes, std::size_t response_bytes)
      : boot(r.boot) {
    const auto o = channel_options(pattern, request_bytes, response_bytes);
    check_requesters(r, requesters, "Responder");
    if (r.rank() < requesters)
      throw UsageError("fabflow: Responder: rank " + std::to_string(r.rank()) +
                       " is a requester (ranks " + std::to_string(requesters) + ".." +
                       std::to_string(r.size() - 1) + " respond)");
    py::gil_scoped_release unlocked;
    transport = open_connected(*boot, provider, rr::required_ops(o));
    channel = rr::make_responder(*transport, *boot, o, requesters);
    why = channel->why();
  }

  // Answers requests with handler(request: bytes) -> bytes-like until every requester closed;
  // returns how many it answered. An exception of the handler stops serving and propagates
  // (that request's requester gets an empty response).
  std::uint64_t serve(const py::function& handler) {
    if (!channel) throw Error("fabflow: serve: the responder has finished");
    std::optional<py::error_already_set> raised;
    std::optional<std::string> refused;
    const rr::Handler call = [&](int, std::span<const std::byte> request,
                                 std::span<std::byte> response) -> std::size_t {
      if (raised || refused) return 0;
      py::gil_scoped_acquire locked;
      try {
        py::object answer =
            handler(py::bytes(reinterpret_cast<const char*>(request.data()), request.size()));
        const Buffer b(answer, false, "serve: the handler's answer");
        if (b.bytes().size() > response.size()) {
          refused = "fabflow: serve: the handler answered " + std::to_string(b.bytes().size()) +
                    " bytes; this channel takes up to " + std::to_string(response.size()) +
                    " (response_bytes)";
          return 0;
        }
        if (!b.bytes().empty()) std::memcpy(response.data(), b.bytes().data(), b.bytes().size());
        return b.bytes().size();
      } catch (py::error_already_set& e) {
        raised = std::move(e);
      } catch (const std::exception& e) {
        refused = std::string("fabflow: serve: ") + e.what();
      }
      return 0;
    };
    std::uint64_t served = 0;
    Status s = Status::ok;
    Wait wait(std::nullopt);
    unsigned idle = 0;
    bool peer_gone = false;
    wait_until(wait, "serve", [&] {
      unsigned n = 0;
      s = channel->serve(&call, &n);
      served += n;
      if (s == Status::empty && (++idle & 4095u) == 0 && boot->peer_failed()) peer_gone = true;
      return s == Status::failed || channel->done() || raised || refused || peer_gone;
    });
    if (raised) throw std::move(*raised);
    if (refused) throw UsageError(*refused);
    if (peer_gone) check_peers(*boot, "serve");
    if (s == Status::failed) raise_failure(*boot, "serve", channel->error());
    {
      py::gil_scoped_release unlocked;
      boot->barrier([this] { transport->progress(); });
    }
    channel.reset();
    return served;
  }
};

}  // namespace

void bind_rr(py::module_& m) {
  const char* args =
      " Collective over the rank's bootstrap: ranks 0..requesters-1 construct Requesters, the "
      "others Responders, at the same time. pattern: 'auto' (.why says what it chose), "
      "'WriteWrite', 'SendSend', 'WriteSend' or 'SendWrite'; provider as for queues; "
      "request_bytes / response_bytes: the largest request and response.";
  py::class_<Requester>(m, "Requester",
                        "The requester end of a request-response channel "
                        "(docs/request-response.md).")
      .def(py::init<Rank&, int, const std::string&, const std::string&, std::size_t, std::size_t,
                    std::optional<double>>(),
           py::arg("rank"), py::arg("requesters") = 1, py::arg("pattern") = "auto",
           py::arg("provider") = "auto", py::arg("request_bytes") = 4096,
           py::arg("response_bytes") = 4096, py::arg("timeout") = 10.0,
           (std::string("Opens a requester; timeout: seconds a call may wait (None: no bound).") +
            args)
               .c_str())
      .def("call", &Requester::call, py::arg("request"), py::arg("responder") = 0,
           "Sends a request (any contiguous buffer) to a responder (0-based among them) and "
           "returns its response as bytes.")
      .def("close", &Requester::close, "Tells every responder this requester is done.")
      .def_readonly("why", &Requester::why,
                    "auto: the pattern this end opened and why; empty when one was named.");
  py::class_<Responder>(m, "Responder", "The responder end of a request-response channel.")
      .def(py::init<Rank&, int, const std::string&, const std::string&, std::size_t, std::size_t>(),
           py::arg("rank"), py::arg("requesters") = 1, py::arg("pattern") = "auto",
           py::arg("provider") = "auto", py::arg("request_bytes") = 4096,
           py::arg("response_bytes") = 4096, (std::string("Opens a responder.") + args).c_str())
      .def("serve", &Responder::serve, py::arg("handler"),
           "Answers every request with handler(request: bytes) -> bytes-like until every "
           "requester closed; returns how many requests it answered.")
      .def_readonly("why", &Responder::why, "As Requester.why.");
}

}  // namespace fabflow::python
