// The socket baseline of the flow queues between two threads (thread bootstraps): FIFO,
// exactly-once and content over random-size items with random pauses, full / empty, end of
// stream, peer death and a malformed frame.
#include <gtest/gtest.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fabflow/bootstrap.h>

#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "flow/socket/socket_queue.h"

namespace fabflow::flow {
namespace {

using namespace std::chrono_literals;

// The socket queue never touches its Transport; this one only satisfies the signature.
class NullTransport final : public Transport {
 public:
  const Capabilities& caps() const noexcept override { return caps_; }
  std::string_view name() const noexcept override { return "null"; }
  void connect(Bootstrap&) override {}
  std::unique_ptr<MemoryRegion> register_memory(void*, std::size_t, unsigned) override {
    throw Error("null transport");
  }
  std::vector<std::byte> export_key(const MemoryRegion&) const override { return {}; }
  RemoteMemory import_key(int, std::span<const std::byte>) override { return {}; }
  Status post_send(int, const void*, std::size_t, void*, std::uint64_t,
                   unsigned) noexcept override {
    return Status::failed;
  }
  Status post_recv(int, void*, std::size_t, void*, std::uint64_t) noexcept override {
    return Status::failed;
  }
  Status post_write(int, const void*, std::size_t, void*, const RemoteMemory&, std::uint64_t,
                    std::uint64_t, unsigned, std::optional<std::uint64_t>) noexcept override {
    return Status::failed;
  }
  Status post_read(int, void*, std::size_t, void*, const RemoteMemory&, std::uint64_t,
                   std::uint64_t, unsigned) noexcept override {
    return Status::failed;
  }
  Status post_atomic(int, AtomicOp, std::uint64_t, std::uint64_t, std::uint64_t*, void*,
                     const RemoteMemory&, std::uint64_t, std::uint64_t,
                     unsigned) noexcept override {
    return Status::failed;
  }
  int poll_tx(std::span<Completion>) noexcept override { return 0; }
  int poll_rx(std::span<Completion>) noexcept override { return 0; }
  void progress() noexcept override {}
  const std::string& last_error() const noexcept override { return error_; }

 private:
  Capabilities caps_;
  std::string error_;
};

QueueOptions options(std::size_t capacity, std::size_t item_bytes) {
  QueueOptions o;
  o.socket = true;
  o.capacity = capacity;
  o.item_bytes = item_bytes;
  return o;
}

// Producer on rank 0, consumer on rank 1, set up collectively from two threads.
struct Pair {
  std::vector<std::unique_ptr<Bootstrap>> boots = make_thread_bootstraps(2);
  NullTransport t0, t1;
  std::unique_ptr<Producer> producer;
  std::unique_ptr<Consumer> consumer;

  explicit Pair(const QueueOptions& o) {
    std::thread th([&] { consumer = make_socket_consumer(t1, *boots[1], 0, o); });
    producer = make_socket_producer(t0, *boots[0], 1, o);
    th.join();
  }
};

// Item `seq`: its length and bytes follow from seq alone, so the consumer can check both.
std::size_t item_len(std::uint64_t seq, std::size_t max) { return (seq * 2654435761u) % (max + 1); }
void fill(std::byte* p, std::size_t len, std::uint64_t seq) {
  std::mt19937_64 rng(seq);
  for (std::size_t i = 0; i < len; ++i) p[i] = static_cast<std::byte>(rng());
  if (len >= 8) std::memcpy(p, &seq, 8);
}

TEST(FlowSocket, FifoExactlyOnceRandomSizesAndPauses) {
  constexpr std::size_t kItems = 20000, kMax = 300;
  Pair q(options(32, kMax));
  std::thread producer([&] {
    std::mt19937 rng(1);
    std::vector<std::byte> buf(kMax);
    for (std::uint64_t seq = 0; seq < kItems; ++seq) {
      std::size_t len = item_len(seq, kMax);
      if (seq % 3 == 0) {
        std::span<std::byte> slot;
        Status s;
        while ((s = q.producer->reserve(len, &slot)) == Status::full) std::this_thread::yield();
        ASSERT_EQ(s, Status::ok) << q.producer->error();
        fill(slot.data(), len, seq);
        ASSERT_EQ(q.producer->commit(), Status::ok);
      } else {
        fill(buf.data(), len, seq);
        ASSERT_EQ(q.producer->enqueue({buf.data(), len}, 5s), Status::ok) << q.producer->error();
      }
      if (rng() % 1000 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    }
    ASSERT_EQ(q.producer->close(5s), Status::ok) << q.producer->error();
  });
  std::mt19937 rng(2);
  std::vector<std::byte> out(kMax), want(kMax);
  std::uint64_t seq = 0;
  for (;;) {
    std::span<const std::byte> item;
    std::size_t len = 0;
    Status s;
    if (seq % 2 == 0) {
      s = q.consumer->dequeue(out, &len, 5s);
      item = {out.data(), len};
    } else {
      while ((s = q.consumer->peek(&item)) == Status::empty) std::this_thread::yield();
    }
    if (s == Status::closed) break;
    ASSERT_EQ(s, Status::ok) << q.consumer->error();
    ASSERT_LT(seq, kItems);
    ASSERT_EQ(item.size(), item_len(seq, kMax)) << "item " << seq;
    fill(want.data(), item.size(), seq);
    ASSERT_EQ(std::memcmp(item.data(), want.data(), item.size()), 0) << "item " << seq;
    if (seq % 2 == 1) {
      ASSERT_EQ(q.consumer->release(), Status::ok);
    }
    ++seq;
    if (rng() % 1000 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
  }
  producer.join();
  EXPECT_EQ(seq, kItems);
  EXPECT_EQ(q.producer->stats().items, kItems);
  EXPECT_EQ(q.consumer->stats().items, kItems);
  EXPECT_GT(q.producer->stats().data_ops, 0u);
  EXPECT_GT(q.consumer->stats().data_ops, 0u);
  EXPECT_EQ(q.producer->stats().transfer_ops + q.producer->stats().space_ops, 0u);
}

TEST(FlowSocket, FullWhenKernelAndBufferAreFullEmptyWhenNothingSent) {
  constexpr std::size_t kBytes = 4096;
  Pair q(options(8, kBytes));
  std::vector<std::byte> buf(kBytes, std::byte{7});
  std::size_t len = 0;
  EXPECT_EQ(q.consumer->try_dequeue(buf, &len), Status::empty);
  EXPECT_GE(q.consumer->stats().empty, 1u);
  std::uint64_t sent = 0;
  Status s = Status::ok;
  for (int i = 0; i < 1000000 && s == Status::ok; ++i) {
    s = q.producer->try_enqueue(buf);
    if (s == Status::ok) ++sent;
  }
  ASSERT_EQ(s, Status::full) << q.producer->error();
  EXPECT_GE(q.producer->stats().full, 1u);
  std::span<std::byte> slot;
  EXPECT_EQ(q.producer->reserve(kBytes, &slot), Status::full);
  EXPECT_EQ(q.producer->enqueue(buf, 20ms), Status::timeout);
  std::thread closer([&] { EXPECT_EQ(q.producer->close(10s), Status::ok) << q.producer->error(); });
  std::uint64_t got = 0;
  while ((s = q.consumer->dequeue(buf, &len, 5s)) == Status::ok) ++got;
  closer.join();
  EXPECT_EQ(s, Status::closed) << q.consumer->error();
  EXPECT_EQ(got, sent);
}

TEST(FlowSocket, CloseEndsTheStreamAfterTheLastItem) {
  Pair q(options(16, 64));
  std::byte b[64] = {};
  for (int i = 0; i < 100; ++i) ASSERT_EQ(q.producer->enqueue(b, 1s), Status::ok);
  ASSERT_EQ(q.producer->enqueue({b, 0}, 1s), Status::ok);  // empty items are items
  ASSERT_EQ(q.producer->close(1s), Status::ok);
  EXPECT_EQ(q.producer->try_enqueue(b), Status::closed);
  std::size_t len = 0;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(q.consumer->dequeue(b, &len, 1s), Status::ok) << i;
    EXPECT_EQ(len, 64u);
  }
  ASSERT_EQ(q.consumer->dequeue(b, &len, 1s), Status::ok);
  EXPECT_EQ(len, 0u);
  EXPECT_EQ(q.consumer->dequeue(b, &len, 1s), Status::closed);
  EXPECT_EQ(q.consumer->try_dequeue(b, &len), Status::closed);
  EXPECT_TRUE(q.consumer->error().empty()) << q.consumer->error();
}

// The batched calls on the stream: one slot / item per call, and the counts checked.
TEST(FlowSocket, BatchedCallsTakeOneAtATime) {
  Pair q(options(16, 64));
  std::vector<std::span<std::byte>> slots(8);
  std::size_t granted = 9;
  ASSERT_EQ(q.producer->reserve_many(64, slots, &granted), Status::ok) << q.producer->error();
  ASSERT_EQ(granted, 1u);
  fill(slots[0].data(), 64, 5);
  EXPECT_EQ(q.producer->commit_many(2), Status::failed);  // more than granted
  EXPECT_NE(q.producer->error().find("commit_many"), std::string::npos) << q.producer->error();
  ASSERT_EQ(q.producer->commit_many(1), Status::ok) << q.producer->error();
  ASSERT_EQ(q.producer->reserve_many(8, slots, &granted), Status::ok);
  ASSERT_EQ(q.producer->commit_many(0), Status::ok);  // given back: nothing sent
  EXPECT_EQ(q.producer->commit(), Status::failed);
  ASSERT_EQ(q.producer->close(1s), Status::ok);
  std::vector<std::span<const std::byte>> items(4);
  std::size_t n = 0;
  Status st;
  while ((st = q.consumer->peek_many(items, &n)) == Status::empty) std::this_thread::yield();
  ASSERT_EQ(st, Status::ok) << q.consumer->error();
  ASSERT_EQ(n, 1u);
  std::vector<std::byte> want(64);
  fill(want.data(), 64, 5);
  ASSERT_EQ(items[0].size(), 64u);
  EXPECT_EQ(std::memcmp(items[0].data(), want.data(), 64), 0);
  EXPECT_EQ(q.consumer->release_many(2), Status::failed);
  ASSERT_EQ(q.consumer->release_many(1), Status::ok);
  EXPECT_EQ(q.consumer->peek_many(items, &n), Status::closed);
  EXPECT_EQ(n, 0u);
}

TEST(FlowSocket, ProducerDeathWithoutCloseFailsTheConsumer) {
  Pair q(options(16, 64));
  std::byte b[64] = {};
  for (int i = 0; i < 10; ++i) ASSERT_EQ(q.producer->enqueue(b, 1s), Status::ok);
  ASSERT_EQ(q.producer->flush(1s), Status::ok);
  q.producer.reset();
  std::size_t len = 0;
  for (int i = 0; i < 10; ++i) ASSERT_EQ(q.consumer->dequeue(b, &len, 1s), Status::ok) << i;
  EXPECT_EQ(q.consumer->dequeue(b, &len, 2s), Status::failed);
  EXPECT_NE(q.consumer->error().find("vanished"), std::string::npos) << q.consumer->error();
}

TEST(FlowSocket, ConsumerDeathFailsTheProducer) {
  Pair q(options(16, 64));
  q.consumer.reset();
  std::byte b[64] = {};
  Status s = Status::ok;
  for (int i = 0; i < 1000 && (s == Status::ok || s == Status::full); ++i) {
    s = q.producer->enqueue(b, 100ms);
    if (s == Status::timeout) s = Status::full;
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(s, Status::failed);
  EXPECT_NE(q.producer->error().find("consumer"), std::string::npos) << q.producer->error();
}

TEST(FlowSocket, MalformedFrameFailsTheConsumer) {
  auto boots = make_thread_bootstraps(2);
  NullTransport t;
  std::unique_ptr<Consumer> consumer;
  std::thread th([&] { consumer = make_socket_consumer(t, *boots[1], 0, options(16, 64)); });
  auto all = boots[0]->allgather({});
  std::string addr(reinterpret_cast<const char*>(all[1].data()), all[1].size());
  auto sp = addr.rfind(' ');
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  ASSERT_EQ(getaddrinfo(addr.substr(0, sp).c_str(), addr.substr(sp + 1).c_str(), &hints, &ai), 0);
  int fd = socket(ai->ai_family, SOCK_STREAM, 0);
  ASSERT_EQ(connect(fd, ai->ai_addr, ai->ai_addrlen), 0);
  freeaddrinfo(ai);
  th.join();
  std::uint32_t good = 4, bad = 1000;
  char frame[8] = {'a', 'b', 'c', 'd'};
  ASSERT_EQ(write(fd, &good, 4), 4);
  ASSERT_EQ(write(fd, frame, 4), 4);
  ASSERT_EQ(write(fd, &bad, 4), 4);
  std::byte out[64];
  std::size_t len = 0;
  ASSERT_EQ(consumer->dequeue(out, &len, 1s), Status::ok);
  EXPECT_EQ(len, 4u);
  EXPECT_EQ(consumer->dequeue(out, &len, 1s), Status::failed);
  EXPECT_NE(consumer->error().find("malformed frame"), std::string::npos) << consumer->error();
  EXPECT_EQ(consumer->try_dequeue(out, &len), Status::failed);
  close(fd);
}

}  // namespace
}  // namespace fabflow::flow
