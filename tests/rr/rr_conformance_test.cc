// Conformance of the request-response channels through the benchmark engine, with ranks as
// threads: 4 patterns x 2 models x 3 topologies on shm, tcp and local. Every response is
// checked against its own request (checksum and tag: no cross-talk), the responders must have
// served exactly as many requests as the requesters got answers, and every measured request
// yields one latency sample. FABFLOW_RR_REQUESTS lowers the count under sanitizers.
#include <gtest/gtest.h>

#include <fabflow/bench/rr.h>
#include <fabflow/bootstrap.h>

#include <cctype>
#include <cstdlib>
#include <thread>

namespace fabflow {
namespace {

struct Point {
  rr::Pattern pattern;
  rr::Model model;
  rr::Topology topology;
  const char* provider;
};

std::uint64_t requests_per_thread() {
  const char* v = std::getenv("FABFLOW_RR_REQUESTS");
  return v && *v ? std::strtoull(v, nullptr, 10) : 300;
}

// Runs every rank of `p` as a thread; returns rank 0's result and the first error.
RrResult run_threads(const RrParams& p, std::string* error) {
  const int n = p.requesters + p.responders;
  auto boots = make_thread_bootstraps(n);
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  RrResult result;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto& boot = *boots[static_cast<std::size_t>(r)];
      try {
        RrResult mine = run_rr(p, boot);
        if (r == 0) result = mine;
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = "rank " + std::to_string(r) + ": " + e.what();
        boot.abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (!e.empty() && error->empty()) *error = e;
  return result;
}

class RrConformance : public ::testing::TestWithParam<Point> {};

TEST_P(RrConformance, EveryRequestAnsweredOnceWithItsOwnPayload) {
  const Point& pt = GetParam();
  RrParams p;
  p.target.provider = pt.provider;
  p.patterns = {pt.pattern};
  p.models = {pt.model};
  p.topology = pt.topology;
  p.requesters = pt.topology == rr::Topology::one_to_one ? 1 : 2;
  p.responders = pt.topology == rr::Topology::n_to_m ? 2 : 1;
  p.threads = 2;
  // Several outstanding requests per thread in N:M: responses come back out of order.
  p.depth = pt.topology == rr::Topology::n_to_m ? 3 : 1;
  p.request_bytes = 72;
  p.response_sizes = {203};  // not a multiple of 8: the padded trailer
  p.requests = requests_per_thread();
  p.warmup = 5;
  p.verify = true;
  p.target.pin = false;
  p.always_yield = true;
  p.target.timeout_ms = 10000;
  std::string error;
  RrResult r = run_threads(p, &error);
  ASSERT_EQ(error, "");
  ASSERT_EQ(r.rows.size(), 1u);
  const RrRow& row = r.rows[0];
  ASSERT_EQ(row.unsupported, "");
  const std::uint64_t expected = static_cast<std::uint64_t>(p.requesters) * p.threads * p.requests;
  EXPECT_EQ(row.requests, expected);
  EXPECT_EQ(row.latency.samples, expected);
  EXPECT_GT(row.requests_per_s, 0);
  EXPECT_GT(row.requester.ns_per_msg, 0);
  EXPECT_GT(row.responder.ns_per_msg, 0);
  EXPECT_LE(row.latency.p50, row.latency.max);
}

std::vector<Point> points() {
  std::vector<Point> out;
  for (const char* provider : {"shm", "tcp", "local"})
    for (rr::Pattern pattern : rr::kAllPatterns)
      for (rr::Model model : {rr::Model::private_connections, rr::Model::dispatcher})
        for (rr::Topology t :
             {rr::Topology::one_to_one, rr::Topology::n_to_one, rr::Topology::n_to_m})
          out.push_back({pattern, model, t, provider});
  return out;
}

std::string point_name(const ::testing::TestParamInfo<Point>& info) {
  const Point& p = info.param;
  std::string topo = p.topology == rr::Topology::one_to_one ? "1to1"
                     : p.topology == rr::Topology::n_to_one ? "Nto1"
                                                            : "NtoM";
  return std::string(rr::to_string(p.pattern)) + "_" + std::string(rr::to_string(p.model)) + "_" +
         topo + "_" + p.provider;
}

INSTANTIATE_TEST_SUITE_P(All, RrConformance, ::testing::ValuesIn(points()), point_name);

// Dense mailboxes (flag array + message area) deliver the same guarantees.
TEST(RrConformanceDense, WriteRequestsThroughTheFlagArray) {
  for (const char* provider : {"shm", "tcp", "local"}) {
    RrParams p;
    p.target.provider = provider;
    p.patterns = {rr::Pattern::write_write, rr::Pattern::write_send};
    p.mailbox = rr::Mailbox::dense;
    p.topology = rr::Topology::n_to_one;
    p.requesters = 2;
    p.threads = 2;
    p.depth = 2;
    p.response_sizes = {64};
    p.requests = requests_per_thread();
    p.warmup = 5;
    p.verify = true;
    p.target.pin = false;
    p.always_yield = true;
    p.target.timeout_ms = 10000;
    p.empty_mailboxes_pct = 50;
    std::string error;
    RrResult r = run_threads(p, &error);
    ASSERT_EQ(error, "") << provider;
    ASSERT_EQ(r.rows.size(), 2u);
    for (const auto& row : r.rows) {
      EXPECT_EQ(row.unsupported, "") << provider;
      EXPECT_EQ(row.requests, 2u * 2u * p.requests) << provider;
      EXPECT_EQ(row.empty_mailboxes, 8u) << provider;  // 8 active slots, half the mailboxes empty
    }
  }
}

}  // namespace
}  // namespace fabflow
