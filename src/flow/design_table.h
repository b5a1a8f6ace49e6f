// The flow design space as data: the 33 design points, each with its name and the operations
// it asks of the transport. Validity, naming, parsing, the capability check and the template
// instantiations (instantiate.h) all read this one table.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

#include <fabflow/flow.h>
#include <fabflow/transport.h>

namespace fabflow::flow::detail {

// One design point and the fabric operation each of its axes uses (docs/flow-queues.md).
struct DesignPoint {
  DataFlow data;
  TransferNotify transfer;
  SpaceNotify space;
  std::string_view name;
  Op data_op;  // moves the items
  // Tells the consumer about new items; none of its own for a watermark (it travels in the
  // item slots), an event (the data send's completion) or imm (the data write's CQ data).
  std::optional<Op> transfer_op;
  Op space_op;  // tells the producer about free slots
};

namespace table {
using D = DataFlow;
using T = TransferNotify;
using S = SpaceNotify;
constexpr auto none = std::nullopt;
}  // namespace table

// In the order Design::all() lists them: data flow, then transfer, then space notification.
inline constexpr std::array<DesignPoint, 33> kDesignPoints = [] {
  using namespace table;
  return std::array<DesignPoint, 33>{{
      {D::push1, T::watermark, S::push, "push1-watermark-push", Op::write, none, Op::write},
      {D::push1, T::watermark, S::pull, "push1-watermark-pull", Op::write, none, Op::read},
      {D::push1, T::watermark, S::push2, "push1-watermark-push2", Op::write, none, Op::send},
      {D::push1, T::push, S::push, "push1-push-push", Op::write, Op::write, Op::write},
      {D::push1, T::push, S::pull, "push1-push-pull", Op::write, Op::write, Op::read},
      {D::push1, T::push, S::push2, "push1-push-push2", Op::write, Op::write, Op::send},
      {D::push1, T::pull, S::push, "push1-pull-push", Op::write, Op::read, Op::write},
      {D::push1, T::pull, S::pull, "push1-pull-pull", Op::write, Op::read, Op::read},
      {D::push1, T::pull, S::push2, "push1-pull-push2", Op::write, Op::read, Op::send},
      {D::push1, T::imm, S::push, "push1-imm-push", Op::writedata, none, Op::write},
      {D::push1, T::imm, S::pull, "push1-imm-pull", Op::writedata, none, Op::read},
      {D::push1, T::imm, S::push2, "push1-imm-push2", Op::writedata, none, Op::send},
      {D::push2, T::watermark, S::push, "push2-watermark-push", Op::send, none, Op::write},
      {D::push2, T::watermark, S::pull, "push2-watermark-pull", Op::send, none, Op::read},
      {D::push2, T::watermark, S::push2, "push2-watermark-push2", Op::send, none, Op::send},
      {D::push2, T::push, S::push, "push2-push-push", Op::send, Op::write, Op::write},
      {D::push2, T::push, S::pull, "push2-push-pull", Op::send, Op::write, Op::read},
      {D::push2, T::push, S::push2, "push2-push-push2", Op::send, Op::write, Op::send},
      {D::push2, T::pull, S::push, "push2-pull-push", Op::send, Op::read, Op::write},
      {D::push2, T::pull, S::pull, "push2-pull-pull", Op::send, Op::read, Op::read},
      {D::push2, T::pull, S::push2, "push2-pull-push2", Op::send, Op::read, Op::send},
      {D::push2, T::event, S::push, "push2-event-push", Op::send, none, Op::write},
      {D::push2, T::event, S::pull, "push2-event-pull", Op::send, none, Op::read},
      {D::push2, T::event, S::push2, "push2-event-push2", Op::send, none, Op::send},
      {D::pull, T::watermark, S::push, "pull-watermark-push", Op::read, none, Op::write},
      {D::pull, T::watermark, S::pull, "pull-watermark-pull", Op::read, none, Op::read},
      {D::pull, T::watermark, S::push2, "pull-watermark-push2", Op::read, none, Op::send},
      {D::pull, T::push, S::push, "pull-push-push", Op::read, Op::write, Op::write},
      {D::pull, T::push, S::pull, "pull-push-pull", Op::read, Op::write, Op::read},
      {D::pull, T::push, S::push2, "pull-push-push2", Op::read, Op::write, Op::send},
      {D::pull, T::pull, S::push, "pull-pull-push", Op::read, Op::read, Op::write},
      {D::pull, T::pull, S::pull, "pull-pull-pull", Op::read, Op::read, Op::read},
      {D::pull, T::pull, S::push2, "pull-pull-push2", Op::read, Op::read, Op::send},
  }};
}();

// The row of design `d`, or nullptr when it is not one of the 33.
constexpr const DesignPoint* find_point(DataFlow d, TransferNotify t, SpaceNotify s) noexcept {
  for (const DesignPoint& p : kDesignPoints)
    if (p.data == d && p.transfer == t && p.space == s) return &p;
  return nullptr;
}

constexpr const DesignPoint* find_point(std::string_view name) noexcept {
  for (const DesignPoint& p : kDesignPoints)
    if (p.name == name) return &p;
  return nullptr;
}

namespace table {

constexpr std::string_view kDataNames[] = {"push1", "push2", "pull"};
constexpr std::string_view kTransferNames[] = {"watermark", "push", "pull", "event", "imm"};
constexpr std::string_view kSpaceNames[] = {"push", "pull", "push2"};

// Each row's name is its three axes' names joined by '-', and no two rows are the same point.
constexpr bool consistent() {
  for (std::size_t i = 0; i < kDesignPoints.size(); ++i) {
    const DesignPoint& p = kDesignPoints[i];
    const std::string_view d = kDataNames[static_cast<std::size_t>(p.data)];
    const std::string_view t = kTransferNames[static_cast<std::size_t>(p.transfer)];
    const std::string_view s = kSpaceNames[static_cast<std::size_t>(p.space)];
    if (p.name.size() != d.size() + t.size() + s.size() + 2) return false;
    if (p.name.substr(0, d.size()) != d || p.name[d.size()] != '-' ||
        p.name.substr(d.size() + 1, t.size()) != t || p.name[d.size() + 1 + t.size()] != '-' ||
        p.name.substr(d.size() + t.size() + 2) != s)
      return false;
    for (std::size_t j = 0; j < i; ++j) {
      const DesignPoint& q = kDesignPoints[j];
      if (q.name == p.name || (q.data == p.data && q.transfer == p.transfer && q.space == p.space))
        return false;
    }
  }
  return true;
}

}  // namespace table

static_assert(kDesignPoints.size() == 33, "the design space has 33 points");
static_assert(table::consistent(), "a design point's name must match its axes, once each");

}  // namespace fabflow::flow::detail
