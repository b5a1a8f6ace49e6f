// The inbound benchmarks: C clients keep a window of one-sided operations (read, write, fadd,
// cswap) outstanding against one server, which only drives progress; or a window of sends,
// which the server receives into buffers it keeps posted (window per client). The loops are
// templates over the concrete transport so the data path is bound statically.
#include <fabflow/bench/inbound.h>
#include <fabflow/bootstrap.h>
#include <fabflow/progress.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <thread>

#include "common/affinity.h"
#include "common/bounded_wait.h"
#include "transport/dispatch.h"

namespace fabflow {
namespace {

constexpr std::size_t kPollBatch = 16;
constexpr std::size_t kSlotAlign = 64;
// The aliasing probe's pairs: both span two pages and two cache lines; only whether their 12
// low address bits agree differs (the server's region is page-aligned).
constexpr std::uint64_t kProbeSame = 4096;
constexpr std::uint64_t kProbeDifferent = 4096 + 64;
constexpr std::uint64_t kProbeRegion = 8192;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// splitmix64: the clients' counter choice (fast, and the same sequence for the same seed).
struct Rng {
  std::uint64_t state;
  std::uint64_t next() noexcept {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

// What a client tells the server after each row (followed by `samples` doubles).
struct ClientSummary {
  std::uint64_t completed = 0;  // warm-up and measured operations
  std::uint64_t measured = 0;
  std::uint64_t successes = 0;  // cswap: swaps that took effect; fadd: == completed
  std::uint64_t samples = 0;
  double seconds = 0;
  LatencyFigures latency;
};

// What a send of 16 bytes or more carries first: the client's rank and the message's number
// (0, 1, ... over the client's warm-up and measured sends of one row).
struct SendStamp {
  std::uint64_t rank;
  std::uint64_t seq;
};
constexpr std::size_t kStampBytes = sizeof(SendStamp);

// The bytes of one send buffer (client) and one posted receive (server); 0 without sends.
std::size_t send_slot_bytes(const InboundParams& p) {
  if (std::find(p.ops.begin(), p.ops.end(), Op::send) == p.ops.end()) return 0;
  const std::size_t largest = *std::max_element(p.sizes.begin(), p.sizes.end());
  return round_up(std::max(largest, kStampBytes), kSlotAlign);
}

// The sum 0 + 1 + ... + (n - 1), modulo 2^64 (as the server's sum of sequence numbers wraps).
std::uint64_t sum_below(std::uint64_t n) { return n % 2 == 0 ? n / 2 * (n - 1) : (n - 1) / 2 * n; }

// One row's choice of operation and placement.
struct RowSpec {
  Op op;
  std::size_t size;
  std::uint64_t counters;
  Aliasing aliasing;
};

template <class T>
class InboundRunner {
 public:
  InboundRunner(T& t, Bootstrap& boot, const InboundParams& p, const Clock& clock,
                bool progress_thread)
      : t_(t),
        boot_(boot),
        p_(p),
        clock_(clock),
        inline_progress_(!progress_thread),
        server_(boot.size() - 1),
        is_server_(boot.rank() == server_) {
    std::size_t max_size = 8;
    for (Op op : p.ops)
      if (!is_atomic(op))
        for (std::size_t s : p.sizes) max_size = std::max(max_size, s);
    slot_len_ = round_up(std::max<std::size_t>(max_size, kSlotAlign), kSlotAlign);
    counter_base_ = slot_len_ * static_cast<std::size_t>(server_);
    counter_len_ = static_cast<std::size_t>(counter_region_bytes(p));
    send_slot_ = send_slot_bytes(p);
    send_base_ = slot_len_ + round_up(8 * std::size_t{p.window}, kSlotAlign);
    // Server: one payload slot per client, then the counters. Client: a source / target
    // buffer, one 8-byte result word per window slot, then one send buffer per window slot.
    const std::size_t len = is_server_ ? counter_base_ + std::max<std::size_t>(counter_len_, 8)
                                       : send_base_ + send_slot_ * std::size_t{p.window};
    mr_ = t_.allocate(len, kAllAccess);
    // Server, for sends: the receive pool, window buffers per client.
    if (is_server_ && send_slot_)
      rx_mr_ = t_.allocate(send_slot_ * std::size_t{p.window} * static_cast<std::size_t>(server_),
                           kAllAccess);
    auto keys = boot_.allgather(t_.export_key(*mr_));
    if (!is_server_) {
      remote_ = t_.import_key(server_, keys[static_cast<std::size_t>(server_)]);
      if (!remote_.contains(0, counter_base_ + std::max<std::size_t>(counter_len_, 8)))
        throw PeerError(server_, "inbound bench: the server registered a region too small");
    }
  }

  // Runs one row; the server returns it.
  std::optional<InboundRow> run(const RowSpec& row) {
    const auto offsets = is_atomic(row.op) ? counter_offsets(row.counters, p_.stride, row.aliasing)
                                           : std::vector<std::uint64_t>{};
    const bool sends = row.op == Op::send;
    if (is_server_) zero_counters(offsets);
    if (sends && is_server_) start_receiving();
    wait_all();
    ClientSummary mine;
    std::vector<double> samples;
    std::vector<std::uint64_t> seen(offsets.size(), 0);  // cswap: last value seen per counter
    Rng rng{p_.seed + static_cast<std::uint64_t>(boot_.rank()) * 0x100000001b3ull +
            static_cast<std::uint64_t>(row.counters)};
    if (!is_server_) phase(row, offsets, p_.warmup, nullptr, seen, rng, mine);
    if (sends && is_server_) receive(p_.warmup * static_cast<std::uint64_t>(server_), row);
    wait_all();
    double cpu0 = process_cpu_seconds();
    double server_seconds = 0;
    if (!is_server_) {
      samples.reserve(p_.iterations);
      auto t0 = std::chrono::steady_clock::now();
      phase(row, offsets, p_.iterations, &samples, seen, rng, mine);
      mine.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      mine.measured = p_.iterations;
    } else if (sends) {
      auto t0 = std::chrono::steady_clock::now();
      receive(p_.iterations * static_cast<std::uint64_t>(server_), row);
      server_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    wait_all();
    double server_cpu = process_cpu_seconds() - cpu0;

    std::vector<std::byte> blob;
    if (!is_server_) {
      mine.latency = summarize(samples);  // sorts: the kept samples are evenly spaced ranks
      std::vector<double> kept;
      const std::size_t n = samples.size();
      const std::size_t keep = std::min(n, kInboundMaxSamples);
      for (std::size_t i = 0; i < keep; ++i) kept.push_back(samples[i * n / keep]);
      mine.samples = kept.size();
      blob.resize(sizeof mine + kept.size() * sizeof(double));
      std::memcpy(blob.data(), &mine, sizeof mine);
      if (!kept.empty())
        std::memcpy(blob.data() + sizeof mine, kept.data(), kept.size() * sizeof(double));
    }
    auto all = boot_.allgather(blob);
    if (!is_server_) return std::nullopt;
    return report(row, offsets, all, server_cpu, server_seconds);
  }

 private:
  std::byte* buf() const noexcept { return mr_->data(); }
  std::uint64_t* results() const noexcept {
    return reinterpret_cast<std::uint64_t*>(mr_->data() + slot_len_);
  }
  std::uint64_t* counter(std::uint64_t offset) const noexcept {
    return reinterpret_cast<std::uint64_t*>(mr_->data() + counter_base_ + offset);
  }

  void zero_counters(const std::vector<std::uint64_t>& offsets) {
    for (std::uint64_t o : offsets) std::atomic_ref<std::uint64_t>(*counter(o)).store(0);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }

  // A barrier during which this rank keeps the provider progressing: the server's whole job.
  void wait_all() {
    if (inline_progress_)
      boot_.barrier([this] {
        for (int i = 0; i < 256; ++i) t_.progress();
      });
    else
      boot_.barrier([] { std::this_thread::sleep_for(std::chrono::microseconds(50)); });
  }

  struct Slot {
    std::uint64_t t0 = 0;
    std::uint64_t counter = 0;  // index into offsets
    std::uint64_t compare = 0;
    bool busy = false;
  };

  Status post(const RowSpec& row, std::size_t slot, std::uint64_t offset, std::uint64_t compare) {
    const std::uint64_t ctx = slot + 1;
    const auto mine = static_cast<std::uint64_t>(boot_.rank()) * slot_len_;
    switch (row.op) {
      case Op::read:
        return t_.post_read(server_, buf(), row.size, mr_->desc(), remote_, mine, ctx, kSignal);
      case Op::write:
        return t_.post_write(server_, buf(), row.size, mr_->desc(), remote_, mine, ctx, kSignal);
      case Op::fadd:
        return t_.post_atomic(server_, AtomicOp::fetch_add, 1, 0, results() + slot, mr_->desc(),
                              remote_, counter_base_ + offset, ctx, kSignal);
      case Op::cswap:
        return t_.post_atomic(server_, AtomicOp::compare_swap, compare + 1, compare,
                              results() + slot, mr_->desc(), remote_, counter_base_ + offset, ctx,
                              kSignal);
      case Op::send: {
        std::byte* b = buf() + send_base_ + slot * send_slot_;
        if (row.size >= kStampBytes) {
          const SendStamp stamp{static_cast<std::uint64_t>(boot_.rank()), compare};
          std::memcpy(b, &stamp, sizeof stamp);
        }
        return t_.post_send(server_, b, row.size, mr_->desc(), ctx, kSignal);
      }
      default: return Status::failed;
    }
  }

  // `count` operations with a window of p_.window outstanding; samples post-to-completion
  // times when `samples` is given.
  void phase(const RowSpec& row, const std::vector<std::uint64_t>& offsets, std::uint64_t count,
             std::vector<double>* samples, std::vector<std::uint64_t>& seen, Rng& rng,
             ClientSummary& sum) {
    const std::uint64_t first_seq = sum.completed;  // send: the number of this phase's first
    std::vector<Slot> slots(p_.window);
    std::vector<std::size_t> free;
    for (std::size_t i = slots.size(); i-- > 0;) free.push_back(i);
    std::uint64_t posted = 0, done = 0;
    BoundedWait dog(std::chrono::milliseconds(p_.target.timeout_ms), &boot_);
    dog.yield_when_idle(p_.yield);
    Completion c[kPollBatch];
    while (done < count) {
      bool progressed = false;
      while (posted < count && !free.empty()) {
        const std::size_t slot = free.back();
        Slot& s = slots[slot];
        s.counter = offsets.empty() ? 0 : rng.next() % offsets.size();
        s.compare = row.op == Op::send ? first_seq + posted : offsets.empty() ? 0 : seen[s.counter];
        s.t0 = clock_.now();
        Status st = post(row, slot, offsets.empty() ? 0 : offsets[s.counter], s.compare);
        if (st == Status::again) break;
        if (st == Status::failed) throw Error("inbound bench: post: " + t_.last_error());
        s.busy = true;
        free.pop_back();
        ++posted;
        progressed = true;
      }
      int n = t_.poll_tx(c);
      if (n < 0) throw Error("inbound bench: " + t_.last_error());
      const std::uint64_t now = n > 0 ? clock_.now() : 0;
      for (int i = 0; i < n; ++i) {
        const std::uint64_t ctx = c[i].context;
        if (ctx == 0 || ctx > slots.size() || !slots[ctx - 1].busy)
          throw Error("inbound bench: a completion for no outstanding operation");
        const std::size_t slot = ctx - 1;
        Slot& s = slots[slot];
        if (samples) samples->push_back(clock_.to_ns(now - s.t0));
        if (row.op == Op::cswap) {
          const std::uint64_t old = std::atomic_ref<std::uint64_t>(results()[slot]).load();
          if (old == s.compare) ++sum.successes;
          seen[s.counter] = old == s.compare ? old + 1 : old;
        } else if (row.op == Op::fadd) {
          ++sum.successes;
        }
        s.busy = false;
        free.push_back(slot);
        ++done;
        ++sum.completed;
      }
      if (n > 0 || progressed)
        dog.reset();
      else
        dog.idle("inbound bench", "waiting for one-sided completions");
    }
  }

  // Server, before a send row's warm-up: every receive of the pool posted (once: they stay
  // posted between rows, each reposted as soon as its message is read) and the counts zeroed.
  void start_receiving() {
    got_.assign(static_cast<std::size_t>(server_), 0);
    seq_sum_.assign(static_cast<std::size_t>(server_), 0);
    if (receives_posted_) return;
    for (std::size_t k = 0; k < std::size_t{p_.window} * static_cast<std::size_t>(server_); ++k)
      post_receive(k);
    receives_posted_ = true;
  }

  void post_receive(std::size_t k) {
    const int client = static_cast<int>(k / p_.window);
    BoundedWait dog(std::chrono::milliseconds(p_.target.timeout_ms), &boot_);
    while (true) {
      const Status st =
          t_.post_recv(client, rx_mr_->data() + k * send_slot_, send_slot_, rx_mr_->desc(), k + 1);
      if (st == Status::ok) return;
      if (st == Status::failed) throw Error("inbound bench: post_recv: " + t_.last_error());
      t_.progress();
      dog.idle("inbound bench", "waiting to post a receive");
    }
  }

  // Server: reads `count` messages, checks each one's length and stamp (data from a client is
  // untrusted), counts them per client and posts its buffer again.
  void receive(std::uint64_t count, const RowSpec& row) {
    const std::size_t pool = std::size_t{p_.window} * static_cast<std::size_t>(server_);
    const std::uint64_t sends_per_client = p_.warmup + p_.iterations;
    BoundedWait dog(std::chrono::milliseconds(p_.target.timeout_ms), &boot_);
    Completion c[kPollBatch];
    std::uint64_t got = 0;
    while (got < count) {
      const int n =
          t_.poll_rx(std::span<Completion>(c, std::min<std::uint64_t>(kPollBatch, count - got)));
      if (n < 0) throw Error("inbound bench: " + t_.last_error());
      for (int i = 0; i < n; ++i) {
        const std::uint64_t ctx = c[i].context;
        if (ctx == 0 || ctx > pool)
          throw Error("inbound bench: a receive completion for no posted buffer");
        const std::size_t k = ctx - 1;
        if (c[i].length != row.size)
          throw PeerError(-1, "inbound bench: a message of " + std::to_string(c[i].length) +
                                  " bytes in a row of " + std::to_string(row.size));
        if (row.size >= kStampBytes) {
          SendStamp stamp;
          std::memcpy(&stamp, rx_mr_->data() + k * send_slot_, sizeof stamp);
          if (stamp.rank >= static_cast<std::uint64_t>(server_) || stamp.seq >= sends_per_client)
            throw PeerError(-1, "inbound bench: a message with an impossible stamp");
          ++got_[stamp.rank];
          seq_sum_[stamp.rank] += stamp.seq;
        }
        post_receive(k);
      }
      got += static_cast<std::uint64_t>(n);
      if (n > 0)
        dog.reset();
      else
        dog.idle("inbound bench", "waiting for the clients' sends");
    }
  }

  // The server's row from every client's summary (untrusted: checked before use).
  InboundRow report(const RowSpec& spec, const std::vector<std::uint64_t>& offsets,
                    const std::vector<std::vector<std::byte>>& all, double server_cpu,
                    double server_seconds) {
    InboundRow row;
    row.op = spec.op;
    row.size = spec.size;
    row.counters = is_atomic(spec.op) ? offsets.size() : 0;
    row.aliasing = spec.aliasing;
    row.server_cpu_s = server_cpu;
    std::vector<double> merged;
    std::uint64_t completed = 0, successes = 0;
    for (int c = 0; c < server_; ++c) {
      const auto& b = all[static_cast<std::size_t>(c)];
      ClientSummary s;
      if (b.size() < sizeof s) throw PeerError(c, "inbound bench: malformed client summary");
      std::memcpy(&s, b.data(), sizeof s);
      if (s.samples > kInboundMaxSamples || b.size() != sizeof s + s.samples * sizeof(double) ||
          s.measured != p_.iterations || s.completed != p_.warmup + p_.iterations ||
          s.successes > s.completed || !(s.seconds > 0 && s.seconds < 1e7) ||
          !(s.latency.min >= 0 && s.latency.max < 1e15))
        throw PeerError(
            c, "inbound bench: client " + std::to_string(c) + " reported an impossible summary");
      const std::size_t at = merged.size();
      merged.resize(at + s.samples);
      if (s.samples) std::memcpy(merged.data() + at, b.data() + sizeof s, s.samples * 8);
      row.clients.push_back({s.measured, s.seconds, LatencyStats{s.latency}});
      row.ops += s.measured;
      row.seconds = std::max(row.seconds, s.seconds);
      completed += s.completed;
      successes += s.successes;
    }
    for (std::size_t i = merged.size(); i-- > 0;)
      if (!(merged[i] >= 0 && merged[i] < 1e15))
        throw PeerError(-1, "inbound bench: a client sent an impossible latency sample");
    row.latency = summarize(merged);
    row.ops_per_s = static_cast<double>(row.ops) / row.seconds;
    row.mbps = row.ops_per_s * static_cast<double>(spec.size) / 1e6;
    if (is_atomic(spec.op)) {
      std::atomic_thread_fence(std::memory_order_seq_cst);
      for (std::uint64_t o : offsets)
        row.counter_sum += std::atomic_ref<std::uint64_t>(*counter(o)).load();
      row.expected_sum = spec.op == Op::fadd ? completed : successes;
      row.checked = true;
      row.check_passed = row.counter_sum == row.expected_sum;
    }
    if (spec.op == Op::send) {
      // The server read exactly clients x iterations messages in the measured phase.
      row.server_rate = true;
      row.seconds = server_seconds;
      row.ops_per_s = static_cast<double>(row.ops) / server_seconds;
      row.mbps = row.ops_per_s * static_cast<double>(spec.size) / 1e6;
      row.expected = completed;
      // Stamped messages say whose and which they are: every client's, each exactly once.
      if (spec.size >= kStampBytes) {
        const std::uint64_t n = p_.warmup + p_.iterations;
        row.checked = true;
        row.check_passed = true;
        for (int c = 0; c < server_; ++c) {
          const auto i = static_cast<std::size_t>(c);
          row.received += got_[i];
          row.check_passed = row.check_passed && got_[i] == n && seq_sum_[i] == sum_below(n);
        }
      }
    }
    return row;
  }

  T& t_;
  Bootstrap& boot_;
  const InboundParams& p_;
  const Clock& clock_;
  const bool inline_progress_;
  const int server_;
  const bool is_server_;
  std::size_t slot_len_ = 0;
  std::size_t counter_base_ = 0;
  std::size_t counter_len_ = 0;
  std::size_t send_slot_ = 0;  // bytes per send buffer and posted receive (0: no sends)
  std::size_t send_base_ = 0;  // client: where the send buffers start in mr_
  std::unique_ptr<MemoryRegion> mr_;
  std::unique_ptr<MemoryRegion> rx_mr_;  // server: the receive pool
  RemoteMemory remote_;
  bool receives_posted_ = false;
  std::vector<std::uint64_t> got_;      // server, send rows: stamped messages per client
  std::vector<std::uint64_t> seq_sum_;  // and the sum of their sequence numbers
};

}  // namespace

std::vector<std::uint64_t> counter_offsets(std::uint64_t counters, std::uint64_t stride,
                                           Aliasing aliasing) {
  switch (aliasing) {
    case Aliasing::same_low12: return {0, kProbeSame};
    case Aliasing::different_low12: return {0, kProbeDifferent};
    case Aliasing::none: break;
  }
  std::vector<std::uint64_t> out;
  out.reserve(counters);
  for (std::uint64_t i = 0; i < counters; ++i) out.push_back(i * stride);
  return out;
}

std::uint64_t counter_region_bytes(const InboundParams& p) {
  if (std::none_of(p.ops.begin(), p.ops.end(), is_atomic)) return 0;
  std::uint64_t bytes = p.probe_aliasing ? kProbeRegion : 8;
  for (std::uint64_t k : p.counters) bytes = std::max(bytes, k * p.stride);
  return bytes;
}

bool inbound_progress_thread(const InboundParams& params, const Capabilities& caps, int rank,
                             int size) {
  return rank == size - 1 && needs_progress_thread(params.progress, caps, /*passive=*/true);
}

InboundResult run_inbound(const InboundParams& params, Bootstrap& boot) {
  TransportOptions opts = params.target.transport(params.ops, boot.local_address());
  // The server keeps a window of receives posted per client.
  if (std::find(params.ops.begin(), params.ops.end(), Op::send) != params.ops.end())
    opts.rx_depth = std::max<std::size_t>(
        opts.rx_depth, std::size_t{params.window} * static_cast<std::size_t>(boot.size() - 1));
  opts.thread_safe =
      inbound_progress_thread(params, probe_transport(opts), boot.rank(), boot.size());
  auto transport = open_transport(opts);
  transport->connect(boot);
  return run_inbound(params, *transport, boot);
}

InboundResult run_inbound(const InboundParams& params, Transport& transport, Bootstrap& boot) {
  if (boot.size() < 2)
    throw UsageError("inbound bench needs at least 2 processes, got " +
                     std::to_string(boot.size()));
  const Capabilities& caps = transport.caps();
  if (params.ops.empty()) throw UsageError("inbound bench: no operation given");
  for (Op op : params.ops) {
    if (op != Op::read && op != Op::write && op != Op::send && !is_atomic(op))
      throw UsageError("inbound bench: -o takes read, write, send, fadd and cswap, not " +
                       std::string(to_string(op)));
  }
  if (auto m = missing_op(caps, params.ops)) throw UsageError(m->why);
  const auto takes = [&](Op op) {
    return std::find(params.ops.begin(), params.ops.end(), op) != params.ops.end();
  };
  if (params.sizes.empty()) throw UsageError("inbound bench: no size given");
  for (std::size_t s : params.sizes) {
    if ((takes(Op::read) || takes(Op::write)) &&
        (s == 0 || s > kInboundMaxSize || s > caps.max_msg_size))
      throw UsageError("inbound bench: size " + std::to_string(s) + " is outside 1.." +
                       std::to_string(std::min(kInboundMaxSize, caps.max_msg_size)));
    if (takes(Op::send) && (s > kInboundMaxSendSize || s > caps.max_msg_size))
      throw UsageError("inbound bench: send size " + std::to_string(s) + " is outside 0.." +
                       std::to_string(std::min(kInboundMaxSendSize, caps.max_msg_size)));
  }
  if (takes(Op::send) &&
      send_slot_bytes(params) * params.window * static_cast<std::size_t>(boot.size() - 1) >
          kInboundMaxReceivePool)
    throw UsageError(
        "inbound bench: send: clients x window x size needs more than the 64M of "
        "receives the server may post; give a smaller window or size");
  if (params.stride < 8 || params.stride > 4096 || params.stride % 8 != 0)
    throw UsageError("--stride must be a multiple of 8 in 8..4096");
  for (std::uint64_t k : params.counters)
    if (k == 0 || k > (1u << 20)) throw UsageError("--counters must be in 1..1048576");
  if (counter_region_bytes(params) > kInboundMaxCounterRegion)
    throw UsageError("counters x stride needs " + std::to_string(counter_region_bytes(params)) +
                     " bytes, above the counter region's limit of 256M");
  if (params.window == 0 || params.iterations == 0)
    throw UsageError("inbound bench: window and iterations must be at least 1");

  Clock clock;
  InboundResult result;
  result.env = machine_environment();
  result.params = params;
  result.clients = boot.size() - 1;
  result.env.caps = caps;
  result.env.clock = clock.name();
  const bool thread = inbound_progress_thread(params, caps, boot.rank(), boot.size());
  std::optional<ProgressEngine> engine;
  if (thread) engine.emplace(transport, params.target.cpu);

  std::vector<RowSpec> specs;
  for (Op op : params.ops) {
    if (!is_atomic(op)) {
      for (std::size_t s : params.sizes) specs.push_back({op, s, 0, Aliasing::none});
      continue;
    }
    for (std::uint64_t k : params.counters) specs.push_back({op, 8, k, Aliasing::none});
    if (params.probe_aliasing) {
      specs.push_back({op, 8, 2, Aliasing::same_low12});
      specs.push_back({op, 8, 2, Aliasing::different_low12});
    }
  }
  with_concrete(transport, [&](auto& t) {
    using T = std::remove_reference_t<decltype(t)>;
    InboundRunner<T> runner(t, boot, params, clock, thread);
    for (const RowSpec& spec : specs)
      if (auto row = runner.run(spec)) result.rows.push_back(std::move(*row));
  });
  if (engine) engine->stop();
  // The server reports: its CPU and client 0's are the two the header names.
  gather_pinning(result.env, boot, params.target.cpu);
  result.env.progress_thread_target = thread;
  result.oversubscribed = params.yield;
  return result;
}

}  // namespace fabflow
