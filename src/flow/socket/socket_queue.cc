// The TCP socket baseline of the flow queues: framed items over one non-blocking stream.
#include "flow/socket/socket_queue.h"

#include <fabflow/bootstrap.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/errno_text.h"
#include "common/fd.h"

namespace fabflow::flow {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr std::size_t kHeader = sizeof(std::uint32_t);
constexpr std::size_t kMinRecvBuffer = 64 * 1024;
constexpr std::size_t kMaxRecvBuffer = 4 * 1024 * 1024;

void check_options(const QueueOptions& o) {
  if (o.capacity == 0) throw UsageError("socket queue: capacity must be at least 1");
  if (o.item_bytes == 0) throw UsageError("socket queue: item_bytes must be at least 1");
  if (o.item_bytes >= kSocketEndOfStream)
    throw UsageError("socket queue: item_bytes must be below 4 GiB");
  if (o.capacity > (std::size_t{1} << 32) / (kHeader + o.item_bytes) + 1)
    throw UsageError("socket queue: capacity x item_bytes above 4 GiB");
}

void set_stream_options(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    throw Error("socket queue: setsockopt(TCP_NODELAY): " + errno_text(errno));
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    throw Error("socket queue: fcntl(O_NONBLOCK): " + errno_text(errno));
}

// Waits for `events` on fd; returns revents, 0 on timeout.
short wait_fd(int fd, short events, std::chrono::milliseconds timeout) noexcept {
  pollfd p{fd, events, 0};
  int ms = static_cast<int>(std::clamp<std::int64_t>(timeout.count(), 0, 1 << 30));
  int n;
  do {
    n = ::poll(&p, 1, ms);
  } while (n < 0 && errno == EINTR);
  return n > 0 ? p.revents : 0;
}

std::chrono::milliseconds left(SteadyClock::time_point deadline) noexcept {
  auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
  return d.count() > 0 ? d : std::chrono::milliseconds(0);
}

// Consumer side of setup: listen, publish the address, accept the producer.
Fd listen_and_accept(Bootstrap& boot, int producer_rank, std::chrono::milliseconds timeout) {
  const std::string host = boot.local_address();
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  int rc = ::getaddrinfo(host.c_str(), "0", &hints, &ai);
  if (rc != 0) throw Error("socket queue: bad local address '" + host + "': " + gai_strerror(rc));
  Fd lfd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int bind_rc = lfd.get() < 0 ? -1 : ::bind(lfd.get(), ai->ai_addr, ai->ai_addrlen);
  int err = errno;
  ::freeaddrinfo(ai);
  if (lfd.get() < 0 || bind_rc != 0 || ::listen(lfd.get(), 4) != 0)
    throw Error("socket queue: cannot listen on " + host + ": " + errno_text(err));
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(lfd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    throw Error("socket queue: getsockname: " + errno_text(errno));
  unsigned port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                           : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  const std::string address = host + " " + std::to_string(port);
  const auto* first = reinterpret_cast<const std::byte*>(address.data());
  boot.allgather({first, first + address.size()});
  auto deadline = SteadyClock::now() + timeout;
  for (;;) {
    if (wait_fd(lfd.get(), POLLIN, std::min(left(deadline), std::chrono::milliseconds(50)))) {
      Fd fd(::accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (fd.get() >= 0) {
        set_stream_options(fd.get());
        return fd;
      }
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
        throw Error("socket queue: accept: " + errno_text(errno));
    }
    const bool vanished = boot.peer_failed();
    if (vanished || left(deadline).count() == 0)
      throw PeerError(producer_rank,
                      "socket queue: producer rank " + std::to_string(producer_rank) +
                          (vanished ? " vanished during setup" : " did not connect"));
  }
}

// Producer side of setup: learn the consumer's address, connect.
Fd connect_to_consumer(Bootstrap& boot, int consumer_rank) {
  auto all = boot.allgather({});
  if (consumer_rank < 0 || static_cast<std::size_t>(consumer_rank) >= all.size())
    throw UsageError("socket queue: consumer rank " + std::to_string(consumer_rank) +
                     " out of range");
  const auto& blob = all[static_cast<std::size_t>(consumer_rank)];
  std::string text(reinterpret_cast<const char*>(blob.data()), blob.size());
  auto sp = text.rfind(' ');
  if (sp == std::string::npos || text.size() > 128)
    throw PeerError(consumer_rank, "socket queue: malformed address from consumer rank " +
                                       std::to_string(consumer_rank));
  std::string host = text.substr(0, sp), port = text.substr(sp + 1);
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &ai);
  if (rc != 0)
    throw PeerError(consumer_rank,
                    "socket queue: bad consumer address '" + text + "': " + gai_strerror(rc));
  Fd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int crc = fd.get() < 0 ? -1 : ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
  int err = errno;
  ::freeaddrinfo(ai);
  if (fd.get() < 0 || crc != 0)
    throw PeerError(consumer_rank, "socket queue: connect to consumer at " + host + ":" + port +
                                       ": " + errno_text(err));
  set_stream_options(fd.get());
  return fd;
}

// Producer over a TCP stream. One thread; owns the socket and its send ring.
class SocketProducer final : public Producer {
 public:
  SocketProducer(Fd fd, const QueueOptions& o)
      : fd_(std::move(fd)),
        item_bytes_(o.item_bytes),
        ring_(o.capacity * (kHeader + o.item_bytes) + kHeader),
        staging_(o.item_bytes) {}

  Status try_enqueue(std::span<const std::byte> item) noexcept override {
    if (Status s = check(item.size()); s != Status::ok) return s;
    if (!room(kHeader + item.size())) return Status::full;
    append(item);
    ++stats_.items;
    push();
    return failed_ ? Status::failed : Status::ok;
  }

  Status enqueue(std::span<const std::byte> item,
                 std::chrono::milliseconds timeout) noexcept override {
    if (Status s = check(item.size()); s != Status::ok) return s;
    if (Status s = wait_room(kHeader + item.size(), timeout); s != Status::ok) return s;
    append(item);
    ++stats_.items;
    push();
    return failed_ ? Status::failed : Status::ok;
  }

  Status reserve(std::size_t len, std::span<std::byte>* slot) noexcept override {
    if (Status s = check(len); s != Status::ok) return s;
    if (!room(kHeader + len)) return Status::full;
    reserved_ = len;
    *slot = std::span<std::byte>(staging_.data(), len);
    return Status::ok;
  }

  Status commit() noexcept override {
    if (reserved_ == kNone) return fail_usage("commit() without reserve()");
    std::size_t len = std::exchange(reserved_, kNone);
    if (closed_) return Status::closed;
    if (failed_) return Status::failed;
    append({staging_.data(), len});
    ++stats_.items;
    push();
    return failed_ ? Status::failed : Status::ok;
  }

  // One slot per call: the stream frames each item into the send ring on commit.
  Status reserve_many(std::size_t len, std::span<std::span<std::byte>> slots,
                      std::size_t* granted) noexcept override {
    *granted = 0;
    if (slots.empty()) return fail_usage("reserve_many() with no room for a slot");
    if (Status s = reserve(len, &slots[0]); s != Status::ok) return s;
    *granted = 1;
    return Status::ok;
  }

  Status commit_many(std::size_t n) noexcept override {
    if (n > 1 || (n == 1 && reserved_ == kNone))
      return fail_usage("commit_many() of more slots than reserve_many() granted");
    if (n == 0) {
      reserved_ = kNone;
      return failed_ ? Status::failed : Status::ok;
    }
    return commit();
  }

  Status flush(std::chrono::milliseconds timeout) noexcept override {
    if (failed_) return Status::failed;
    return drain(SteadyClock::now() + timeout);
  }

  Status close(std::chrono::milliseconds timeout) noexcept override {
    if (closed_) return Status::closed;
    if (failed_) return Status::failed;
    auto deadline = SteadyClock::now() + timeout;
    // A close that timed out may be called again: the marker is staged only once.
    if (!marker_staged_) {
      std::uint32_t marker = kSocketEndOfStream;
      if (Status s = wait_room(kHeader, timeout, true); s != Status::ok) return s;
      put(&marker, kHeader);
      marker_staged_ = true;
    }
    if (Status s = drain(deadline); s != Status::ok) return s;
    closed_ = true;
    if (::shutdown(fd_.get(), SHUT_WR) != 0) return fail("shutdown", errno);
    return Status::ok;
  }

  const QueueStats& stats() const noexcept override { return stats_; }
  const std::string& error() const noexcept override { return error_; }

 private:
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

  Status check(std::size_t len) noexcept {
    if (closed_) return Status::closed;
    if (failed_) return Status::failed;
    if (len > item_bytes_)
      return fail_usage("item of " + std::to_string(len) + " bytes is above item_bytes " +
                        std::to_string(item_bytes_));
    return Status::ok;
  }

  Status fail_usage(std::string msg) noexcept {
    error_ = "socket queue: " + std::move(msg);
    return Status::failed;
  }

  Status fail(const char* call, int err) noexcept {
    failed_ = true;
    if (err == EPIPE || err == ECONNRESET)
      error_ =
          "socket queue: consumer vanished (" + std::string(call) + ": " + errno_text(err) + ")";
    else
      error_ = "socket queue: " + std::string(call) + ": " + errno_text(err);
    return Status::failed;
  }

  std::size_t used() const noexcept { return static_cast<std::size_t>(tail_ - head_); }

  // Room for `need` bytes, after pushing what the kernel takes now.
  bool room(std::size_t need) noexcept {
    if (ring_.size() - used() >= need + kHeader) return true;  // kHeader kept for the marker
    push();
    if (!failed_ && ring_.size() - used() >= need + kHeader) return true;
    if (!failed_) ++stats_.full;
    return false;
  }

  // Waits for room for `need` bytes (plus the marker's, unless this is the marker).
  Status wait_room(std::size_t need, std::chrono::milliseconds timeout,
                   bool marker = false) noexcept {
    auto deadline = SteadyClock::now() + timeout;
    bool counted = false;
    const std::size_t keep = marker ? 0 : kHeader;
    while (ring_.size() - used() < need + keep) {
      push();
      if (failed_) return Status::failed;
      if (ring_.size() - used() >= need + keep) break;
      if (!counted) ++stats_.full, counted = true;
      if (Status s = wait_writable(deadline); s != Status::ok) return s;
    }
    return Status::ok;
  }

  // Waits, at most until `deadline` and 100 ms, for the kernel to take more bytes: Status::ok
  // (push again), Status::timeout once the deadline has passed, Status::failed when the consumer
  // hung up.
  Status wait_writable(SteadyClock::time_point deadline) noexcept {
    if (left(deadline).count() == 0) return Status::timeout;
    short ev =
        wait_fd(fd_.get(), POLLOUT, std::min(left(deadline), std::chrono::milliseconds(100)));
    if (ev & (POLLERR | POLLHUP)) {
      push();
      return failed_ ? Status::failed : fail("poll", ECONNRESET);
    }
    return Status::ok;
  }

  void put(const void* src, std::size_t len) noexcept {
    const auto* p = static_cast<const std::byte*>(src);
    std::size_t at = static_cast<std::size_t>(tail_ % ring_.size());
    std::size_t first = std::min(len, ring_.size() - at);
    std::memcpy(ring_.data() + at, p, first);
    std::memcpy(ring_.data(), p + first, len - first);
    tail_ += len;
  }

  void append(std::span<const std::byte> item) noexcept {
    auto len = static_cast<std::uint32_t>(item.size());
    put(&len, kHeader);
    if (!item.empty()) put(item.data(), item.size());
  }

  // One send of what the ring holds; the kernel takes what fits.
  void push() noexcept {
    if (failed_ || used() == 0) return;
    std::size_t at = static_cast<std::size_t>(head_ % ring_.size());
    std::size_t n = used();
    iovec iov[2];
    iov[0] = {ring_.data() + at, std::min(n, ring_.size() - at)};
    iov[1] = {ring_.data(), n - iov[0].iov_len};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = iov[1].iov_len ? 2 : 1;
    ssize_t sent;
    do {
      sent = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (sent < 0 && errno == EINTR);
    if (sent > 0) {
      head_ += static_cast<std::uint64_t>(sent);
      ++stats_.data_ops;
    } else if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      fail("send", errno);
    }
  }

  Status drain(SteadyClock::time_point deadline) noexcept {
    for (;;) {
      push();
      if (failed_) return Status::failed;
      if (used() == 0) return Status::ok;
      if (Status s = wait_writable(deadline); s != Status::ok) return s;
    }
  }

  Fd fd_;
  std::size_t item_bytes_;
  std::vector<std::byte> ring_;     // framed bytes not yet taken by the kernel
  std::vector<std::byte> staging_;  // reserve() hands this out; commit() frames it
  std::uint64_t head_ = 0;          // bytes sent
  std::uint64_t tail_ = 0;          // bytes framed
  std::size_t reserved_ = kNone;
  bool closed_ = false;
  bool marker_staged_ = false;  // close() put the end-of-stream frame into the buffer
  bool failed_ = false;
  QueueStats stats_;
  std::string error_;
};

// Consumer over a TCP stream. One thread; owns the socket and its receive buffer.
class SocketConsumer final : public Consumer {
 public:
  SocketConsumer(Fd fd, const QueueOptions& o)
      : fd_(std::move(fd)),
        item_bytes_(o.item_bytes),
        buf_(std::max({kHeader + o.item_bytes, kMinRecvBuffer,
                       std::min(o.capacity * (kHeader + o.item_bytes), kMaxRecvBuffer)})) {}

  Status try_dequeue(std::span<std::byte> out, std::size_t* len) noexcept override {
    if (peeked_) return fail_usage("try_dequeue() between peek() and release()");
    std::span<const std::byte> item;
    Status s = next(&item);
    if (s != Status::ok) return s;
    if (out.size() < item.size())
      return fail_usage("output buffer of " + std::to_string(out.size()) +
                        " bytes is smaller than the item's " + std::to_string(item.size()));
    if (!item.empty()) std::memcpy(out.data(), item.data(), item.size());
    *len = item.size();
    consume(item.size());
    return Status::ok;
  }

  Status dequeue(std::span<std::byte> out, std::size_t* len,
                 std::chrono::milliseconds timeout) noexcept override {
    auto deadline = SteadyClock::now() + timeout;
    for (;;) {
      Status s = try_dequeue(out, len);
      if (s != Status::empty) return s;
      if (left(deadline).count() == 0) return Status::timeout;
      wait_fd(fd_.get(), POLLIN, std::min(left(deadline), std::chrono::milliseconds(100)));
    }
  }

  Status peek(std::span<const std::byte>* item) noexcept override {
    if (peeked_) {
      *item = {buf_.data() + rpos_ + kHeader, peeked_len_};
      return Status::ok;
    }
    Status s = next(item);
    if (s != Status::ok) return s;
    peeked_ = true;
    peeked_len_ = item->size();
    return Status::ok;
  }

  Status release() noexcept override {
    if (!peeked_) return fail_usage("release() without peek()");
    peeked_ = false;
    consume(peeked_len_);
    return Status::ok;
  }

  // One item per call (the frames are parsed one at a time).
  Status peek_many(std::span<std::span<const std::byte>> items, std::size_t* n) noexcept override {
    *n = 0;
    if (items.empty()) return fail_usage("peek_many() with no room for an item");
    if (Status s = peek(&items[0]); s != Status::ok) return s;
    *n = 1;
    return Status::ok;
  }

  Status release_many(std::size_t k) noexcept override {
    if (k > (peeked_ ? 1u : 0u))
      return fail_usage("release_many() of more items than peek_many() gave");
    return k == 0 ? Status::ok : release();
  }

  const QueueStats& stats() const noexcept override { return stats_; }
  const std::string& error() const noexcept override { return error_; }

 private:
  Status fail_usage(std::string msg) noexcept {
    error_ = "socket queue: " + std::move(msg);
    return Status::failed;
  }

  Status fail(std::string msg) noexcept {
    state_ = Status::failed;
    error_ = "socket queue: " + std::move(msg);
    return Status::failed;
  }

  void consume(std::size_t len) noexcept {
    rpos_ += kHeader + len;
    ++stats_.items;
    if (rpos_ == wpos_) rpos_ = wpos_ = 0;
  }

  // The next complete frame in the buffer, if any. Sets state_ on the end marker or a bad
  // length.
  bool parse(std::span<const std::byte>* item) noexcept {
    if (wpos_ - rpos_ < kHeader) return false;
    std::uint32_t len;
    std::memcpy(&len, buf_.data() + rpos_, kHeader);
    if (len == kSocketEndOfStream) {
      state_ = Status::closed;
      return false;
    }
    if (len > item_bytes_) {
      fail("malformed frame from the producer: length " + std::to_string(len) +
           " is above item_bytes " + std::to_string(item_bytes_));
      return false;
    }
    if (wpos_ - rpos_ < kHeader + len) return false;
    *item = {buf_.data() + rpos_ + kHeader, len};
    return true;
  }

  Status next(std::span<const std::byte>* item) noexcept {
    if (state_ != Status::ok) return state_;
    if (parse(item)) return Status::ok;
    if (state_ != Status::ok) return state_;
    if (rpos_ > 0 && buf_.size() - wpos_ < buf_.size() / 2) {  // compact: room for a full read
      std::memmove(buf_.data(), buf_.data() + rpos_, wpos_ - rpos_);
      wpos_ -= rpos_;
      rpos_ = 0;
    }
    ssize_t n;
    do {
      n = ::recv(fd_.get(), buf_.data() + wpos_, buf_.size() - wpos_, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
      ++stats_.data_ops;
      wpos_ += static_cast<std::size_t>(n);
      if (parse(item)) return Status::ok;
      if (state_ != Status::ok) return state_;
      ++stats_.empty;
      return Status::empty;
    }
    if (n == 0)
      return fail(wpos_ > rpos_ ? "producer vanished in the middle of an item"
                                : "producer vanished (EOF without the end-of-stream marker)");
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      ++stats_.empty;
      return Status::empty;
    }
    if (errno == ECONNRESET) return fail("producer vanished (connection reset)");
    return fail(std::string("recv: ") + errno_text(errno));
  }

  Fd fd_;
  std::size_t item_bytes_;
  std::vector<std::byte> buf_;  // received bytes; [rpos_, wpos_) not yet consumed
  std::size_t rpos_ = 0;
  std::size_t wpos_ = 0;
  bool peeked_ = false;
  std::size_t peeked_len_ = 0;
  Status state_ = Status::ok;  // closed after the end marker, failed after an error
  QueueStats stats_;
  std::string error_;
};

}  // namespace

std::unique_ptr<Producer> make_socket_producer(Transport&, Bootstrap& boot, int consumer_rank,
                                               const QueueOptions& options) {
  check_options(options);
  return std::make_unique<SocketProducer>(connect_to_consumer(boot, consumer_rank), options);
}

std::unique_ptr<Consumer> make_socket_consumer(Transport&, Bootstrap& boot, int producer_rank,
                                               const QueueOptions& options) {
  check_options(options);
  auto timeout = std::max(options.peer_timeout, std::chrono::milliseconds(8000));
  return std::make_unique<SocketConsumer>(listen_and_accept(boot, producer_rank, timeout), options);
}

}  // namespace fabflow::flow
