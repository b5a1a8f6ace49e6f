// Run-time choice of one of the 33 design-point instantiations (times the concrete transport
// type, through with_concrete on the data transport; the notify transport is of the same type).
#pragma once

#include <type_traits>
#include <utility>

#include "flow/queue.h"
#include "transport/dispatch.h"

namespace fabflow::flow::detail {

constexpr bool valid_combo(DataFlow d, TransferNotify t) noexcept {
  if (t == TransferNotify::event) return d == DataFlow::push2;
  if (t == TransferNotify::imm) return d == DataFlow::push1;
  return true;
}

template <template <DataFlow, TransferNotify, SpaceNotify, class> class Impl, class Base,
          std::size_t I>
void build_if(const Design& d, Transport& t, Transport& n, Shared& s, std::unique_ptr<Base>& out) {
  constexpr auto D = static_cast<DataFlow>(I / 15);
  constexpr auto T = static_cast<TransferNotify>((I / 3) % 5);
  constexpr auto S = static_cast<SpaceNotify>(I % 3);
  if constexpr (valid_combo(D, T)) {
    if (out || d.data != D || d.transfer != T || d.space != S) return;
    out = with_concrete(t, [&](auto& tr) -> std::unique_ptr<Base> {
      using Tr = std::remove_reference_t<decltype(tr)>;
      // make_producer / make_consumer checked that both are of one concrete type.
      auto* nt = dynamic_cast<Tr*>(&n);
      if (!nt) throw UsageError("flow: the notify transport is not of the data transport's kind");
      return std::make_unique<Impl<D, T, S, Tr>>(tr, *nt, std::move(s));
    });
  }
}

template <template <DataFlow, TransferNotify, SpaceNotify, class> class Impl, class Base,
          std::size_t... I>
std::unique_ptr<Base> build_design(const Design& d, Transport& t, Transport& n, Shared& s,
                                   std::index_sequence<I...>) {
  std::unique_ptr<Base> out;
  (build_if<Impl, Base, I>(d, t, n, s, out), ...);
  if (!out) throw UsageError("flow: not one of the 33 design points");
  return out;
}

}  // namespace fabflow::flow::detail
