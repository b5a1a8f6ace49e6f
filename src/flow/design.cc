// Design naming, presets, capability checks and the hello blob (factory.cc dispatches
// make_producer / make_consumer onto the template instantiations).
#include <fabflow/flow.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "flow/layout.h"

namespace fabflow::flow {
namespace {

constexpr std::array<std::string_view, 3> kData = {"push1", "push2", "pull"};
constexpr std::array<std::string_view, 5> kTransfer = {"watermark", "push", "pull", "event", "imm"};
constexpr std::array<std::string_view, 3> kSpace = {"push", "pull", "push2"};

template <class E, std::size_t N>
std::optional<E> lookup(const std::array<std::string_view, N>& names, std::string_view s) {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<E>(i);
  return std::nullopt;
}

}  // namespace

bool Design::valid() const noexcept {
  if (static_cast<std::size_t>(data) >= kData.size() ||
      static_cast<std::size_t>(transfer) >= kTransfer.size() ||
      static_cast<std::size_t>(space) >= kSpace.size())
    return false;
  switch (transfer) {
    case TransferNotify::watermark:
    case TransferNotify::push:
    case TransferNotify::pull: return true;
    case TransferNotify::event: return data == DataFlow::push2;
    case TransferNotify::imm: return data == DataFlow::push1;
  }
  return false;
}

std::string Design::name() const {
  if (!valid()) return "invalid";
  std::string s(kData[static_cast<std::size_t>(data)]);
  s += '-';
  s += kTransfer[static_cast<std::size_t>(transfer)];
  s += '-';
  s += kSpace[static_cast<std::size_t>(space)];
  return s;
}

std::optional<Design> Design::parse(std::string_view name) noexcept {
  auto a = name.find('-');
  if (a == std::string_view::npos) return std::nullopt;
  auto b = name.find('-', a + 1);
  if (b == std::string_view::npos) return std::nullopt;
  auto d = lookup<DataFlow>(kData, name.substr(0, a));
  auto t = lookup<TransferNotify>(kTransfer, name.substr(a + 1, b - a - 1));
  auto s = lookup<SpaceNotify>(kSpace, name.substr(b + 1));
  if (!d || !t || !s) return std::nullopt;
  Design design{*d, *t, *s};
  if (!design.valid()) return std::nullopt;
  return design;
}

std::vector<Design> Design::all() {
  std::vector<Design> out;
  for (std::size_t d = 0; d < kData.size(); ++d)
    for (std::size_t t = 0; t < kTransfer.size(); ++t)
      for (std::size_t s = 0; s < kSpace.size(); ++s) {
        Design x{static_cast<DataFlow>(d), static_cast<TransferNotify>(t),
                 static_cast<SpaceNotify>(s)};
        if (x.valid()) out.push_back(x);
      }
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

// The operations that move items.
void data_ops(const Design& d, std::vector<Op>& ops) {
  if (d.data == DataFlow::push1)
    add_op(ops, d.transfer == TransferNotify::imm ? Op::writedata : Op::write);
  if (d.data == DataFlow::push2) add_op(ops, Op::send);
  if (d.data == DataFlow::pull) add_op(ops, Op::read);
}

// The operations of the transfer and space notifications that are not carried by the data.
void notify_ops(const Design& d, std::vector<Op>& ops) {
  if (d.transfer == TransferNotify::push) add_op(ops, Op::write);
  if (d.transfer == TransferNotify::pull) add_op(ops, Op::read);
  if (d.space == SpaceNotify::push) add_op(ops, Op::write);
  if (d.space == SpaceNotify::pull) add_op(ops, Op::read);
  if (d.space == SpaceNotify::push2) add_op(ops, Op::send);
}

// Checks `o` against the data transport's and the notify transport's capabilities (the same
// ones without separate_notify_endpoint).
std::string why_unsupported_on(const Capabilities& data, const Capabilities& notify,
                               const QueueOptions& o) {
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
  if (o.batching && d.data == DataFlow::push2)
    return "flow: " + name +
           " cannot batch: push2 moves one item per message into one posted receive";
  const char* where = o.separate_notify_endpoint ? " (notify endpoint)" : "";
  auto check = [&](const Capabilities& caps, const std::vector<Op>& ops,
                   const char* which) -> std::string {
    for (Op op : ops) {
      if (op == Op::writedata) {
        if (caps.cq_data_size == 0)
          return "flow: " + name + " needs remote CQ data, " + caps.provider + " has none";
        if (caps.cq_data_size < 4)
          return "flow: " + name + " needs 4 bytes of remote CQ data, " + caps.provider + " has " +
                 std::to_string(caps.cq_data_size);
      }
      if (auto why = caps.why_not(op); !why.empty()) return "flow: " + name + which + ": " + why;
    }
    return {};
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

std::vector<Op> required_ops(const QueueOptions& o) {
  std::vector<Op> ops;
  data_ops(o.design, ops);
  if (!o.separate_notify_endpoint) notify_ops(o.design, ops);
  return ops;
}

std::vector<Op> required_notify_ops(const QueueOptions& o) {
  std::vector<Op> ops;
  if (o.separate_notify_endpoint) notify_ops(o.design, ops);
  return ops;
}

std::string why_unsupported(const Capabilities& caps, const QueueOptions& o) {
  return why_unsupported_on(caps, caps, o);
}

std::string why_unsupported(const Capabilities& data, const Capabilities& notify,
                            const QueueOptions& o) {
  return why_unsupported_on(data, notify, o);
}

namespace detail {

std::span<const std::byte> decode_hello(std::span<const std::byte> blob, int peer,
                                        const Hello& expect,
                                        std::span<const std::byte>* notify_key) {
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
  if (h.role == expect.role)
    throw bad("is a queue end of the same role (both producers or both consumers)");
  if (h.data != expect.data || h.transfer != expect.transfer || h.space != expect.space)
    throw bad("uses a different design point");
  if (h.capacity != expect.capacity || h.item_bytes != expect.item_bytes)
    throw bad("uses a different capacity or item size (" + std::to_string(h.capacity) + " x " +
              std::to_string(h.item_bytes) + " bytes, this end " + std::to_string(expect.capacity) +
              " x " + std::to_string(expect.item_bytes) + " bytes" +
              (expect.data == static_cast<std::uint8_t>(DataFlow::push2)
                   ? "; push2 rings hold min(capacity, recv_pool) slots)"
                   : ")"));
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
  return blob.subspan(sizeof h, h.key_len);
}

}  // namespace detail

}  // namespace fabflow::flow
