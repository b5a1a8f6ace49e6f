#include "launcher/relay.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

namespace fabflow::launcher {
namespace {

// An in-memory file the relay writes to.
class Sink {
 public:
  Sink() : fd_(::memfd_create("relay-test", MFD_CLOEXEC)) {}
  ~Sink() { ::close(fd_); }
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;

  int fd() const { return fd_; }
  std::string text() const {
    std::string out(static_cast<std::size_t>(::lseek(fd_, 0, SEEK_END)), '\0');
    EXPECT_EQ(::pread(fd_, out.data(), out.size(), 0), static_cast<ssize_t>(out.size()));
    return out;
  }

 private:
  int fd_;
};

TEST(LauncherRelay, PassesOrdinaryLinesThroughWhole) {
  Sink sink;
  LineRelay relay(sink.fd(), 2);
  relay.feed(0, "hel");
  relay.feed(1, "other\n");
  relay.feed(0, "lo\nwor");
  EXPECT_EQ(sink.text(), "other\nhello\n");
  relay.feed(0, "ld\n");
  EXPECT_EQ(sink.text(), "other\nhello\nworld\n");
  EXPECT_FALSE(relay.error_shown());
}

TEST(LauncherRelay, ShowsOnlyTheFirstErrorLineOfTheRun) {
  Sink sink;
  LineRelay relay(sink.fd(), 3);
  relay.feed(1, "fabflow: error: rank 1 failed\n");
  relay.feed(0, "fabflow: error: peer 1 vanished\nstill here\n");
  relay.feed(1, "fabflow: error: again\n");
  relay.feed(2, "fabflow: warning: not an error\nfabflow: error:no space\n");
  EXPECT_EQ(sink.text(),
            "fabflow: error: rank 1 failed\nstill here\nfabflow: warning: not an error\n"
            "fabflow: error:no space\n");
  EXPECT_TRUE(relay.error_shown());
}

TEST(LauncherRelay, ClassifiesALineSplitAcrossReads) {
  Sink sink;
  LineRelay relay(sink.fd(), 2);
  relay.feed(0, "fabflow: error: first\n");
  relay.feed(1, "fabflow: err");
  relay.feed(1, "or: second\nok\n");
  EXPECT_EQ(sink.text(), "fabflow: error: first\nok\n");
}

TEST(LauncherRelay, FinishTerminatesTheLastLine) {
  Sink sink;
  LineRelay relay(sink.fd(), 2);
  relay.feed(0, "no newline");
  relay.finish(0);
  relay.finish(1);
  EXPECT_EQ(sink.text(), "no newline\n");
}

TEST(LauncherRelay, OwnLinesFollowTheSameRule) {
  Sink sink;
  LineRelay relay(sink.fd(), 1);
  relay.emit("fabflow: error: run exceeded its deadline of 1 s");
  relay.feed(0, "fabflow: error: interrupted\n");
  relay.emit("fabflow: error: another");
  EXPECT_EQ(sink.text(), "fabflow: error: run exceeded its deadline of 1 s\n");
}

TEST(LauncherRelay, LongLinesAreRelayedInPiecesAndKeepTheirClass) {
  Sink sink;
  LineRelay relay(sink.fd(), 2);
  const std::string long_text(LineRelay::kMaxLine + 10, 'x');
  relay.feed(0, "fabflow: error: first\n");
  relay.feed(1, "fabflow: error: " + long_text);
  relay.feed(1, "tail\n");
  relay.feed(1, long_text);
  relay.feed(1, "!\n");
  EXPECT_EQ(sink.text(), "fabflow: error: first\n" + long_text + "!\n");
}

TEST(LauncherRelay, LabelsEveryLineOfItsStream) {
  Sink sink;
  LineRelay relay(sink.fd(), 2);
  relay.set_label(0, "[0] ");
  relay.set_label(1, "[1] ");
  relay.feed(0, "hel");
  relay.feed(1, "a\nb\n");
  relay.feed(0, "lo\nworld\n");
  relay.emit("fabflow: error: the launcher's own");
  relay.feed(1, "tail");
  relay.finish(1);
  relay.feed(1, "after finish\n");
  EXPECT_EQ(sink.text(),
            "[1] a\n[1] b\n[0] hello\n[0] world\nfabflow: error: the launcher's own\n"
            "[1] tail\n[1] after finish\n");
}

TEST(LauncherRelay, ALabelledLongLineCarriesItsLabelOnce) {
  Sink sink;
  LineRelay relay(sink.fd(), 1);
  relay.set_label(0, "[7] ");
  const std::string long_text(LineRelay::kMaxLine + 10, 'x');
  relay.feed(0, long_text);
  relay.feed(0, "!\nnext\n");
  EXPECT_EQ(sink.text(), "[7] " + long_text + "!\n[7] next\n");
}

TEST(LauncherRelay, EveryErrorModeShowsEveryErrorLine) {
  Sink sink;
  LineRelay relay(sink.fd(), 2, ErrorLines::every);
  relay.set_label(0, "[0] ");
  relay.set_label(1, "[1] ");
  relay.feed(1, "fabflow: error: rank 1 failed\n");
  relay.feed(0, "fabflow: err");
  relay.feed(0, "or: peer 1 vanished\n");
  relay.emit("fabflow: error: rank 1 exited with 3");
  relay.feed(1, "fabflow: error: again\n");
  EXPECT_EQ(sink.text(),
            "[1] fabflow: error: rank 1 failed\n[0] fabflow: error: peer 1 vanished\n"
            "fabflow: error: rank 1 exited with 3\n[1] fabflow: error: again\n");
  EXPECT_TRUE(relay.error_shown());
}

TEST(LauncherRelay, TheFirstErrorRuleLooksPastTheLabel) {
  Sink sink;
  LineRelay relay(sink.fd(), 2);
  relay.set_label(0, "[0] ");
  relay.set_label(1, "[1] ");
  relay.feed(0, "fabflow: error: first\n");
  relay.feed(1, "fabflow: error: second\nok\n");
  EXPECT_EQ(sink.text(), "[0] fabflow: error: first\n[1] ok\n");
}

TEST(LauncherRelay, AReaderThatExitedLeavesTheOutputGone) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[0]);
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old);
  LineRelay relay(fds[1], 1);
  relay.feed(0, "partial");
  EXPECT_FALSE(relay.output_gone());
  relay.feed(0, " line\n");
  EXPECT_TRUE(relay.output_gone());
  relay.feed(0, "more\n");  // written nowhere, and no error
  ::sigaction(SIGPIPE, &old, nullptr);
  ::close(fds[1]);
}

}  // namespace
}  // namespace fabflow::launcher
