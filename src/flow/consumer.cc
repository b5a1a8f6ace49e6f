// Consumer instantiations: one per design point and concrete transport type.
#include "flow/consumer_impl.h"
#include "flow/instantiate.h"

namespace fabflow::flow::detail {

std::unique_ptr<Consumer> make_consumer_impl(Transport& t, Transport& n, Bootstrap& boot, int peer,
                                             const QueueOptions& o) {
  const bool imm_recvs =
      o.design.transfer == TransferNotify::imm && t.caps().rx_cq_data_consumes_recv;
  const std::size_t pool = imm_recvs ? kCounterPool : 0;
  // Both kinds of receives belong to the data flow (push2 items; receives imm may consume).
  Shared s =
      setup_end(t, n, boot, peer, o, EndRole::consumer, {pool, RecvOn::data}, [&](Shared& sh) {
        if (o.design.data == DataFlow::push2)
          for (std::size_t i = 0; i < sh.layout.capacity; ++i)
            post_setup_recv(sh, RecvOn::data, sh.layout.slot(i), sh.layout.stride, kCtxRecv + i);
        for (std::size_t i = 0; i < pool; ++i)
          post_setup_recv(sh, RecvOn::data, sh.layout.pool_cell(i), 8, kCtxRecv + i);
      });
  return build_design<ConsumerImpl, Consumer>(o.design, t, n, s);
}

}  // namespace fabflow::flow::detail
