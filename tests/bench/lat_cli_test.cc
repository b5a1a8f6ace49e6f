// `fabflow bench lat` through the CLI: every mode, inline off and on, on shm, tcp, tcp;ofi_rxm
// and local, with the UDP and TCP socket baselines (blocking and spinning) as rows of the same
// run; the JSON fields; bad input and a killed rank, each one error line and a non-zero exit.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::lines;
using testing::run_cli;
using namespace std::chrono_literals;

TEST(LatCli, EveryModeOnFourProvidersAndTheSocketBaselinesInOneRun) {
  CliResult r = run_cli({"fabflow", "bench", "lat", "-p", "shm,tcp,tcp;ofi_rxm,local", "-S", "8,64",
                         "-I", "300", "-w", "20", "--json"},
                        120s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  // (path, provider, mode, inline) -> sizes seen
  std::map<std::string, std::set<std::size_t>> seen;
  for (const auto& line : lines(r.out)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["bench"], "lat");
    EXPECT_EQ(j["type"], "latency");
    EXPECT_EQ(j["latency_kind"], "one_way");
    EXPECT_EQ(j["iterations"], 300);
    const auto& l = j["latency_ns"];
    EXPECT_EQ(l["samples"], 300);
    EXPECT_GT(l["min"].get<double>(), 0);
    EXPECT_LE(l["p50"].get<double>(), l["p9999"].get<double>());
    EXPECT_LE(l["p9999"].get<double>(), l["max"].get<double>());
    std::uint64_t counted = 0;
    for (const auto& bucket : l["histogram"]) counted += bucket[2].get<std::uint64_t>();
    EXPECT_EQ(counted, 300u) << line;
    if (j["path"] == "socket") {
      EXPECT_EQ(j["lost"], 0);
      EXPECT_GE(j["path_mtu"].get<int>(), 1500);
      EXPECT_EQ(j["inject"], false);
    }
    const std::string key = j["path"].get<std::string>() + " " + j["provider"].get<std::string>() +
                            " " + j["mode"].get<std::string>() + (j["inject"] ? " inline" : "");
    seen[key].insert(j["size_bytes"].get<std::size_t>());
  }
  for (const char* provider : {"shm", "tcp", "tcp;ofi_rxm", "local"})
    for (const char* mode : {"send", "writedata", "write", "write-like"}) {
      const std::string key = std::string("fabric ") + provider + " " + mode;
      if (std::string(provider) == "local" && std::string(mode) == "write-like") {
        // local places a message only when the receiver polls: not run, and said so.
        EXPECT_EQ(seen.count(key), 0u);
        continue;
      }
      EXPECT_EQ(seen[key], (std::set<std::size_t>{8, 64})) << key;
      // Inline where the provider inlines 64 bytes (every one of these does).
      EXPECT_EQ(seen[key + " inline"], (std::set<std::size_t>{8, 64})) << key;
    }
  EXPECT_NE(r.err.find("write-like: not run on local"), std::string::npos) << r.err;
  for (const char* key :
       {"socket udp block", "socket udp spin", "socket tcp block", "socket tcp spin"})
    EXPECT_EQ(seen[key], (std::set<std::size_t>{8, 64})) << key;
  EXPECT_EQ(seen.size(), 4u * 4 * 2 - 2 + 4) << r.out;
}

// WRITE-like send/recv with batches that do not divide the run (and a warm-up shorter than a
// batch): every message still found in its own buffer, every receive reaped.
TEST(LatCli, WriteLikeBatchesOfAnySize) {
  for (const char* reap : {"1", "7", "256"}) {
    CliResult r = run_cli(
        {"fabflow", "bench",     "lat",  "-p",           "shm,tcp", "-m", "write-like", "--inject",
         "off",     "--sockets", "none", "--reap-every", reap,      "-S", "1,100,4K",   "-I",
         "500",     "-w",        "5",    "--json"},
        60s);
    SCOPED_TRACE(reap);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(lines(r.out).size(), 6u) << r.out;
    for (const auto& line : lines(r.out))
      EXPECT_EQ(nlohmann::json::parse(line)["latency_ns"]["samples"], 500) << line;
  }
}

TEST(LatCli, TheTableNamesEveryRow) {
  CliResult r =
      run_cli({"fabflow", "bench", "lat", "-p", "local", "-m", "write", "--inject", "off",
               "--sockets", "udp", "--socket-wait", "spin", "-S", "64", "-I", "200", "-w", "10"},
              60s);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("p99.99(us)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  fabric  local     write      -     closed   off        64      200"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  socket  udp       spin       -     closed   off        64      200"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("path MTU"), std::string::npos) << r.out;
}

TEST(LatCli, BadInputIsOneLine) {
  const std::vector<std::vector<std::string>> cases = {
      {"-p", "local", "-S", "70000"},          // above UDP's largest datagram
      {"-p", "nosuchfabric"},                  // unknown provider
      {"-p", "none", "--sockets", "none"},     // nothing to run
      {"--sockets", "sctp"},                   // unknown socket protocol
      {"-m", "read"},                          // not a latency mode
      {"--socket-wait", "sleep"},              // unknown wait
      {"-p", "local", "-S", "0"},              // zero-byte ping
      {"-p", "local", "-I", "0"},              // no iterations
      {"-m", "write", "--recv-post", "list"},  // receive posting without the send mode
      {"-m", "write", "--rate", "1000"},       // an open loop without the send mode
      {"--recv-post", "heap"},                 // unknown posting
      {"--recv-batch", "0"},                   // an empty batch
      {"--recv-batch", "65"},                  // above the receive window
      {"--rate", "-5"},                        // a negative rate
      {"--rate", "fast"},                      // not a number
      {"-p", "tcp", "-m", "send", "--recv-post", "multi", "-S", "0", "--sockets", "none"},
      {"-p", "local", "-m", "send", "--rate", "0.5", "--timeout", "1000"},  // period > timeout
      {"--netns", "--loss", "150%"},                             // a loss rate outside 0..100 %
      {"--loss", "1%"},                                          // loss without namespaces
      {"-p", "local", "--samples", "/nonexistent/dir/samples"},  // unwritable samples file
  };
  for (const auto& extra : cases) {
    std::vector<std::string> args = {"fabflow", "bench", "lat"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = run_cli(args, 20s);
    SCOPED_TRACE(extra.back());
    ASSERT_NO_FATAL_FAILURE(testing::expect_one_error_line(r));
    EXPECT_EQ(r.status, 2) << r.err;
  }
}

// Receives re-posted one by one, as lists and in multi-receive buffers, with batches that do
// not divide the run or the warm-up: every row complete on every provider that has the
// posting; local, without multi-receive buffers, says so and runs the rest.
TEST(LatCli, ReceivePostingOneListAndMulti) {
  CliResult r = run_cli({"fabflow",
                         "bench",
                         "lat",
                         "-p",
                         "shm,tcp,tcp;ofi_rxm,local",
                         "-m",
                         "send",
                         "--inject",
                         "off",
                         "--recv-post",
                         "one,list,multi",
                         "--recv-batch",
                         "5",
                         "-S",
                         "1,100,4K",
                         "-I",
                         "300",
                         "-w",
                         "7",
                         "--sockets",
                         "none",
                         "--json"},
                        120s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  std::map<std::string, std::set<std::size_t>> seen;  // "provider post" -> sizes
  for (const auto& line : lines(r.out)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["latency_ns"]["samples"], 300) << line;
    EXPECT_EQ(j["loop"], "closed") << line;
    if (j["recv_post"] == "list") {
      EXPECT_EQ(j["recv_more_hint"].get<std::string>().find("ignored"), 0u) << line;
    }
    seen[j["provider"].get<std::string>() + " " + j["recv_post"].get<std::string>()].insert(
        j["size_bytes"].get<std::size_t>());
  }
  const std::set<std::size_t> sizes{1, 100, 4096};
  for (const char* provider : {"shm", "tcp", "tcp;ofi_rxm", "local"})
    for (const char* post : {"one", "list"})
      EXPECT_EQ(seen[std::string(provider) + " " + post], sizes) << provider << " " << post;
  for (const char* provider : {"shm", "tcp;ofi_rxm"})
    EXPECT_EQ(seen[std::string(provider) + " multi"], sizes) << provider;
  EXPECT_EQ(seen.count("local multi"), 0u);
  EXPECT_NE(r.err.find("multi: not run: local has no multi-receive buffers"), std::string::npos)
      << r.err;
}

// --rate: open-loop rows beside the closed-loop ones, every ping answered and timed.
TEST(LatCli, OpenLoopBesideTheClosedLoop) {
  CliResult r = run_cli(
      {"fabflow", "bench", "lat", "-p", "local,shm", "-m", "send", "--inject",  "off",  "--rate",
       "5000",    "-S",    "64",  "-I", "1000",      "-w", "100",  "--sockets", "none", "--json"},
      60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  std::multiset<std::string> loops;
  for (const auto& line : lines(r.out)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["latency_ns"]["samples"], 1000) << line;
    loops.insert(j["provider"].get<std::string>() + " " + j["loop"].get<std::string>());
    if (j["loop"] == "open") {
      EXPECT_EQ(j["rate_per_s"], 5000.0) << line;
    }
  }
  EXPECT_EQ(loops,
            (std::multiset<std::string>{"local closed", "local open", "shm closed", "shm open"}));
}

// A rate no machine holds is an error, not a closed loop under another name.
TEST(LatCli, AnUnsustainableRateIsOneLine) {
  CliResult r =
      run_cli({"fabflow", "bench", "lat", "-p", "local", "-m", "send", "--inject", "off", "--rate",
               "1e9", "-S", "64", "-I", "200000", "-w", "0", "--sockets", "none"},
              60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_NO_FATAL_FAILURE(testing::expect_one_error_line(r));
  EXPECT_NE(r.err.find("cannot sustain 1000000000 pings/s"), std::string::npos) << r.err;
  EXPECT_NE(r.status, 0);
}

// --samples: every sample of every row, none capped, in the order measured.
TEST(LatCli, SamplesFileHoldsEverySample) {
  char path[] = "/tmp/fabflow-lat-samples-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  CliResult r = run_cli({"fabflow",    "bench",     "lat",  "-p",        "local", "-m",
                         "send,write", "--inject",  "off",  "--sockets", "tcp",   "--socket-wait",
                         "spin",       "-S",        "8,1K", "-I",        "20000", "-w",
                         "10",         "--samples", path},
                        60s);
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(path);
  std::vector<std::string> headers;
  std::vector<std::size_t> counts;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# ", 0) == 0) {
      headers.push_back(line);
      counts.push_back(0);
      continue;
    }
    ASSERT_FALSE(counts.empty()) << line;
    EXPECT_GT(std::stod(line), 0) << line;
    ++counts.back();
  }
  ::unlink(path);
  EXPECT_EQ(headers, (std::vector<std::string>{
                         "# fabric local send inject=off size=8 recv=one",
                         "# fabric local send inject=off size=1024 recv=one",
                         "# fabric local write inject=off size=8",
                         "# fabric local write inject=off size=1024",
                         "# socket tcp spin inject=off size=8",
                         "# socket tcp spin inject=off size=1024",
                     }));
  EXPECT_EQ(counts, std::vector<std::size_t>(6, 20000));
}

// --loss in namespaces: UDP pings are lost at about the rate asked for, counted, and the run
// still ends; the rows say how the loss was made.
TEST(LatCli, LossInNamespacesIsCountedNotHung) {
  CliResult r =
      run_cli({"fabflow", "bench", "lat", "-p", "none", "--netns", "--loss", "5%", "--sockets",
               "udp", "--socket-wait", "spin", "-S", "64", "-I", "200", "-w", "0", "--json"},
              60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  if (r.status == 2 && r.err.find("--netns") != std::string::npos)
    GTEST_SKIP() << "network namespaces not available here: " << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  const auto out = lines(r.out);
  ASSERT_EQ(out.size(), 1u) << r.out;
  const auto j = nlohmann::json::parse(out[0]);
  EXPECT_EQ(j["loss_percent"], 5.0);
  EXPECT_NE(j["loss_method"].get<std::string>().find("5%"), std::string::npos) << out[0];
  // 200 pings, each round trip lost with probability 1 - 0.95^2 = 9.75 %: about 20.
  const auto lost = j["lost"].get<std::uint64_t>();
  EXPECT_GE(lost, 3u) << out[0];
  EXPECT_LE(lost, 60u) << out[0];
  EXPECT_EQ(j["iterations"].get<std::uint64_t>() + lost, 200u) << out[0];
  // Under loss it says so before it starts, then a line per row as it is measured.
  EXPECT_NE(r.err.find("fabflow: lat: under 5% loss about 9.8% of round trips wait"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("fabflow: lat: measured socket udp spin 64: p50 "), std::string::npos)
      << r.err;
}

// The quick tour's run under loss takes minutes: it says what it runs at once, long before its
// first row (the run is interrupted after 4 s, as a user would with Ctrl-C).
TEST(LatCli, UnderLossItSaysWhatRunsAtOnce) {
  std::thread interrupt;
  CliResult r =
      run_cli({"fabflow", "bench", "lat", "-p", "tcp", "--netns", "--loss", "1%", "-S", "64"}, 30s,
              {}, [&](pid_t pid) {
                interrupt = std::thread([pid] {
                  std::this_thread::sleep_for(4s);
                  ::kill(pid, SIGINT);
                });
              });
  interrupt.join();
  if (r.status == 2 && r.err.find("--netns") != std::string::npos)
    GTEST_SKIP() << "network namespaces not available here: " << r.err;
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.err.rfind("fabflow: lat: under 1% loss about 2% of round trips wait", 0), 0u)
      << r.err;
  EXPECT_NE(r.err.find("-I 1000 for a quicker look"), std::string::npos) << r.err;
}

// A rank killed while the socket baseline spins: the survivor and the launcher stop with one
// error line, well before any timeout.
TEST(LatCliPeerDeath, EchoRankKilledDuringTheSocketBaseline) {
  for (int victim : {1, 0}) {
    const auto run =
        testing::kill_rank_mid_run({"fabflow", "bench", "lat", "-p", "none", "--sockets", "udp,tcp",
                                    "--socket-wait", "spin", "-S", "64", "-I", "2000000000"},
                                   {victim, 700ms});
    ASSERT_NO_FATAL_FAILURE(testing::expect_one_error_line(run.result));
    EXPECT_LT(run.result.seconds, 12.0);
  }
}

}  // namespace
}  // namespace fabflow
