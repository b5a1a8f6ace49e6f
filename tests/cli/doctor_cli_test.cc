// `fabflow doctor`: every check reported with a status and, where not ok, a fix; the exit status
// follows the failures; a memlock limit too small for one registered flow ring fails its check
// with the fix (provoked with prlimit, as the issue asks).
#include <gtest/gtest.h>

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::run_cli;
using namespace std::chrono_literals;

nlohmann::json check_named(const nlohmann::json& doc, const std::string& name) {
  for (const auto& c : doc["checks"])
    if (c["check"] == name) return c;
  return nullptr;
}

TEST(DoctorCli, EveryCheckHasAStatusAndTheExitFollowsTheFailures) {
  CliResult r = run_cli({"fabflow", "doctor", "--json"}, 60s);
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["type"], "doctor");
  int failed = 0;
  const std::set<std::string> statuses = {"ok", "warn", "fail", "n/a"};
  for (const auto& c : doc["checks"]) {
    EXPECT_TRUE(statuses.count(c["status"].get<std::string>())) << c.dump();
    EXPECT_FALSE(c["detail"].get<std::string>().empty()) << c.dump();
    if (c["status"] == "fail" || c["status"] == "warn") {
      EXPECT_FALSE(c["fix"].get<std::string>().empty()) << c.dump();
    }
    failed += c["status"] == "fail";
  }
  EXPECT_EQ(doc["failed"], failed);
  EXPECT_EQ(r.status, failed > 0 ? 1 : 0) << r.err;
  for (const char* name :
       {"libfabric", "memlock", "/dev/shm", "userfaultfd", "cross-memory attach", "huge pages",
        "cpu governor", "invariant tsc", "launcher", "bootstrap port"})
    EXPECT_FALSE(check_named(doc, name).is_null()) << name;
  EXPECT_EQ(check_named(doc, "bootstrap port")["status"], "ok");
  CliResult text = run_cli({"fabflow", "doctor"}, 60s);
  EXPECT_EQ(text.status, r.status);
  EXPECT_NE(text.out.find("check(s) failed"), std::string::npos);
}

TEST(DoctorCli, ASmallMemlockLimitFailsWithTheFix) {
  CliResult r =
      run_cli({"/usr/bin/prlimit", "--memlock=65536", FABFLOW_BIN, "doctor", "--json"}, 60s);
  ASSERT_EQ(r.status, 1) << r.err;
  const auto memlock = check_named(nlohmann::json::parse(r.out), "memlock");
  EXPECT_EQ(memlock["status"], "fail");
  EXPECT_NE(memlock["detail"].get<std::string>().find("64 KiB"), std::string::npos);
  EXPECT_NE(memlock["fix"].get<std::string>().find("ulimit -l unlimited"), std::string::npos);
}

// A /dev/shm with less room than a few ranks need (a 1 MiB tmpfs mounted over it in a private
// mount namespace: root only) fails its check with the fix.
TEST(DoctorCli, ASmallDevShmFailsWithTheFix) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a small /dev/shm needs root";
  CliResult r = run_cli(
      {"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
       "mount -t tmpfs -o size=1m tmpfs /dev/shm && exec \"$0\" doctor --json", FABFLOW_BIN},
      60s);
  ASSERT_EQ(r.status, 1) << r.err;
  const auto shm = check_named(nlohmann::json::parse(r.out), "/dev/shm");
  EXPECT_EQ(shm["status"], "fail");
  EXPECT_NE(shm["detail"].get<std::string>().find("1 MiB free"), std::string::npos) << shm.dump();
  EXPECT_NE(shm["fix"].get<std::string>().find("remount"), std::string::npos);
}

}  // namespace
}  // namespace fabflow
