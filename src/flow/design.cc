// Design naming, presets, capability checks and the hello blob (factory.cc dispatches
// make_producer / make_consumer onto the template instantiations).
#include <fabflow/flow.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "flow/design_table.h"
#include "flow/layout.h"

namespace fabflow::flow {

using detail::find_point;
using detail::kDesignPoints;

bool Design::valid() const noexcept { return find_point(data, transfer, space) != nullptr; }

std::string Design::name() const {
  const auto* p = find_point(data, transfer, space);
  return p ? std::string(p->name) : "invalid";
}

std::optional<Design> Design::parse(std::string_view name) noexcept {
  const auto* p = find_point(name);
  if (!p) return std::nullopt;
  return Design{p->data, p->transfer, p->space};
}

std::vector<Design> Design::all() {
  std::vector<Design> out;
  for (const auto& p : kDesignPoints) out.push_back(Design{p.data, p.transfer, p.space});
  return out;
}

QueueOptions QueueOptions::preset(std::string_view name, Design design) {
  QueueOptions o;
  o.design = design;
  if (name == "basic") return o;
  if (name == "batching") {
    o.batching = design.data != DataFlow::push2;
    return o;
  }
  if (name == "datamover") {
    o.active_producer = true;
    o.batching = design.data != DataFlow::push2;
    return o;
  }
  throw UsageError("flow: unknown queue preset '" + std::string(name) +
                   "' (basic, batching, datamover)");
}

namespace {

void add_op(std::vector<Op>& ops, Op op) {
  for (Op x : ops)
    if (x == op) return;
  ops.push_back(op);
}

// The operations of the notifications that the data does not carry.
void notify_ops(const detail::DesignPoint& p, std::vector<Op>& ops) {
  if (p.transfer_op) add_op(ops, *p.transfer_op);
  add_op(ops, p.space_op);
}

const detail::DesignPoint* point_of(const Design& d) {
  return find_point(d.data, d.transfer, d.space);
}

// Checks `o` against the data transport's and the notify transport's capabilities (the same
// ones without separate_notify_endpoint).
std::string why_unsupported_on(const Capabilities& data, const Capabilities& notify,
                               const QueueOptions& o) {
  if (o.automatic) {
    if (o.objective != "throughput" && o.objective != "p50" && o.objective != "p99")
      return "flow: auto: objective '" + o.objective + "' is not throughput, p50 or p99";
    const AutoDesign c = choose_design(data, notify, o);
    return c.name.empty() ? "flow: auto: " + c.why : "";
  }
  if (o.socket) return {};
  const Design& d = o.design;
  if (!d.valid()) return "flow: not one of the 33 design points";
  const std::string name = d.name();
  if (o.capacity == 0 || o.capacity > (std::size_t{1} << 24))
    return "flow: capacity must be between 1 and 16777216 slots";
  if (o.item_bytes == 0 || o.item_bytes > (std::size_t{1} << 30))
    return "flow: item_bytes must be between 1 and 1 GiB";
  if (o.signal_every == 0) return "flow: signal_every must be at least 1";
  if (!(o.lazy_refresh >= 0.0 && o.lazy_refresh <= 1.0))
    return "flow: lazy_refresh must be in [0, 1]";
  if (o.slot_format == SlotFormat::compact) {
    if (d.data != DataFlow::push1)
      return "flow: " + name +
             ": compact slots need push1 data (the consumer polls the word the producer's write "
             "stores last)";
    if (!data.in_order_data)
      return "flow: " + name + ": compact slots need writes placed in order (in_order_data), " +
             data.provider + " does not advertise it";
  }
  if (o.batching && d.data == DataFlow::push2)
    return "flow: " + name +
           " cannot batch: push2 moves one item per message into one posted receive";
  const char* where = o.separate_notify_endpoint ? " (notify endpoint)" : "";
  auto check = [&](const Capabilities& caps, const std::vector<Op>& ops,
                   const char* which) -> std::string {
    auto m = missing_op(caps, ops);
    if (!m) return {};
    if (m->op == Op::writedata && caps.cq_data_size == 0)
      return "flow: " + name + " needs remote CQ data, " + caps.provider + " has none";
    if (m->op == Op::writedata && caps.cq_data_size < 4)
      return "flow: " + name + " needs 4 bytes of remote CQ data, " + caps.provider + " has " +
             std::to_string(caps.cq_data_size);
    return "flow: " + name + which + ": " + m->why;
  };
  if (auto why = check(data, required_ops(o), ""); !why.empty()) return why;
  if (o.separate_notify_endpoint)
    if (auto why = check(notify, required_notify_ops(o), where); !why.empty()) return why;
  const bool counters = d.transfer == TransferNotify::push || d.space == SpaceNotify::push ||
                        d.space == SpaceNotify::push2;
  if (counters && notify.inject_size < 8)
    return "flow: " + name + " injects 8-byte counters, " + notify.provider + where + " injects " +
           std::to_string(notify.inject_size) + " bytes";
  return {};
}

}  // namespace

// auto may choose any design: the operations of all but immediate data (writedata), which a
// transport offering write either carries or refuses at the choice.
constexpr Op kAutoOps[] = {Op::send, Op::write, Op::read};

std::vector<Op> required_ops(const QueueOptions& o) {
  if (o.automatic) return {std::begin(kAutoOps), std::end(kAutoOps)};
  std::vector<Op> ops;
  const auto* p = point_of(o.design);
  if (!p) return ops;
  add_op(ops, p->data_op);
  if (!o.separate_notify_endpoint) notify_ops(*p, ops);
  return ops;
}

std::vector<Op> required_notify_ops(const QueueOptions& o) {
  if (o.automatic && o.separate_notify_endpoint) return {std::begin(kAutoOps), std::end(kAutoOps)};
  std::vector<Op> ops;
  const auto* p = point_of(o.design);
  if (p && o.separate_notify_endpoint) notify_ops(*p, ops);
  return ops;
}

std::string why_unsupported(const Capabilities& caps, const QueueOptions& o) {
  return why_unsupported_on(caps, caps, o);
}

std::string why_unsupported(const Capabilities& data, const Capabilities& notify,
                            const QueueOptions& o) {
  return why_unsupported_on(data, notify, o);
}

std::string_view to_string(SlotFormat f) noexcept {
  switch (f) {
    case SlotFormat::automatic: return "automatic";
    case SlotFormat::framed: return "framed";
    case SlotFormat::compact: return "compact";
  }
  return "?";
}

SlotFormat slot_format(const Capabilities& caps, const QueueOptions& o) noexcept {
  if (o.slot_format != SlotFormat::automatic) return o.slot_format;
  // Coalesced writes (batching, data mover) publish only their last slot in order: with the
  // watermark transfer, compact slots would cost them a write per item, so they stay framed.
  const bool coalesced = detail::coalesces_writes(o.design.transfer, o.batching, o.active_producer);
  const bool compact =
      !o.socket && o.design.data == DataFlow::push1 && caps.in_order_data && !coalesced;
  return compact ? SlotFormat::compact : SlotFormat::framed;
}

namespace detail {

std::span<const std::byte> decode_hello(std::span<const std::byte> blob, int peer,
                                        const Hello& expect, std::span<const std::byte>* notify_key,
                                        Hello* peer_hello) {
  auto bad = [&](const std::string& why) {
    return PeerError(peer, "flow: rank " + std::to_string(peer) + " " + why);
  };
  Hello h;
  if (blob.size() < sizeof h)
    throw bad("sent a short queue hello (" + std::to_string(blob.size()) + " bytes)");
  std::memcpy(&h, blob.data(), sizeof h);
  if (h.magic != Hello::kMagic || h.version != expect.version)
    throw bad("is not a flow queue end of this version");
  if (h.refused) {
    // The peer found the design point unsupported after both ends committed to the exchange:
    // a refusal on both sides, with its reason (bounded, printable bytes only).
    std::string why;
    for (std::byte b :
         blob.subspan(sizeof h).first(std::min<std::size_t>(blob.size() - sizeof h, 512)))
      why += std::isprint(static_cast<unsigned char>(b)) ? static_cast<char>(b) : '?';
    throw UsageError(why.empty() ? "flow: rank " + std::to_string(peer) + " refused the queue"
                                 : why);
  }
  if (h.peer != expect.rank)
    throw bad("pairs its queue end with rank " + std::to_string(h.peer) + ", not with rank " +
              std::to_string(expect.rank) +
              " (a queue joins one producer and one consumer; a third rank cannot open it)");
  if (h.role == expect.role)
    throw bad("is a queue end of the same role (both producers or both consumers)");
  if (h.data != expect.data || h.transfer != expect.transfer || h.space != expect.space) {
    const Design theirs{DataFlow{h.data}, TransferNotify{h.transfer}, SpaceNotify{h.space}};
    const Design ours{DataFlow{expect.data}, TransferNotify{expect.transfer},
                      SpaceNotify{expect.space}};
    throw bad("opened " + (theirs.valid() ? theirs.name() : std::string("no valid design point")) +
              ", this end " + ours.name() +
              " (both ends must open the same design; with auto each end chooses from its own "
              "profile and transport)");
  }
  if (h.capacity != expect.capacity || h.item_bytes != expect.item_bytes)
    throw bad("uses a different capacity or item size (" + std::to_string(h.capacity) + " x " +
              std::to_string(h.item_bytes) + " bytes, this end " + std::to_string(expect.capacity) +
              " x " + std::to_string(expect.item_bytes) + " bytes" +
              (expect.data == static_cast<std::uint8_t>(DataFlow::push2)
                   ? "; push2 rings hold min(capacity, recv_pool) slots)"
                   : ")"));
  if (h.format != expect.format)
    throw bad(std::string("uses ") + std::string(to_string(static_cast<SlotFormat>(h.format))) +
              " slots, this end " + std::string(to_string(static_cast<SlotFormat>(expect.format))) +
              " ones");
  if (h.sum != expect.sum)
    throw bad(std::string(h.sum ? "carries" : "does not carry") +
              " payload sums in its slots, this end " + (expect.sum ? "does" : "does not"));
  // Only a producer with compact slots may store them word first.
  if (h.word_first > 1 ||
      (h.word_first &&
       (h.role != 0 /* producer */ || h.format != static_cast<std::uint8_t>(SlotFormat::compact))))
    throw bad("sent a queue hello with a bad word_first byte (" + std::to_string(h.word_first) +
              ")");
  if (h.separate != expect.separate)
    throw bad(std::string("uses ") + (h.separate ? "a separate" : "a shared") +
              " notification endpoint, this end " + (expect.separate ? "a separate" : "a shared") +
              " one");
  // Both lengths come from the peer: compare their sum in 64 bits, then each against the rest.
  const std::uint64_t rest = blob.size() - sizeof h;
  if (std::uint64_t{h.key_len} + h.notify_key_len != rest ||
      (h.separate ? h.notify_key_len == 0 : h.notify_key_len != 0))
    throw bad("sent a queue hello with a bad key length");
  if (notify_key) *notify_key = blob.subspan(sizeof h + h.key_len, h.notify_key_len);
  if (peer_hello) *peer_hello = h;
  return blob.subspan(sizeof h, h.key_len);
}

}  // namespace detail

}  // namespace fabflow::flow
