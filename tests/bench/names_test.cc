// Every enumerated value round-trips through its name table, aliases parse to their value,
// and the list shown to users names each value once.
#include <fabflow/bench/queue.h>
#include <fabflow/bench/raw.h>
#include <fabflow/rr.h>
#include <fabflow/transport.h>
#include <gtest/gtest.h>

namespace fabflow {
namespace {

template <class E>
void round_trips(std::size_t expected_values) {
  auto values = all_values<E>();
  EXPECT_EQ(values.size(), expected_values);
  for (E v : values) {
    auto name = name_of(v);
    EXPECT_NE(name, "?");
    ASSERT_TRUE(parse_name<E>(name).has_value()) << name;
    EXPECT_EQ(*parse_name<E>(name), v) << name;
  }
  EXPECT_FALSE(parse_name<E>("no-such-name").has_value());
}

TEST(NameTables, EveryValueRoundTrips) {
  round_trips<EndpointType>(4);
  round_trips<Op>(6);
  round_trips<ProgressMode>(3);
  round_trips<Switch>(2);
  round_trips<RawTest>(3);
  round_trips<QueuePreset>(3);
  round_trips<QueueApi>(3);
  round_trips<NotifyEndpoint>(2);
  round_trips<rr::Pattern>(4);
  round_trips<rr::Mailbox>(2);
  round_trips<rr::Model>(2);
  round_trips<rr::Topology>(3);
}

TEST(NameTables, AliasesAndCaseRules) {
  EXPECT_EQ(parse_name<RawTest>("latency"), RawTest::latency);
  EXPECT_EQ(parse_name<RawTest>("bw"), RawTest::bandwidth);
  EXPECT_EQ(name_of(RawTest::latency), "lat");
  EXPECT_EQ(parse_name<rr::Topology>("n:m"), rr::Topology::n_to_m);
  EXPECT_EQ(name_of(rr::Topology::n_to_m), "N:M");
  EXPECT_EQ(parse_name<rr::Pattern>("writesend"), rr::Pattern::write_send);  // case-insensitive
  EXPECT_FALSE(parse_name<Op>("WRITE").has_value());                         // case-sensitive
  EXPECT_EQ(name_list<rr::Topology>(), "1:1, N:1, N:M");
  EXPECT_EQ(name_list<Op>(), "write, read, send, writedata, fadd, cswap");
}

TEST(NameTables, ToStringAndParsersUseTheTables) {
  EXPECT_EQ(to_string(Op::writedata), "writedata");
  EXPECT_EQ(parse_op("cswap"), Op::cswap);
  EXPECT_EQ(rr::to_string(rr::Model::private_connections), "private");
  EXPECT_EQ(rr::parse_model("dispatcher"), rr::Model::dispatcher);
  static_assert(to_string(ProgressMode::thread) == "on");
  static_assert(parse_endpoint_type("rdm") == EndpointType::rdm);
}

}  // namespace
}  // namespace fabflow
