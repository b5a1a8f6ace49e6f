#include "bootstrap/coordinator.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <optional>
#include <vector>

#include "bootstrap/wire.h"
#include "fabflow/status.h"

namespace fabflow::bootstrap_detail {
namespace {

constexpr std::size_t kReadChunk = 256 * 1024;
constexpr std::size_t kMaxPending = 64;  // unauthenticated connections held at once
// How long an unauthenticated connection may take to send its hello. A real rank answers the
// challenge within a round trip; a slow or silent peer is dropped at this deadline (or sooner,
// when the pending set is full and it is the oldest).
constexpr auto kHandshakeDeadline = std::chrono::seconds(2);
constexpr std::size_t kMaxMissingListed = 8;

}  // namespace

std::chrono::milliseconds heartbeat_interval(std::chrono::milliseconds silence) {
  return std::clamp(silence / 8, std::chrono::milliseconds(10), std::chrono::milliseconds(250));
}

// The coordinator's state machine. Owned and used by the worker thread only.
class Coordinator::Relay {
 public:
  Relay(Fd listener, CoordinatorConfig config)
      : listener_(std::move(listener)),
        cfg_(std::move(config)),
        ranks_(static_cast<std::size_t>(cfg_.size), RankState::absent),
        blobs_(static_cast<std::size_t>(cfg_.size)),
        contributed_(static_cast<std::size_t>(cfg_.size), false),
        heard_(static_cast<std::size_t>(cfg_.size)),
        echo_(static_cast<std::size_t>(cfg_.size), 0),
        beat_(heartbeat_interval(cfg_.silence)) {}

  void run(int wake_fd, const std::atomic<bool>& stop,
           const SteadyClock::time_point& stop_deadline);

 private:
  enum class RankState { absent, joined, left };

  struct Queued {
    std::shared_ptr<const Bytes> frame;
    std::size_t offset = 0;
  };

  struct Conn {
    Fd fd;
    FrameBuffer in;
    std::deque<Queued> out;
    int rank = -1;                       // -1 until authenticated
    SteadyClock::time_point deadline{};  // handshake deadline while rank < 0
    Nonce challenge{};
    bool closing = false;  // rejected: closes once `out` is flushed
    bool dead = false;     // to be closed by sweep()
  };

  void accept_all(SteadyClock::time_point now);
  void on_readable(Conn& c);
  void on_handshake(Conn& c, const Frame& f);
  void on_frame(Conn& c, const Frame& f);
  void on_gather(Conn& c, const Frame& f);
  void violation(Conn& c, const std::string& what);
  void check_round();
  void complete_round();
  void fail(int rank, const std::string& what, int skip = -1);
  // Sends to every joined rank but `skip`; to rank 0, which shares this process, last: once
  // rank 0 has the frame, the others' copies are with the kernel even if rank 0 dies next.
  void broadcast(const std::shared_ptr<const Bytes>& frame, int skip = -1);
  void reject(Conn& c, const std::string& reason);
  void send(Conn& c, const std::shared_ptr<const Bytes>& frame);
  void flush(Conn& c);
  void sweep();
  bool all_left() const;
  // After a failure: every rank still answering has every frame queued to it in its kernel.
  bool told_everyone(SteadyClock::time_point now) const;
  // Once a beat: fails the run on a rank silent for cfg_.silence, else reports every rank's
  // silence to every rank.
  void on_beat(SteadyClock::time_point now);
  std::string join_timeout_message() const;

  Fd listener_;
  CoordinatorConfig cfg_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<RankState> ranks_;
  int joined_ = 0;
  bool ready_ = false;
  SteadyClock::time_point join_deadline_{};
  SteadyClock::time_point listen_paused_until_{};
  std::optional<std::string> failure_;  // the first failure, already told to every rank
  // The collective in progress.
  std::vector<Bytes> blobs_;
  std::vector<bool> contributed_;
  int contributions_ = 0;
  std::size_t round_bytes_ = 4 + 4 * blobs_.size();  // the result frame's body so far
  Collective round_kind_ = Collective::allgather;
  int round_first_ = -1;
  // Liveness: when each rank's connection last carried a byte.
  std::vector<SteadyClock::time_point> heard_;
  std::vector<std::uint32_t> echo_;  // each rank's last heartbeat number
  std::chrono::milliseconds beat_;
  SteadyClock::time_point next_beat_{};
  SteadyClock::time_point last_turn_{};  // the loop's previous turn
  // Attempts to join that were turned away, for the join timeout's message.
  int rejected_ = 0;
  std::string last_rejection_;
};

void Coordinator::Relay::run(int wake_fd, const std::atomic<bool>& stop,
                             const SteadyClock::time_point& stop_deadline) {
  join_deadline_ = SteadyClock::now() + cfg_.timeout;
  last_turn_ = SteadyClock::now();
  std::vector<pollfd> fds;
  for (;;) {
    const auto now = SteadyClock::now();
    // The loop turns at least once a beat. A longer gap means this process itself did not run
    // (stopped, or starved of CPU): what the ranks sent meanwhile is still unread, so nobody is
    // judged silent for that gap.
    if (now - last_turn_ > std::max<SteadyClock::duration>(cfg_.silence / 2, 4 * beat_)) {
      for (auto& t : heard_) t = std::max(t, now);
    }
    last_turn_ = now;
    const bool stopping = stop.load(std::memory_order_acquire);
    if (stopping && (all_left() || now >= stop_deadline || (failure_ && told_everyone(now)))) {
      return;
    }
    if (!ready_ && !failure_ && now >= join_deadline_) fail(-1, join_timeout_message());
    for (auto& c : conns_) {
      if (c->rank < 0 && now >= c->deadline) c->dead = true;
    }
    if (ready_ && now >= next_beat_) on_beat(now);
    sweep();

    auto next = SteadyClock::time_point::max();
    if (!ready_ && !failure_) next = std::min(next, join_deadline_);
    if (ready_) next = std::min(next, next_beat_);
    if (stopping) next = std::min(next, stop_deadline);
    const bool listening = now >= listen_paused_until_;
    if (!listening) next = std::min(next, listen_paused_until_);
    fds.clear();
    fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({listening ? listener_.get() : -1, POLLIN, 0});
    for (auto& c : conns_) {
      if (c->rank < 0) next = std::min(next, c->deadline);
      fds.push_back({c->fd.get(), static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
    }
    const int timeout = next == SteadyClock::time_point::max() ? -1 : ms_until(next);
    if (::poll(fds.data(), fds.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      throw Error("bootstrap: coordinator poll failed: " + errno_text(errno));
    }
    if (fds[0].revents != 0) {
      std::uint64_t count = 0;
      [[maybe_unused]] auto n = ::read(wake_fd, &count, sizeof count);
    }
    const std::size_t polled = conns_.size();
    for (std::size_t i = 0; i < polled; ++i) {
      Conn& c = *conns_[i];
      const short revents = fds[i + 2].revents;
      if (!c.dead && (revents & POLLOUT)) flush(c);
      if (!c.dead && (revents & (POLLIN | POLLHUP | POLLERR))) on_readable(c);
    }
    if (fds[1].revents & POLLIN) accept_all(SteadyClock::now());
    sweep();
  }
}

void Coordinator::Relay::accept_all(SteadyClock::time_point now) {
  for (;;) {
    Fd fd =
        no_delay(Fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)));
    if (!fd) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        listen_paused_until_ = now + std::chrono::milliseconds(100);
      }
      return;
    }
    // At the cap, the oldest unauthenticated connection makes room: a flood of silent or slow
    // connections cannot hold every slot, and a real rank, which answers the challenge within a
    // round trip, is the newest. A rank dropped before its welcome connects again.
    std::size_t pending = 0;
    Conn* oldest = nullptr;
    for (auto& c : conns_) {
      if (c->rank >= 0 || c->dead) continue;
      ++pending;
      if (oldest == nullptr || c->deadline < oldest->deadline) oldest = c.get();
    }
    if (pending >= kMaxPending && oldest != nullptr) oldest->dead = true;
    auto c = std::make_unique<Conn>();
    c->fd = std::move(fd);
    c->deadline = now + std::min<SteadyClock::duration>(cfg_.timeout, kHandshakeDeadline);
    c->challenge = random_nonce();
    send(*c, std::make_shared<const Bytes>(encode_challenge(c->challenge)));
    conns_.push_back(std::move(c));
  }
}

void Coordinator::Relay::on_readable(Conn& c) {
  auto space = c.in.prepare(c.rank < 0 ? kHeaderSize + kMaxHandshakeFrame : kReadChunk);
  const ssize_t n = ::recv(c.fd.get(), space.data(), space.size(), MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    c.dead = true;
    return;
  }
  if (n < 0) return;
  c.in.commit(static_cast<std::size_t>(n));
  if (c.rank >= 0) heard_[static_cast<std::size_t>(c.rank)] = SteadyClock::now();
  try {
    while (!c.dead && !c.closing) {
      auto f = c.in.take(c.rank < 0 ? kMaxHandshakeFrame : kMaxFrame);
      if (!f) break;
      if (c.rank < 0) {
        on_handshake(c, *f);
      } else {
        on_frame(c, *f);
      }
    }
  } catch (const ProtocolError& e) {
    if (c.rank < 0) {
      c.dead = true;  // a stray: drop it without a word
    } else {
      violation(c, e.what());
    }
  }
}

void Coordinator::Relay::on_handshake(Conn& c, const Frame& f) {
  if (f.type != static_cast<std::uint32_t>(Msg::hello)) {
    c.dead = true;
    return;
  }
  Hello h;
  try {
    h = decode_hello(f.body);
  } catch (const ProtocolError& e) {
    reject(c, e.what());
    return;
  }
  if (!same_mac(hello_mac(cfg_.secret, c.challenge, h.rank, h.size, h.client_nonce), h.mac)) {
    reject(c, "wrong secret");
    return;
  }
  const auto size = static_cast<std::uint32_t>(cfg_.size);
  if (h.size != size) {
    reject(c, "size " + std::to_string(h.size) + " does not match the coordinator's size " +
                  std::to_string(size));
    return;
  }
  if (h.rank >= size) {
    reject(c,
           "rank " + std::to_string(h.rank) + " is out of range for size " + std::to_string(size));
    return;
  }
  if (failure_) {
    reject(c, "the run already failed (" + *failure_ + ")");
    return;
  }
  if (ranks_[h.rank] != RankState::absent) {
    reject(c, "rank " + std::to_string(h.rank) + " already joined");
    return;
  }
  c.rank = static_cast<int>(h.rank);
  ranks_[h.rank] = RankState::joined;
  heard_[h.rank] = SteadyClock::now();
  send(c, std::make_shared<const Bytes>(
              encode_welcome(welcome_mac(cfg_.secret, c.challenge, h.client_nonce))));
  if (++joined_ == cfg_.size) {
    ready_ = true;
    broadcast(std::make_shared<const Bytes>(encode_empty(Msg::ready)));
  }
}

void Coordinator::Relay::on_frame(Conn& c, const Frame& f) {
  switch (static_cast<Msg>(f.type)) {
    case Msg::gather: on_gather(c, f); return;
    case Msg::abort:
      fail(c.rank, "rank " + std::to_string(c.rank) + " aborted: " + printable(f.body), c.rank);
      return;
    case Msg::heartbeat: echo_[static_cast<std::size_t>(c.rank)] = decode_heartbeat(f.body); return;
    case Msg::bye:
      ranks_[c.rank] = RankState::left;
      c.dead = true;
      check_round();
      return;
    default: violation(c, "unexpected message type " + std::to_string(f.type));
  }
}

void Coordinator::Relay::on_gather(Conn& c, const Frame& f) {
  if (!ready_) return violation(c, "collective before every rank joined");
  BodyReader r(f.body);
  const std::uint32_t kind_value = r.u32();
  if (kind_value != static_cast<std::uint32_t>(Collective::allgather) &&
      kind_value != static_cast<std::uint32_t>(Collective::barrier)) {
    return violation(c, "unknown collective " + std::to_string(kind_value));
  }
  const auto kind = static_cast<Collective>(kind_value);
  if (kind == Collective::barrier && r.left() != 0) return violation(c, "barrier with a payload");
  if (failure_) return;  // every rank already has the verdict
  const auto rank = static_cast<std::size_t>(c.rank);
  if (contributed_[rank]) return violation(c, "a second collective before the first completed");
  if (contributions_ > 0 && kind != round_kind_) {
    return fail(c.rank, "rank " + std::to_string(c.rank) + " entered " + collective_name(kind) +
                            " while rank " + std::to_string(round_first_) + " entered " +
                            collective_name(round_kind_));
  }
  if (contributions_ == 0) {
    round_kind_ = kind;
    round_first_ = c.rank;
  }
  auto blob = r.rest();
  round_bytes_ += blob.size();
  if (round_bytes_ > kMaxFrame) {
    return fail(-1, "allgather of more than " + std::to_string(kMaxFrame >> 20) +
                        " MiB in all exceeds the frame limit");
  }
  blobs_[rank].assign(blob.begin(), blob.end());
  contributed_[rank] = true;
  ++contributions_;
  check_round();
}

void Coordinator::Relay::violation(Conn& c, const std::string& what) {
  ranks_[c.rank] = RankState::left;
  c.dead = true;
  fail(c.rank, "rank " + std::to_string(c.rank) + " broke the protocol (" + what + ")");
}

void Coordinator::Relay::check_round() {
  if (failure_ || contributions_ == 0) return;
  for (int r = 0; r < cfg_.size; ++r) {
    if (!contributed_[r] && ranks_[r] == RankState::left) {
      return fail(r, "rank " + std::to_string(r) + " exited without entering the " +
                         collective_name(round_kind_));
    }
  }
  if (contributions_ == cfg_.size) complete_round();
}

void Coordinator::Relay::complete_round() {
  Bytes frame =
      encode_result(round_kind_ == Collective::barrier ? std::span<const Bytes>() : blobs_);
  for (auto& b : blobs_) Bytes().swap(b);
  contributed_.assign(contributed_.size(), false);
  contributions_ = 0;
  round_bytes_ = 4 + 4 * blobs_.size();
  broadcast(std::make_shared<const Bytes>(std::move(frame)));
}

void Coordinator::Relay::fail(int rank, const std::string& what, int skip) {
  if (failure_) return;
  failure_ = what;
  broadcast(std::make_shared<const Bytes>(encode_abort(rank, what)), skip);
}

void Coordinator::Relay::broadcast(const std::shared_ptr<const Bytes>& frame, int skip) {
  Conn* local = nullptr;
  for (auto& c : conns_) {
    if (c->rank < 0 || c->rank == skip || ranks_[c->rank] != RankState::joined) continue;
    if (c->rank == 0) {
      local = c.get();
    } else {
      send(*c, frame);
    }
  }
  if (local != nullptr) send(*local, frame);
}

void Coordinator::Relay::reject(Conn& c, const std::string& reason) {
  ++rejected_;
  last_rejection_ = reason;
  c.closing = true;
  send(c, std::make_shared<const Bytes>(encode_text(Msg::reject, reason)));
}

void Coordinator::Relay::send(Conn& c, const std::shared_ptr<const Bytes>& frame) {
  if (c.dead) return;
  c.out.push_back({frame, 0});
  if (c.out.size() == 1) flush(c);
}

void Coordinator::Relay::flush(Conn& c) {
  while (!c.out.empty()) {
    auto& head = c.out.front();
    const ssize_t n = ::send(c.fd.get(), head.frame->data() + head.offset,
                             head.frame->size() - head.offset, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
      return;
    }
    head.offset += static_cast<std::size_t>(n);
    if (head.offset == head.frame->size()) c.out.pop_front();
  }
  if (c.closing) {
    ::shutdown(c.fd.get(), SHUT_WR);
    c.dead = true;
  }
}

void Coordinator::Relay::sweep() {
  for (std::size_t i = 0; i < conns_.size();) {
    if (!conns_[i]->dead) {
      ++i;
      continue;
    }
    const int rank = conns_[i]->rank;
    conns_.erase(conns_.begin() + static_cast<std::ptrdiff_t>(i));
    if (rank >= 0 && ranks_[rank] == RankState::joined) {
      ranks_[rank] = RankState::left;
      fail(rank, "rank " + std::to_string(rank) + " vanished (connection closed)");
      check_round();
      i = 0;  // fail() may have marked earlier connections dead
    }
  }
}

void Coordinator::Relay::on_beat(SteadyClock::time_point now) {
  next_beat_ = now + beat_;
  if (failure_) return;
  std::vector<std::uint32_t> silent_ms(heard_.size(), 0);
  for (std::size_t r = 0; r < heard_.size(); ++r) {
    if (ranks_[r] != RankState::joined) continue;
    const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - heard_[r]);
    if (silent > cfg_.silence) {
      const int rank = static_cast<int>(r);
      return fail(rank, "rank " + std::to_string(rank) +
                            " stopped answering: no sign of life for " + seconds_text(silent) +
                            " (its process is stopped, hung or starved of CPU; alive ranks "
                            "answer within " +
                            seconds_text(cfg_.silence) + ")");
    }
    silent_ms[r] = static_cast<std::uint32_t>(std::min<std::int64_t>(silent.count(), UINT32_MAX));
  }
  // To each rank with the number of its own last heartbeat: a report read late, from a
  // backlog, is known by the rank to be as old as that heartbeat.
  for (auto& c : conns_) {
    if (c->rank < 0 || c->dead || !c->out.empty()) continue;
    send(*c, std::make_shared<const Bytes>(
                 encode_liveness(echo_[static_cast<std::size_t>(c->rank)], silent_ms)));
  }
}

bool Coordinator::Relay::told_everyone(SteadyClock::time_point now) const {
  return std::ranges::all_of(conns_, [&](const auto& c) {
    return c->out.empty() || c->rank < 0 || now - heard_[static_cast<std::size_t>(c->rank)] > beat_;
  });
}

bool Coordinator::Relay::all_left() const {
  return std::ranges::none_of(ranks_, [](RankState s) { return s == RankState::joined; });
}

std::string Coordinator::Relay::join_timeout_message() const {
  std::string missing;
  std::size_t listed = 0;
  for (int r = 0; r < cfg_.size; ++r) {
    if (ranks_[r] != RankState::absent) continue;
    if (listed++ == kMaxMissingListed) {
      missing += ", ...";
      break;
    }
    missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  std::string rejected;
  if (rejected_ > 0) {
    rejected = "; " + std::to_string(rejected_) +
               (rejected_ == 1 ? " attempt to join was" : " attempts to join were") +
               " rejected, the last for: " + last_rejection_;
  }
  return "timed out after " + seconds_text(cfg_.timeout) + " waiting for " +
         std::to_string(cfg_.size - joined_) + " of " + std::to_string(cfg_.size) +
         " ranks to join coordinator " + cfg_.label + " (missing: " + missing + rejected + ")";
}

Coordinator::Coordinator(Fd listener, CoordinatorConfig config)
    : wake_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)), linger_(config.timeout) {
  if (!wake_) throw Error("bootstrap: eventfd for the coordinator failed: " + errno_text(errno));
  relay_ = std::make_unique<Relay>(std::move(listener), std::move(config));
  worker_ = std::thread([this] {
    try {
      relay_->run(wake_.get(), stop_, stop_deadline_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fabflow: %s\n", e.what());
    }
    relay_.reset();  // closes every connection: the ranks see the coordinator vanish
  });
}

Coordinator::~Coordinator() {
  stop_deadline_ = SteadyClock::now() + linger_;
  stop_.store(true, std::memory_order_release);
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
  worker_.join();
}

}  // namespace fabflow::bootstrap_detail
