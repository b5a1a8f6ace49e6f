// The sequencer's shared parts: option checks, which design a provider can run, the
// fingerprint, the worker crew and the factories.
#include <fabflow/seq.h>

#include <exception>
#include <mutex>
#include <thread>

#include "common/affinity.h"
#include "common/bounded_wait.h"
#include "seq/internal.h"

namespace fabflow::seq {

std::vector<Op> required_ops(Design d) {
  switch (d) {
    case Design::rpc:
    case Design::rpc_batch: return {Op::write, Op::send};
    case Design::spec: return {Op::writedata, Op::send};
    case Design::atomic: return {Op::fadd, Op::write};
  }
  return {};
}

std::string why_unsupported(const Capabilities& caps, const Options& o) {
  if (auto m = missing_op(caps, required_ops(o.design)))
    return std::string(to_string(o.design)) + " needs " + std::string(to_string(m->op)) + ": " +
           m->why;
  if (o.design == Design::spec) {
    if (caps.cq_data_size < 4)
      return "spec needs 4 bytes of CQ data; " + caps.provider + " carries " +
             std::to_string(caps.cq_data_size);
    if (caps.inject_size < 8)
      return "spec needs inject of 8 bytes; " + caps.provider + " injects " +
             std::to_string(caps.inject_size);
  }
  return {};
}

void validate(const Options& o, int clients) {
  auto range = [](const char* what, std::uint64_t v, std::uint64_t lo, std::uint64_t hi) {
    if (v < lo || v > hi)
      throw UsageError("seq: " + std::string(what) + " must be in " + std::to_string(lo) + ".." +
                       std::to_string(hi) + " (got " + std::to_string(v) + ")");
  };
  range("clients", clients < 0 ? 0 : static_cast<std::uint64_t>(clients), 1, kMaxClients - 1);
  range("workers", o.workers, 1, kMaxWorkers);
  range("queues", o.queues, 1, kMaxQueues);
  range("outstanding", o.outstanding, 1, kMaxOutstanding);
  range("batch", o.batch, 1, kMaxBatch);
  if (o.peer_timeout.count() <= 0) throw UsageError("seq: the peer timeout must be positive");
}

// splitmix64's finaliser with two seeds: a value's two independent 64-bit marks.
namespace {
constexpr std::uint64_t mix(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

void fingerprint_add(std::uint64_t value, std::uint64_t fp[2]) noexcept {
  fp[0] += mix(value + 0x9e3779b97f4a7c15ull);
  fp[1] += mix(value ^ 0xd1b54a32d192ed03ull);
}

void fingerprint_range(std::uint64_t first, std::uint64_t last, std::uint64_t out[2]) {
  out[0] = out[1] = 0;
  for (std::uint64_t v = first; v < last; ++v) fingerprint_add(v, out);
}

std::uint64_t Client::next(Bootstrap& boot) {
  BoundedWait watch(std::chrono::milliseconds(10000), &boot, {}, 256);
  bool sent = false;
  for (;;) {
    if (!sent) {
      Status s = issue();
      if (s == Status::failed) throw Error(error());
      sent = s == Status::ok;
    }
    std::uint64_t v;
    Status s = poll(&v);
    if (s == Status::ok) return v;  // the answer to this request or to an earlier one
    if (s == Status::failed) throw Error(error());
    watch.idle("seq", sent ? "waiting for a value" : "sending a request");
  }
}

namespace detail {

std::unique_ptr<Transport> open_lane(const TransportOptions& given, Bootstrap& boot, Design d) {
  TransportOptions to = given;
  to.ops = required_ops(d);
  auto t = open_transport(to);
  t->connect(boot);
  return t;
}

void drain(Client& c, Bootstrap& boot, const Options& o) {
  BoundedWait watch(o.peer_timeout, &boot, {}, 256);
  watch.yield_when_idle(o.yield_when_idle);
  while (c.in_flight() > 0) {
    std::uint64_t v;
    Status s = c.poll(&v);
    if (s == Status::failed) throw Error(c.error());
    if (s == Status::empty) watch.idle("seq client", "draining before close");
  }
}

}  // namespace detail

namespace {
void check_setup(const TransportOptions& to, Bootstrap& boot, const Options& o) {
  validate(o, detail::client_count(boot));
  TransportOptions probe = to;
  probe.ops = required_ops(o.design);
  if (std::string why = why_unsupported(probe_transport(probe), o); !why.empty())
    throw UsageError("seq: " + why);
}

const detail::Ends& ends_for(Design d) {
  switch (d) {
    case Design::rpc:
    case Design::rpc_batch: return detail::kRpcEnds;
    case Design::spec: return detail::kSpecEnds;
    case Design::atomic: return detail::kAtomicEnds;
  }
  throw UsageError("seq: unknown design");
}
}  // namespace

std::unique_ptr<Server> make_server(const TransportOptions& given, Bootstrap& boot,
                                    const Options& o) {
  const TransportOptions to = for_ranks_of(given, boot);  // "auto": local on one host
  check_setup(to, boot, o);
  if (boot.rank() != detail::server_rank(boot))
    throw UsageError("seq: rank " + std::to_string(boot.rank()) + " is a client");
  return ends_for(o.design).server(to, boot, o);
}

std::unique_ptr<Client> make_client(const TransportOptions& given, Bootstrap& boot,
                                    const Options& o) {
  const TransportOptions to = for_ranks_of(given, boot);  // "auto": local on one host
  check_setup(to, boot, o);
  if (boot.rank() == detail::server_rank(boot))
    throw UsageError("seq: rank " + std::to_string(boot.rank()) + " is the server");
  return ends_for(o.design).client(to, boot, o);
}

}  // namespace fabflow::seq
