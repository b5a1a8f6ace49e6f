// The notification cadences of the thesis (QueueOptions::one_notification_in_flight, with
// lazy_refresh 0 for the space notifications): a TN-Push producer keeps at most one tail write
// in flight (section 6.1, L591) and a space push / push2 consumer at most one head write or send
// (section 6.3, L683). Observed through the transport: NotifyCounter wraps each rank's
// transport (over the fault wrapper, which can hold completions back) and counts the
// notification pushes an end posts and the completions the queue reaps. Checked: never two in
// flight, at most one per item, fewer than one per item when completions are slow (a
// deterministic case: completions held for a few polls while the producer enqueues a whole
// stream the consumer has not started on), and every item in order, once, intact, on local
// and over shm and tcp.
#include <gtest/gtest.h>

#include <fabflow/fault.h>
#include <fabflow/forwarding.h>

#include <memory>
#include <mutex>
#include <set>

#include "flow/layout.h"
#include "support/flow_support.h"

namespace fabflow::flow::test {
namespace {

using namespace std::chrono_literals;

// What one end's transport saw of its notification pushes: 8-byte writes of the peer's counter
// cell (the tail, transfer push; the head, space push) and 8-byte sends (the head, space push2).
struct NotifyCounts {
  std::uint64_t posted = 0;         // notification pushes posted
  std::uint64_t untracked = 0;      // ... unsignalled: their completion is never seen
  std::uint64_t in_flight = 0;      // signalled, completion not yet reaped by the queue
  std::uint64_t max_in_flight = 0;  // the most at once, an untracked one counting for ever
  std::uint64_t while_busy = 0;     // posted while another one was in flight (or untracked)
  bool context_shared = false;      // a notification's context also used by another post
};

// Forwards every call to `inner` and counts the notification pushes (NotifyCounts). A
// notification is in flight from its post until a poll_tx through this wrapper hands its
// completion to the queue. Not thread-safe, like the transport it wraps.
class NotifyCounter final : public ForwardingTransport {
 public:
  NotifyCounter(std::unique_ptr<Transport> inner, const QueueOptions& o,
                std::shared_ptr<NotifyCounts> counts)
      : ForwardingTransport(std::move(inner)), o_(o), counts_(std::move(counts)) {}

  std::string_view name() const noexcept override { return "notify-counter"; }
  Status post_send(int peer, const void* buf, std::size_t len, void* desc, std::uint64_t context,
                   unsigned flags) noexcept override {
    Status s = inner_->post_send(peer, buf, len, desc, context, flags);
    if (s == Status::ok) note(len == 8, context, flags);
    return s;
  }
  Status post_write(int peer, const void* buf, std::size_t len, void* desc, const RemoteMemory& dst,
                    std::uint64_t offset, std::uint64_t context, unsigned flags,
                    std::optional<std::uint64_t> imm = std::nullopt) noexcept override {
    Status s = inner_->post_write(peer, buf, len, desc, dst, offset, context, flags, imm);
    if (s == Status::ok) note(len == 8 && offset == cell(), context, flags);
    return s;
  }
  Status post_read(int peer, void* buf, std::size_t len, void* desc, const RemoteMemory& src,
                   std::uint64_t offset, std::uint64_t context, unsigned flags) noexcept override {
    Status s = inner_->post_read(peer, buf, len, desc, src, offset, context, flags);
    if (s == Status::ok) note(false, context, flags);
    return s;
  }
  int poll_tx(std::span<Completion> out) noexcept override {
    const int n = inner_->poll_tx(out);
    for (int i = 0; i < n; ++i)
      if (notify_ctx_.count(out[static_cast<std::size_t>(i)].context) && counts_->in_flight > 0)
        --counts_->in_flight;
    return n;
  }

 private:
  // The peer's counter cell 0 (tail or head), right after its ring (no separate endpoint; a
  // push2 ring is the whole capacity: recv_pool unset). Computed once connected (caps final).
  std::uint64_t cell() noexcept {
    if (!cell_) {
      cell_ =
          detail::Layout::make(o_.capacity, o_.item_bytes, 0, false, false, slot_format(caps(), o_))
              .cells_base;
    }
    return *cell_;
  }
  void note(bool notification, std::uint64_t context, unsigned flags) noexcept {
    NotifyCounts& c = *counts_;
    if (!notification) {
      other_ctx_.insert(context);
      if (notify_ctx_.count(context)) c.context_shared = true;
      return;
    }
    if (c.in_flight + c.untracked > 0) ++c.while_busy;
    ++c.posted;
    if (flags & kSignal) {
      ++c.in_flight;
      notify_ctx_.insert(context);
      if (other_ctx_.count(context)) c.context_shared = true;
    } else {
      ++c.untracked;
    }
    c.max_in_flight = std::max(c.max_in_flight, c.in_flight + c.untracked);
  }

  QueueOptions o_;
  std::shared_ptr<NotifyCounts> counts_;
  std::optional<std::uint64_t> cell_;
  std::set<std::uint64_t> notify_ctx_, other_ctx_;
};

// Both ranks' counts (in no set order: each rank's transport is wrapped as it is opened).
struct Watch {
  std::mutex m;
  std::vector<std::shared_ptr<NotifyCounts>> ends;

  // Wraps each transport in the fault wrapper with `plan`, then in a NotifyCounter.
  fabflow::testing::WrapTransport wrap(const QueueOptions& o, FaultPlan plan = {}) {
    return [this, o, plan](std::unique_ptr<Transport> t) -> std::unique_ptr<Transport> {
      auto c = std::make_shared<NotifyCounts>();
      {
        std::lock_guard<std::mutex> lock(m);
        ends.push_back(c);
      }
      return std::make_unique<NotifyCounter>(make_fault_transport(std::move(t), plan), o, c);
    };
  }
  std::uint64_t posted() const {
    std::uint64_t n = 0;
    for (const auto& e : ends) n += e->posted;
    return n;
  }
};

// Checks each end's counts: at most one notification in flight, none posted while one was,
// and the completions told apart from every other operation's.
void expect_one_in_flight(const Watch& w, const std::string& what) {
  ASSERT_EQ(w.ends.size(), 2u) << what;
  for (const auto& e : w.ends) {
    EXPECT_LE(e->max_in_flight, 1u) << what;
    EXPECT_EQ(e->while_busy, 0u) << what;
    EXPECT_EQ(e->untracked, 0u) << what;
    EXPECT_FALSE(e->context_shared) << what;
  }
}

QueueOptions cadence_options(const char* design, bool one_in_flight, double lazy_refresh = 0.5) {
  QueueOptions o;
  o.design = *Design::parse(design);
  o.capacity = 16;
  o.item_bytes = 72;
  o.lazy_refresh = lazy_refresh;
  o.one_notification_in_flight = one_in_flight;
  return o;
}

// ---- streams over transports: never two in flight, at most one per item, items intact ----

struct CadenceCase {
  const char* design;
  Provider provider;
};

std::string cadence_name(const ::testing::TestParamInfo<CadenceCase>& info) {
  return label(*Design::parse(info.param.design), info.param.provider);
}
void PrintTo(const CadenceCase& c, std::ostream* os) {
  *os << label(*Design::parse(c.design), c.provider);
}

std::size_t cadence_items() {
  return std::min<std::size_t>(4000, env_count("FABFLOW_FLOW_ITEMS", 4000));
}

class FlowOneNotificationInFlight : public ::testing::TestWithParam<CadenceCase> {};

// Completions held back for 2 polls of their queue: where a transport completes a write at
// once (local, and the software providers for injected writes), a rule that is not kept would
// never be seen breaking.
FaultPlan slow_completions() {
  FaultPlan plan;
  plan.delay_completions = 2;
  return plan;
}

// Transfer push (the producer's tail writes) and space push / push2 (the consumer's head
// writes or sends) with lazy_refresh 0, the thesis' cadence: random items, random pauses on
// both sides; FIFO, exactly once, contents (stream()).
TEST_P(FlowOneNotificationInFlight, AtMostOneInFlightAndOnePerItem) {
  const auto& c = GetParam();
  const QueueOptions o = on(c.provider, cadence_options(c.design, true, 0));
  const std::size_t n = cadence_items();
  Watch w;
  Result r;
  ASSERT_EQ(stream(c.provider, o, {n, 21, true}, &r, w.wrap(o, slow_completions())), "");
  expect_one_in_flight(w, c.design);
  // What the ends counted is what the transport saw, and at most one per item (the end of
  // stream is one or two more slots: their tails, its head).
  std::uint64_t pushes = 0;
  if (o.design.transfer == TransferNotify::push) {
    EXPECT_GT(r.producer.transfer_ops, 0u);
    EXPECT_LE(r.producer.transfer_ops, n + end_markers(o.design));
    pushes += r.producer.transfer_ops;
  }
  if (o.design.space != SpaceNotify::pull) {
    EXPECT_GT(r.consumer.space_ops, 0u);
    EXPECT_LE(r.consumer.space_ops, n + 1);
    pushes += r.consumer.space_ops;
  }
  EXPECT_EQ(w.posted(), pushes);
}

std::vector<CadenceCase> cadence_cases() {
  std::vector<CadenceCase> v;
  for (const Provider& p : {kLocal, kShm, kTcp})
    for (const char* d :
         {"push1-push-pull", "push1-push-push", "push2-push-push2", "pull-push-push",
          "push1-watermark-push", "push1-watermark-push2", "push2-event-push", "pull-pull-push2"})
      v.push_back({d, p});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Points, FlowOneNotificationInFlight, ::testing::ValuesIn(cadence_cases()),
                         cadence_name);

// The control: without the option every notification is injected untracked, so the same
// checker sees them pile up. (The counter can tell.)
TEST(FlowOneNotificationInFlightControl, WithoutTheOptionPushesAreNotTracked) {
  const QueueOptions o = cadence_options("push1-push-push", false, 0);
  Watch w;
  ASSERT_EQ(stream(kLocal, o, {200, 3, false}, nullptr, w.wrap(o)), "");
  ASSERT_EQ(w.ends.size(), 2u);
  for (const auto& e : w.ends) {
    EXPECT_GT(e->posted, 1u);
    EXPECT_EQ(e->untracked, e->posted);
    EXPECT_GT(e->max_in_flight, 1u);
  }
}

// Every design point with the option on local and shm: no cadence stalls a stream (the final
// tail after close and flush, the final head at end of stream).
class FlowOneNotificationInFlightAll : public ::testing::TestWithParam<Point> {};

TEST_P(FlowOneNotificationInFlightAll, FifoExactlyOnceWithContents) {
  const auto& pt = GetParam();
  QueueOptions o;
  o.design = pt.design;
  o.capacity = 8;
  o.item_bytes = 100;
  o.lazy_refresh = 0;
  o.one_notification_in_flight = true;
  ASSERT_EQ(stream(pt.provider, o, {std::min<std::size_t>(1500, cadence_items()), 17, true}), "");
}

INSTANTIATE_TEST_SUITE_P(All, FlowOneNotificationInFlightAll,
                         ::testing::ValuesIn(points({kLocal, kShm})), point_name);

// Batching, the data mover and the active consumer move and notify from other places (a
// coalesced write, the mover thread, the consumer's helper thread).
TEST(FlowOneNotificationInFlightPresets, BatchingDataMoverActiveConsumer) {
  for (const Provider& p : {kLocal, kShm})
    for (const char* design : {"push1-push-push", "push1-watermark-push2", "pull-push-push"})
      for (const char* preset : {"basic", "batching", "datamover"})
        for (bool active_consumer : {false, true}) {
          auto o = QueueOptions::preset(preset, *Design::parse(design));
          o.capacity = 16;
          o.item_bytes = 48;
          o.lazy_refresh = 0;
          o.one_notification_in_flight = true;
          o.active_consumer = active_consumer;
          Watch w;
          ASSERT_EQ(stream(p, o, {env_count("FABFLOW_FLOW_PRESET_ITEMS", 300), 9, false}, nullptr,
                           w.wrap(o, slow_completions())),
                    "")
              << p.name << " " << design << " " << preset << " active consumer " << active_consumer;
          expect_one_in_flight(w, std::string(design) + " " + preset);
        }
}

// ---- a producer that outpaces its notifications: fewer than one per item ----

// Completions held back for 3 polls (the fault wrapper), on local: the producer enqueues all
// `items` (the ring holds them all) and flushes while the consumer waits in a barrier without
// polling; then the consumer dequeues them all and checks each. Deterministic: every tail
// write's completion reaches the producer 3 polls after it came in, each enqueue polls once or
// twice, and nothing else runs on the producer's transport meanwhile.
struct Ahead {
  QueueStats producer, consumer;
  std::string error;
};

Ahead producer_ahead(const QueueOptions& o, std::size_t items, Watch& w) {
  FaultPlan plan;
  plan.delay_completions = 3;
  Ahead out;
  const Stream s{items, 29, false};
  out.error = run_pair(
      transport_options(kLocal, o),
      [&](int rank, Transport& t, Bootstrap& boot) {
        std::vector<std::byte> buf(o.item_bytes);
        if (rank == 0) {
          auto p = make_producer(t, boot, 1, o);
          for (std::uint64_t i = 0; i < items; ++i) {
            const std::size_t len = stream_len(s, i, o.item_bytes);
            fill_item(s.seed, i, buf.data(), len);
            if (p->try_enqueue({buf.data(), len}) != Status::ok)
              throw Error("enqueue " + std::to_string(i) + " did not go in at once: " + p->error());
          }
          if (p->flush(5s) != Status::ok) throw Error("flush: " + p->error());
          out.producer = p->stats();
          boot.barrier([&] { t.progress(); });  // the consumer starts now
          if (p->close(5s) != Status::ok) throw Error("close: " + p->error());
          boot.barrier([&] { t.progress(); });
        } else {
          auto c = make_consumer(t, boot, 0, o);
          boot.barrier([&] { t.progress(); });  // not one poll of the queue before this
          for (std::uint64_t i = 0; i < items; ++i) {
            std::size_t len = 0;
            if (c->dequeue(buf, &len, 5s) != Status::ok)
              throw Error("dequeue " + std::to_string(i) + ": " + c->error());
            check_item(s, i, {buf.data(), len}, o.item_bytes);
          }
          std::size_t len = 0;
          if (c->dequeue(buf, &len, 5s) != Status::closed) throw Error("no end of stream");
          out.consumer = c->stats();
          boot.barrier([&] { t.progress(); });
        }
      },
      w.wrap(o, plan));
  return out;
}

TEST(FlowProducerAhead, SlowCompletionsGiveFewerTailWritesThanItems) {
  constexpr std::size_t kItems = 200;
  QueueOptions o = cadence_options("push1-push-pull", true);
  o.capacity = 256;  // all of them, and the end of stream
  Watch w;
  Ahead a = producer_ahead(o, kItems, w);
  ASSERT_EQ(a.error, "");
  expect_one_in_flight(w, "push1-push-pull");
  // Counted before the close: the items' tails, the last one posted by flush.
  EXPECT_GT(a.producer.transfer_ops, 0u);
  EXPECT_LT(a.producer.transfer_ops, kItems);
  EXPECT_LE(a.producer.transfer_ops, kItems / 2 + 1);  // one per two items at most
  // The same run without the option: a tail write per item.
  o.one_notification_in_flight = false;
  Watch w0;
  Ahead b = producer_ahead(o, kItems, w0);
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(b.producer.transfer_ops, kItems);
}

// The space side of the same run: the consumer dequeues a full queue with lazy_refresh 0. With
// the option it pushes its head after a dequeue only when no push is in flight (fewer than one
// per item while completions take 3 polls); without it after every dequeue. Push (a write) and
// push2 (a send); a space-pull producer reads and the consumer pushes nothing.
TEST(FlowProducerAhead, SpacePushesAtMostOnePerDequeue) {
  constexpr std::size_t kItems = 200;
  for (const char* design :
       {"push1-watermark-push", "push1-watermark-push2", "push1-watermark-pull"}) {
    QueueOptions o = cadence_options(design, true, 0);
    o.capacity = 256;
    Watch w;
    Ahead a = producer_ahead(o, kItems, w);
    ASSERT_EQ(a.error, "") << design;
    expect_one_in_flight(w, design);
    // The consumer released kItems items and the end-of-stream slot.
    if (o.design.space == SpaceNotify::pull) {
      EXPECT_EQ(a.consumer.space_ops, 0u) << design;
      EXPECT_EQ(w.posted(), 0u) << design;
      continue;
    }
    EXPECT_GT(a.consumer.space_ops, 0u) << design;
    EXPECT_LE(a.consumer.space_ops, kItems / 2 + 2) << design;
    EXPECT_EQ(w.posted(), a.consumer.space_ops) << design;
    // Without it, lazy_refresh 0 pushes after every release, the end of stream's too.
    o.one_notification_in_flight = false;
    Watch w0;
    Ahead b = producer_ahead(o, kItems, w0);
    ASSERT_EQ(b.error, "") << design;
    EXPECT_EQ(b.consumer.space_ops, kItems + 1) << design;
  }
}

}  // namespace
}  // namespace fabflow::flow::test
