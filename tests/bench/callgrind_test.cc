// Reading callgrind dumps: self cost per function with compressed names, relative positions and
// calls (whose inclusive cost is not the caller's own), several events, instr+line positions;
// malformed dumps refused; and a real dump of valgrind on this machine whose functions' self
// costs add up to its totals.
#include "bench/callgrind.h"

#include <fabflow/status.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

namespace fabflow::callgrind {
namespace {

Profile parse_text(const std::string& text) {
  std::istringstream in(text);
  return parse(in, "test");
}

double ir_of(const Profile& p, const std::string& name) {
  for (const auto& f : p.functions)
    if (f.name == name) return f.ir;
  return -1;
}

const char* kDump = R"(# callgrind format
version: 1
creator: callgrind-3.19.0
positions: line
events: Ir Dr
summary: 1000

ob=(1) /usr/lib/x86_64-linux-gnu/libfabric.so.1
fl=(1) prov/tcp/src/xnet_cq.c
fn=(1) xnet_cq_read
10 300 7
+2 100
cob=(2) /usr/lib/x86_64-linux-gnu/libc.so.6
cfl=(2) ???
cfn=(2) pthread_spin_lock
calls=5 0
-2 400 9
ob=(2)
fl=(2)
fn=(2)
0 400
ob=(3) /work/build/fabflow
fl=(3) src/rr/channel.cc
fn=(3) fabflow::rr::Responder::serve()
* 150
fi=(4) src/rr/frame.h
+1 50
fe=(3)
fn=(1)
ob=(1)
fn=(1)
5 0
totals: 1000 16
)";

TEST(Callgrind, SelfCostPerFunctionLeavesCallsToTheCallee) {
  const Profile p = parse_text(kDump);
  EXPECT_EQ(p.total, 1000);
  ASSERT_EQ(p.functions.size(), 3u);
  EXPECT_EQ(p.functions[0].ir, 400);         // the most first
  EXPECT_EQ(ir_of(p, "xnet_cq_read"), 400);  // 300 + 100; the call's 400 is the callee's
  EXPECT_EQ(ir_of(p, "pthread_spin_lock"), 400);
  EXPECT_EQ(ir_of(p, "fabflow::rr::Responder::serve()"), 200);  // inlined lines count too
  for (const auto& f : p.functions) {
    if (f.name == "xnet_cq_read") {
      EXPECT_EQ(f.object, "libfabric.so.1");
    } else if (f.name == "pthread_spin_lock") {
      EXPECT_EQ(f.object, "libc.so.6");
    } else {
      EXPECT_EQ(f.object, "fabflow");
    }
  }
  EXPECT_DOUBLE_EQ(share_of_objects(p, {"libfabric", "libc"}), 0.8);
  EXPECT_DOUBLE_EQ(share_of_objects(p, {"fabflow"}), 0.2);
  EXPECT_EQ(share_of_objects(Profile{}, {"libc"}), 0);
}

TEST(Callgrind, IrIsFoundAmongOtherEventsAndAfterTwoPositions) {
  const Profile p = parse_text(
      "positions: instr line\nevents: Dr Ir\nob=a.so\nfn=f\n0x10 3 7 11\n+4 +1 1 5\ntotals: 8 "
      "16\n");
  EXPECT_EQ(p.total, 16);
  EXPECT_EQ(ir_of(p, "f"), 16);
}

TEST(Callgrind, MalformedDumpsAreRefused) {
  for (const char* bad : {
           "",                                        // not a dump
           "events: Dr\n",                            // no Ir
           "events: Ir\n10 5\n",                      // a cost before any fn=
           "events: Ir\nfn=(4)\n10 5\n",              // a name never given
           "events: Ir\nfn=(4 f\n10 5\n",             // no ')'
           "events: Ir\nfn=f\n10 five\n",             // not a count
           "events: Ir\nfn=f\n10 -5\n",               // not a count either
           "events: Ir\npositions: instr line pc\n",  // three positions
           "events: Ir\nfn=f\nsomething callgrind never writes\n",
       }) {
    EXPECT_THROW(parse_text(bad), Error) << "accepted: " << bad;
  }
}

TEST(Callgrind, ARealDumpAddsUpToItsTotals) {
  const char* valgrind = "/usr/bin/valgrind";
  if (::access(valgrind, X_OK) != 0) GTEST_SKIP() << "valgrind is not installed (scripts/setup.sh)";
  const auto dir =
      std::filesystem::temp_directory_path() / ("fabflow-cg-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string out = "--callgrind-out-file=" + (dir / "cg.%p").string();
    ::execl(valgrind, valgrind, "--tool=callgrind", "--quiet", out.c_str(), "/bin/true",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const Profile p = read_newest(dir.string(), child);  // valgrind runs /bin/true in its own pid
  std::filesystem::remove_all(dir);
  ASSERT_GT(p.total, 0);
  double sum = 0;
  for (const auto& f : p.functions) sum += f.ir;
  EXPECT_DOUBLE_EQ(sum, p.total);
  EXPECT_GT(share_of_objects(p, {"ld-linux", "libc"}), 0.5);  // /bin/true is all loader and libc
  EXPECT_THROW(read_newest(dir.string(), child), Error);      // the folder is gone
}

}  // namespace
}  // namespace fabflow::callgrind
