// make_tcp_bootstrap: one rank's client of the coordinator (which rank 0 also runs).
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "bootstrap/coordinator.h"
#include "bootstrap/net.h"
#include "bootstrap/job_store.h"
#include "bootstrap/wire.h"
#include "fabflow/bootstrap.h"
#include "fabflow/status.h"

namespace fabflow {
namespace {

using namespace bootstrap_detail;

// How long a rank waits for the coordinator's join verdict beyond its own timeout: the
// coordinator's verdict names the missing ranks.
constexpr auto kVerdictGrace = std::chrono::milliseconds(1000);
constexpr auto kByeBound = std::chrono::milliseconds(1000);
constexpr std::size_t kReadChunk = 256 * 1024;

// A single process: no coordinator, no sockets.
class SoloBootstrap final : public Bootstrap {
 public:
  explicit SoloBootstrap(const BootstrapConfig& c) : local_rank_(c.local_rank) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return local_rank_; }
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> mine) override {
    return {std::vector<std::byte>(mine.begin(), mine.end())};
  }
  void barrier(const std::function<void()>&) override {}
  bool peer_failed() override { return false; }
  void abort(const std::string&) override {}
  std::string local_address() const override { return "127.0.0.1"; }

 private:
  int local_rank_;
};

// One rank's connection to the coordinator; on rank 0 it also owns the coordinator. Move-less;
// not thread-safe (one thread at a time, see Bootstrap).
class TcpBootstrap final : public Bootstrap {
 public:
  TcpBootstrap(BootstrapConfig config, Fd listener);
  ~TcpBootstrap() override;
  TcpBootstrap(const TcpBootstrap&) = delete;
  TcpBootstrap& operator=(const TcpBootstrap&) = delete;

  int rank() const override { return config_.rank; }
  int size() const override { return config_.size; }
  int local_rank() const override { return config_.local_rank; }
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> mine) override;
  void barrier(const std::function<void()>& while_waiting) override;
  bool peer_failed() override;
  std::optional<Bootstrap::Failure> failure() override {
    if (!peer_failed()) return std::nullopt;
    return Bootstrap::Failure{failure_->rank, failure_->what};
  }
  std::vector<Silence> silent_peers(std::chrono::milliseconds at_least) override;
  std::chrono::milliseconds silence_bound() const override { return config_.silence; }
  void abort(const std::string& reason) override;
  std::string local_address() const override { return local_address_; }

 private:
  struct Failure {
    int rank;  // -1: the run failed as a whole (join timeout, limits)
    std::string what;
  };
  enum class Fill { data, idle, closed };

  void join(const sockaddr_in& addr);
  // One attempt; false: the coordinator closed the connection before its welcome.
  bool join_once(const sockaddr_in& addr, SteadyClock::time_point deadline);
  Fill fill(int timeout_ms);
  std::optional<Frame> wait_frame(SteadyClock::time_point deadline, bool* closed);
  void pump(int timeout_ms);
  void dispatch(Frame f);
  bool send_frame(const Bytes& frame, SteadyClock::time_point deadline);
  Bytes collective(Collective kind, std::span<const std::byte> blob,
                   const std::function<void()>& while_waiting);
  Failure decode_abort(const Bytes& body) const;
  Failure lost() const;
  [[noreturn]] void throw_failure() const;
  // The heartbeat thread: a HEARTBEAT every beat_ until stop_beating().
  void beat();
  void stop_beating();
  // How long the coordinator has left this rank's heartbeats unanswered: since the first
  // heartbeat after the one its newest report echoes was sent, less the beat an answer may
  // take. Zero on rank 0, whose coordinator is a thread of this process, and while every
  // heartbeat is answered.
  std::chrono::milliseconds coordinator_silence(SteadyClock::time_point now) const;

  BootstrapConfig config_;
  std::string label_;                         // the coordinator's "host:port", for messages
  std::unique_ptr<Coordinator> coordinator_;  // rank 0 only; outlives fd_
  Fd fd_;
  FrameBuffer in_;
  bool awaiting_result_ = false;
  std::optional<Bytes> result_;
  std::optional<Failure> failure_;
  std::string unusable_;  // set after this process aborted or a collective timed out
  std::string local_address_;
  // Liveness. send_mu_ orders whole frames on fd_ between the caller and the heartbeat thread.
  std::mutex send_mu_;
  std::chrono::milliseconds beat_;
  std::mutex beat_mu_;
  std::condition_variable beat_cv_;
  bool beat_stop_ = false;
  std::thread beater_;
  // Heartbeat n (from 1) was sent at sent_ns_[n % kBeatsKept], steady-clock nanoseconds.
  static constexpr std::uint32_t kBeatsKept = 256;
  std::array<std::atomic<std::int64_t>, kBeatsKept> sent_ns_{};
  std::atomic<std::uint32_t> beats_sent_{0};
  std::uint32_t echo_ = 0;                // the newest heartbeat the coordinator has heard
  std::vector<std::uint32_t> silent_ms_;  // the coordinator's newest report
};

TcpBootstrap::TcpBootstrap(BootstrapConfig config, Fd listener) : config_(std::move(config)) {
  if (config_.silence.count() == 0) config_.silence = config_.timeout;
  beat_ = heartbeat_interval(config_.silence);
  std::string why;
  std::optional<HostPort> target;
  if (!config_.coordinator.empty()) target = parse_host_port(config_.coordinator, &why);
  if (config_.rank == 0) {
    if (!listener) {
      listener = listen_tcp(resolve_ipv4(*target), target->str());
    } else if (!target) {
      sockaddr_in bound = local_name(listener.get());
      if (bound.sin_addr.s_addr == htonl(INADDR_ANY))
        bound.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      target = HostPort{numeric_host(bound), ntohs(bound.sin_port)};
    }
    coordinator_ = std::make_unique<Coordinator>(
        std::move(listener), CoordinatorConfig{config_.size, config_.secret, config_.timeout,
                                               config_.silence, target->str()});
  }
  label_ = target->str();
  join(resolve_ipv4(*target));
  silent_ms_.assign(static_cast<std::size_t>(config_.size), 0);
  beater_ = std::thread([this] { beat(); });
}

TcpBootstrap::~TcpBootstrap() {
  stop_beating();
  if (fd_) {
    try {
      send_frame(encode_empty(Msg::bye), SteadyClock::now() + std::min(config_.timeout, kByeBound));
    } catch (const std::exception&) {
    }
    ::shutdown(fd_.get(), SHUT_WR);
    std::byte sink[4096];
    while (::recv(fd_.get(), sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    fd_.reset();
  }
  coordinator_.reset();
}

void TcpBootstrap::join(const sockaddr_in& addr) {
  const auto timeout = config_.timeout;
  const auto deadline = SteadyClock::now() + timeout;
  // Closed by the coordinator before its welcome, without a reject: it is shedding
  // unauthenticated connections (a flood, or many ranks at once); connect again.
  for (;;) {
    if (join_once(addr, deadline)) return;
    if (SteadyClock::now() >= deadline) {
      throw Error("bootstrap: cannot reach coordinator " + label_ + " within " +
                  seconds_text(timeout) + " (connection closed during the handshake)");
    }
    std::this_thread::sleep_for(std::min<SteadyClock::duration>(std::chrono::milliseconds(10),
                                                                deadline - SteadyClock::now()));
  }
}

bool TcpBootstrap::join_once(const sockaddr_in& addr, SteadyClock::time_point deadline) {
  const auto timeout = config_.timeout;
  const std::string at = "bootstrap: coordinator at " + label_;
  std::optional<Frame> challenge;
  while (!challenge) {
    fd_ = connect_until(addr, label_, deadline, timeout);
    in_ = FrameBuffer();
    bool closed = false;
    try {
      challenge = wait_frame(deadline, &closed);
    } catch (const ProtocolError& e) {
      throw Error(at + " is not a fabflow coordinator (" + e.what() + ")");
    }
    if (challenge) break;
    if (!closed || SteadyClock::now() >= deadline) {
      throw Error(
          "bootstrap: cannot reach coordinator " + label_ + " within " + seconds_text(timeout) +
          (closed ? " (connection closed before the handshake)" : " (no challenge received)"));
    }
    // Closed before the challenge: the coordinator is shedding connections; try again.
    std::this_thread::sleep_for(std::min<SteadyClock::duration>(std::chrono::milliseconds(10),
                                                                deadline - SteadyClock::now()));
  }

  if (challenge->type != static_cast<std::uint32_t>(Msg::challenge)) {
    throw Error(at + " is not a fabflow coordinator (unexpected first message)");
  }
  Nonce server_nonce;
  try {
    server_nonce = decode_challenge(challenge->body);
  } catch (const ProtocolError& e) {
    throw Error(at + ": " + e.what());
  }
  Hello hello;
  hello.rank = static_cast<std::uint32_t>(config_.rank);
  hello.size = static_cast<std::uint32_t>(config_.size);
  hello.client_nonce = random_nonce();
  hello.mac = hello_mac(config_.secret, server_nonce, hello.rank, hello.size, hello.client_nonce);
  if (!send_frame(encode_hello(hello), deadline)) return false;

  bool welcomed = false;
  for (;;) {
    bool closed = false;
    std::optional<Frame> f;
    try {
      f = wait_frame(welcomed ? deadline + kVerdictGrace : deadline, &closed);
    } catch (const ProtocolError& e) {
      throw Error(at + " sent a malformed message (" + e.what() + ")");
    }
    if (!f && closed) {
      if (welcomed) throw PeerError(0, lost().what);
      return false;
    }
    if (!f) {
      throw Error("bootstrap: timed out after " + seconds_text(timeout) +
                  (welcomed ? " waiting for every rank to join coordinator " + label_
                            : " waiting for coordinator " + label_ + " to answer the handshake"));
    }
    switch (static_cast<Msg>(f->type)) {
      case Msg::reject: throw Error(at + " rejected this process: " + printable(f->body));
      case Msg::abort: failure_ = decode_abort(f->body); throw_failure();
      case Msg::welcome: {
        Mac mac{};
        if (welcomed || f->body.size() != mac.size())
          throw Error(at + " sent an unexpected welcome");
        std::ranges::copy(f->body, mac.begin());
        if (!same_mac(mac, welcome_mac(config_.secret, server_nonce, hello.client_nonce))) {
          throw Error(at + " does not know the shared secret");
        }
        welcomed = true;
        break;
      }
      case Msg::ready:
        if (!welcomed) throw Error(at + " sent ready before welcome");
        local_address_ = numeric_host(local_name(fd_.get()));
        return true;
      default:
        throw Error(at + " sent an unexpected message (type " + std::to_string(f->type) + ")");
    }
  }
}

TcpBootstrap::Fill TcpBootstrap::fill(int timeout_ms) {
  bool got = false;
  for (;;) {
    auto space = in_.prepare(kReadChunk);
    const ssize_t n = ::recv(fd_.get(), space.data(), space.size(), MSG_DONTWAIT);
    if (n > 0) {
      in_.commit(static_cast<std::size_t>(n));
      got = true;
      if (static_cast<std::size_t>(n) < space.size()) return Fill::data;
      continue;
    }
    if (n == 0) return Fill::closed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Fill::closed;
    if (got) return Fill::data;
    if (timeout_ms <= 0) return Fill::idle;
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return Fill::idle;
    timeout_ms = 0;
  }
}

std::optional<Frame> TcpBootstrap::wait_frame(SteadyClock::time_point deadline, bool* closed) {
  for (;;) {
    if (auto f = in_.take(kMaxFrame)) return f;
    if (SteadyClock::now() >= deadline) return std::nullopt;
    if (fill(ms_until(deadline)) == Fill::closed) {
      if (auto f = in_.take(kMaxFrame)) return f;
      *closed = true;
      return std::nullopt;
    }
  }
}

void TcpBootstrap::pump(int timeout_ms) {
  if (failure_) return;
  const Fill state = fill(timeout_ms);
  try {
    while (!failure_) {
      auto f = in_.take(kMaxFrame);
      if (!f) break;
      dispatch(std::move(*f));
    }
  } catch (const ProtocolError& e) {
    failure_ = Failure{
        0, "bootstrap: coordinator " + label_ + " sent a malformed message (" + e.what() + ")"};
  }
  if (state == Fill::closed && !failure_) failure_ = lost();
  if (!failure_) {
    const auto silent = coordinator_silence(SteadyClock::now());
    if (silent > config_.silence) {
      failure_ =
          Failure{0, "bootstrap: rank 0 stopped answering: coordinator " + label_ +
                         " left this rank's heartbeats unanswered for " + seconds_text(silent) +
                         " (its process is stopped, hung or starved of CPU)"};
    }
  }
}

void TcpBootstrap::dispatch(Frame f) {
  switch (static_cast<Msg>(f.type)) {
    case Msg::abort: failure_ = decode_abort(f.body); return;
    case Msg::result:
      if (!awaiting_result_ || result_) throw ProtocolError("unexpected result");
      result_ = std::move(f.body);
      return;
    case Msg::liveness: {
      Liveness l = decode_liveness(f.body, static_cast<std::size_t>(config_.size));
      if (l.echo > beats_sent_.load(std::memory_order_acquire)) {
        throw ProtocolError("liveness report echoes a heartbeat not sent");
      }
      if (l.echo < echo_) throw ProtocolError("liveness reports out of order");
      echo_ = l.echo;
      silent_ms_ = std::move(l.silent_ms);
      return;
    }
    default: throw ProtocolError("unexpected message type " + std::to_string(f.type));
  }
}

bool TcpBootstrap::send_frame(const Bytes& frame, SteadyClock::time_point deadline) {
  const std::lock_guard lock(send_mu_);
  std::size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n =
        ::send(fd_.get(), frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
    pollfd p{fd_.get(), POLLOUT, 0};
    if (::poll(&p, 1, ms_until(deadline)) == 0) {
      throw Error("bootstrap: timed out after " + seconds_text(config_.timeout) +
                  " sending to coordinator " + label_);
    }
  }
  return true;
}

std::vector<std::vector<std::byte>> TcpBootstrap::allgather(std::span<const std::byte> mine) {
  const Bytes body = collective(Collective::allgather, mine, {});
  try {
    return decode_result(body, static_cast<std::size_t>(config_.size));
  } catch (const ProtocolError& e) {
    failure_ = Failure{
        0, "bootstrap: coordinator " + label_ + " sent a malformed result (" + e.what() + ")"};
    throw_failure();
  }
}

void TcpBootstrap::barrier(const std::function<void()>& while_waiting) {
  const Bytes body = collective(Collective::barrier, {}, while_waiting);
  try {
    decode_result(body, 0);
  } catch (const ProtocolError& e) {
    failure_ = Failure{
        0, "bootstrap: coordinator " + label_ + " sent a malformed result (" + e.what() + ")"};
    throw_failure();
  }
}

Bytes TcpBootstrap::collective(Collective kind, std::span<const std::byte> blob,
                               const std::function<void()>& while_waiting) {
  const std::string name = collective_name(kind);
  if (!unusable_.empty()) throw Error(unusable_);
  if (peer_failed()) throw_failure();
  if (blob.size() > kMaxFrame - 4) {
    throw Error("bootstrap: allgather blob of " + std::to_string(blob.size()) +
                " bytes exceeds the " + std::to_string(kMaxFrame >> 20) + " MiB limit");
  }
  const auto deadline = SteadyClock::now() + config_.timeout;
  awaiting_result_ = true;  // stays set after a timeout: a late result is then dropped quietly
  bool sent = false;
  try {
    sent = send_frame(encode_gather(kind, blob), deadline);
  } catch (const Error&) {
    unusable_ = "bootstrap: unusable after an earlier " + name + " timed out";
    throw;
  }
  if (!sent) {
    pump(0);
    if (!failure_) failure_ = lost();
  }
  for (;;) {
    if (result_) {
      awaiting_result_ = false;
      Bytes body = std::move(*result_);
      result_.reset();
      return body;
    }
    if (failure_) {
      awaiting_result_ = false;
      throw_failure();
    }
    if (while_waiting) {
      pump(0);
      if (!result_ && !failure_) while_waiting();
      continue;
    }
    if (SteadyClock::now() >= deadline) {
      unusable_ = "bootstrap: unusable after an earlier " + name + " timed out";
      const std::string what = "bootstrap: " + name + " timed out after " +
                               seconds_text(config_.timeout) + " waiting for the other ranks";
      const auto silent = silent_peers(config_.timeout / 2);
      if (silent.empty()) throw Error(what + " (every rank was answering: slow, not stuck)");
      throw PeerError(silent.front().rank, what + ": rank " + std::to_string(silent.front().rank) +
                                               " stopped answering (no sign of life for " +
                                               seconds_text(silent.front().silent) + ")");
    }
    // Woken at least once a beat: a coordinator gone silent is noticed within the silence bound.
    pump(std::min(ms_until(deadline), static_cast<int>(beat_.count())));
  }
}

bool TcpBootstrap::peer_failed() {
  if (!failure_) pump(0);
  return failure_.has_value();
}

std::vector<Bootstrap::Silence> TcpBootstrap::silent_peers(std::chrono::milliseconds at_least) {
  using std::chrono::milliseconds;
  if (!failure_) pump(0);
  const auto now = SteadyClock::now();
  // A healthy rank is heard from every beat; a report is at most a beat old when read.
  const milliseconds bound = std::max(at_least, 3 * beat_);
  const milliseconds coordinator = coordinator_silence(now);
  if (coordinator >= bound) return {Silence{0, coordinator}};  // nothing fresher can be known
  // The report's figures as sent: at least that long, and the report is recent (the
  // coordinator answers heartbeats).
  std::vector<Silence> out;
  for (std::size_t r = 0; r < silent_ms_.size(); ++r) {
    if (static_cast<int>(r) == config_.rank) continue;
    const milliseconds silent(silent_ms_[r]);
    if (silent >= bound) out.push_back(Silence{static_cast<int>(r), silent});
  }
  std::ranges::sort(out, [](const Silence& a, const Silence& b) { return a.silent > b.silent; });
  return out;
}

std::chrono::milliseconds TcpBootstrap::coordinator_silence(SteadyClock::time_point now) const {
  const std::uint32_t sent = beats_sent_.load(std::memory_order_acquire);
  if (coordinator_ || echo_ >= sent) return std::chrono::milliseconds(0);
  const std::uint32_t first_unanswered =
      sent - echo_ > kBeatsKept ? sent - kBeatsKept + 1 : echo_ + 1;
  const SteadyClock::time_point at{std::chrono::nanoseconds(
      sent_ns_[first_unanswered % kBeatsKept].load(std::memory_order_relaxed))};
  // The coordinator reports once a beat: an answer may take a beat without anything wrong.
  const auto unanswered = std::chrono::duration_cast<std::chrono::milliseconds>(now - at);
  return std::max(unanswered - beat_, std::chrono::milliseconds(0));
}

void TcpBootstrap::beat() {
  std::unique_lock lock(beat_mu_);
  while (!beat_cv_.wait_for(lock, beat_, [this] { return beat_stop_; })) {
    // A caller sending a long frame holds send_mu_: the coordinator hears those bytes instead.
    std::unique_lock send_lock(send_mu_, std::try_to_lock);
    if (!send_lock.owns_lock()) continue;
    const std::uint32_t seq = beats_sent_.load(std::memory_order_relaxed) + 1;
    const Bytes frame = encode_heartbeat(seq);
    // Stamped and counted before it can be answered. One that finds the socket full counts as
    // sent and unanswered: a coordinator that reads nothing is as good as stuck.
    sent_ns_[seq % kBeatsKept].store(SteadyClock::now().time_since_epoch().count(),
                                     std::memory_order_relaxed);
    beats_sent_.store(seq, std::memory_order_release);
    const ssize_t n = ::send(fd_.get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 || static_cast<std::size_t>(n) == frame.size()) continue;  // full: skip a beat
    // Part of a frame is out: finish it, or the stream would be broken for the caller.
    std::size_t sent = static_cast<std::size_t>(n);
    const auto give_up = SteadyClock::now() + config_.silence;
    while (sent < frame.size() && SteadyClock::now() < give_up) {
      pollfd p{fd_.get(), POLLOUT, 0};
      if (::poll(&p, 1, ms_until(give_up)) <= 0) break;
      const ssize_t m =
          ::send(fd_.get(), frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (m > 0) sent += static_cast<std::size_t>(m);
      if (m < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
    }
    if (sent < frame.size()) ::shutdown(fd_.get(), SHUT_RDWR);  // the caller sees it vanish
  }
}

void TcpBootstrap::stop_beating() {
  if (!beater_.joinable()) return;
  {
    const std::lock_guard lock(beat_mu_);
    beat_stop_ = true;
  }
  beat_cv_.notify_one();
  beater_.join();
}

void TcpBootstrap::abort(const std::string& reason) {
  if (unusable_.empty()) unusable_ = "bootstrap: this process aborted (" + reason + ")";
  try {
    send_frame(encode_text(Msg::abort, reason),
               SteadyClock::now() + std::min(config_.timeout, kByeBound));
  } catch (const std::exception&) {
  }
}

TcpBootstrap::Failure TcpBootstrap::decode_abort(const Bytes& body) const {
  BodyReader r(body);
  if (r.left() < 4) return {0, "bootstrap: coordinator " + label_ + " aborted the run"};
  auto rank = static_cast<int>(r.u32());
  if (rank < -1 || rank >= config_.size) rank = -1;
  return {rank, "bootstrap: " + printable(r.rest())};
}

TcpBootstrap::Failure TcpBootstrap::lost() const {
  return {0, "bootstrap: rank 0 vanished (coordinator " + label_ + " closed the connection)"};
}

void TcpBootstrap::throw_failure() const {
  if (failure_->rank >= 0) throw PeerError(failure_->rank, failure_->what);
  throw Error(failure_->what);
}

// 32 random bytes as hex: a secret no one outside the job can guess.
std::string fresh_secret() {
  unsigned char bytes[32];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("bootstrap: getrandom() failed: " + errno_text(errno));
    got += static_cast<std::size_t>(n);
  }
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : bytes) {
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  return hex;
}

const char* const kStoreCoordinator = "fabflow.coordinator";
const char* const kStoreSecret = "fabflow.secret";

// Started by a PMIx or PMI2 launcher with no coordinator given: rank 0 opens the coordinator (on
// loopback when the whole job is on one node, else on this host's address) and publishes its
// address and a fresh secret in the resource manager's store; the other ranks read them there.
// A secret the user gave (FABFLOW_SECRET or a file) is kept; rank 0 publishes the one it uses.
void rendezvous_through_job_store(BootstrapConfig& config, Fd& listener) {
  const std::unique_ptr<JobStore> store = open_job_store(config.timeout);
  const std::string via = store->name();
  if (store->rank() != config.rank) {
    throw UsageError("bootstrap: rank " + std::to_string(config.rank) + " is " + via + " rank " +
                     std::to_string(store->rank()) + "; under " + via +
                     " leave the rank to the launcher");
  }
  if (config.rank == 0) {
    const std::string host = store->nodes() == 1 ? "127.0.0.1" : host_ipv4();
    listener = listen_tcp(resolve_ipv4(HostPort{host, 0}), host + ":0");
    config.coordinator = HostPort{host, ntohs(local_name(listener.get()).sin_port)}.str();
    if (config.secret.empty()) config.secret = fresh_secret();
    store->put(kStoreCoordinator, config.coordinator);
    store->put(kStoreSecret, config.secret);
  }
  store->fence();
  if (config.rank == 0) return;
  // Written by rank 0 of this job, still checked like any other input.
  config.coordinator = store->get(0, kStoreCoordinator);
  std::string why;
  if (!parse_host_port(config.coordinator, &why)) {
    throw Error("bootstrap: " + via + " gave the coordinator address " + config.coordinator +
                ", which " + why);
  }
  if (config.secret.empty()) config.secret = store->get(0, kStoreSecret);
  if (config.secret.empty()) throw Error("bootstrap: " + via + " gave an empty secret");
}

}  // namespace

std::unique_ptr<Bootstrap> make_tcp_bootstrap(BootstrapConfig config) {
  Fd given(config.listen_fd);  // an inherited listening socket is ours from here on
  config.fill_from_env();
  Fd listener = config.listen_fd == given.get() ? std::move(given) : Fd(config.listen_fd);
  config.listen_fd = -1;
  if (config.rank != 0) listener.reset();
  if (config.size == 1) return std::make_unique<SoloBootstrap>(config);
  if (config.coordinator.empty() && !listener) rendezvous_through_job_store(config, listener);
  if (listener) listener = adopt_listener(std::move(listener));
  return std::make_unique<TcpBootstrap>(std::move(config), std::move(listener));
}

}  // namespace fabflow
