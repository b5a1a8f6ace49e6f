// Multi-process tests of `fabflow bench queue` through the CLI: JSON fields for the socket
// baseline and a design point, every design of `--design all` measured or refused with a
// reason, ping-pong fields, and bad inputs giving one error line and exit 2 within 10 s.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <set>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::lines;
using testing::run_cli;
using namespace std::chrono_literals;

void expect_measured(const nlohmann::json& j, std::uint64_t items) {
  EXPECT_EQ(j["bench"], "queue");
  EXPECT_EQ(j["item_bytes"], 64);
  EXPECT_EQ(j["items"], items);
  EXPECT_GT(j["items_per_s"].get<double>(), 0);
  EXPECT_GT(j["MBps"].get<double>(), 0);
  for (const char* k : {"data", "transfer_notify", "space_notify"})
    ASSERT_TRUE(j["ops_per_item"].contains(k)) << k;
  EXPECT_GE(j["ops_per_item"]["data"].get<double>(), 1.0);
  EXPECT_TRUE(j["full"].is_number_unsigned());
  EXPECT_TRUE(j["empty"].is_number_unsigned());
  EXPECT_NE(j["provider"].get<std::string>().find("shm"), std::string::npos);
}

TEST(QueueCli, SocketAndDesignPointReportEveryField) {
  CliResult r = run_cli({"fabflow", "bench", "queue", "-p", "shm", "--design",
                         "socket,push1-watermark-pull", "-S", "64", "--items", "20000", "--json"},
                        60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  auto s = nlohmann::json::parse(out[0]);
  EXPECT_EQ(s["design"], "socket");
  expect_measured(s, 20000);
  EXPECT_EQ(s["ops_per_item"]["transfer_notify"], 0.0);
  EXPECT_EQ(s["ops_per_item"]["space_notify"], 0.0);
  auto d = nlohmann::json::parse(out[1]);
  EXPECT_EQ(d["design"], "push1-watermark-pull");
  EXPECT_EQ(d["preset"], "basic");
  expect_measured(d, 20000);
  EXPECT_NEAR(d["ops_per_item"]["data"].get<double>(), 1.0, 0.01);  // one WRITE per item (+ close)
}

TEST(QueueCli, AllDesignsMeasuredOrRefusedWithAReason) {
  CliResult r = run_cli(
      {"fabflow", "bench", "queue", "-p", "shm", "--design", "all", "--items", "500", "--json"},
      80s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 34u) << r.out;
  std::set<std::string> names;
  for (const auto& line : out) {
    auto j = nlohmann::json::parse(line);
    names.insert(j["design"].get<std::string>());
    if (j.contains("unsupported")) {
      EXPECT_FALSE(j["unsupported"].get<std::string>().empty()) << line;
    } else {
      expect_measured(j, 500);
    }
  }
  EXPECT_EQ(names.size(), 34u);
  EXPECT_TRUE(names.count("socket"));
}

TEST(QueueCli, PingPongReportsTransferTimeAndRawReference) {
  CliResult r = run_cli({"fabflow", "bench", "queue", "-p", "shm", "--design", "socket",
                         "--pingpong", "--round-trips", "500", "-w", "50", "--json"},
                        60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 1u) << r.out;
  auto j = nlohmann::json::parse(out[0]);
  EXPECT_EQ(j["type"], "pingpong");
  EXPECT_EQ(j["items"], 500);
  for (const char* k : {"mean", "p50", "p90", "p99", "p999", "max"}) {
    EXPECT_GT(j["transfer_ns"][k].get<double>(), 0) << k;
    EXPECT_GT(j["raw_write_pingpong_ns"][k].get<double>(), 0) << k;
  }
  EXPECT_LE(j["transfer_ns"]["p50"].get<double>(), j["transfer_ns"]["max"].get<double>());
}

// --reference: the raw streaming write bandwidth and the SPSC ring in throughput mode, the
// cache-line ping-pong in ping-pong mode, all measured (positive) in the same run.
TEST(QueueCli, ReferencesAreMeasuredInTheSameRun) {
  CliResult t = run_cli({"fabflow", "bench", "queue", "-p", "shm", "--design",
                         "push1-watermark-pull", "--items", "5000", "--reference", "--json"},
                        60s);
  ASSERT_FALSE(t.timed_out) << t.err;
  ASSERT_EQ(t.status, 0) << t.err;
  auto out = lines(t.out);
  ASSERT_EQ(out.size(), 1u) << t.out;
  auto j = nlohmann::json::parse(out[0]);
  for (const char* k : {"raw_write_stream_MBps", "raw_write_stream_msgs_per_s",
                        "spsc_ring_items_per_s", "memcpy_MBps"})
    EXPECT_GT(j["reference"][k].get<double>(), 0) << k;

  // Ping-pong: the row and its references in 3 interleaved rounds that share the 500 round
  // trips (167 + 167 + 166): every figure pools all rounds, each ratio is a median of three.
  CliResult p = run_cli(
      {"fabflow", "bench", "queue", "-p", "shm", "--design", "push1-watermark-pull", "--pingpong",
       "--round-trips", "500", "-w", "50", "--reference", "--reference-rounds", "3", "--json"},
      60s);
  ASSERT_FALSE(p.timed_out) << p.err;
  ASSERT_EQ(p.status, 0) << p.err;
  out = lines(p.out);
  ASSERT_EQ(out.size(), 1u) << p.out;
  j = nlohmann::json::parse(out[0]);
  const auto& ref = j["reference"];
  EXPECT_GT(ref["cacheline_pingpong_ns"]["p50"].get<double>(), 0);
  EXPECT_GT(ref["cacheline_whole_run_ns"].get<double>(), 0);
  EXPECT_EQ(ref["rounds"], 3);
  EXPECT_EQ(j["round_trips"], 500);
  EXPECT_EQ(j["transfer_ns"]["samples"], 500);
  EXPECT_EQ(j["raw_write_pingpong_ns"]["samples"], 500);
  EXPECT_EQ(ref["cacheline_pingpong_ns"]["samples"], 500);
  for (const char* k : {"transfer_p50_vs_cacheline_p50", "transfer_p50_vs_cacheline_whole_run",
                        "transfer_p50_vs_raw_write_p50"})
    EXPECT_GT(ref[k].get<double>(), 0) << k;
  // One cache-line block per round here (167 trips, under a block's 2048).
  for (const char* k : {"cacheline_p50", "raw_write_p50"}) {
    auto each = ref[std::string(k[0] == 'c' ? "block" : "round") + "_transfer_p50_vs_" + k]
                    .get<std::vector<double>>();
    ASSERT_EQ(each.size(), 3u) << k;
    std::sort(each.begin(), each.end());
    EXPECT_DOUBLE_EQ(ref[std::string("transfer_p50_vs_") + k].get<double>(), each[1]) << k;
  }
  EXPECT_FALSE(j.contains("progress_threads"));  // a field that could only say false: gone
}

// Every API moves every item in order (the bench checks the sequence number of each, and but
// for seq-only every byte); only the APIs that write and read whole items report MB/s; the
// automatic capacity keeps a ring of large items within 4 MiB; each row says what it used.
TEST(QueueCli, ApiAndAutomaticCapacityAreReported) {
  for (const char* api : {"copy", "zero-copy", "seq-only"}) {
    CliResult r = run_cli({"fabflow", "bench", "queue", "-p", "shm", "--design", "socket,datamover",
                           "-S", "64,64K", "--items", "3000", "--api", api, "--json"},
                          60s);
    ASSERT_FALSE(r.timed_out) << api << ": " << r.err;
    ASSERT_EQ(r.status, 0) << api << ": " << r.err;
    auto out = lines(r.out);
    ASSERT_EQ(out.size(), 4u) << r.out;
    for (const auto& line : out) {
      auto j = nlohmann::json::parse(line);
      EXPECT_EQ(j["api"], api);
      EXPECT_EQ(j["items"], 3000);
      EXPECT_GT(j["items_per_s"].get<double>(), 0) << line;
      EXPECT_GT(j["producer_items_per_s"].get<double>(), 0) << line;
      if (std::string(api) == "seq-only") {
        EXPECT_TRUE(j["MBps"].is_null()) << line;
        EXPECT_TRUE(j["producer_MBps"].is_null()) << line;
      } else {
        EXPECT_DOUBLE_EQ(j["MBps"].get<double>(),
                         j["items_per_s"].get<double>() * j["item_bytes"].get<double>() / 1e6)
            << line;
        EXPECT_DOUBLE_EQ(j["producer_MBps"].get<double>(), j["producer_items_per_s"].get<double>() *
                                                               j["item_bytes"].get<double>() / 1e6)
            << line;
      }
      EXPECT_EQ(j["capacity"], j["item_bytes"] == 64 ? 1024 : 64) << line;
    }
  }
  CliResult fixed = run_cli({"fabflow", "bench", "queue", "-p", "shm", "--design", "socket", "-S",
                             "64K", "--items", "100", "--capacity", "8", "--json"},
                            60s);
  ASSERT_EQ(fixed.status, 0) << fixed.err;
  auto j = nlohmann::json::parse(lines(fixed.out).at(0));
  EXPECT_EQ(j["capacity"], 8);
  EXPECT_EQ(j["api"], "zero-copy");
}

// seq-only moves no payload, so its table prints no MB/s and its header says why; seq-only
// batched calls run too (the copy API has none).
TEST(QueueCli, SeqOnlyReportsNoBytesPerSecond) {
  CliResult r =
      run_cli({"fabflow", "bench", "queue", "-p", "local", "--design", "push1-watermark-pull", "-S",
               "64K", "--items", "2000", "--api", "seq-only", "--burst", "8"},
              60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("only the 8-byte sequence number written and read: no MB/s"),
            std::string::npos)
      << r.out;
  const auto row = r.out.find("push1-watermark-pull ");
  ASSERT_NE(row, std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" n/a ", row), std::string::npos) << r.out;

  CliResult whole = run_cli({"fabflow", "bench", "queue", "-p", "local", "--design",
                             "push1-watermark-pull", "-S", "64K", "--items", "2000"},
                            60s);
  ASSERT_EQ(whole.status, 0) << whole.err;
  EXPECT_NE(whole.out.find("every item written whole and read whole (checksum)"), std::string::npos)
      << whole.out;
  EXPECT_EQ(whole.out.find(" n/a ", whole.out.find("push1-watermark-pull ")), std::string::npos)
      << whole.out;
}

// --notify-endpoint separate: the design points run with their notifications on a second
// endpoint per queue (throughput and ping-pong), every row says which.
TEST(QueueCli, SeparateNotifyEndpointIsMeasuredAndReported) {
  CliResult r = run_cli({"fabflow", "bench", "queue", "-p", "shm", "--design",
                         "push1-push-pull,pull-pull-push2,push1-imm-pull", "-S", "64", "--items",
                         "3000", "--notify-endpoint", "separate", "--json"},
                        60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 3u) << r.out;
  for (const auto& line : out) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["notify_endpoint"], "separate") << line;
    ASSERT_FALSE(j.contains("unsupported")) << line;
    expect_measured(j, 3000);
    EXPECT_GT(j["ops_per_item"]["space_notify"].get<double>(), 0.0) << line;
  }
  CliResult p = run_cli(
      {"fabflow", "bench", "queue", "-p", "shm", "--design", "push1-push-push", "--pingpong",
       "--round-trips", "300", "-w", "30", "--notify-endpoint", "separate", "--json"},
      60s);
  ASSERT_FALSE(p.timed_out) << p.err;
  ASSERT_EQ(p.status, 0) << p.err;
  auto j = nlohmann::json::parse(lines(p.out).at(0));
  EXPECT_EQ(j["notify_endpoint"], "separate");
  EXPECT_GT(j["transfer_ns"]["p50"].get<double>(), 0);
  // The default is shared, in the human header too.
  CliResult h = run_cli(
      {"fabflow", "bench", "queue", "-p", "shm", "--design", "push1-push-push", "--items", "1000"},
      60s);
  ASSERT_EQ(h.status, 0) << h.err;
  EXPECT_NE(h.out.find("# notifications shared"), std::string::npos) << h.out;
}

// --lazy-refresh, --recv-pool, --one-notification-in-flight: every row records the values in
// force (the socket baseline none), and they act: on local (no post is ever busy) a push1
// watermark consumer with lazy refresh 0 pushes its head after every release, the end of
// stream's included; with the default 0.5 once per 512.
TEST(QueueCli, NotificationCadenceIsInForceAndReported) {
  auto run = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"fabflow",
                                     "bench",
                                     "queue",
                                     "-p",
                                     "local",
                                     "--design",
                                     "socket,push1-watermark-push,push2-watermark-push2",
                                     "-S",
                                     "64",
                                     "--items",
                                     "3000",
                                     "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = run_cli(args, 60s);
    EXPECT_FALSE(r.timed_out) << r.err;
    EXPECT_EQ(r.status, 0) << r.err;
    std::vector<nlohmann::json> rows;
    for (const auto& line : lines(r.out)) rows.push_back(nlohmann::json::parse(line));
    return rows;
  };
  auto rows = run({"--lazy-refresh", "0", "--recv-pool", "32"});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(rows[0]["lazy_refresh"].is_null());
  EXPECT_TRUE(rows[0]["recv_pool"].is_null());
  EXPECT_EQ(rows[0]["one_notification_in_flight"], false);
  for (std::size_t i = 1; i < 3; ++i) {
    ASSERT_FALSE(rows[i].contains("unsupported")) << rows[i].dump();
    EXPECT_EQ(rows[i]["lazy_refresh"], 0.0);
    EXPECT_EQ(rows[i]["recv_pool"], 32);
    EXPECT_EQ(rows[i]["one_notification_in_flight"], false);
  }
  EXPECT_DOUBLE_EQ(rows[1]["ops_per_item"]["space_notify"].get<double>(), 3001.0 / 3000);
  rows = run({"--one-notification-in-flight"});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["one_notification_in_flight"], false);
  for (std::size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(rows[i]["lazy_refresh"], 0.5);
    EXPECT_EQ(rows[i]["recv_pool"], 0);
    EXPECT_EQ(rows[i]["one_notification_in_flight"], true);
    EXPECT_LT(rows[i]["ops_per_item"]["space_notify"].get<double>(), 0.5) << rows[i].dump();
  }
  CliResult h = run_cli({"fabflow", "bench", "queue", "-p", "local", "--design", "push1-push-push",
                         "--items", "1000", "--one-notification-in-flight"},
                        60s);
  ASSERT_EQ(h.status, 0) << h.err;
  EXPECT_NE(h.out.find("lazy refresh 0.5, push2 receive pool = capacity; at most one notification "
                       "push in flight per end"),
            std::string::npos)
      << h.out;
}

// --burst: the batched calls move every item in order (the bench checks each one's sequence
// number and length), on the compact local path, a framed shm design and the socket baseline.
TEST(QueueCli, BurstMovesEveryItemAndIsReported) {
  for (const char* provider : {"local", "shm"}) {
    CliResult r = run_cli({"fabflow", "bench", "queue", "-p", provider, "--design",
                           "basic,pull-watermark-pull,socket", "-S", "64,200", "--items", "5000",
                           "--burst", "16", "--json"},
                          60s);
    ASSERT_FALSE(r.timed_out) << provider << ": " << r.err;
    ASSERT_EQ(r.status, 0) << provider << ": " << r.err;
    auto out = lines(r.out);
    ASSERT_EQ(out.size(), 6u) << r.out;
    for (const auto& line : out) {
      auto j = nlohmann::json::parse(line);
      EXPECT_EQ(j["burst"], 16) << line;
      ASSERT_FALSE(j.contains("unsupported")) << line;
      EXPECT_EQ(j["items"], 5000) << line;
      EXPECT_GT(j["items_per_s"].get<double>(), 0) << line;
      EXPECT_GE(j["ops_per_item"]["data"].get<double>(), 1.0) << line;
    }
  }
}

TEST(QueueCli, BadInputsGiveOneErrorLineAndExit2) {
  const std::vector<std::vector<std::string>> cases = {
      {"--design", "push3-watermark-pull"},
      {"--design", "socket", "--preset", "turbo"},
      {"--design", "socket", "--items", "1"},
      {"--design", "socket", "-S", "0"},
      {"--design", "socket", "--capacity", "0"},
      {"--design", "socket", "--capacity", "12x"},
      {"--design", "socket", "--api", "dma"},
      {"--design", "socket", "--notify-endpoint", "both"},
      {"--design", "socket", "--burst", "0"},
      {"--design", "socket", "--burst", "5000"},
      {"--design", "socket", "--burst", "8", "--api", "copy"},
      {"--design", "socket", "--burst", "8", "--pingpong"},
      {"--design", "socket", "--burst", "8", "--latency"},
      {"--design", "socket", "--lazy-refresh", "fast"},
      {"--design", "socket", "--recv-pool", "1.5"},
      {"--design", "socket", "-p", "nosuchprovider"},
      // Found by trying it as a new user (issue 44): none of these may run quietly.
      {"--design", "socket", "-S", ""},
      {"--design", "socket", "-p", "local,local"},
      {"--design", "socket", "-p", "local,,shm"},
      {"--design", "socket", "-p", ""},
      {"--design", "socket,socket"},
      {"--design", "basic,push1-watermark-pull"},
      {"--design", "auto", "-S", "64,4K"},
  };
  for (const auto& extra : cases) {
    std::vector<std::string> args = {"fabflow", "bench", "queue"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = run_cli(args, 10s);
    ASSERT_FALSE(r.timed_out) << extra[1];
    EXPECT_EQ(r.status, 2) << extra[1] << ": " << r.err;
    auto err = lines(r.err);
    ASSERT_EQ(err.size(), 1u) << r.err;
    EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
    EXPECT_LT(r.seconds, 10.0);
  }
  // The unknown-provider line lists fabflow's own transport with libfabric's.
  CliResult r = run_cli({"fabflow", "bench", "queue", "-p", "nosuchprovider"}, 10s);
  EXPECT_NE(r.err.find("(available: local, "), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fabflow
