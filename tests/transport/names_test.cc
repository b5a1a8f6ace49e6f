// Names of the transport enums and the capability checks every transport shares.
#include <fabflow/transport.h>
#include <gtest/gtest.h>

#include <vector>

namespace fabflow {
namespace {

TEST(NamesOp, RoundTrips) {
  for (Op op : {Op::write, Op::read, Op::send, Op::writedata, Op::fadd, Op::cswap})
    EXPECT_EQ(parse_op(to_string(op)), op) << to_string(op);
  EXPECT_EQ(to_string(Op::writedata), "writedata");
  EXPECT_EQ(to_string(Op::cswap), "cswap");
}

TEST(NamesEndpointType, RoundTrips) {
  for (EndpointType t : {EndpointType::automatic, EndpointType::msg, EndpointType::rdm})
    EXPECT_EQ(parse_endpoint_type(to_string(t)), t) << to_string(t);
  EXPECT_EQ(to_string(EndpointType::automatic), "auto");
  EXPECT_EQ(to_string(EndpointType::rdm), "rdm");
}

TEST(NamesProgressMode, RoundTrips) {
  for (ProgressMode m : {ProgressMode::automatic, ProgressMode::thread, ProgressMode::inline_only})
    EXPECT_EQ(parse_progress_mode(to_string(m)), m) << to_string(m);
  EXPECT_EQ(to_string(ProgressMode::thread), "on");
  EXPECT_EQ(to_string(ProgressMode::inline_only), "off");
}

TEST(NamesParse, UnknownNamesGiveNothing) {
  for (const char* s : {"", "bogus", "SEND", "send ", "automatic"}) {
    EXPECT_EQ(parse_op(s), std::nullopt) << s;
    EXPECT_EQ(parse_endpoint_type(s), std::nullopt) << s;
    EXPECT_EQ(parse_progress_mode(s), std::nullopt) << s;
  }
  EXPECT_EQ(parse_op("msg"), std::nullopt);
  EXPECT_EQ(parse_endpoint_type("send"), std::nullopt);
}

Capabilities caps(bool rma, std::size_t cq_data, bool atomics) {
  Capabilities c;
  c.provider = "tcp;ofi_rxm";
  c.endpoint = EndpointType::rdm;
  c.rma = rma;
  c.cq_data_size = cq_data;
  c.atomics_u64 = atomics;
  return c;
}

TEST(NamesCapabilities, EverythingSupportedHasNoReason) {
  Capabilities c = caps(true, 8, true);
  for (Op op : {Op::write, Op::read, Op::send, Op::writedata, Op::fadd, Op::cswap}) {
    EXPECT_TRUE(c.supports(op)) << to_string(op);
    EXPECT_EQ(c.why_not(op), "") << to_string(op);
  }
}

TEST(NamesCapabilities, NoRmaRefusesWritesAndReadsNamingTheProvider) {
  Capabilities c = caps(false, 8, true);
  EXPECT_TRUE(c.supports(Op::send));
  for (Op op : {Op::write, Op::read, Op::writedata}) {
    EXPECT_FALSE(c.supports(op)) << to_string(op);
    std::string why = c.why_not(op);
    EXPECT_NE(why.find("tcp;ofi_rxm"), std::string::npos) << why;
    EXPECT_NE(why.find("RMA"), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  }
}

TEST(NamesCapabilities, NoRemoteCqDataRefusesWritedataOnly) {
  Capabilities c = caps(true, 0, false);
  EXPECT_TRUE(c.supports(Op::write));
  EXPECT_FALSE(c.supports(Op::writedata));
  std::string why = c.why_not(Op::writedata);
  EXPECT_NE(why.find("tcp;ofi_rxm"), std::string::npos) << why;
  EXPECT_NE(why.find("cq_data_size 0"), std::string::npos) << why;
  EXPECT_TRUE(caps(true, 4, false).supports(Op::writedata));
}

// missing_op: the first unsupported operation of a list, in the list's order, with why_not's
// line; none when every one is supported (or the list is empty).
// The operation-size rule of the engine and the bulk channel: the size asked, else the preferred
// one, within the largest operation (the smaller of max_msg_size and max_rma_size, at most 1 GiB);
// 0 where neither is given.
TEST(NamesCapabilities, RmaOperationSizeIsAskedElsePreferredWithinTheLargest) {
  Capabilities tcp;
  tcp.max_msg_size = tcp.max_rma_size = std::size_t{1} << 40;
  tcp.rma_preferred_size = 1 << 20;
  EXPECT_EQ(largest_rma_operation(tcp), std::size_t{1} << 30);
  EXPECT_EQ(rma_operation_size(tcp), 1u << 20);
  EXPECT_EQ(rma_operation_size(tcp, 256 << 10), 256u << 10);
  EXPECT_EQ(rma_operation_size(tcp, 8 << 20), 8u << 20);
  EXPECT_EQ(rma_operation_size(tcp, std::size_t{4} << 30), std::size_t{1} << 30);
  Capabilities small;
  small.max_msg_size = 1 << 20;
  small.max_rma_size = 64 << 10;
  small.rma_preferred_size = 1 << 20;
  EXPECT_EQ(largest_rma_operation(small), 64u << 10);
  EXPECT_EQ(rma_operation_size(small), 64u << 10);
  Capabilities none;  // no preference, no stated largest
  EXPECT_EQ(largest_rma_operation(none), std::size_t{1} << 30);
  EXPECT_EQ(rma_operation_size(none), 0u);
  EXPECT_EQ(rma_operation_size(none, 4096), 4096u);
}

TEST(NamesCapabilities, MissingOpIsTheFirstUnsupportedWithItsReason) {
  const Capabilities no_rma = caps(false, 8, true);
  const std::vector<Op> ops{Op::send, Op::fadd, Op::read, Op::write};
  auto m = missing_op(no_rma, ops);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->op, Op::read);
  EXPECT_EQ(m->why, no_rma.why_not(Op::read));
  EXPECT_FALSE(missing_op(no_rma, std::vector<Op>{Op::send, Op::cswap}).has_value());
  EXPECT_FALSE(missing_op(no_rma, {}).has_value());
  const Capabilities no_atomics = caps(true, 8, false);
  m = missing_op(no_atomics, std::vector<Op>{Op::write, Op::cswap, Op::fadd});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->op, Op::cswap);
  EXPECT_FALSE(m->why.empty());
}

TEST(NamesCapabilities, NoAtomicsRefusesFetchAddAndCompareSwap) {
  Capabilities c = caps(true, 8, false);
  for (Op op : {Op::fadd, Op::cswap}) {
    EXPECT_FALSE(c.supports(op)) << to_string(op);
    std::string why = c.why_not(op);
    EXPECT_NE(why.find("tcp;ofi_rxm"), std::string::npos) << why;
    EXPECT_NE(why.find("atomics"), std::string::npos) << why;
  }
  EXPECT_TRUE(c.supports(Op::write));
}

}  // namespace
}  // namespace fabflow
