// The bulk channel's RMA over tcp is posted in the transport's preferred operation size
// (Capabilities::rma_preferred_size, 1 MiB; fabflow's rma_operation_size, the rule the transfer
// engine follows): an 8 MiB message by every rendezvous and pipeline protocol goes in 1 MiB
// operations (Stats::rma_operations, counted where they are posted), fragments that grow past
// 1 MiB included, and every byte arrives; on msg and rdm endpoints.
#include <gtest/gtest.h>

#include <fabflow/bootstrap.h>
#include <fabflow/bulk.h>
#include <fabflow/transport.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/ranks.h"

// A namespace of its own: the test files are compiled together in unity batches.
namespace fabflow::bulk::channel_rma_test {
namespace {

struct Case {
  EndpointType endpoint;
  Protocol protocol;
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  std::string n =
      std::string(to_string(i.param.endpoint)) + "_" + std::string(to_string(i.param.protocol));
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

std::byte byte_of(std::size_t i) { return static_cast<std::byte>((i * 2654435761u) >> 13); }

class ChannelRma : public ::testing::TestWithParam<Case> {};

// Rank 0 sends 8 MiB to rank 1. The RMA part (all of it for the rendezvous protocols; for the
// pipelines all but the header's and the copy-ahead's first 80 KiB, in fragments of 1, 2 and
// 4 MiB and the rest, growth 2) goes in 1 MiB operations: 8 in all, whichever rank posts them
// (the sender writes, the receiver reads). One 8 MiB operation (or, for the pipelines, one per
// fragment: 4) would be the count without the rule.
TEST_P(ChannelRma, AnEightMegabyteMessageGoesInPreferredOperations) {
  const Case c = GetParam();
  constexpr std::size_t kSize = 8 << 20;
  TransportOptions to;
  to.provider = "tcp";
  to.endpoint = c.endpoint;
  to.ops = {Op::send, Op::write, Op::read};
  const std::string err = testing::run_ranks(2, to, [&](int rank, Transport& t, Bootstrap& boot) {
    if (t.caps().rma_preferred_size != (1u << 20))
      throw Error("tcp's preferred operation is " + std::to_string(t.caps().rma_preferred_size) +
                  " bytes, not 1 MiB");
    ChannelOptions o;
    o.measure_costs = false;
    o.frag_growth = 2.0;
    auto ch = open_channel(t, boot, o);
    std::vector<std::byte> buf(kSize);
    const std::uint64_t before = ch->stats().rma_operations;
    if (rank == 0) {
      for (std::size_t i = 0; i < kSize; ++i) buf[i] = byte_of(i);
      ch->send(1, 3, buf, c.protocol);
    } else {
      if (ch->recv(0, 3, buf) != kSize) throw Error("a message of another length arrived");
      for (std::size_t i = 0; i < kSize; ++i)
        if (buf[i] != byte_of(i)) throw Error("byte " + std::to_string(i) + " differs");
    }
    const std::uint64_t mine = ch->stats().rma_operations - before;
    const auto ops = allgather_value(boot, mine, "rma operations");
    if (ops[0] + ops[1] != 8)
      throw Error(std::to_string(ops[0]) + " + " + std::to_string(ops[1]) +
                  " RMA operations, not 8");
    boot.barrier();
  });
  EXPECT_EQ(err, "");
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (EndpointType e : {EndpointType::msg, EndpointType::rdm})
    for (Protocol p : kAllProtocols)
      if (p != Protocol::eager && p != Protocol::copy) out.push_back({e, p});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Tcp, ChannelRma, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace fabflow::bulk::channel_rma_test
