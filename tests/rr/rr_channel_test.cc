// The channel API with ranks as threads: ids match responses to requests with several
// outstanding, peers that disagree at setup are refused, malformed or oversized messages from
// a hand-made peer fail the channel with an error, and a vanished responder is reported within
// the peer timeout.
#include <gtest/gtest.h>

#include <fabflow/bootstrap.h>
#include <fabflow/rr.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "rr/frame.h"
#include "support/ranks.h"

namespace fabflow::rr {
namespace {

using namespace std::chrono_literals;

TransportOptions topts(const char* provider, const ChannelOptions& o) {
  TransportOptions t;
  t.provider = provider;
  t.ops = required_ops(o);
  return t;
}

// Runs body(rank, transport, boot) on n threads, each with its own connected transport.
std::string run_ranks(int n, const TransportOptions& to,
                      const std::function<void(int, Transport&, Bootstrap&)>& body) {
  return fabflow::testing::run_ranks(n, to, body);
}

// A responder handler that answers with the request's first 8 bytes and its own index.
Handler tagger(int me) {
  return [me](int, std::span<const std::byte> req, std::span<std::byte> resp) {
    std::memcpy(resp.data(), req.data(), 8);
    std::memcpy(resp.data() + 8, &me, 4);
    return std::size_t{12};
  };
}

// Serves until every requester closed or the channel failed; returns the error ("" if none).
// *served: the requests serve() said it answered.
std::string serve_all(Responder& r, const Handler& h, std::chrono::milliseconds bound = 5s,
                      std::uint64_t* served = nullptr) {
  auto end = std::chrono::steady_clock::now() + bound;
  while (!r.done()) {
    unsigned n = 0;
    if (r.serve(&h, &n) == Status::failed) return r.error();
    if (served) *served += n;
    if (std::chrono::steady_clock::now() > end) return "timed out";
    if (n == 0) std::this_thread::yield();
  }
  return "";
}

class RrIds : public ::testing::TestWithParam<Pattern> {};

// Four outstanding requests to two responders; each response is matched by its slot id.
TEST_P(RrIds, ResponsesMatchTheirRequestsWithSeveralOutstanding) {
  ChannelOptions o;
  o.pattern = GetParam();
  o.request_bytes = 16;
  o.response_bytes = 32;
  std::string err = run_ranks(3, topts("shm", o), [&](int rank, Transport& t, Bootstrap& boot) {
    if (rank != 0) {
      auto r = make_responder(t, boot, o, 1);
      boot.barrier([&] { t.progress(); });
      std::uint64_t served = 0;
      std::string e = serve_all(*r, tagger(rank - 1), 5s, &served);
      if (!e.empty()) throw Error(e);
      // Half of the 50 x 4 requests each; the requester's close is not a request.
      if (served != 100) throw Error("responder counted " + std::to_string(served) + " served");
      return;
    }
    auto q = make_requester(t, boot, o, 1, 4);
    boot.barrier([&] { t.progress(); });
    for (int round = 0; round < 50; ++round) {
      for (unsigned s = 0; s < 4; ++s) {
        std::uint64_t tag = round * 100 + s;
        std::memcpy(q->request_buffer(s).data(), &tag, 8);
        ASSERT_EQ(q->submit(s, static_cast<int>(s % 2), 16), Status::ok) << q->error();
      }
      EXPECT_EQ(q->submit(0, 0, 16), Status::full);  // slot 0 waits for its response
      int got = 0;
      auto end = std::chrono::steady_clock::now() + 5s;
      while (got < 4 && std::chrono::steady_clock::now() < end) {
        Response resp;
        Status st = q->poll(&resp);
        ASSERT_NE(st, Status::failed) << q->error();
        if (st != Status::ok) continue;
        std::uint64_t tag;
        int from;
        ASSERT_EQ(resp.data.size(), 12u);
        std::memcpy(&tag, resp.data.data(), 8);
        std::memcpy(&from, resp.data.data() + 8, 4);
        EXPECT_EQ(tag, static_cast<std::uint64_t>(round * 100 + resp.slot));
        EXPECT_EQ(from, static_cast<int>(resp.slot % 2));
        EXPECT_EQ(resp.responder, from);
        q->release(resp);
        ++got;
      }
      ASSERT_EQ(got, 4);
    }
    ASSERT_EQ(q->close(), Status::ok) << q->error();
  });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Patterns, RrIds, ::testing::ValuesIn(kAllPatterns),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(RrSetup, PeersThatDisagreeOnSizesAreRefused) {
  ChannelOptions o;
  o.pattern = Pattern::send_send;
  std::string err = run_ranks(2, topts("shm", o), [&](int rank, Transport& t, Bootstrap& boot) {
    ChannelOptions mine = o;
    if (rank == 1) {
      mine.request_bytes = 128;
      make_responder(t, boot, mine, 1);
    } else {
      make_requester(t, boot, mine, 1, 1);
    }
  });
  EXPECT_NE(err.find("disagrees on the channel options"), std::string::npos) << err;
}

// One responder (rank 1, answering with tagger) and one requester with `slots` slots (rank 0,
// running `requester`, which closes) on `provider`. Returns the run's error; *responder: the
// responder's counters once it is done.
std::string one_to_one(const char* provider, const ChannelOptions& o, unsigned slots,
                       ChannelStats* responder, const std::function<void(Requester&)>& requester) {
  return run_ranks(2, topts(provider, o), [&](int rank, Transport& t, Bootstrap& boot) {
    if (rank == 1) {
      auto r = make_responder(t, boot, o, 1);
      boot.barrier([&] { t.progress(); });
      std::string e = serve_all(*r, tagger(0));
      if (!e.empty()) throw Error(e);
      *responder = r->stats();
      return;
    }
    auto q = make_requester(t, boot, o, 1, slots);
    boot.barrier([&] { t.progress(); });
    requester(*q);
  });
}

// On local, WRITE frames are stores into the peer's mapped region (no post each); on shm they
// are posted writes. Both carry every request and response intact.
TEST(RrDirect, WriteFramesAreStoresOnLocalAndPostedWritesElsewhere) {
  ChannelOptions o;
  o.pattern = Pattern::write_write;
  o.request_bytes = 64;
  o.response_bytes = 64;
  constexpr int kRequests = 40;
  for (const char* provider : {"local", "shm"}) {
    SCOPED_TRACE(provider);
    const bool local = std::string(provider) == "local";
    ChannelStats responder;
    std::string err = one_to_one(provider, o, 1, &responder, [&](Requester& q) {
      for (std::uint64_t i = 0; i < kRequests; ++i) {
        std::memcpy(q.request_buffer(0).data(), &i, 8);
        ASSERT_EQ(q.submit(0, 0, 64), Status::ok) << q.error();
        Response resp;
        Status st;
        auto end = std::chrono::steady_clock::now() + 5s;
        while ((st = q.poll(&resp)) == Status::empty && std::chrono::steady_clock::now() < end) {
        }
        ASSERT_EQ(st, Status::ok) << q.error();
        std::uint64_t tag;
        ASSERT_EQ(resp.data.size(), 12u);
        std::memcpy(&tag, resp.data.data(), 8);
        EXPECT_EQ(tag, i);
        q.release(resp);
      }
      ASSERT_EQ(q.close(), Status::ok) << q.error();
      // The requests and the close's bye frame.
      EXPECT_EQ(q.stats().direct_frames, local ? kRequests + 1u : 0u);
      if (local)
        EXPECT_EQ(q.stats().posts, 0u);
      else
        EXPECT_GE(q.stats().posts, kRequests + 1u);
    });
    EXPECT_EQ(err, "");
    EXPECT_EQ(responder.direct_frames, local ? std::uint64_t{kRequests} : 0u);
    if (local)
      EXPECT_EQ(responder.posts, 0u);
    else
      EXPECT_GE(responder.posts, std::uint64_t{kRequests});
  }
}

// On local, SEND frames are read where they land in the transport's ring: no receive is
// posted or reposted, and responses given back out of order free their slots. On shm they are
// received into posted buffers. Both carry every request and response intact.
TEST(RrInPlace, SendFramesAreReadInPlaceOnLocalAndReceivedElsewhere) {
  ChannelOptions o;
  o.pattern = Pattern::send_send;
  o.request_bytes = 64;
  o.response_bytes = 64;
  constexpr int kRounds = 300;  // two requests each: more than one lap of local's ring
  for (const char* provider : {"local", "shm"}) {
    SCOPED_TRACE(provider);
    const bool local = std::string(provider) == "local";
    ChannelStats responder;
    std::string err = one_to_one(provider, o, 2, &responder, [&](Requester& q) {
      for (std::uint64_t i = 0; i < kRounds; ++i) {
        Response resp[2];
        for (unsigned slot = 0; slot < 2; ++slot) {
          const std::uint64_t tag = 2 * i + slot;
          std::memcpy(q.request_buffer(slot).data(), &tag, 8);
          ASSERT_EQ(q.submit(slot, 0, 64), Status::ok) << q.error();
        }
        for (Response& r : resp) {
          Status st;
          auto end = std::chrono::steady_clock::now() + 5s;
          while ((st = q.poll(&r)) == Status::empty && std::chrono::steady_clock::now() < end) {
          }
          ASSERT_EQ(st, Status::ok) << q.error();
        }
        for (const Response& r : resp) {
          std::uint64_t tag;
          ASSERT_EQ(r.data.size(), 12u);
          std::memcpy(&tag, r.data.data(), 8);
          EXPECT_EQ(tag, 2 * i + r.slot);
        }
        // Given back newest first: the older one's slot is freed last.
        q.release(resp[1]);
        q.release(resp[0]);
        ASSERT_EQ(q.error(), "");
      }
      ASSERT_EQ(q.close(), Status::ok) << q.error();
      EXPECT_EQ(q.stats().in_place_receives, local ? 2u * kRounds : 0u);
      // The requests and the bye, and on shm the receives posted and reposted too.
      if (local)
        EXPECT_EQ(q.stats().posts, 2u * kRounds + 1);
      else
        EXPECT_GE(q.stats().posts, 4u * kRounds + 1);
    });
    EXPECT_EQ(err, "");
    EXPECT_EQ(responder.in_place_receives, local ? 2u * kRounds + 1 : 0u);
    if (local)
      EXPECT_EQ(responder.posts, 2u * kRounds);
    else
      EXPECT_GE(responder.posts, 4u * kRounds);
  }
}

TEST(RrSetup, UnsupportedCombinationsAreRefused) {
  Capabilities caps;
  caps.provider = "test";
  caps.rma = false;
  caps.max_msg_size = 1 << 20;
  ChannelOptions o;
  o.pattern = Pattern::write_send;
  EXPECT_NE(why_unsupported(caps, o), "");
  o.pattern = Pattern::send_send;
  EXPECT_EQ(why_unsupported(caps, o), "");
  o.mailbox = Mailbox::dense;
  EXPECT_NE(why_unsupported(caps, o).find("dense"), std::string::npos);
  o.mailbox = Mailbox::sparse;
  o.response_bytes = 2 << 20;
  EXPECT_NE(why_unsupported(caps, o).find("max_msg_size"), std::string::npos);
}

// A requester that takes part in setup by hand and then sends whatever frame a test makes.
struct FakeRequester {
  std::unique_ptr<MemoryRegion> mr;
  RemoteMemory responder;
  detail::ResponderLayout layout;
  detail::Framing framing;  // as the channel frames on this transport

  FakeRequester(Transport& t, Bootstrap& boot, const ChannelOptions& o)
      : layout(o, 1 + (request_by_write(o.pattern) ? o.empty_mailboxes : 0), 1),
        framing(t.caps().in_order_data && t.caps().write_after_write ? detail::Framing::ordered
                                                                     : detail::Framing::trailer) {
    std::uint32_t slots = 1;
    boot.allgather({reinterpret_cast<const std::byte*>(&slots), 4});
    detail::RequesterLayout mine(o, 1, 1);
    mr = t.allocate(mine.bytes, kAllAccess);
    auto key = t.export_key(*mr);
    detail::Hello h;
    h.role = 0;
    h.pattern = static_cast<std::uint8_t>(o.pattern);
    h.mailbox = static_cast<std::uint8_t>(o.mailbox);
    h.slots = 1;
    h.key_len = static_cast<std::uint32_t>(key.size());
    h.request_bytes = o.request_bytes;
    h.response_bytes = o.response_bytes;
    h.empty_mailboxes = o.empty_mailboxes;
    h.region_bytes = mine.bytes;
    std::vector<std::byte> blob(sizeof h + key.size());
    std::memcpy(blob.data(), &h, sizeof h);
    std::memcpy(blob.data() + sizeof h, key.data(), key.size());
    auto all = boot.allgather(blob);
    detail::Hello peer;
    std::memcpy(&peer, all[1].data(), sizeof peer);
    responder = t.import_key(1, {all[1].data() + sizeof peer, peer.key_len});
  }

  // A frame claiming `source` and `slot` with a payload of `len` bytes.
  std::size_t frame(std::uint64_t seq, std::size_t len, std::uint32_t source, std::uint32_t slot) {
    std::memset(mr->data() + detail::kHeader, 0x42, len);
    detail::seal(mr->data(), {seq, len, false}, source, slot, framing);
    return detail::frame_bytes(len, framing);
  }

  // WRITEs the first `n` bytes of the frame into the responder's first mailbox the way the
  // channel does: in one write, or (ordered framing) the stamp word last.
  template <class MustPost>
  void write(Transport& t, std::size_t n, MustPost&& must_post) {
    auto w = [&](std::size_t from, std::size_t len) {
      must_post(t, [&] {
        return t.post_write(1, mr->data() + from, len, mr->desc(), responder,
                            layout.mailbox_off + from, 0, kInject);
      });
    };
    if (framing == detail::Framing::ordered && n > 8) {
      w(8, n - 8);
      w(0, 8);
    } else {
      w(0, n);
    }
  }
};

// Sends one crafted request to a real responder and returns the responder's error.
std::string responder_error(Pattern pattern,
                            const std::function<void(FakeRequester&, Transport&)>& send,
                            const char* provider = "shm") {
  ChannelOptions o;
  o.pattern = pattern;
  o.request_bytes = 64;
  o.response_bytes = 64;
  std::atomic<bool> done{false};
  std::string error;
  run_ranks(2, topts(provider, o), [&](int rank, Transport& t, Bootstrap& boot) {
    if (rank == 0) {
      FakeRequester fake(t, boot, o);
      send(fake, t);
      while (!done) t.progress();  // shm delivers while its sender progresses
      return;
    }
    auto r = make_responder(t, boot, o, 1);
    Handler h = tagger(0);
    error = serve_all(*r, h, 5s);
    done = true;
  });
  return error;
}

// Posts, retrying while the provider is busy (RDM endpoints connect lazily).
template <class Post>
void must_post(Transport& t, Post&& post) {
  auto end = std::chrono::steady_clock::now() + 5s;
  Status s;
  while ((s = post()) == Status::again && std::chrono::steady_clock::now() < end) t.progress();
  ASSERT_EQ(s, Status::ok) << t.last_error();
}

// Every malformed-request case on a provider with the trailer framing (shm) and one with the
// ordered framing (local).
class RrMalformed : public ::testing::TestWithParam<const char*> {};

TEST_P(RrMalformed, SendWithIdsOutOfRange) {
  std::string e = responder_error(
      Pattern::send_send,
      [](FakeRequester& f, Transport& t) {
        std::size_t n = f.frame(1, 8, 7, 0);  // requester 7 does not exist
        must_post(t, [&] { return t.post_send(1, f.mr->data(), n, f.mr->desc(), 0, kInject); });
      },
      GetParam());
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
}

TEST_P(RrMalformed, OversizedSendRequest) {
  std::string e = responder_error(
      Pattern::send_write,
      [](FakeRequester& f, Transport& t) {
        // Fits the receive buffer (64-byte payload slot rounded up) but claims more than allowed.
        std::size_t n = f.frame(1, 72, 0, 0);
        must_post(t, [&] { return t.post_send(1, f.mr->data(), n, f.mr->desc(), 0, 0 | kSignal); });
      },
      GetParam());
  EXPECT_NE(e.find("oversized"), std::string::npos) << e;
}

TEST_P(RrMalformed, SendWhoseLengthDisagreesWithItsFrame) {
  for (std::size_t cut : {1, 8}) {
    std::string e = responder_error(
        Pattern::send_send,
        [cut](FakeRequester& f, Transport& t) {
          std::size_t n = f.frame(1, 16, 0, 0);
          must_post(t, [&] {
            return t.post_send(1, f.mr->data(), n - cut, f.mr->desc(), 0, kInject);
          });  // the end cut off (the trailer, or with the ordered framing the payload)
        },
        GetParam());
    EXPECT_NE(e.find("malformed"), std::string::npos) << e << " (cut " << cut << ")";
  }
}

TEST_P(RrMalformed, TruncatedSendRequest) {
  std::string e = responder_error(
      Pattern::send_send,
      [](FakeRequester& f, Transport& t) {
        f.frame(1, 0, 0, 0);
        must_post(t, [&] { return t.post_send(1, f.mr->data(), 12, f.mr->desc(), 0, kInject); });
      },
      GetParam());
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST_P(RrMalformed, OversizedWriteIntoAMailbox) {
  std::string e = responder_error(
      Pattern::write_write,
      [](FakeRequester& f, Transport& t) {
        // A stamp announcing 1000 bytes in a mailbox for 64.
        std::uint64_t w = detail::pack({1, 1000, false});
        std::memcpy(f.mr->data(), &w, 8);
        f.write(t, 8, must_post<std::function<Status()>>);
      },
      GetParam());
  EXPECT_NE(e.find("oversized"), std::string::npos) << e;
}

TEST_P(RrMalformed, WriteWithForeignIds) {
  std::string e = responder_error(
      Pattern::write_send,
      [](FakeRequester& f, Transport& t) {
        std::size_t n = f.frame(1, 8, 0, 3);  // slot 3 of requester 0 does not exist
        f.write(t, n, must_post<std::function<Status()>>);
      },
      GetParam());
  EXPECT_NE(e.find("foreign ids"), std::string::npos) << e;
}

INSTANTIATE_TEST_SUITE_P(Providers, RrMalformed, ::testing::Values("shm", "local"),
                         [](const auto& info) { return std::string(info.param); });

// A requester with more slots than local can hold in place (its ring: 512 messages) receives
// its responses into posted buffers, so that holding one response per slot never stalls a
// responder; the responder still reads requests in place.
TEST(RrInPlace, ARequesterWithMoreSlotsThanTheRingPostsReceives) {
  ChannelOptions o;
  o.pattern = Pattern::send_send;
  o.request_bytes = 64;
  o.response_bytes = 64;
  TransportOptions to = topts("local", o);
  const unsigned slots = static_cast<unsigned>(probe_transport(to).rx_in_place_depth) + 1;
  ChannelStats responder;
  std::string err = one_to_one("local", o, slots, &responder, [&](Requester& q) {
    ASSERT_EQ(q.submit(slots - 1, 0, 64), Status::ok) << q.error();
    Response r;
    Status st;
    auto end = std::chrono::steady_clock::now() + 5s;
    while ((st = q.poll(&r)) == Status::empty && std::chrono::steady_clock::now() < end) {
    }
    ASSERT_EQ(st, Status::ok) << q.error();
    EXPECT_EQ(r.slot, slots - 1);
    q.release(r);
    ASSERT_EQ(q.close(), Status::ok) << q.error();
    EXPECT_EQ(q.stats().in_place_receives, 0u);
  });
  EXPECT_EQ(err, "");
  EXPECT_EQ(responder.in_place_receives, 2u);  // the request and the bye
}

// A request above what local reads in place (one ring slot) fails the responder with an error.
TEST(RrInPlace, ARequestAboveOneRingSlotIsRefusedOnLocal) {
  std::string e = responder_error(
      Pattern::send_send,
      [](FakeRequester& f, Transport& t) {
        std::vector<std::byte> big(t.caps().rx_in_place_max + 8);
        f.frame(1, 8, 0, 0);
        std::memcpy(big.data(), f.mr->data(), detail::frame_bytes(8, f.framing));
        must_post(t, [&] { return t.post_send(1, big.data(), big.size(), nullptr, 0, 0); });
      },
      "local");
  EXPECT_NE(e.find("in-place receive limit"), std::string::npos) << e;
}

// Frames as their readers check them (frame.h), for both framings.
TEST(RrFrame, ATornFrameIsNotAcceptedWithTheTrailerFraming) {
  alignas(64) std::byte buf[detail::slot_bytes(64)] = {};
  detail::seal(buf, {5, 40, false}, 0, 0, detail::Framing::trailer);
  auto fresh = [](std::uint64_t seq) { return seq > 4; };
  detail::Stamp s;
  ASSERT_EQ(detail::read_mailbox(buf, 64, fresh, &s, detail::Framing::trailer),
            detail::MailboxState::complete);
  ASSERT_TRUE(detail::read_received(buf, detail::frame_bytes(40), 64, &s));
  // The header of the new frame has landed, its trailer not yet (a stale one is there).
  std::uint64_t stale = detail::pack({4, 40, false});
  std::memcpy(buf + detail::kHeader + 40, &stale, 8);
  EXPECT_EQ(detail::read_mailbox(buf, 64, fresh, &s, detail::Framing::trailer),
            detail::MailboxState::nothing);
  EXPECT_FALSE(detail::read_received(buf, detail::frame_bytes(40), 64, &s));
}

TEST(RrFrame, TheOrderedFramingChecksLengthsButNeedsNoTrailer) {
  using detail::Framing;
  alignas(64) std::byte buf[detail::slot_bytes(64)] = {};
  auto fresh = [](std::uint64_t seq) { return seq > 4; };
  detail::Stamp s;
  detail::seal(buf, {5, 40, false}, 0, 0, Framing::ordered);
  EXPECT_EQ(detail::frame_bytes(40, Framing::ordered), detail::kHeader + 40);
  EXPECT_EQ(detail::read_mailbox(buf, 64, fresh, &s, Framing::ordered),
            detail::MailboxState::complete);
  EXPECT_EQ(s.len, 40u);
  EXPECT_TRUE(detail::read_received(buf, detail::kHeader + 40, 64, &s, Framing::ordered));
  // A length that disagrees with the stamp, a frame shorter than a header, a stale stamp.
  EXPECT_FALSE(detail::read_received(buf, detail::kHeader + 39, 64, &s, Framing::ordered));
  EXPECT_FALSE(detail::read_received(buf, detail::kHeader + 48, 64, &s, Framing::ordered));
  EXPECT_FALSE(detail::read_received(buf, 8, 64, &s, Framing::ordered));
  detail::seal(buf, {4, 40, false}, 0, 0, Framing::ordered);
  EXPECT_EQ(detail::read_mailbox(buf, 64, fresh, &s, Framing::ordered),
            detail::MailboxState::nothing);
  // A length above the maximum: oversized, and never accepted by SEND.
  detail::seal(buf, {6, 65, false}, 0, 0, Framing::ordered);
  EXPECT_EQ(detail::read_mailbox(buf, 64, fresh, &s, Framing::ordered),
            detail::MailboxState::oversized);
  EXPECT_FALSE(detail::read_received(buf, detail::kHeader + 65, 64, &s, Framing::ordered));
}

// The responder stops answering and its rank vanishes: the requester's call fails within the
// peer timeout (the bootstrap usually reports it much sooner).
TEST(RrPeerDeath, RequesterSeesResponderVanish) {
  for (Pattern pattern : {Pattern::write_write, Pattern::send_send}) {
    ChannelOptions o;
    o.pattern = pattern;
    o.peer_timeout = 500ms;
    std::atomic<bool> gone{false}, requester_done{false};
    std::int64_t elapsed_ms = -1;
    std::string requester_error;
    auto boots = make_thread_bootstraps(2);
    std::thread responder([&] {
      auto t = open_transport(topts("shm", o));
      t->connect(*boots[1]);
      auto r = make_responder(*t, *boots[1], o, 1);
      Handler h = tagger(0);
      unsigned n = 0;
      while (r->stats().requests < 1) r->serve(&h, &n);
      for (auto end = std::chrono::steady_clock::now() + 50ms;
           std::chrono::steady_clock::now() < end;)
        t->progress();
      boots[1]->abort("test: responder vanishes");
      gone = true;
      while (!requester_done) std::this_thread::sleep_for(1ms);  // keep the provider state alive
    });
    std::thread requester([&] {
      auto t = open_transport(topts("shm", o));
      t->connect(*boots[0]);
      auto q = make_requester(*t, *boots[0], o, 1, 1);
      Response resp;
      try {
        q->call(0, 0, 8, &resp, *boots[0]);
        q->release(resp);
        while (!gone) t->progress();
        auto start = std::chrono::steady_clock::now();
        try {
          q->call(0, 0, 8, &resp, *boots[0]);
          requester_error = "a call to a vanished responder succeeded";
        } catch (const Error&) {
        }
        elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now() - start)
                         .count();
      } catch (const std::exception& e) {
        requester_error = e.what();
      }
      requester_done = true;
    });
    requester.join();
    responder.join();
    EXPECT_EQ(requester_error, "") << to_string(pattern);
    EXPECT_GE(elapsed_ms, 0);
    EXPECT_LE(elapsed_ms, 500 + 1000) << to_string(pattern);
  }
}

}  // namespace
}  // namespace fabflow::rr
