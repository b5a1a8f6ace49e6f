// --secret-file on every bench subcommand: a file other users may read, a missing file and an
// empty file are each one error line and exit code 2, before any rank starts.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "support/run_cli.h"

namespace fabflow {
namespace {

using testing::CliResult;
using testing::lines;
using testing::run_cli;
using namespace std::chrono_literals;

class SecretFileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/fabflow-secret-cli-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    for (const auto& f : files_) ::unlink(f.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string file(const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
    files_.push_back(path);
    return path;
  }
  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(SecretFileCli, BadFilesAreOneLineAndExitTwo) {
  const std::string readable = file("readable", "s3cret\n", 0644);
  const std::string empty = file("empty", "", 0600);
  const std::string missing = dir_ + "/missing";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {readable, "has mode 0644: other users may read it (chmod 600 " + readable + ")"},
      {empty, empty + " is empty"},
      {missing, missing + ": No such file or directory"}};
  for (const char* sub : {"raw", "queue", "rr", "seq", "inbound", "kv"}) {
    for (const auto& [path, want] : cases) {
      CliResult r = run_cli({"fabflow", "bench", sub, "--secret-file", path}, 10s);
      const std::string what = std::string("bench ") + sub + " --secret-file " + path;
      ASSERT_FALSE(r.timed_out) << what;
      EXPECT_EQ(r.status, 2) << what << ": " << r.err;
      const auto err = lines(r.err);
      ASSERT_EQ(err.size(), 1u) << what << ": " << r.err;
      EXPECT_EQ(err[0].rfind("fabflow: error: ", 0), 0u) << err[0];
      EXPECT_NE(err[0].find("--secret-file"), std::string::npos) << err[0];
      EXPECT_NE(err[0].find(want), std::string::npos) << err[0];
    }
  }
}

TEST_F(SecretFileCli, HelpListsItAndThereIsNoSecretFlag) {
  CliResult r = run_cli({"fabflow", "bench", "raw", "--help"}, 10s);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("--secret-file"), std::string::npos);
  r = run_cli({"fabflow", "bench", "raw", "--secret", "s3cret"}, 10s);
  EXPECT_EQ(r.status, 2) << r.err;  // no such flag: the secret never goes on a command line
}

}  // namespace
}  // namespace fabflow
