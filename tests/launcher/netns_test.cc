#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <vector>

#include "support/launcher_test_util.h"
#include "launcher/netns.h"

namespace fabflow::launcher_test {
namespace {

// Namespaces in /var/run/netns whose names start with ffl-<pid>-.
std::vector<std::string> namespaces_of(pid_t pid) {
  std::vector<std::string> names;
  const std::string prefix = "ffl-" + std::to_string(pid) + "-";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/var/run/netns", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(prefix)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool netns_exists(const std::string& name) {
  struct stat st;
  return ::stat(("/var/run/netns/" + name).c_str(), &st) == 0;
}

class LauncherNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!netns_available(&why)) GTEST_SKIP() << "network namespaces unavailable: " << why;
  }
};

TEST_F(LauncherNetns, RanksGetTheirOwnAddressesAndTalkOverTcp) {
  TempDir dir;
  const std::string script = R"(
    r=$FABFLOW_RANK
    ip -o -4 addr show dev eth0 > "$1/addr.$r"
    ip -o link show dev lo > "$1/lo.$r"
    readlink /proc/self/ns/net > "$1/ns.$r"
    env | grep '^FABFLOW_' > "$1/env.$r"
    host=${FABFLOW_COORD%:*}; port=${FABFLOW_COORD##*:}
    if [ "$r" = 0 ]; then
      exec perl -MIO::Socket::INET -e '
        my $s = IO::Socket::INET->new(LocalAddr => $ARGV[0], LocalPort => $ARGV[1],
                                      Listen => 4, ReuseAddr => 1) or die "listen: $!\n";
        alarm 5; my $c = $s->accept or die "accept: $!\n"; my $l = <$c>;
        open my $f, ">", $ARGV[2] or die; print $f $l;' "$host" "$port" "$1/received"
    fi
    i=0
    until bash -c "echo hello-from-$r > /dev/tcp/$host/$port" 2>/dev/null; do
      i=$((i+1)); [ $i -lt 200 ] || exit 1; sleep 0.02
    done)";
  auto config = sh_launch(2, script, dir);
  config.netns = true;
  config.deadline = 10s;
  ASSERT_EQ(launch_local(config), 0);

  EXPECT_EQ(read_file(dir.file("received")), "hello-from-1\n");
  const auto our_ns = std::filesystem::read_symlink("/proc/self/ns/net").string() + "\n";
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::string r = std::to_string(rank);
    const auto addr = read_file(dir.file("addr." + r)).value_or("");
    EXPECT_NE(addr.find("eth0    inet 10.213.0." + std::to_string(rank + 1) + "/24"),
              std::string::npos)
        << addr;
    EXPECT_NE(read_file(dir.file("lo." + r)).value_or("").find(",UP"), std::string::npos);
    EXPECT_NE(read_file(dir.file("ns." + r)), our_ns);
    const auto env = read_file(dir.file("env." + r)).value_or("");
    EXPECT_NE(env.find("FABFLOW_COORD=10.213.0.1:17471\n"), std::string::npos) << env;
    EXPECT_EQ(env.find("FABFLOW_COORD_FD"), std::string::npos) << env;
  }
  EXPECT_NE(read_file(dir.file("ns.0")), read_file(dir.file("ns.1")));
}

TEST_F(LauncherNetns, NamespacesAreGoneAfterAFailedRun) {
  TempDir dir;
  const std::string script = R"(
    ls /var/run/netns > "$1/during.$FABFLOW_RANK"
    [ "$FABFLOW_RANK" = 1 ] && exit 2
    exit 0)";
  auto config = sh_launch(2, script, dir);
  config.netns = true;
  EXPECT_EQ(launch_local(config), 2);
  const std::string prefix = "ffl-" + std::to_string(::getpid()) + "-";
  const auto during = read_file(dir.file("during.1")).value_or("");
  for (const char* suffix : {"0", "1", "hub"}) {
    EXPECT_NE(during.find(prefix + suffix + "\n"), std::string::npos) << during;
  }
  EXPECT_EQ(namespaces_of(::getpid()), std::vector<std::string>{});
}

TEST_F(LauncherNetns, NamespacesAreGoneAfterASetupError) {
  LaunchConfig config;
  config.nprocs = 2;
  config.argv = {"/nonexistent/fabflow-test-program"};
  config.netns = true;
  EXPECT_THROW(launch_local(config), Error);
  EXPECT_EQ(namespaces_of(::getpid()), std::vector<std::string>{});
}

TEST_F(LauncherNetns, SigtermToTheLauncherRemovesRanksAndNamespaces) {
  TempDir dir;
  auto config = sh_launch(2, R"(echo $$ > "$1/pid.$FABFLOW_RANK"; sleep 30; exit 0)", dir);
  config.netns = true;
  const pid_t launcher = fork_launch(config);
  ASSERT_GT(launcher, 0);
  const bool started = wait_until(
      [&] { return read_pid(dir.file("pid.0")) > 0 && read_pid(dir.file("pid.1")) > 0; }, 5s);
  const auto during = namespaces_of(launcher);
  ::kill(launcher, SIGTERM);
  EXPECT_TRUE(started);
  const auto expected_during = std::vector<std::string>{"ffl-" + std::to_string(launcher) + "-0",
                                                        "ffl-" + std::to_string(launcher) + "-1",
                                                        "ffl-" + std::to_string(launcher) + "-hub"};
  EXPECT_EQ(during, expected_during);
  EXPECT_EQ(wait_exit(launcher, 5s), 128 + SIGTERM);
  EXPECT_EQ(namespaces_of(launcher), std::vector<std::string>{});
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = read_pid(dir.file("pid." + std::to_string(rank)));
    EXPECT_TRUE(pid > 0 && wait_until([&] { return process_gone(pid); }, 2s)) << "rank " << rank;
  }
}

TEST_F(LauncherNetns, StaleNamespacesOfDeadLaunchersAreRemoved) {
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_EQ(wait_exit(dead, 5s), 0);
  const pid_t alive = ::fork();
  if (alive == 0) {
    ::pause();
    ::_exit(0);
  }
  const std::string stale = "ffl-" + std::to_string(dead) + "-0";
  const std::string stale_hub = "ffl-" + std::to_string(dead) + "-hub";
  const std::string live = "ffl-" + std::to_string(alive) + "-0";
  for (const auto& name : {stale, stale_hub, live}) launcher::run_ip({"netns", "add", name});

  cleanup_stale_netns();
  EXPECT_FALSE(netns_exists(stale));
  EXPECT_FALSE(netns_exists(stale_hub));
  EXPECT_TRUE(netns_exists(live));

  ::kill(alive, SIGKILL);
  wait_exit(alive, 5s);
  launcher::run_ip({"netns", "del", live});
}

TEST_F(LauncherNetns, WithoutRootTheErrorSaysSo) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to drop privileges";
  TempDir dir;
  ::chmod(dir.path().c_str(), 0777);
  const pid_t child = ::fork();
  if (child == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 65534) != 0) {
      ::_exit(3);
    }
    std::string why;
    const bool available = netns_available(&why);
    std::string thrown;
    auto config = sh_launch(1, "exit 0", dir);
    config.netns = true;
    try {
      launch_local(config);
    } catch (const Error& e) {
      thrown = e.what();
    }
    std::ofstream(dir.file("result")) << available << "\n" << why << "\n" << thrown << "\n";
    ::_exit(0);
  }
  ASSERT_EQ(wait_exit(child, 10s), 0);
  std::istringstream result(read_file(dir.file("result")).value_or(""));
  std::string available, why, thrown;
  std::getline(result, available);
  std::getline(result, why);
  std::getline(result, thrown);
  EXPECT_EQ(available, "0");
  EXPECT_TRUE(why.starts_with("launcher: network namespaces need root (ip netns add: ")) << why;
  EXPECT_TRUE(thrown.starts_with("launcher: network namespaces need root (ip netns add: "))
      << thrown;
}

}  // namespace
}  // namespace fabflow::launcher_test
