// Run-time choice of one of the 33 design-point instantiations, one per row of the design table
// (times the concrete transport type, through with_concrete on the data transport; the notify
// transport is of the same type).
#pragma once

#include <type_traits>
#include <utility>

#include "flow/design_table.h"
#include "flow/end_base.h"
#include "transport/dispatch.h"

namespace fabflow::flow::detail {

// Builds the instantiation for row I of the design table when `d` is that row.
template <template <DataFlow, TransferNotify, SpaceNotify, class> class Impl, class Base,
          std::size_t I>
void build_if(const Design& d, Transport& t, Transport& n, Shared& s, std::unique_ptr<Base>& out) {
  constexpr DesignPoint P = kDesignPoints[I];
  if (out || d.data != P.data || d.transfer != P.transfer || d.space != P.space) return;
  out = with_concrete(t, [&](auto& tr) -> std::unique_ptr<Base> {
    using Tr = std::remove_reference_t<decltype(tr)>;
    // make_producer / make_consumer checked that both are of one concrete type.
    auto* nt = dynamic_cast<Tr*>(&n);
    if (!nt) throw UsageError("flow: the notify transport is not of the data transport's kind");
    return std::make_unique<Impl<P.data, P.transfer, P.space, Tr>>(tr, *nt, std::move(s));
  });
}

template <template <DataFlow, TransferNotify, SpaceNotify, class> class Impl, class Base,
          std::size_t... I>
std::unique_ptr<Base> build_design_rows(const Design& d, Transport& t, Transport& n, Shared& s,
                                        std::index_sequence<I...>) {
  std::unique_ptr<Base> out;
  (build_if<Impl, Base, I>(d, t, n, s, out), ...);
  if (!out) throw UsageError("flow: not one of the 33 design points");
  return out;
}

// One instantiation of Impl per row of the design table (times the concrete transport type).
template <template <DataFlow, TransferNotify, SpaceNotify, class> class Impl, class Base>
std::unique_ptr<Base> build_design(const Design& d, Transport& t, Transport& n, Shared& s) {
  return build_design_rows<Impl, Base>(d, t, n, s,
                                       std::make_index_sequence<kDesignPoints.size()>{});
}

}  // namespace fabflow::flow::detail
