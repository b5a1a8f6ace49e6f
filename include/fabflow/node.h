// Connections at run time: a process listens on an address, others connect to it whenever they
// like, and each connection is a Peer over which any pattern opens, as it would between the two
// ranks of a job.
//
//   fabflow::Node node;                               // the secret from FABFLOW_SECRET(_FILE)
//   node.listen("127.0.0.1:7000");                    // server
//   auto peer = node.accept(std::chrono::seconds(30));
//   auto queue = fabflow::flow::open_consumer(*peer, options);   // fabflow/flow.h
//
//   auto peer = fabflow::Node().connect("127.0.0.1:7000", std::chrono::seconds(5));  // client
//   auto queue = fabflow::flow::open_producer(*peer, options);
//
// A connection proves the shared secret both ways before the listener allocates anything for it
// (the bootstrap's challenge, hello and welcome, docs/bootstrap.md), then becomes a session of its
// own: a two-rank bootstrap whose coordinator the listener opens for it alone, with the
// bootstrap's heartbeats, so that a peer that dies or stops answering fails that session only,
// within its silence bound, and the listener and every other peer go on. Rank 0 of a session is
// the side that accepted, rank 1 the side that connected. Closing a Peer (destroying it) ends the
// session; the other side sees it as a departed peer.
//
// Every pattern opens over a Peer in one shape: open_*(peer, pattern options, transport options)
// returns an Opened<End>, which owns the end and the transport it runs on (connect_transport over
// the session, "auto" by default). The other side opens the matching end. A node shares nothing
// between its peers but the listener: each pattern of each peer has its own transport, released
// with it.
#pragma once

#include <fabflow/bootstrap.h>
#include <fabflow/transport.h>

#include <chrono>
#include <memory>
#include <string>

namespace fabflow {

struct NodeOptions {
  std::string secret;       // empty: secret_file, then FABFLOW_SECRET, then FABFLOW_SECRET_FILE
  std::string secret_file;  // mode 0600 or stricter (BootstrapConfig::read_secret_file)
  // A session's bound: its setup, its collectives, and how long its other side may show no sign
  // of life (its bootstrap's silence) before the session fails naming it.
  std::chrono::milliseconds timeout{8000};
  // How long a connection may take to prove the secret before the listener drops it.
  std::chrono::milliseconds handshake{2000};
};

// One connection: this side of a two-rank session. Move-less; destroy it to close. Not
// thread-safe (like any Bootstrap).
class Peer {
 public:
  virtual ~Peer() = default;
  // The session: rank() 0 on the accepting side, 1 on the connecting side.
  virtual Bootstrap& bootstrap() = 0;
  // The same session with this side at rank `rank` (0 or 1) and the other side at the other,
  // for patterns whose roles sit at given ranks (rr: requesters first). Both sides must choose
  // complementary ranks, as the open_* functions of the patterns do. UsageError for another rank.
  virtual Bootstrap& bootstrap_as(int rank) = 0;
  // The other side's address as this side sees it ("host:port").
  virtual const std::string& remote() const = 0;
};

// A transport connected over one Peer's session.
struct Connected {
  std::unique_ptr<Transport> transport;
  Bootstrap* session = nullptr;  // the view it was connected over (owned by the Peer)
  int peer = 0;                  // the other side's rank in that view (the peer a bulk call names)
  std::string provider;          // what was opened and why (connect_transport's choice)
};

// connect_transport over `peer`, this side at `rank` of its session. Collective over the
// session: the other side calls it with the other rank and the same provider.
Connected connect_transport(const TransportOptions& options, Peer& peer, int rank);

// One end of a pattern opened over a Peer, with the transport it runs on. The Peer must outlive
// it. Destroying it releases both (the end first).
template <class End>
struct Opened : Connected {
  std::unique_ptr<End> end;
  End* operator->() const noexcept { return end.get(); }
  End& operator*() const noexcept { return *end; }
};

// A process's handle for run-time connections: listens and accepts, or connects, for as long as
// it lives. Not thread-safe: one thread accepts; Peers it returned are independent of it.
class Node {
 public:
  // Throws UsageError when no secret is given or found.
  explicit Node(NodeOptions options = {});
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Listens on "host:port" (port 0: any free one). Throws UsageError for a malformed address,
  // Error when it cannot listen there.
  void listen(const std::string& address);
  // Where it listens ("127.0.0.1:7000"), once listen() returned; empty before.
  std::string address() const;

  // The next peer that connects and proves the secret, within `timeout`; nullptr when none did.
  // Connections that fail the handshake (wrong secret, another version, garbled, silent) are
  // dropped on the way, each with a reason sent back where it can be; they never end the wait
  // early and never stop the listener. Throws Error when the session of a peer that proved the
  // secret cannot be set up (it vanished meanwhile): the caller accepts again.
  std::unique_ptr<Peer> accept(std::chrono::milliseconds timeout);

  // Connects to a listening node at "host:port" within `timeout`. Throws UsageError for a
  // malformed address, Error naming the address when nothing answers, when it refuses this
  // process (the secret) or when it is not a fabflow node.
  std::unique_ptr<Peer> connect(const std::string& address, std::chrono::milliseconds timeout);

  // Connections dropped during their handshake so far (for tests and logs).
  std::size_t refused() const noexcept;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace fabflow
