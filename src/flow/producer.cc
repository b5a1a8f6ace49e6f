// Producer instantiations: one per design point and concrete transport type.
#include "flow/instantiate.h"
#include "flow/producer_impl.h"

namespace fabflow::flow::detail {

std::unique_ptr<Producer> make_producer_impl(Transport& t, Transport& n, Bootstrap& boot, int peer,
                                             const QueueOptions& o) {
  const bool space_recvs = o.design.space == SpaceNotify::push2;
  const std::size_t pool =
      space_recvs ? std::min(effective_capacity(o), kCounterPool) : std::size_t{0};
  // The pool receives pushed head counters: a notification, on the notify transport.
  Shared s =
      setup_end(t, n, boot, peer, o, EndRole::producer, {pool, RecvOn::notify}, [&](Shared& sh) {
        for (std::size_t i = 0; i < pool; ++i)
          post_setup_recv(sh, RecvOn::notify, sh.layout.pool_cell(i), 8, kCtxRecv + i);
      });
  return build_design<ProducerImpl, Producer>(o.design, t, n, s);
}

}  // namespace fabflow::flow::detail
