// Unreliable endpoints (-e dgram: libfabric's udp provider, FI_EP_DGRAM) in bench lat and bench
// raw: the send ping-pong runs and counts a lost ping instead of waiting for it; every other
// test refuses with one line. And bench lat --rto-min: TCP's minimum retransmission timeout set
// on the routes of the ranks' namespaces.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/run_cli.h"

// A namespace of its own: the test files are compiled together in unity batches.
namespace fabflow::lat_dgram_cli_test {
namespace {

using testing::CliResult;
using testing::lines;
using testing::run_cli;
using namespace std::chrono_literals;

bool skipped_for_netns(const CliResult& r) {
  return r.status == 2 && r.err.find("--netns") != std::string::npos;
}

TEST(LatDgramCli, UdpDatagramPingPongBesideTheReliableEndpoints) {
  CliResult r = run_cli(
      {"fabflow",  "bench", "lat",       "-p",   "udp", "-e",    "dgram", "-m",  "send,writedata",
       "--inject", "off",   "--sockets", "none", "-S",  "16,1K", "-I",    "400", "-w",
       "50",       "--json"},
      60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  // writedata needs RMA, which the datagram endpoint has not: a note, and the send rows run.
  EXPECT_NE(r.err.find("writedata: not run"), std::string::npos) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  for (const auto& line : out) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["endpoint"], "dgram") << line;
    EXPECT_EQ(j["path"], "fabric");
    EXPECT_EQ(j["mode"], "send");
    EXPECT_NE(j["provider"].get<std::string>().find("udp"), std::string::npos) << line;
    // Answered pings and lost ones make up the run; over loopback nearly none is lost.
    EXPECT_EQ(j["iterations"].get<std::uint64_t>() + j["lost"].get<std::uint64_t>(), 400u);
    EXPECT_LE(j["lost"].get<std::uint64_t>(), 40u) << line;
    EXPECT_GT(j["latency_ns"]["p50"].get<double>(), 0);
  }
}

// Dropped datagrams in namespaces: each lost ping is counted after its timeout and the run goes
// on to the end, never waiting for an answer that will not come.
TEST(LatDgramCli, ALostDatagramIsCountedNotHungOn) {
  CliResult r =
      run_cli({"fabflow", "bench", "lat", "-p",   "udp",      "-e",  "dgram",     "--netns",
               "--loss",  "5%",    "-m",  "send", "--inject", "off", "--sockets", "none",
               "-S",      "64",    "-I",  "200",  "-w",       "0",   "--json"},
              90s);
  ASSERT_FALSE(r.timed_out) << r.err;
  if (skipped_for_netns(r)) GTEST_SKIP() << "network namespaces not available here: " << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 1u) << r.out;
  auto j = nlohmann::json::parse(out[0]);
  // 200 pings, each round trip lost with probability 1 - 0.95^2 = 9.75 %: about 20.
  const auto lost = j["lost"].get<std::uint64_t>();
  EXPECT_GE(lost, 3u) << out[0];
  EXPECT_LE(lost, 60u) << out[0];
  EXPECT_EQ(j["iterations"].get<std::uint64_t>() + lost, 200u) << out[0];
  // A lost ping is never a sample: the answered ones stay far below the 200 ms loss timeout.
  EXPECT_LT(j["latency_ns"]["max"].get<double>(), 100e6) << out[0];
}

void expect_one_line(const std::vector<std::string>& args, const std::string& needle) {
  CliResult r = run_cli(args, 20s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.status, 0);
  auto err = lines(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
  EXPECT_NE(err[0].find(needle), std::string::npos) << err[0];
}

TEST(LatDgramCliBadInput, WhatAnUnreliableEndpointCannotRun) {
  // Streams would wait for lost messages; RMA is not there; local has no dgram endpoint.
  expect_one_line({"fabflow", "bench", "raw", "-p", "udp", "-e", "dgram", "-t", "bw"},
                  "unreliable");
  expect_one_line({"fabflow", "bench", "raw", "-p", "udp", "-e", "dgram", "-o", "send"},
                  "unreliable");
  expect_one_line(
      {"fabflow", "bench", "raw", "-p", "udp", "-e", "dgram", "-o", "write", "-t", "lat"}, "udp");
  expect_one_line({"fabflow", "bench", "raw", "-p", "local", "-e", "dgram", "-t", "lat"},
                  "offers no dgram endpoints");
  expect_one_line({"fabflow", "bench", "raw", "-p", "shm", "-e", "dgram", "-t", "lat"}, "shm");
  expect_one_line({"fabflow", "bench", "raw", "-p", "udp", "-e", "datagram"}, "-e");
}

TEST(LatRtoMinCli, BadInputIsOneLine) {
  expect_one_line({"fabflow", "bench", "lat", "--rto-min", "5"}, "--netns");
  expect_one_line({"fabflow", "bench", "lat", "--netns", "--rto-min", "0"}, "--rto-min");
  expect_one_line({"fabflow", "bench", "lat", "--netns", "--rto-min", "5ms"}, "--rto-min");
}

// The set floor shortens the wait for a lost TCP segment: with rto_min at 5 ms no round trip
// waits anywhere near the kernel's default 200 ms RTO, and the rows carry the value set.
TEST(LatRtoMinCli, TheSetFloorBoundsTcpsRetransmissionWait) {
  CliResult r =
      run_cli({"fabflow",   "bench", "lat",       "-p",  "none",          "--netns", "--loss", "5%",
               "--rto-min", "5",     "--sockets", "tcp", "--socket-wait", "spin",    "-S",     "64",
               "-I",        "400",   "-w",        "0",   "--json"},
              90s);
  ASSERT_FALSE(r.timed_out) << r.err;
  if (skipped_for_netns(r)) GTEST_SKIP() << "network namespaces not available here: " << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 1u) << r.out;
  auto j = nlohmann::json::parse(out[0]);
  EXPECT_EQ(j["rto_min_ms"], 5) << out[0];
  // About 40 of 400 round trips lose a segment; each costs a retransmission timer.
  EXPECT_GT(j["latency_ns"]["max"].get<double>(), 1e6) << out[0];
  EXPECT_LT(j["latency_ns"]["max"].get<double>(), 90e6) << out[0];
}

}  // namespace
}  // namespace fabflow::lat_dgram_cli_test
