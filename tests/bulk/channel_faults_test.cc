// The bulk channel against what can go wrong: receive buffers shorter than their message, ranks
// that disagree on the channel's shape, user errors, forged control messages (a tap under the
// channel rewrites what it receives), a transport that answers again, delays and reorders, and a
// peer process killed in the middle of a transfer.
#include <gtest/gtest.h>

#include <fabflow/bootstrap.h>
#include <fabflow/bulk.h>
#include <fabflow/bulk/transfer.h>
#include <fabflow/fault.h>
#include <fabflow/forwarding.h>
#include <fabflow/transport.h>

#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bulk/wire.h"
#include "support/forked.h"
#include "support/ranks.h"

namespace fabflow::bulk {
namespace {

using namespace std::chrono_literals;
using fabflow::testing::run_ranks;

struct Provider {
  const char* name;
  EndpointType endpoint;
};
// tcp on a connected endpoint (the buffer names the sender) and the local transport (rendezvous
// by cross-memory attach).
const Provider kTcp{"tcp", EndpointType::msg};
const Provider kLocal{"local", EndpointType::rdm};
const Provider kProviders[] = {kTcp, kLocal};

std::string provider_name(const Provider& p) {
  return std::string(p.name) + "_" + std::string(to_string(p.endpoint));
}

TransportOptions transport_options(const Provider& p) {
  TransportOptions t;
  t.provider = p.name;
  t.endpoint = p.endpoint;
  t.ops = {Op::send, Op::write, Op::read};
  t.same_host = true;
  return t;
}

// channel_test.cc's small shapes: every boundary a few KiB away.
ChannelOptions small_options() {
  ChannelOptions o;
  o.eager_limit = 1024;
  o.bounce_size = 4096;
  o.frag_size = 16384;
  o.max_frag = 65536;
  o.frag_growth = 2.0;
  o.depth = 2;
  o.copy_ahead = 4096;
  o.rx_buffers = 8;
  o.peer_timeout = 2000ms;
  // No cost measurement at open: the forged messages are counted from the first one sent.
  o.measure_costs = false;
  return o;
}

void fill(std::span<std::byte> b, std::uint64_t n) {
  std::uint64_t x = n * 0x9e3779b97f4a7c15ull + b.size();
  for (std::size_t i = 0; i < b.size(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b[i] = static_cast<std::byte>(x);
  }
}
bool intact(std::span<const std::byte> b, std::uint64_t n) {
  std::vector<std::byte> want(b.size());
  fill(want, n);
  return b.empty() || std::memcmp(want.data(), b.data(), b.size()) == 0;
}

// A receive buffer with guard bytes on both sides: nothing may be written outside it.
class Guarded {
 public:
  static constexpr std::size_t kGuard = 4096;
  static constexpr std::byte kPattern{0xa5};
  explicit Guarded(std::size_t size) : bytes_(size + 2 * kGuard, kPattern), size_(size) {}
  std::span<std::byte> buf() { return {bytes_.data() + kGuard, size_}; }
  bool guards_intact() const {
    for (std::size_t i = 0; i < kGuard; ++i)
      if (bytes_[i] != kPattern || bytes_[kGuard + size_ + i] != kPattern) return false;
    return true;
  }

 private:
  std::vector<std::byte> bytes_;
  std::size_t size_;
};

std::string one_line(const std::string& s) {
  return s.find('\n') == std::string::npos ? "" : "more than one line: " + s;
}

// ---- 1. a receive buffer shorter than its message ----

struct ShortCase {
  Provider provider;
  Protocol protocol;
  std::size_t size;
  bool sender_fails;  // the protocols that wait for the receiver's answer learn it (NACK)
};

std::vector<ShortCase> short_cases() {
  std::vector<ShortCase> c;
  const std::size_t big = 3 * 16384 + 4096 + 1024 + 7;  // eager, copy-ahead and 3 fragments
  for (const Provider& p : kProviders) {
    c.push_back({p, Protocol::eager, 1000, false});
    c.push_back({p, Protocol::copy, 3000, false});  // one piece: the whole message came inline
    c.push_back({p, Protocol::copy, 3 * 4096 + 5, true});
    for (Protocol proto : {Protocol::rndv_write, Protocol::rndv_read, Protocol::leave_pinned,
                           Protocol::pipeline, Protocol::pipeline_read, Protocol::caching_pipeline})
      c.push_back({p, proto, big, true});
  }
  return c;
}

class BulkBadInputShortBuffer : public ::testing::TestWithParam<ShortCase> {};

// The receiver's wait throws naming both sizes; the sender's throws too where it waits for an
// answer; nothing lands outside the buffer; the next message on the same tag arrives intact.
TEST_P(BulkBadInputShortBuffer, BothSidesLearnAndTheChannelGoesOn) {
  const ShortCase c = GetParam();
  const std::size_t have = c.size - 1;
  Guarded rbuf(have), next(c.size);
  std::vector<std::byte> sbuf(c.size);
  fill(sbuf, 1);
  std::string sender_error, receiver_error;
  std::string err =
      run_ranks(2, transport_options(c.provider), [&](int rank, Transport& t, Bootstrap& boot) {
        auto ch = open_channel(t, boot, small_options());
        if (rank == 0) {
          try {
            ch->send(1, 5, sbuf, c.protocol);
          } catch (const Error& e) {
            sender_error = e.what();
          }
          ch->send(1, 5, sbuf, c.protocol);
        } else {
          try {
            ch->recv(0, 5, rbuf.buf());
          } catch (const Error& e) {
            receiver_error = e.what();
          }
          if (ch->recv(0, 5, next.buf()) != c.size) throw Error("the next message's size");
          if (!intact(next.buf(), 1)) throw Error("the next message is not intact");
        }
      });
  ASSERT_EQ(err, "");
  const std::string sizes[] = {std::to_string(c.size), std::to_string(have)};
  for (const std::string& s : sizes) EXPECT_NE(receiver_error.find(s), std::string::npos) << s;
  EXPECT_NE(receiver_error.find("rank 0"), std::string::npos) << receiver_error;
  EXPECT_EQ(one_line(receiver_error), "");
  if (c.sender_fails) {
    for (const std::string& s : sizes) EXPECT_NE(sender_error.find(s), std::string::npos) << s;
    EXPECT_NE(sender_error.find("rank 1"), std::string::npos) << sender_error;
  } else {
    EXPECT_EQ(sender_error, "");
  }
  EXPECT_TRUE(rbuf.guards_intact());
  EXPECT_TRUE(next.guards_intact());
}

std::string short_name(const ::testing::TestParamInfo<ShortCase>& i) {
  std::string n = provider_name(i.param.provider) + "_" + std::string(to_string(i.param.protocol)) +
                  "_" + std::to_string(i.param.size);
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(All, BulkBadInputShortBuffer, ::testing::ValuesIn(short_cases()),
                         short_name);

// ---- 2. ranks that disagree on the channel's shape ----

struct Disagreement {
  const char* name;
  std::function<void(ChannelOptions&)> change;  // applied on rank 1 only
  std::string mine, theirs;                     // the values as the message must name them
};

TEST(BulkBadInput, RanksThatDisagreeOnParametersFailAtOpen) {
  const Disagreement cases[] = {
      {"eager", [](ChannelOptions& o) { o.eager_limit = 2048; }, "1024", "2048"},
      {"fragment", [](ChannelOptions& o) { o.frag_size = 32768; }, "16384", "32768"},
      {"depth", [](ChannelOptions& o) { o.depth = 3; }, "2", "3"},
      {"bounce", [](ChannelOptions& o) { o.bounce_size = 8192; }, "4096", "8192"},
      {"growth", [](ChannelOptions& o) { o.frag_growth = 1.5; }, "2", "1.5"},
      {"largest fragment", [](ChannelOptions& o) { o.max_frag = 131072; }, "65536", "131072"},
      {"copy-ahead", [](ChannelOptions& o) { o.copy_ahead = 8192; }, "4096", "8192"},
      {"receive buffers", [](ChannelOptions& o) { o.rx_buffers = 16; }, "8", "16"},
  };
  for (const Disagreement& d : cases) {
    std::string what[2];
    int blamed[2] = {-2, -2};
    std::string err =
        run_ranks(2, transport_options(kLocal), [&](int rank, Transport& t, Bootstrap& boot) {
          ChannelOptions o = small_options();
          if (rank == 1) d.change(o);
          try {
            auto ch = open_channel(t, boot, o);
          } catch (const PeerError& e) {
            what[rank] = e.what();
            blamed[rank] = e.rank();
          }
        });
    ASSERT_EQ(err, "") << d.name;
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE(std::string(d.name) + ", rank " + std::to_string(r));
      EXPECT_EQ(blamed[r], 1 - r) << what[r];
      EXPECT_NE(what[r].find(d.name), std::string::npos) << what[r];
      EXPECT_NE(what[r].find(d.mine), std::string::npos) << what[r];
      EXPECT_NE(what[r].find(d.theirs), std::string::npos) << what[r];
      EXPECT_EQ(one_line(what[r]), "");
    }
  }
}

// ---- 3. user errors ----

template <typename F>
std::string usage_error(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a UsageError: ") + e.what();
  }
  return "no error";
}

TEST(BulkBadInput, ResolveRefusesBadOptionsInOneLine) {
  Capabilities caps;
  caps.provider = "test";
  caps.max_msg_size = std::size_t{1} << 30;
  const ChannelOptions good = small_options();
  EXPECT_NO_THROW(resolve(good, caps));
  struct Bad {
    const char* expect;
    std::function<void(ChannelOptions&)> change;
  };
  const Bad bad[] = {
      {"eager limit (8192) is above the bounce size (4096)",
       [](ChannelOptions& o) { o.eager_limit = 8192; }},
      {"fragment size 20000", [](ChannelOptions& o) { o.frag_size = 20000; }},
      {"fragment size 2048", [](ChannelOptions& o) { o.frag_size = 2048; }},
      {"largest fragment (70000)", [](ChannelOptions& o) { o.max_frag = 70000; }},
      {"growth", [](ChannelOptions& o) { o.frag_growth = 0.5; }},
      {"growth", [](ChannelOptions& o) { o.frag_growth = std::nan(""); }},
      {"depth 65", [](ChannelOptions& o) { o.depth = 65; }},
      {"receive buffers 1", [](ChannelOptions& o) { o.rx_buffers = 1; }},
      {"receive buffers 1025", [](ChannelOptions& o) { o.rx_buffers = 1025; }},
      {"bounce size 512", [](ChannelOptions& o) { o.bounce_size = 512, o.eager_limit = 256; }},
  };
  for (const Bad& b : bad) {
    ChannelOptions o = good;
    b.change(o);
    const std::string e = usage_error([&] { resolve(o, caps); });
    EXPECT_NE(e.find(b.expect), std::string::npos) << e;
    EXPECT_EQ(one_line(e), "");
  }
  // Depth 64 and 1024 receive buffers are the limits, not beyond them.
  ChannelOptions edge = good;
  edge.depth = 64;
  edge.rx_buffers = 1024;
  EXPECT_NO_THROW(resolve(edge, caps));
}

TEST(BulkBadInput, SendsAndReceivesToNoPeerAndEagerAboveTheLimit) {
  std::vector<std::string> errors[2];
  std::string err =
      run_ranks(2, transport_options(kLocal), [&](int rank, Transport& t, Bootstrap& boot) {
        auto ch = open_channel(t, boot, small_options());
        std::vector<std::byte> b(2048);
        auto& e = errors[rank];
        for (int peer : {rank, -1, 2, 1000}) {
          e.push_back(usage_error([&] { ch->isend(peer, 1, b); }));
          e.push_back(usage_error([&] { ch->irecv(peer, 1, b); }));
        }
        e.push_back(usage_error([&] { ch->isend(1 - rank, 1, b, Protocol::eager); }));
        e.push_back(usage_error([&] { ch->test(nullptr); }));
        // None of it broke the channel.
        fill(b, 9);
        auto s = ch->isend(1 - rank, 1, b);
        std::vector<std::byte> in(2048);
        ch->recv(1 - rank, 1, in);
        ch->wait(s);
        if (!intact(in, 9)) throw Error("the message after the user errors is not intact");
      });
  ASSERT_EQ(err, "");
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(errors[r].size(), 10u);
    for (std::size_t i = 0; i < 8; ++i) {
      EXPECT_NE(errors[r][i].find("not a peer (ranks 0-1, this is " + std::to_string(r) + ")"),
                std::string::npos)
          << errors[r][i];
      EXPECT_EQ(one_line(errors[r][i]), "");
    }
    EXPECT_NE(errors[r][8].find("eager limit (1024 bytes), not 2048"), std::string::npos)
        << errors[r][8];
    EXPECT_NE(errors[r][9].find("null request"), std::string::npos) << errors[r][9];
  }
}

// ---- 4. forged control messages ----

// A transport that forwards everything to another and lets a test rewrite each control message
// it receives before the channel sees it: the evil peer, without a second implementation of the
// protocol. Receive buffers are learned from post_recv by context.
class Tap final : public ForwardingTransport {
 public:
  // Called with every received message that carries a bulk header: may change the header and
  // the bytes after it (inline bytes, key); returns true when it forged something.
  using Forge = std::function<bool(wire::Header&, std::vector<std::byte>&)>;

  Tap(Transport& inner, Forge forge) : ForwardingTransport(inner), forge_(std::move(forge)) {}
  int forged() const { return forged_; }

  std::string_view name() const noexcept override { return "tap"; }
  Status post_recv(int peer, void* buf, std::size_t len, void* desc,
                   std::uint64_t context) noexcept override {
    Status s = inner_->post_recv(peer, buf, len, desc, context);
    if (s == Status::ok) recvs_[context] = {static_cast<std::byte*>(buf), len};
    return s;
  }
  int poll_rx(std::span<Completion> out) noexcept override {
    const int n = inner_->poll_rx(out);
    for (int i = 0; i < n; ++i) rewrite(out[static_cast<std::size_t>(i)]);
    return n;
  }

 private:
  void rewrite(Completion& c) noexcept {
    auto it = recvs_.find(c.context);
    if (c.kind != CompletionKind::recv || it == recvs_.end() || c.length < wire::kHeader) return;
    auto [buf, cap] = it->second;
    wire::Header h;
    std::memcpy(&h, buf, wire::kHeader);
    if (h.magic != wire::kMagic) return;
    std::vector<std::byte> body(buf + wire::kHeader, buf + c.length);
    if (!forge_(h, body)) return;
    ++forged_;
    const std::size_t len = std::min(cap, wire::kHeader + body.size());
    std::memcpy(buf, &h, wire::kHeader);
    if (len > wire::kHeader) std::memcpy(buf + wire::kHeader, body.data(), len - wire::kHeader);
    c.length = static_cast<std::uint32_t>(len);
  }

  Forge forge_;
  std::map<std::uint64_t, std::pair<std::byte*, std::size_t>> recvs_;
  int forged_ = 0;
};

// Forges the n-th (from 0) message of `type` with `f`.
Tap::Forge nth(wire::Type type, int n,
               std::function<void(wire::Header&, std::vector<std::byte>&)> f) {
  auto seen = std::make_shared<int>(0);
  return [=](wire::Header& h, std::vector<std::byte>& body) {
    if (h.type != type || (*seen)++ != n) return false;
    f(h, body);
    return true;
  };
}

struct Forgery {
  const char* name;
  Protocol protocol;
  std::size_t size;
  int victim;  // the rank whose tap forges what it receives: 0 sends, 1 receives
  Tap::Forge (*make)();
  const char* expect;
  bool needs_keys = false;  // only where rendezvous goes by keys (not cross-memory attach)
  int messages = 1;
  // Both buffers in Memories of the channel, on local only, split_copy_min 16 KiB: a read
  // rendezvous is a split copy.
  bool memory = false;
};

const std::size_t kPipe = 1024 + 4096 + 16384 + 32768 + 65536 + 65536 + 100;  // 5 fragments
const std::size_t kCopy = 4 * 4096 + 10;     // inline piece, then 4 data fragments
const std::size_t kSplit = 16 * 4096 + 100;  // above the split copies' 16 KiB: halves of 8 pages

const Forgery kForgeries[] = {
    {"DataBeyondTheMessage", Protocol::copy, kCopy, 1,
     [] { return nth(wire::Type::data, 0, [](auto& h, auto&) { h.offset = h.size; }); },
     "data fragment at offset"},
    {"DataOffByOne", Protocol::copy, kCopy, 1,
     [] { return nth(wire::Type::data, 0, [](auto& h, auto&) { h.offset += 1; }); },
     "data fragment at offset"},
    {"DataInTheInlinePart", Protocol::copy, kCopy, 1,
     [] { return nth(wire::Type::data, 0, [](auto& h, auto&) { h.offset = 0; }); },
     "data fragment at offset 0"},
    {"DuplicateData", Protocol::copy, kCopy, 1,
     [] { return nth(wire::Type::data, 1, [](auto& h, auto&) { h.offset = 4096; }); },
     "data fragment at offset 4096"},
    {"DataLongerThanItsPiece", Protocol::copy, kCopy, 1,
     [] {
       // The last piece is 10 bytes: 4086 more would pass the end of the message.
       return Tap::Forge([](wire::Header& h, std::vector<std::byte>& body) {
         if (h.type != wire::Type::data || h.length == 4096) return false;
         body.resize(4096);
         h.length = body.size();
         return true;
       });
     },
     "data fragment at offset 16384 of 4096 bytes"},
    {"InlineLengthsDoNotAddUp", Protocol::eager, 500, 1,
     [] { return nth(wire::Type::rts, 0, [](auto& h, auto&) { h.length += 1; }); },
     "lengths do not add up"},
    {"EagerLargerThanItsBytes", Protocol::eager, 500, 1,
     [] { return nth(wire::Type::rts, 0, [](auto& h, auto&) { h.size = 1000; }); },
     "malformed match header"},
    {"EagerAboveTheLimit", Protocol::eager, 1000, 1,
     [] {
       return nth(wire::Type::rts, 0, [](auto& h, auto& body) {
         body.resize(2000);
         h.length = h.size = 2000;
       });
     },
     "malformed match header"},
    {"UnknownProtocol", Protocol::eager, 100, 1,
     [] { return nth(wire::Type::rts, 0, [](auto& h, auto&) { h.protocol = Protocol{42}; }); },
     "malformed match header"},
    {"RepeatedSequenceNumber", Protocol::eager, 100, 1,
     [] { return nth(wire::Type::rts, 1, [](auto& h, auto&) { h.seq = 0; }); },
     "repeated message number 0", false, 2},
    {"ClaimsToBeTheReceiver", Protocol::eager, 100, 1,
     [] { return nth(wire::Type::rts, 0, [](auto& h, auto&) { h.src = 1; }); }, "malformed"},
    {"AckForAnotherRequest", Protocol::rndv_write, kPipe, 0,
     [] { return nth(wire::Type::ack, 0, [](auto& h, auto&) { h.sreq += 1000; }); },
     "request it has no part in"},
    {"AckOfAnotherProtocol", Protocol::pipeline, kPipe, 0,
     [] {
       return nth(wire::Type::ack, 0, [](auto& h, auto&) { h.protocol = Protocol::rndv_read; });
     },
     "another protocol"},
    {"AckRegionTooShort", Protocol::rndv_write, kPipe, 0,
     [] { return nth(wire::Type::ack, 0, [](auto& h, auto&) { h.base += 1; }); },
     "region shorter than the message", true},
    {"AckRegionFarAway", Protocol::leave_pinned, kPipe, 0,
     [] { return nth(wire::Type::ack, 0, [](auto& h, auto&) { h.base = ~0ull - 10; }); },
     "region shorter than the message", true},
    {"AckKeyTruncated", Protocol::rndv_write, kPipe, 0,
     [] {
       return nth(wire::Type::ack, 0, [](auto& h, auto& body) {
         body.resize(body.size() / 2);
         h.key_len = static_cast<std::uint16_t>(body.size());
       });
     },
     "rank 1", true},
    {"AckKeyGarbage", Protocol::rndv_write, kPipe, 0,
     [] {
       return nth(wire::Type::ack, 0, [](auto&, auto& body) {
         for (std::byte& b : body) b = std::byte{0xff};
       });
     },
     "rank 1", true},
    {"PipelineAckAtAnotherOffset", Protocol::pipeline, kPipe, 0,
     [] { return nth(wire::Type::ack, 0, [](auto& h, auto&) { h.offset += 4096; }); },
     "asked for the fragments from", true},
    {"UntouchedAckPasses", Protocol::copy, kCopy, 0,  // the control: the tap itself is harmless
     [] { return nth(wire::Type::ack, 0, [](auto&, auto&) {}); }, ""},
    {"ReadyRegionTooShort", Protocol::pipeline, kPipe, 0,
     [] { return nth(wire::Type::ready, 1, [](auto& h, auto&) { h.base += 1; }); },
     "region too short", true},
    {"ReadyFragmentOutOfRange", Protocol::pipeline, kPipe, 0,
     [] { return nth(wire::Type::ready, 0, [](auto& h, auto&) { h.seq = 5; }); },
     "READY for fragment 5", true},
    {"ReadyFragmentHuge", Protocol::caching_pipeline, kPipe, 0,
     [] { return nth(wire::Type::ready, 0, [](auto& h, auto&) { h.seq = ~0ull; }); },
     "READY for fragment", true},
    {"DuplicateReady", Protocol::pipeline, kPipe, 0,
     [] { return nth(wire::Type::ready, 1, [](auto& h, auto&) { h.seq = 0; }); },
     "READY for fragment 0", true},
    {"ReadReadyRegionTooShort", Protocol::pipeline_read, kPipe, 1,
     [] { return nth(wire::Type::ready, 0, [](auto& h, auto&) { h.base += 1; }); },
     "region too short", true},
    {"ReadRtsRegionTooShort", Protocol::rndv_read, kPipe, 1,
     [] { return nth(wire::Type::rts, 0, [](auto& h, auto&) { h.base += 1; }); },
     "region shorter than its message", true},
    {"FinForAFragmentNeverAdvertised", Protocol::pipeline, kPipe, 1,
     [] { return nth(wire::Type::fin, 0, [](auto& h, auto&) { h.seq = 4; }); },
     "FIN for fragment 4", true},
    {"FinOutOfRange", Protocol::pipeline, kPipe, 1,
     [] { return nth(wire::Type::fin, 0, [](auto& h, auto&) { h.seq = 1000; }); },
     "FIN for fragment 1000", true},
    {"SecondFin", Protocol::pipeline, kPipe, 1,
     [] { return nth(wire::Type::fin, 1, [](auto& h, auto&) { h.seq = 0; }); },
     "FIN for fragment 0", true},
    {"ReadFinForAFragmentNeverAdvertised", Protocol::pipeline_read, kPipe, 0,
     [] { return nth(wire::Type::fin, 0, [](auto& h, auto&) { h.seq = 3; }); },
     "FIN for fragment 3", true},
    // Split copies (local, Memories): the receiver's ACK gives the sender its share.
    {"UntouchedSplitAckPasses", Protocol::rndv_read, kSplit, 0,
     [] { return nth(wire::Type::ack, 0, [](auto&, auto&) {}); }, "", false, 1, true},
    {"SplitShareNotPageAligned", Protocol::rndv_read, kSplit, 0,
     [] { return nth(wire::Type::ack, 0, [](auto& h, auto&) { h.offset += 1; }); },
     "asked this rank to copy", false, 1, true},
    {"SplitShareTheWholeMessage", Protocol::pipeline_read, kSplit, 0,
     [] { return nth(wire::Type::ack, 0, [](auto& h, auto&) { h.offset = h.size; }); },
     "asked this rank to copy", false, 1, true},
    {"SplitShareOutsideTheRegion", Protocol::rndv_read, kSplit, 0,
     [] { return nth(wire::Type::ack, 0, [](auto& h, auto&) { h.base = ~0ull - 10; }); },
     "shorter than this rank's share", false, 1, true},
    {"SplitFinFlaggedAsTheReceivers", Protocol::rndv_write, kSplit, 1,
     [] {
       return nth(wire::Type::fin, 0, [](auto& h, auto&) { h.flags = wire::kFinFromReceiver; });
     },
     "no part in", false, 1, true},
    {"SplitFinWithoutItsFlag", Protocol::pipeline, kSplit, 1,
     [] { return nth(wire::Type::fin, 0, [](auto& h, auto&) { h.flags = 0; }); },
     "a FIN for a copy it was not given", false, 1, true},
    {"FlaggedFinOfACopyNotSplit", Protocol::rndv_write, kPipe, 1,
     [] { return nth(wire::Type::fin, 0, [](auto& h, auto&) { h.flags = wire::kFinFromSender; }); },
     "a FIN for a copy it was not given"},
    {"SplitAskedOfASenderThatOfferedNothing", Protocol::rndv_write, kPipe, 0,
     [] { return nth(wire::Type::ack, 0, [](auto& h, auto&) { h.offset = 4096; }); },
     "asked this rank to copy", true},
    {"FlagsOnAnAck", Protocol::rndv_write, kSplit, 0,
     [] { return nth(wire::Type::ack, 0, [](auto& h, auto&) { h.flags = 1; }); }, "malformed",
     false, 1, true},
};

struct ForgeryCase {
  Provider provider;
  const Forgery* forgery;
};

std::vector<ForgeryCase> forgery_cases() {
  std::vector<ForgeryCase> c;
  for (const Provider& p : kProviders)
    for (const Forgery& f : kForgeries)
      if (!(f.needs_keys && std::string(p.name) == "local") &&
          !(f.memory && std::string(p.name) != "local"))
        c.push_back({p, &f});
  return c;
}

class BulkBadInputForged : public ::testing::TestWithParam<ForgeryCase> {};

// Rank 0 sends to rank 1; the victim's tap forges one message it receives. The victim's wait
// throws an error naming the other rank, nothing lands outside either buffer, and the honest
// rank gives up without a hang (it stops once the victim has its error).
TEST_P(BulkBadInputForged, EndsInAnErrorNamingThePeer) {
  const Forgery& f = *GetParam().forgery;
  const int victim = f.victim, honest = 1 - f.victim;
  std::vector<std::byte> sbuf(f.size);
  fill(sbuf, 3);
  std::vector<Guarded> rbufs;
  for (int i = 0; i < f.messages; ++i) rbufs.emplace_back(f.size);
  std::atomic<bool> victim_done{false};
  std::string victim_error;
  int blamed = -2, forged = 0;
  bool memory_guards = true, memory_intact = true;
  std::string err = run_ranks(
      2, transport_options(GetParam().provider), [&](int rank, Transport& t, Bootstrap& boot) {
        Tap tap(t, rank == victim ? f.make() : Tap::Forge([](auto&, auto&) { return false; }));
        ChannelOptions o = small_options();
        o.split_copy_min = 16384;
        auto ch = open_channel(tap, boot, o);
        // With `memory`, the message and its receive buffer lie in Memories, between guards.
        std::shared_ptr<Memory> mem;
        std::span<std::byte> in_memory;
        if (f.memory) {
          mem = ch->allocate(f.size + 2 * Guarded::kGuard);
          std::memset(mem->data(), static_cast<int>(Guarded::kPattern), mem->size());
          in_memory = {mem->data() + Guarded::kGuard, f.size};
          if (rank == 0) std::memcpy(in_memory.data(), sbuf.data(), f.size);
        }
        std::vector<RequestPtr> reqs;
        for (int i = 0; i < f.messages; ++i)
          reqs.push_back(
              rank == 0
                  ? ch->isend(1, 7, f.memory ? in_memory : std::span<std::byte>(sbuf), f.protocol)
                  : ch->irecv(0, 7,
                              f.memory ? in_memory : rbufs[static_cast<std::size_t>(i)].buf()));
        if (rank == victim) {
          try {
            for (auto& r : reqs) ch->wait(r);
          } catch (const PeerError& e) {
            victim_error = e.what();
            blamed = e.rank();
          } catch (const Error& e) {
            victim_error = std::string("not a PeerError: ") + e.what();
          }
          forged = tap.forged();
          // A failed channel stays failed.
          if (!victim_error.empty()) {
            std::byte b[1];
            try {
              ch->isend(honest, 1, b);
              victim_error += " (and the channel still sends)";
            } catch (const Error&) {
            }
          }
          victim_done = true;
        } else {
          try {
            for (auto& r : reqs)
              if (*f.expect == '\0')
                ch->wait(r);  // the control case: everything arrives
              else
                while (!ch->test(r) && !victim_done) {
                }
          } catch (const Error&) {
          }
          while (!victim_done) std::this_thread::sleep_for(1ms);
        }
        // Both stop driving their channel before either closes it.
        boot.barrier([&] { t.progress(); });
        if (f.memory && rank == 1) {
          for (std::size_t i = 0; i < Guarded::kGuard; ++i)
            if (mem->data()[i] != Guarded::kPattern ||
                mem->data()[Guarded::kGuard + f.size + i] != Guarded::kPattern)
              memory_guards = false;
          memory_intact = intact(in_memory, 3);
        }
      });
  ASSERT_EQ(err, "");
  EXPECT_GE(forged, 1);
  for (auto& b : rbufs) EXPECT_TRUE(b.guards_intact());
  EXPECT_TRUE(memory_guards);
  if (std::string(f.expect).empty()) {  // a control case: nothing really forged
    EXPECT_EQ(victim_error, "");
    if (f.memory)
      EXPECT_TRUE(memory_intact);
    else
      for (auto& b : rbufs) EXPECT_TRUE(intact(b.buf(), 3));
    return;
  }
  EXPECT_NE(victim_error.find(f.expect), std::string::npos) << victim_error;
  EXPECT_NE(victim_error.find("rank " + std::to_string(honest)), std::string::npos) << victim_error;
  EXPECT_EQ(blamed, honest) << victim_error;
  EXPECT_EQ(one_line(victim_error), "");
}

INSTANTIATE_TEST_SUITE_P(All, BulkBadInputForged, ::testing::ValuesIn(forgery_cases()),
                         [](const ::testing::TestParamInfo<ForgeryCase>& i) {
                           return provider_name(i.param.provider) + "_" + i.param.forgery->name;
                         });

// ---- 5. a transport that answers again, delays and reorders ----

struct FaultCase {
  const char* name;
  Provider provider;
  FaultPlan plan;
};

FaultPlan plan_of(unsigned delay, unsigned reorder, double again) {
  FaultPlan p;
  p.seed = 7;
  p.delay_completions = delay;
  p.reorder_window = reorder;
  p.again_probability = again;
  return p;
}

std::vector<FaultCase> fault_cases() {
  std::vector<FaultCase> c;
  for (const Provider& p : kProviders) {
    c.push_back({"delay", p, plan_of(3, 0, 0)});
    c.push_back({"reorder", p, plan_of(0, 4, 0)});
    c.push_back({"again", p, plan_of(0, 0, 0.2)});
    c.push_back({"all", p, plan_of(2, 4, 0.2)});
  }
  c.push_back({"all", {"tcp", EndpointType::rdm}, plan_of(2, 4, 0.2)});
  return c;
}

class BulkFaults : public ::testing::TestWithParam<FaultCase> {};

// Every protocol, both directions, several messages of each in flight at once and sizes across
// its boundaries: all arrive intact, and the plan did inject what it says.
TEST_P(BulkFaults, EveryProtocolDeliversIntactMessages) {
  const FaultCase c = GetParam();
  FaultCounters counters[2];
  std::string err = run_ranks(
      2, transport_options(c.provider),
      [&](int rank, Transport& t, Bootstrap& boot) {
        auto ch = open_channel(t, boot, small_options());
        const int peer = 1 - rank;
        const std::size_t sizes[] = {0, 1000, 4097, 1024 + 4096 + 16384 + 1, kPipe + 12345};
        std::vector<std::vector<std::byte>> out, in;
        std::vector<RequestPtr> sends, recvs;
        std::vector<std::uint64_t> ids;
        std::uint32_t tag = 0;
        for (Protocol p : kAllProtocols)
          for (std::size_t size : sizes) {
            if (p == Protocol::eager && size > 1024) continue;
            ++tag;
            out.emplace_back(size);
            in.emplace_back(size + 1);
            fill(out.back(), tag * 2 + static_cast<std::uint64_t>(rank));
            ids.push_back(tag * 2 + static_cast<std::uint64_t>(peer));
            sends.push_back(ch->isend(peer, tag, out.back(), p));
            recvs.push_back(ch->irecv(peer, tag, in.back()));
          }
        for (auto& s : sends) ch->wait(s);
        for (std::size_t i = 0; i < recvs.size(); ++i) {
          const std::size_t n = ch->wait(recvs[i]);
          if (n != out[i].size() || !intact(std::span(in[i]).first(n), ids[i]))
            throw Error("message " + std::to_string(i) + " (" + std::to_string(n) +
                        " bytes) is not intact");
        }
        const Stats& st = ch->stats();
        if (st.cache_hits + st.cache_misses == 0 && st.registrations != st.deregistrations)
          throw Error("registrations " + std::to_string(st.registrations) + ", deregistrations " +
                      std::to_string(st.deregistrations));
        if (const FaultCounters* fc = fault_counters(t)) counters[rank] = *fc;
      },
      [&](std::unique_ptr<Transport> t) { return make_fault_transport(std::move(t), c.plan); });
  ASSERT_EQ(err, "");
  for (const FaultCounters& k : counters) {
    EXPECT_GT(k.posts, 50u);
    if (c.plan.delay_completions) {
      EXPECT_GT(k.delayed, 0u);
    }
    if (c.plan.reorder_window) {
      EXPECT_GT(k.reordered, 0u);
    }
    if (c.plan.again_probability > 0) {
      EXPECT_GT(k.agains, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, BulkFaults, ::testing::ValuesIn(fault_cases()),
                         [](const ::testing::TestParamInfo<FaultCase>& i) {
                           return provider_name(i.param.provider) + "_" + i.param.name;
                         });

// ---- 6. a peer process that dies in the middle of a transfer ----

struct DeathCase {
  Provider provider;
  bool cma;  // local: rendezvous by cross-memory attach (off: the copy it falls back to)
};

class BulkFaultsPeerDeath : public ::testing::TestWithParam<DeathCase> {};

// Rank 1 sends 64 MiB by the pipeline to rank 0 and exits abruptly after its 40th post, in the
// middle of the transfer. Rank 0's wait throws within the peer timeout (2 s; asserted under
// 5 s), and every registration it made is released.
TEST_P(BulkFaultsPeerDeath, ReceiverSeesTheSenderDieMidTransfer) {
  const DeathCase c = GetParam();
  constexpr std::size_t kSize = std::size_t{64} << 20;
  auto children = test::spawn_ranks(
      2, test::loopback(), [&](int rank, const test::ChildIo& io, const BootstrapConfig& config) {
        auto boot = make_tcp_bootstrap(config);
        auto t = open_transport(transport_options(c.provider));
        if (rank == 1) {
          FaultPlan plan;
          plan.kill_after_posts = 40;
          plan.on_kill = [] { std::_Exit(42); };
          t = make_fault_transport(std::move(t), plan);
        }
        t->connect(*boot);
        ChannelOptions o;
        o.peer_timeout = 2000ms;
        o.measure_costs = false;  // kill_after_posts counts the transfer's posts only
        o.cross_memory_attach = c.cma;
        o.frag_size = 256 << 10;  // many fragments, so the death lands among them
        // The buffer is ready before the channel opens (a collective): filling 64 MiB under a
        // sanitizer on a loaded machine took longer than the receiver's peer timeout.
        std::vector<std::byte> buf(kSize);
        if (rank == 1) fill(buf, 1);
        auto ch = open_channel(*t, *boot, o);
        if (rank == 1) {
          ch->send(0, 1, buf, Protocol::pipeline);
          io.say("the send completed");
          return 1;
        }
        const auto start = std::chrono::steady_clock::now();
        std::string what = "no error";
        try {
          ch->recv(1, 1, buf);
        } catch (const Error& e) {
          what = e.what();
        }
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
        const Stats& st = ch->stats();
        io.say("error after " + std::to_string(ms) + " ms: " + what);
        io.say("registrations " + std::to_string(st.registrations) + " deregistrations " +
               std::to_string(st.deregistrations));
        ch.reset();
        t.reset();
        io.say("closed");
        return 0;
      });
  EXPECT_EQ(children[1].finish(20s), 42) << children[1].output();
  ASSERT_EQ(children[0].finish(20s), 0) << children[0].output();
  const std::string out = children[0].output();
  const auto at = out.find("error after ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_LT(std::stol(out.substr(at + 12)), 5000) << out;
  EXPECT_EQ(out.find("no error"), std::string::npos) << out;
  const auto regs = out.find("registrations ");
  ASSERT_NE(regs, std::string::npos) << out;
  std::uint64_t r = 0, d = 0;
  ASSERT_EQ(std::sscanf(out.c_str() + regs, "registrations %lu deregistrations %lu", &r, &d), 2);
  EXPECT_EQ(r, d) << out;
  if (!c.cma && std::string(c.provider.name) == "tcp") {
    EXPECT_GT(r, 0u) << out;
  }
  EXPECT_NE(out.find("closed\n"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(All, BulkFaultsPeerDeath,
                         ::testing::Values(DeathCase{kTcp, false},
                                           DeathCase{{"tcp", EndpointType::rdm}, false},
                                           DeathCase{kLocal, false}),
                         [](const ::testing::TestParamInfo<DeathCase>& i) {
                           return provider_name(i.param.provider) + (i.param.cma ? "_cma" : "");
                         });

}  // namespace
}  // namespace fabflow::bulk
