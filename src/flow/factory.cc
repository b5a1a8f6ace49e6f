// make_producer / make_consumer: the checks of what the caller passed, then the run-time
// dispatch onto the template instantiations (producer.cc, consumer.cc) or the socket baseline.
#include <fabflow/bootstrap.h>
#include <fabflow/flow.h>

#include <typeinfo>

#include "flow/end_base.h"
#include "flow/socket/socket_queue.h"

namespace fabflow::flow {

namespace {

void check_peer_rank(Bootstrap& boot, int peer) {
  if (peer < 0 || peer >= boot.size() || peer == boot.rank())
    throw UsageError("flow: peer rank " + std::to_string(peer) + " is not another rank of " +
                     std::to_string(boot.size()));
}

void check_usage(Transport& transport, Bootstrap& boot, int peer, const QueueOptions& o) {
  check_peer_rank(boot, peer);
  if (o.separate_notify_endpoint)
    throw UsageError(
        "flow: separate_notify_endpoint needs a second transport for the "
        "notifications: open one with required_notify_ops(options) and pass it to "
        "the make_producer / make_consumer overload that takes (data, notify, ...)");
  if (auto why = why_unsupported(transport.caps(), o); !why.empty()) throw UsageError(why);
}

void check_usage(Transport& data, Transport& notify, Bootstrap& boot, int peer,
                 const QueueOptions& o) {
  check_peer_rank(boot, peer);
  if (!o.separate_notify_endpoint)
    throw UsageError("flow: a notify transport was given but separate_notify_endpoint is off");
  if (&data == &notify)
    throw UsageError(
        "flow: separate_notify_endpoint needs a second transport, the data "
        "transport was given twice");
  // The queue end is one instantiation over the data transport's concrete type: the notify
  // transport must be of that type too (static dispatch on both, no virtual call).
  if (typeid(data) != typeid(notify))
    throw UsageError("flow: the notify transport (" + std::string(notify.name()) +
                     ") is not of the data transport's kind (" + std::string(data.name()) + ")");
  if (auto why = why_unsupported(data.caps(), notify.caps(), o); !why.empty())
    throw UsageError(why);
}

}  // namespace

namespace detail {

// Sets an end's why() (a friend of Producer and Consumer).
struct AutoNote {
  template <class End>
  static std::unique_ptr<End> note(std::unique_ptr<End> end, std::string why) {
    end->why_ = std::move(why);
    return end;
  }
};

}  // namespace detail

namespace {

// auto: the end `make(options)` makes with the design chosen for these transports, its why()
// the line that says which and why.
template <class Make>
auto open_auto(const Capabilities& data, const Capabilities& notify, const QueueOptions& options,
               Make make) {
  if (auto refused = why_unsupported(data, notify, options); !refused.empty())
    throw UsageError(refused);
  const AutoDesign c = choose_design(data, notify, options);
  QueueOptions o = options;
  o.automatic = false;
  o.socket = c.name == "socket";
  if (!o.socket) o.design = Design::parse(c.name).value();
  return detail::AutoNote::note(make(o),
                                "auto on " + data.provider + ": " + c.name + " (" + c.why + ")");
}

// What makes each end: the socket baseline's maker and the design points' (producer.cc,
// consumer.cc).
template <class End>
struct Makers;
template <>
struct Makers<Producer> {
  static constexpr auto socket = make_socket_producer;
  static constexpr auto design = detail::make_producer_impl;
};
template <>
struct Makers<Consumer> {
  static constexpr auto socket = make_socket_consumer;
  static constexpr auto design = detail::make_consumer_impl;
};

// make_producer and make_consumer, both overloads: `notify` is null for the one that takes a
// single transport. auto makes the end again with the design chosen for these transports.
template <class End>
std::unique_ptr<End> make_end(Transport& data, Transport* notify, Bootstrap& boot, int peer,
                              const QueueOptions& options) {
  Transport& n = notify ? *notify : data;
  if (options.automatic)
    return open_auto(data.caps(), n.caps(), options, [&](const QueueOptions& o) {
      return make_end<End>(data, notify, boot, peer, o);
    });
  if (!notify) {
    if (options.socket && !options.separate_notify_endpoint)
      return Makers<End>::socket(data, boot, peer, options);
    check_usage(data, boot, peer, options);
  } else {
    if (options.socket)
      throw UsageError("flow: the socket baseline has no notification endpoint to separate");
    check_usage(data, n, boot, peer, options);
  }
  return Makers<End>::design(data, n, boot, peer, options);
}

}  // namespace

std::unique_ptr<Producer> make_producer(Transport& transport, Bootstrap& boot, int consumer_rank,
                                        const QueueOptions& options) {
  return make_end<Producer>(transport, nullptr, boot, consumer_rank, options);
}

std::unique_ptr<Consumer> make_consumer(Transport& transport, Bootstrap& boot, int producer_rank,
                                        const QueueOptions& options) {
  return make_end<Consumer>(transport, nullptr, boot, producer_rank, options);
}

std::unique_ptr<Producer> make_producer(Transport& data, Transport& notify, Bootstrap& boot,
                                        int consumer_rank, const QueueOptions& options) {
  return make_end<Producer>(data, &notify, boot, consumer_rank, options);
}

std::unique_ptr<Consumer> make_consumer(Transport& data, Transport& notify, Bootstrap& boot,
                                        int producer_rank, const QueueOptions& options) {
  return make_end<Consumer>(data, &notify, boot, producer_rank, options);
}

namespace {

template <class End, class Make>
Opened<End> open_over(Peer& peer, const QueueOptions& options, const TransportOptions& transport,
                      Make make) {
  if (options.separate_notify_endpoint)
    throw UsageError(
        "flow: separate_notify_endpoint needs two transports; a queue opened over a Peer has one");
  Opened<End> o;
  static_cast<Connected&>(o) =
      connect_transport(with_needs(transport, required_ops(options), required_rx_depth(options)),
                        peer, peer.bootstrap().rank());
  o.end = make(*o.transport, *o.session, o.peer, options);
  return o;
}

}  // namespace

Opened<Producer> open_producer(Peer& peer, const QueueOptions& options,
                               const TransportOptions& transport) {
  return open_over<Producer>(peer, options, transport,
                             [](Transport& t, Bootstrap& b, int other, const QueueOptions& q) {
                               return make_producer(t, b, other, q);
                             });
}

Opened<Consumer> open_consumer(Peer& peer, const QueueOptions& options,
                               const TransportOptions& transport) {
  return open_over<Consumer>(peer, options, transport,
                             [](Transport& t, Bootstrap& b, int other, const QueueOptions& q) {
                               return make_consumer(t, b, other, q);
                             });
}

}  // namespace fabflow::flow
