// The sequencer with ranks as threads: every design on local, shm, tcp and tcp;ofi_rxm (or the
// one line why not) hands out each value exactly once, in real-time order per client, and the
// final counter is the number of values handed out; Spec-S0's encoding across the 2^32
// boundary; a client that sends garbage; a server that vanishes.
#include <gtest/gtest.h>

#include <fabflow/bootstrap.h>
#include <fabflow/seq.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <thread>

#include "seq/internal.h"

namespace fabflow::seq {
namespace {

using namespace std::chrono_literals;

TEST(SeqSpec, EncodingRoundTripsAndWraps) {
  for (std::uint32_t client : {0u, 1u, 77u, kMaxClients - 1}) {
    for (std::uint16_t g : {std::uint16_t{0}, std::uint16_t{1}, std::uint16_t{0xffff}}) {
      std::uint32_t w = spec::request(client, g);
      EXPECT_EQ(spec::client_of(w), client);
      EXPECT_EQ(spec::guess_of(w), g);
      EXPECT_FALSE(spec::is_bye(w));
    }
    EXPECT_TRUE(spec::is_bye(spec::bye(client)));
    EXPECT_EQ(spec::client_of(spec::bye(client)), client);
  }
  // The low half wraps into the next guess: the last value under a guess is confirmed, the
  // first above it is not, and it names the next guess.
  for (std::uint64_t high : {0ull, 1ull, 0xfffeull}) {
    const std::uint64_t last = (high << 32) | 0xffffffffull, next = last + 1;
    const auto g = static_cast<std::uint16_t>(high);
    EXPECT_TRUE(spec::confirms(last, g));
    EXPECT_EQ(spec::value_of(g, 0xffffffffu), last);
    EXPECT_FALSE(spec::confirms(next, g));
    EXPECT_EQ(spec::guess_for(next), g + 1);
    EXPECT_TRUE(spec::confirms(next, spec::guess_for(next)));
    EXPECT_EQ(spec::value_of(spec::guess_for(next), 0), next);
  }
  // A wrong guess at every boundary below and above; values at or above 2^48 never confirm.
  EXPECT_FALSE(spec::confirms(std::uint64_t{5} << 32, 4));
  EXPECT_FALSE(spec::confirms((std::uint64_t{5} << 32) - 1, 5));
  EXPECT_FALSE(spec::confirms(std::uint64_t{1} << 48, 0));
  EXPECT_FALSE(spec::confirms((std::uint64_t{1} << 48) | 7, 0));
}

TEST(SeqOptions, OutOfRangeIsRefusedWithOneLine) {
  Options o;
  EXPECT_THROW(validate(o, 0), UsageError);
  EXPECT_THROW(validate(o, static_cast<int>(kMaxClients)), UsageError);
  o.workers = 0;
  EXPECT_THROW(validate(o, 1), UsageError);
  o.workers = 1;
  o.outstanding = kMaxOutstanding + 1;
  EXPECT_THROW(validate(o, 1), UsageError);
  o.outstanding = 1;
  o.batch = 0;
  EXPECT_THROW(validate(o, 1), UsageError);
  o.batch = 1;
  EXPECT_NO_THROW(validate(o, 1));
  try {
    o.queues = 99;
    validate(o, 1);
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "seq: queues must be in 1..16 (got 99)");
  }
}

struct Outcome {
  std::vector<std::uint64_t> values;  // every value every client received
  std::uint64_t order_violations = 0, full_responses = 0;
  ServerStats server;
  std::string error;  // first failure
  bool unsupported = false;
};

// `clients` client ranks, each taking `per_client` values with o.outstanding in flight.
Outcome run_sequencer(const char* provider, const Options& o, int clients, int per_client) {
  Outcome out;
  TransportOptions to;
  to.provider = provider;
  to.ops = required_ops(o.design);
  if (std::string why = why_unsupported(probe_transport(to), o); !why.empty()) {
    out.unsupported = true;
    out.error = why;
    return out;
  }
  auto boots = make_thread_bootstraps(clients + 1);
  std::mutex m;
  std::vector<std::thread> threads;
  for (int r = 0; r <= clients; ++r)
    threads.emplace_back([&, r] {
      Bootstrap& boot = *boots[static_cast<std::size_t>(r)];
      try {
        if (r == clients) {
          auto server = make_server(to, boot, o);
          boot.barrier();
          ServerStats s = server->run();
          {
            std::lock_guard<std::mutex> lock(m);
            out.server = s;
          }
          boot.barrier();  // transports stay until every rank is done
        } else {
          auto client = make_client(to, boot, o);
          boot.barrier();
          std::vector<std::uint64_t> mine;

          for (int sent = 0; sent < per_client || client->in_flight() > 0;) {
            if (sent < per_client && client->issue() == Status::ok) ++sent;
            std::uint64_t v;
            Status s = client->poll(&v);
            if (s == Status::failed) throw Error(client->error());
            if (s == Status::ok) mine.push_back(v);
            if (s == Status::empty) std::this_thread::yield();
          }
          client->close(boot);
          {
            std::lock_guard<std::mutex> lock(m);
            out.values.insert(out.values.end(), mine.begin(), mine.end());
            out.order_violations += client->stats().order_violations;
            out.full_responses += client->stats().full_responses;
          }
          boot.barrier();
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(m);
        if (out.error.empty()) out.error = "rank " + std::to_string(r) + ": " + e.what();
        boot.abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

struct Point {
  Design design;
  const char* provider;
};

class SeqConformance : public ::testing::TestWithParam<Point> {};

TEST_P(SeqConformance, ExactlyOnceInOrderFinalCount) {
  Options o;
  o.design = GetParam().design;
  o.workers = 2;
  o.queues = 2;
  o.outstanding = 3;
  o.batch = 4;
  o.first_value = 1000;
  o.yield_when_idle = true;
  o.peer_timeout = 5s;
  const int clients = 3, per_client = 200;
  Outcome out = run_sequencer(GetParam().provider, o, clients, per_client);
  if (out.unsupported) {
    // Only the designs the provider lacks the operations for may be refused.
    EXPECT_EQ(o.design, Design::atomic) << out.error;
    EXPECT_NE(out.error.find("atomic needs fadd"), std::string::npos) << out.error;
    return;
  }
  ASSERT_EQ(out.error, "");
  ASSERT_EQ(out.values.size(), static_cast<std::size_t>(clients * per_client));
  std::sort(out.values.begin(), out.values.end());
  for (std::size_t i = 0; i < out.values.size(); ++i)
    ASSERT_EQ(out.values[i], o.first_value + i) << "value " << i << " missing or repeated";
  EXPECT_EQ(out.order_violations, 0u);
  EXPECT_EQ(out.server.counter, o.first_value + out.values.size());
  EXPECT_EQ(out.server.served, out.values.size());
  std::uint64_t fp[2];
  fingerprint_range(o.first_value, out.server.counter, fp);
  std::uint64_t got[2] = {0, 0};
  for (std::uint64_t v : out.values) fingerprint_add(v, got);
  EXPECT_EQ(fp[0], got[0]);
  EXPECT_EQ(fp[1], got[1]);
}

std::string point_name(const ::testing::TestParamInfo<Point>& info) {
  std::string s = std::string(to_string(info.param.design)) + "_" + info.param.provider;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

std::vector<Point> points() {
  std::vector<Point> v;
  for (Design d : kAllDesigns)
    for (const char* p : {"local", "shm", "tcp", "tcp;ofi_rxm"}) v.push_back({d, p});
  return v;
}

INSTANTIATE_TEST_SUITE_P(All, SeqConformance, ::testing::ValuesIn(points()), point_name);

// Spec-S0 across the 2^32 boundary: the clients' guesses go stale, the server answers those in
// full, and every value is still handed out exactly once.
TEST(SeqSpecBoundary, WrongGuessesAreAnsweredInFull) {
  for (const char* provider : {"local", "shm"}) {
    Options o;
    o.design = Design::spec;
    o.outstanding = 2;
    o.first_value = (std::uint64_t{1} << 32) - 50;
    o.yield_when_idle = true;
    Outcome out = run_sequencer(provider, o, 2, 100);
    ASSERT_EQ(out.error, "") << provider;
    std::sort(out.values.begin(), out.values.end());
    for (std::size_t i = 0; i < out.values.size(); ++i)
      ASSERT_EQ(out.values[i], o.first_value + i) << provider;
    // Every client starts guessing 0 and must be told once that the high half is now 1 (more
    // often if a guess was still in flight).
    EXPECT_GE(out.full_responses, 2u) << provider;
    EXPECT_EQ(out.server.full_responses, out.full_responses) << provider;
    EXPECT_EQ(out.order_violations, 0u) << provider;
  }
}

// A hand-made Spec-S0 client (rank 0) sends a request naming a client that does not exist and
// one with CQ data wider than 32 bits, then closes properly: the server drops both with a
// reason and goes on serving the real client (rank 1) every value.
TEST(SeqSpecMisbehavingClient, IsRejectedAndTheOthersAreServed) {
  Options o;
  o.design = Design::spec;
  o.yield_when_idle = true;
  TransportOptions to;
  to.provider = "local";
  auto boots = make_thread_bootstraps(3);
  std::mutex m;
  std::string error;
  ServerStats stats;
  std::vector<std::uint64_t> values;
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      Bootstrap& boot = *boots[static_cast<std::size_t>(r)];
      try {
        if (r == 2) {
          auto server = make_server(to, boot, o);
          boot.barrier();
          ServerStats s = server->run();
          std::lock_guard<std::mutex> lock(m);
          stats = s;
        } else if (r == 1) {
          auto client = make_client(to, boot, o);
          boot.barrier();
          for (int i = 0; i < 100; ++i) values.push_back(client->next(boot));
          client->close(boot);
          boot.barrier();
          return;
        } else {
          auto t = detail::open_lane(to, boot, Design::spec);
          auto mr = t->allocate(detail::kSpecLanding + 8, kAllAccess);
          auto remote = detail::spec_exchange(
              *t, boot, *mr, o.outstanding, [](int rank) { return rank == 2; },
              [](int) { return detail::kSpecLanding + 8; });
          boot.barrier();
          for (std::uint64_t imm : {std::uint64_t{spec::request(99, 0)},
                                    (std::uint64_t{1} << 40) | 5, std::uint64_t{spec::bye(0)}}) {
            while (t->post_write(2, mr->data(), 0, mr->desc(), remote[2], 0, 1, kSignal, imm) !=
                   Status::ok)
              std::this_thread::yield();
            Completion c;
            while (t->poll_tx({&c, 1}) == 0) std::this_thread::yield();
          }
          boot.barrier();
          return;
        }
        boot.barrier();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(m);
        if (error.empty()) error = "rank " + std::to_string(r) + ": " + e.what();
        boot.abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  ASSERT_EQ(error, "");
  EXPECT_EQ(stats.rejected, 2u);
  EXPECT_EQ(stats.first_rejection, "seq: a request naming client 99 on lane 0");
  ASSERT_EQ(values.size(), 100u);
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ(values[i], i);
  EXPECT_EQ(stats.served, 100u);
  EXPECT_EQ(stats.counter, 100u);
}

}  // namespace
}  // namespace fabflow::seq
