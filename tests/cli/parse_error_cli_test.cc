// The parser's own errors in fabflow's words: one line naming the command, what was wrong and
// where its help is, exit 2.
#include <gtest/gtest.h>

#include <chrono>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using namespace std::chrono_literals;
using testing::expect_usage_line;
using testing::run_cli;

TEST(ParseErrorCliBadInput, SaysWhichCommandAndWhatWasWrong) {
  expect_usage_line(run_cli({"fabflow", "bench"}, 10s),
                    "fabflow bench needs a command: raw, queue, rr");
  expect_usage_line(run_cli({"fabflow", "bogus"}, 10s),
                    "'bogus' is not a command of fabflow (info, bench");
  expect_usage_line(run_cli({"fabflow", "bench", "bogus"}, 10s),
                    "'bogus' is not a command of fabflow bench (raw, queue");
  expect_usage_line(run_cli({"fabflow", "bench", "queue", "--itms", "5"}, 10s),
                    "fabflow bench queue does not take --itms 5 (fabflow bench queue --help");
  expect_usage_line(run_cli({"fabflow", "bench", "queue", "-S"}, 10s), "--size needs a value");
}

}  // namespace
}  // namespace fabflow
