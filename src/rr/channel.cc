// Request-response channels over one Transport: setup (key exchange, layouts), the requester
// and the responder. Wire format and layouts: frame.h and docs/request-response.md.
#include <fabflow/bootstrap.h>
#include <fabflow/rr.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <thread>

#include "rr/frame.h"
#include "common/bounded_wait.h"
#include "common/cldemote.h"

namespace fabflow::rr {

using namespace detail;

// ---- names ----

bool request_by_write(Pattern p) noexcept {
  return p == Pattern::write_write || p == Pattern::write_send;
}
bool response_by_write(Pattern p) noexcept {
  return p == Pattern::write_write || p == Pattern::send_write;
}

std::vector<Op> required_ops(const ChannelOptions& o) {
  std::vector<Op> ops;
  if (request_by_write(o.pattern) || response_by_write(o.pattern)) ops.push_back(Op::write);
  if (!request_by_write(o.pattern) || !response_by_write(o.pattern)) ops.push_back(Op::send);
  return ops;
}

std::string why_unsupported(const Capabilities& caps, const ChannelOptions& o) {
  if (auto m = missing_op(caps, required_ops(o)))
    return std::string(to_string(o.pattern)) + " needs " + std::string(to_string(m->op)) + ": " +
           m->why;
  for (std::size_t payload : {o.request_bytes, o.response_bytes})
    if (frame_bytes(payload) > caps.max_msg_size)
      return "a " + std::to_string(frame_bytes(payload)) + "-byte message is above " +
             caps.provider + "'s max_msg_size " + std::to_string(caps.max_msg_size);
  if (o.mailbox == Mailbox::dense && !request_by_write(o.pattern))
    return "dense mailboxes need WRITE requests (" + std::string(to_string(o.pattern)) +
           " sends them)";
  return {};
}

std::string_view receive_queue_kind(const Capabilities& caps) noexcept {
  return caps.endpoint == EndpointType::msg ? "per-endpoint" : "shared";
}

namespace {

bool per_endpoint(const Capabilities& caps) { return caps.endpoint == EndpointType::msg; }

// Frames without a trailer where the transport places a write's bytes in order and writes in
// posting order (frame.h).
Framing framing_of(const Capabilities& caps) {
  return caps.in_order_data && caps.write_after_write ? Framing::ordered : Framing::trailer;
}

// What setup learnt about the other ranks of one channel.
struct Peers {
  int requesters = 0, responders = 0;
  std::vector<unsigned> slots;    // per requester rank
  std::vector<std::size_t> base;  // first mailbox / response buffer of each requester
  std::size_t total_slots = 0;
  std::vector<RemoteMemory> remote;       // per rank (imported for ranks of the other role)
  std::vector<std::size_t> remote_bytes;  // per rank: the bytes of `remote` this side addresses
};

std::size_t request_rx_buffers(const ChannelOptions& o, std::size_t total_slots) {
  return total_slots + (request_by_write(o.pattern) ? o.empty_mailboxes : 0);
}
std::size_t response_rx_buffers(const ChannelOptions& o, const Capabilities& caps,
                                std::size_t slots, int responders) {
  if (response_by_write(o.pattern)) return slots;
  return per_endpoint(caps) ? slots * static_cast<std::size_t>(responders) : slots;
}

Hello hello_of(const ChannelOptions& o, std::uint8_t role, unsigned slots, std::size_t bytes) {
  Hello h;
  h.role = role;
  h.pattern = static_cast<std::uint8_t>(o.pattern);
  h.mailbox = static_cast<std::uint8_t>(o.mailbox);
  h.slots = slots;
  h.request_bytes = o.request_bytes;
  h.response_bytes = o.response_bytes;
  h.empty_mailboxes = o.empty_mailboxes;
  h.region_bytes = bytes;
  return h;
}

// Setup step 1: every rank's slot count (requesters' counts size the responders' regions).
Peers gather_slots(Bootstrap& boot, int requesters, unsigned mine) {
  if (requesters < 1 || requesters >= boot.size())
    throw UsageError("rr: " + std::to_string(requesters) + " requesters among " +
                     std::to_string(boot.size()) + " ranks leaves no responder");
  const auto all = allgather_value(boot, std::uint32_t{mine}, "rr: slot count");
  Peers p;
  p.requesters = requesters;
  p.responders = boot.size() - requesters;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const std::uint32_t v = all[r];
    const bool requester = static_cast<int>(r) < requesters;
    if (requester ? (v == 0 || v > kMaxSlots) : v != 0)
      throw PeerError(static_cast<int>(r),
                      "rr: rank " + std::to_string(r) + " announced an impossible slot count");
    if (!requester) continue;
    p.slots.push_back(v);
    p.base.push_back(p.total_slots);
    p.total_slots += v;
  }
  return p;
}

// Setup step 2: all-gathers hellos and keys; checks that every rank agrees and imports the
// other role's regions, each checked to hold the layout this side will address.
void exchange(Transport& t, Bootstrap& boot, const ChannelOptions& o, Peers& p, Hello mine,
              const MemoryRegion& mr) {
  auto key = t.export_key(mr);
  mine.key_len = static_cast<std::uint32_t>(key.size());
  std::vector<std::byte> blob(sizeof(Hello) + key.size());
  std::memcpy(blob.data(), &mine, sizeof mine);
  std::memcpy(blob.data() + sizeof mine, key.data(), key.size());
  auto all = boot.allgather(blob);
  p.remote.assign(all.size(), RemoteMemory{});
  p.remote_bytes.assign(all.size(), 0);
  const Capabilities& caps = t.caps();
  for (std::size_t r = 0; r < all.size(); ++r) {
    const int rank = static_cast<int>(r);
    auto bad = [&](const std::string& why) {
      return PeerError(rank, "rr: rank " + std::to_string(rank) + " " + why);
    };
    if (all[r].size() < sizeof(Hello)) throw bad("sent a malformed hello");
    Hello h;
    std::memcpy(&h, all[r].data(), sizeof h);
    if (h.magic != mine.magic || all[r].size() != sizeof(Hello) + h.key_len)
      throw bad("sent a malformed hello");
    const bool requester = rank < p.requesters;
    if (h.role != (requester ? 0 : 1)) throw bad("plays the wrong role");
    if (h.pattern != mine.pattern || h.mailbox != mine.mailbox ||
        h.request_bytes != mine.request_bytes || h.response_bytes != mine.response_bytes ||
        h.empty_mailboxes != mine.empty_mailboxes || (requester && h.slots != p.slots[r]))
      throw bad("disagrees on the channel options");
    if (rank == boot.rank() || h.role == mine.role) continue;
    p.remote[r] = t.import_key(rank, {all[r].data() + sizeof(Hello), h.key_len});
    std::size_t need =
        requester
            ? RequesterLayout(o, p.slots[r], response_rx_buffers(o, caps, p.slots[r], p.responders))
                  .bytes
            : ResponderLayout(o, request_rx_buffers(o, p.total_slots), p.total_slots).bytes;
    if (h.region_bytes != need || !p.remote[r].contains(0, need))
      throw bad("published a region that does not hold its layout");
    p.remote_bytes[r] = need;
  }
}

// Reaping, signalling and retrying shared by both ends.
class Endpoint {
 public:
  Endpoint(Transport& t, const ChannelOptions& o)
      : t_(t),
        o_(o),
        framing_(framing_of(t.caps())),
        per_endpoint_(per_endpoint(t.caps())),
        inject_max_(o.inject ? t.caps().inject_size : 0) {}

 protected:
  bool inject_ok(std::size_t len) const noexcept { return len <= inject_max_ && o_.inject; }

  // Flags for the next post of `len` bytes: inject when it fits, else a completion every
  // signal_every posts so the transmit queue drains (unsignalled posts retire with it).
  unsigned next_flags(std::size_t len) noexcept {
    if (inject_ok(len)) return kInject;
    if (++unsignalled_ >= o_.signal_every) {
      unsignalled_ = 0;
      return kSignal;
    }
    return 0;
  }

  // Where the transport maps its peers (local) and frames are ordered, WRITE frames become
  // stores into the peer's region as this process maps it (what the transport's own write would
  // do: the rest of the frame, then the stamp word with a release store;
  // docs/local-transport.md), with no call per frame. The mapping covers the layout each
  // imported region was checked to hold at setup.
  void map_peers(const Peers& p) {
    if (!t_.caps().peer_mapping || framing_ != Framing::ordered) return;
    demote_ = t_.caps().stores_demoted;
    direct_.assign(p.remote.size(), nullptr);
    direct_bytes_.assign(p.remote.size(), 0);
    for (std::size_t r = 0; r < p.remote.size(); ++r) {
      if (p.remote_bytes[r] == 0) continue;
      direct_[r] = t_.map_peer(static_cast<int>(r), p.remote[r], 0, p.remote_bytes[r]);
      if (!direct_[r]) throw Error("rr: " + t_.last_error());
      direct_bytes_[r] = p.remote_bytes[r];
    }
  }

  // Whether SEND frames of up to `frame` bytes, at most `held` of them held at once from one
  // peer, are read where they land in the transport's memory (poll_rx_in_place: no posted
  // receive, no copy, no repost; local), rather than received into this channel's buffers.
  bool reads_in_place(std::size_t frame, std::size_t held) const noexcept {
    const Capabilities& c = t_.caps();
    return c.rx_in_place_max > 0 && frame <= c.rx_in_place_max && held <= c.rx_in_place_depth;
  }
  // Gives a frame read in place from `rank` back to the transport.
  Status give_back_in_place(int rank, const std::byte* frame) noexcept {
    Completion c;
    c.kind = CompletionKind::recv;
    c.buf = const_cast<std::byte*>(frame);
    c.peer = rank;
    if (t_.release_rx(c) != Status::ok)
      return failed("could not give back a frame: " + t_.last_error());
    return Status::ok;
  }

  bool reap_tx() noexcept {
    int n = t_.poll_tx(scratch_);  // scratch: no 16 completions to construct per poll
    if (n < 0) return fail("transmit failed: " + t_.last_error());
    return true;
  }

  // WRITEs frame [0, bytes) to `off` in `dst`. Framing::ordered: the stamp word goes last, by
  // a second write, so that a reader that sees it sees the frame.
  Status write_frame(int peer, std::byte* frame, std::size_t bytes, const RemoteMemory& dst,
                     std::size_t off, unsigned more) noexcept {
    if (!direct_.empty()) [[likely]] {
      const auto r = static_cast<std::size_t>(peer);
      if (r >= direct_.size() || !direct_[r] || off > direct_bytes_[r] ||
          bytes > direct_bytes_[r] - off || off % 8 != 0 || bytes < 8) [[unlikely]]
        return failed("frame of " + std::to_string(bytes) + " bytes at offset " +
                      std::to_string(off) + " is outside rank " + std::to_string(peer) +
                      "'s mapped region");
      std::byte* to = direct_[r] + off;
      // The stamp's line last, in one go: the frame beyond it first, then the rest of that line
      // (a line written, left and written again for the stamp costs the reader's poll).
      const std::size_t line = std::min(bytes, kAlign - off % kAlign);
      if (bytes > line) std::memcpy(to + line, frame + line, bytes - line);
      std::memcpy(to + 8, frame + 8, line - 8);
      std::uint64_t stamp;
      std::memcpy(&stamp, frame, 8);
      std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(to))
          .store(stamp, std::memory_order_release);
      if (demote_ && bytes <= kDemoteMax) demote_lines(to, bytes);
      ++stats_.direct_frames;
      return Status::ok;
    }
    if (framing_ == Framing::trailer)
      return post([&] {
        return t_.post_write(peer, frame, bytes, mr_desc_, dst, off, 1, next_flags(bytes) | more);
      });
    Status s = post([&] {
      return t_.post_write(peer, frame + 8, bytes - 8, mr_desc_, dst, off + 8, 1,
                           next_flags(bytes - 8) | kMore);
    });
    if (s != Status::ok) return s;
    return post(
        [&] { return t_.post_write(peer, frame, 8, mr_desc_, dst, off, 1, next_flags(8) | more); });
  }

  // Posts with retries while the transmit queue is full, for at most peer_timeout.
  template <class Post>
  Status post(Post&& p) noexcept {
    auto deadline = std::chrono::steady_clock::time_point{};
    for (unsigned spins = 0;; ++spins) {
      Status s = p();
      if (s == Status::ok) {
        ++stats_.posts;
        return s;
      }
      if (s != Status::again) return failed("post failed: " + t_.last_error());
      if (!reap_tx()) return Status::failed;
      t_.progress();
      if ((spins & 255) == 255) {
        auto now = std::chrono::steady_clock::now();
        if (deadline == std::chrono::steady_clock::time_point{}) deadline = now + o_.peer_timeout;
        if (now > deadline) return failed("transmit queue stayed full for the peer timeout");
      }
    }
  }

  bool fail(std::string why) noexcept {
    if (error_.empty()) error_ = "rr: " + std::move(why);
    return false;
  }
  Status failed(std::string why) noexcept {
    fail(std::move(why));
    return Status::failed;
  }

  Transport& t_;
  ChannelOptions o_;
  Framing framing_;
  bool per_endpoint_;        // per_endpoint(t_.caps()), asked once
  std::size_t inject_max_;   // the inject size when injecting, else 0
  void* mr_desc_ = nullptr;  // the channel region's descriptor, set by the derived class
  ChannelStats stats_;
  std::string error_;
  unsigned unsignalled_ = 0;
  Completion scratch_[16];
  std::vector<std::byte*> direct_;         // per rank: its region mapped here (map_peers), or null
  std::vector<std::size_t> direct_bytes_;  // ... and how many bytes of it
  bool demote_ = false;                    // the frames' lines are demoted (stores_demoted)
};

// ---- requester ----

class RequesterImpl final : public Requester, Endpoint {
 public:
  RequesterImpl(Transport& t, Bootstrap& boot, const ChannelOptions& o, int requesters,
                unsigned slots)
      : Endpoint(t, o),
        slots_(slots),
        me_(boot.rank()),
        layout_(o, slots, response_rx_buffers(o, t.caps(), slots, boot.size() - requesters)) {
    if (me_ >= requesters) throw UsageError("rr: rank " + std::to_string(me_) + " is a responder");
    peers_ = gather_slots(boot, requesters, slots);
    mr_ = t.allocate(layout_.bytes, kAllAccess);
    mr_desc_ = mr_->desc();
    exchange(t, boot, o, peers_, hello_of(o, 0, slots, layout_.bytes), *mr_);
    map_peers(peers_);
    responder_layout_.emplace(o, request_rx_buffers(o, peers_.total_slots), peers_.total_slots);
    state_.resize(slots);
    rx_buffers_ = response_rx_buffers(o, t.caps(), slots, peers_.responders);
    // Responses are held until the user releases them: one per slot at most (a user who holds
    // more than that before resubmitting holds up a responder either way).
    in_place_ = !response_by_write(o.pattern) && reads_in_place(layout_.resp_slot, slots);
    if (!response_by_write(o.pattern) && !in_place_) post_all_receives();
  }

  unsigned slots() const noexcept override { return slots_; }
  int responders() const noexcept override { return peers_.responders; }
  Transport& transport() noexcept override { return t_; }
  const ChannelOptions& options() const noexcept override { return o_; }
  const ChannelStats& stats() const noexcept override { return stats_; }
  const std::string& error() const noexcept override { return error_; }

  std::span<std::byte> request_buffer(unsigned slot) noexcept override {
    if (slot >= slots_) return {};
    return {tx_frame(slot) + kHeader, o_.request_bytes};
  }

  Status submit(unsigned slot, int responder, std::size_t len) noexcept override {
    if (!error_.empty()) return Status::failed;
    if (slot >= slots_) return failed("no slot " + std::to_string(slot));
    if (state_[slot].outstanding) return Status::full;
    if (responder < 0 || responder >= peers_.responders)
      return failed("no responder " + std::to_string(responder));
    if (len > o_.request_bytes)
      return failed("request of " + std::to_string(len) + " bytes is above request_bytes " +
                    std::to_string(o_.request_bytes));
    SlotState& st = state_[slot];
    if (st.seq == kMaxSeq)
      return failed("sequence numbers exhausted on slot " + std::to_string(slot));
    Status s = send_frame(slot, responder, Stamp{st.seq + 1, len, false});
    if (s != Status::ok) return s;
    ++st.seq;
    st.outstanding = true;
    st.responder = responder;
    ++outstanding_;
    ++stats_.requests;
    return Status::ok;
  }

  Status poll(Response* out) noexcept override {
    if (!error_.empty()) return Status::failed;
    if (!reap_tx()) return Status::failed;
    Status s = response_by_write(o_.pattern) ? poll_mailboxes(out) : poll_receives(out);
    if (s == Status::empty) ++stats_.empty_polls;
    return s;
  }

  void release(const Response& r) noexcept override {
    if (in_place_) {
      if (r.responder >= 0 && r.responder < peers_.responders)
        give_back_in_place(rank_of(r.responder), r.data.data() - kHeader);
      return;
    }
    if (response_by_write(o_.pattern) || r.buffer >= rx_buffers()) return;
    // The buffer goes back to the queue it came from.
    std::uint32_t q = r.buffer / slots_;
    Status s = post([&] {
      return t_.post_recv(queue_peer(q), rx_buffer(r.buffer), layout_.resp_slot, mr_desc_,
                          r.buffer);
    });
    if (s != Status::ok) fail("could not repost a receive: " + t_.last_error());
  }

  Status close() noexcept override {
    if (!error_.empty()) return Status::failed;
    if (outstanding_ != 0) return failed("close with requests outstanding");
    // The bye uses slot 0's sequence, so mailbox readers see it as new.
    SlotState& st = state_[0];
    for (int r = 0; r < peers_.responders; ++r) {
      Status s = send_frame(0, r, Stamp{st.seq + 1, 0, true});
      if (s != Status::ok) return s;
      ++st.seq;
    }
    return Status::ok;
  }

 private:
  struct SlotState {
    std::uint64_t seq = 0;
    int responder = 0;
    bool outstanding = false;
  };

  std::byte* tx_frame(unsigned slot) const noexcept {
    return mr_->data() + layout_.tx_off + slot * layout_.req_slot;
  }
  std::byte* rx_buffer(std::size_t i) const noexcept {
    return mr_->data() + layout_.rx_off + i * layout_.resp_slot;
  }
  std::size_t rx_buffers() const noexcept { return rx_buffers_; }
  int rank_of(int responder) const noexcept { return peers_.requesters + responder; }
  int queue_peer(std::uint32_t q) const noexcept {
    return per_endpoint_ ? rank_of(static_cast<int>(q)) : rank_of(0);
  }

  void post_all_receives() {
    for (std::size_t i = 0; i < rx_buffers(); ++i) {
      Status s = post([&] {
        return t_.post_recv(queue_peer(static_cast<std::uint32_t>(i / slots_)), rx_buffer(i),
                            layout_.resp_slot, mr_desc_, i);
      });
      if (s != Status::ok) throw Error(error_);
    }
  }

  Status send_frame(unsigned slot, int responder, const Stamp& stamp) noexcept {
    std::byte* frame = tx_frame(slot);
    seal(frame, stamp, static_cast<std::uint32_t>(me_), slot, framing_);
    const std::size_t len = frame_bytes(stamp.len, framing_);
    const int peer = rank_of(responder);
    if (!request_by_write(o_.pattern))
      return post([&] { return t_.post_send(peer, frame, len, mr_desc_, 1, next_flags(len)); });
    const RemoteMemory& dst = peers_.remote[static_cast<std::size_t>(peer)];
    const std::size_t mailbox = peers_.base[static_cast<std::size_t>(me_)] + slot;
    const ResponderLayout& rl = *responder_layout_;
    Status s = write_frame(peer, frame, len, dst, rl.mailbox_off + mailbox * rl.req_slot, 0);
    if (s != Status::ok || o_.mailbox == Mailbox::sparse) return s;
    // Dense: the doorbell byte goes by a second write after the frame; the responder still
    // checks the frame's stamps, since no provider here promises write-after-write order.
    std::byte* flag = mr_->data() + layout_.flag_off + slot;
    *flag = static_cast<std::byte>(stamp.seq % 255 + 1);
    return post([&] {
      return t_.post_write(peer, flag, 1, mr_desc_, dst, rl.flag_off + mailbox, 1, next_flags(1));
    });
  }

  // Checks a response frame against the slot it names; fills *out.
  Status accept(const std::byte* frame, std::uint64_t word, std::uint32_t slot, int from,
                std::uint32_t buffer, Response* out) noexcept {
    Stamp s = unpack(word);
    if (slot >= slots_ || !state_[slot].outstanding || s.seq != state_[slot].seq || s.bye)
      return failed("responder " + std::to_string(from) + " answered slot " + std::to_string(slot) +
                    " sequence " + std::to_string(s.seq) + ", which is not outstanding");
    if (state_[slot].responder != from)
      return failed("responder " + std::to_string(from) + " answered a request sent to responder " +
                    std::to_string(state_[slot].responder));
    if (s.len > o_.response_bytes)
      return failed("responder " + std::to_string(from) + " sent an oversized response (" +
                    std::to_string(s.len) + " bytes, limit " + std::to_string(o_.response_bytes) +
                    ")");
    state_[slot].outstanding = false;
    --outstanding_;
    *out = Response{slot, from, {frame + kHeader, s.len}, buffer};
    return Status::ok;
  }

  Status poll_mailboxes(Response* out) noexcept {
    // Round robin from next_ (no division: this runs on every poll).
    unsigned slot = next_ < slots_ ? next_ : 0;
    for (unsigned i = 0; i < slots_; ++i, slot = slot + 1 == slots_ ? 0 : slot + 1) {
      const SlotState& st = state_[slot];
      if (!st.outstanding) continue;
      const std::byte* frame = rx_buffer(slot);
      Stamp s;
      // An older answer may still be in the mailbox: only this slot's sequence is fresh.
      const auto got = read_mailbox(
          frame, o_.response_bytes, [&](std::uint64_t seq) { return seq == st.seq; }, &s, framing_);
      if (got == MailboxState::nothing) continue;  // older, or still arriving
      if (got == MailboxState::oversized)
        return failed("responder " + std::to_string(st.responder) +
                      " wrote an oversized response (" + std::to_string(s.len) + " bytes)");
      const std::uint64_t word = pack(s);
      next_ = slot + 1;
      if (source_of(frame) != static_cast<std::uint32_t>(st.responder) || slot_of(frame) != slot)
        return failed("responder " + std::to_string(st.responder) +
                      " wrote a response with foreign ids into slot " + std::to_string(slot));
      return accept(frame, word, slot, st.responder, 0, out);
    }
    t_.progress();
    return Status::empty;
  }

  Status poll_receives(Response* out) noexcept {
    Completion c[1];
    int n = in_place_ ? t_.poll_rx_in_place(c) : t_.poll_rx(c);
    if (n < 0) return failed("receive failed: " + t_.last_error());
    if (n == 0) return Status::empty;
    const std::byte* frame;
    std::uint32_t buffer = 0;
    if (in_place_) {  // in the transport's ring: each field is read once, then checked
      frame = static_cast<const std::byte*>(c[0].buf);
      ++stats_.in_place_receives;
    } else {
      if (c[0].context >= rx_buffers()) return failed("receive completion with unknown context");
      buffer = static_cast<std::uint32_t>(c[0].context);
      frame = rx_buffer(buffer);
    }
    if (c[0].length < frame_bytes(0, framing_)) return failed("received a truncated response");
    std::uint32_t from = source_of(frame);
    if (from >= static_cast<std::uint32_t>(peers_.responders))
      return failed("received a response from unknown responder " + std::to_string(from));
    if (in_place_ && rank_of(static_cast<int>(from)) != c[0].peer)
      return failed("rank " + std::to_string(c[0].peer) + " sent a response as responder " +
                    std::to_string(from));
    Stamp s;
    if (!read_received(frame, c[0].length, o_.response_bytes, &s, framing_))
      return failed("responder " + std::to_string(from) +
                    " sent a malformed or oversized response (" + std::to_string(c[0].length) +
                    " bytes)");
    return accept(frame, pack(s), slot_of(frame), static_cast<int>(from), buffer, out);
  }

  unsigned slots_;
  int me_;
  RequesterLayout layout_;
  std::optional<ResponderLayout> responder_layout_;
  std::unique_ptr<MemoryRegion> mr_;
  Peers peers_;
  std::vector<SlotState> state_;
  unsigned outstanding_ = 0;
  unsigned next_ = 0;
  std::size_t rx_buffers_ = 0;
  bool in_place_ = false;  // SEND responses read in place (reads_in_place)
};

// ---- responder ----

class ResponderImpl final : public Responder, Endpoint {
 public:
  ResponderImpl(Transport& t, Bootstrap& boot, const ChannelOptions& o, int requesters)
      : Endpoint(t, o), me_(boot.rank() - requesters) {
    if (me_ < 0) throw UsageError("rr: rank " + std::to_string(boot.rank()) + " is a requester");
    peers_ = gather_slots(boot, requesters, 0);
    const std::size_t rx = request_rx_buffers(o, peers_.total_slots);
    layout_.emplace(o, rx, peers_.total_slots);
    mr_ = t.allocate(layout_->bytes, kAllAccess);
    mr_desc_ = mr_->desc();
    exchange(t, boot, o, peers_, hello_of(o, 1, 0, layout_->bytes), *mr_);
    map_peers(peers_);
    mailboxes_ = request_by_write(o.pattern) ? rx : 0;
    last_seq_.assign(rx, 0);
    flag_seen_.assign(rx, 0);
    closed_by_.assign(static_cast<std::size_t>(requesters), false);
    for (int r = 0; r < requesters; ++r)
      requester_rx_off_.push_back(
          RequesterLayout(o, peers_.slots[static_cast<std::size_t>(r)], 0).rx_off);
    // Requests are given back as soon as they are served.
    in_place_ = !request_by_write(o.pattern) && reads_in_place(layout_->req_slot, 1);
    if (!request_by_write(o.pattern) && !in_place_)
      for (std::size_t b = 0; b < peers_.total_slots; ++b)
        if (repost(b) != Status::ok) throw Error(error_);
  }

  Status serve(const Handler* handler, unsigned* served) noexcept override {
    *served = 0;
    if (!error_.empty()) return Status::failed;
    if (!reap_tx()) return Status::failed;
    Status s = collect(/*one_per_requester=*/false, SIZE_MAX);
    if (s != Status::ok) return note(s);
    for (const Arrival& a : round_) {
      bool answer;
      std::size_t len = 0;
      Status st = take(handler, a, &answer, &len);
      // A posted receive goes back before the response lets the requester send again; a frame
      // read in place goes back after it, off the round trip (the ring has room for the next
      // request: this round's frames are all it holds).
      if (st == Status::ok && !in_place_) st = give_back(a);
      if (st == Status::ok && answer) st = respond(a.requester, a.slot, a.seq, len, 0);
      if (st == Status::ok && in_place_) st = give_back(a);
      if (st != Status::ok) return st;
      *served += answer;  // a close is taken, not served
    }
    return Status::ok;
  }

  Status serve_batch(const BatchHandler& handler, unsigned max_batch,
                     unsigned* served) noexcept override {
    *served = 0;
    if (!error_.empty()) return Status::failed;
    if (max_batch == 0) return failed("serve_batch needs a batch of at least 1");
    if (!reap_tx()) return Status::failed;
    Status s = collect(/*one_per_requester=*/true, max_batch);
    if (s != Status::ok) return note(s);
    batch_.clear();
    for (const Arrival& a : round_) {
      bool answer;
      std::size_t len = 0;
      if (Status st = take(nullptr, a, &answer, &len); st != Status::ok) return st;
      if (!answer) continue;  // a close
      std::byte* out = tx_frame(peers_.base[static_cast<std::size_t>(a.requester)] + a.slot);
      batch_.push_back({a.requester,
                        {a.frame + kHeader, a.len},
                        {out + kHeader, o_.response_bytes},
                        o_.response_bytes});
    }
    if (!batch_.empty() && handler) {
      try {
        handler(batch_);
      } catch (const std::exception& e) {
        return failed(std::string("handler failed: ") + e.what());
      }
    }
    // Posted receives go back before the responses, frames read in place after them (as in
    // serve).
    if (!in_place_)
      for (const Arrival& a : round_)
        if (Status st = give_back(a); st != Status::ok) return st;
    // The responses go out back to back, FI_MORE on all but the last (one doorbell where the
    // provider batches).
    std::size_t k = 0;
    for (const Arrival& a : round_) {
      if (a.bye) continue;
      const BatchRequest& b = batch_[k++];
      if (b.response_len > o_.response_bytes)
        return failed("handler returned an oversized response");
      const unsigned more = k < batch_.size() ? kMore : 0;
      if (Status st = respond(a.requester, a.slot, a.seq, b.response_len, more); st != Status::ok)
        return st;
    }
    if (in_place_)
      for (const Arrival& a : round_)
        if (Status st = give_back(a); st != Status::ok) return st;
    *served = static_cast<unsigned>(batch_.size());
    return Status::ok;
  }

  bool done() const noexcept override { return closed_ == peers_.requesters; }
  Transport& transport() noexcept override { return t_; }
  const ChannelStats& stats() const noexcept override { return stats_; }
  const std::string& error() const noexcept override { return error_; }

 private:
  // One request or close taken from a mailbox or a receive buffer, not yet answered.
  struct Arrival {
    int requester = 0;
    std::uint32_t slot = 0;
    std::uint64_t seq = 0;
    std::size_t len = 0;  // request payload bytes
    bool bye = false;
    const std::byte* frame = nullptr;
    std::size_t buffer = SIZE_MAX;  // receive buffer to post again (SEND requests)
  };

  Status note(Status s) noexcept {
    if (s == Status::empty) ++stats_.empty_polls;
    return s;
  }

  std::byte* mailbox(std::size_t i) const noexcept {
    return mr_->data() + layout_->mailbox_off + i * layout_->req_slot;
  }
  std::byte* tx_frame(std::size_t i) const noexcept {
    return mr_->data() + layout_->tx_off + i * layout_->resp_slot;
  }
  // Which requester's mailbox `i` is (for i < total_slots).
  int owner_of(std::size_t i) const noexcept {
    auto it = std::upper_bound(peers_.base.begin(), peers_.base.end(), i);
    return static_cast<int>(it - peers_.base.begin()) - 1;
  }

  // Fills round_ with what has arrived, checked: at most `limit` requests (closes do not
  // count) and, with `one_per_requester`, at most one per requester (later ones wait for the
  // next round). ok when something was taken, empty when nothing, failed.
  Status collect(bool one_per_requester, std::size_t limit) noexcept {
    round_.clear();
    if (one_per_requester) in_round_.assign(static_cast<std::size_t>(peers_.requesters), false);
    std::size_t requests = 0;
    auto admit = [&](const Arrival& a) {
      const auto ri = static_cast<std::size_t>(a.requester);
      if (one_per_requester && !a.bye) {
        if (in_round_[ri] || requests >= limit) return false;
        in_round_[ri] = true;
      }
      requests += !a.bye;
      round_.push_back(a);
      return true;
    };
    Status s = request_by_write(o_.pattern) ? scan(admit) : receive(admit);
    if (s == Status::failed) return s;
    if (round_.empty()) {
      if (request_by_write(o_.pattern)) t_.progress();
      return Status::empty;
    }
    return Status::ok;
  }

  template <class Admit>
  Status scan(Admit& admit) noexcept {
    const std::size_t n = mailboxes_;
    const bool dense = o_.mailbox == Mailbox::dense;
    const std::byte* flags = mr_->data() + layout_->flag_off;
    for (std::size_t i = 0; i < n; ++i) {
      if (dense && __atomic_load_n(reinterpret_cast<const std::uint8_t*>(flags + i),
                                   __ATOMIC_RELAXED) == flag_seen_[i])
        continue;
      const std::byte* frame = mailbox(i);
      if (i >= peers_.total_slots) {  // no requester owns it: any new stamp is a violation
        if (unpack(load_stamp(frame)).seq > last_seq_[i])
          return failed("a peer wrote into empty mailbox " + std::to_string(i));
        continue;
      }
      Stamp s;
      const auto got = read_mailbox(
          frame, o_.request_bytes, [&](std::uint64_t seq) { return seq > last_seq_[i]; }, &s,
          framing_);
      if (got == MailboxState::nothing) continue;  // older, or still arriving
      const int r = owner_of(i);
      if (got == MailboxState::oversized)
        return failed("requester " + std::to_string(r) + " wrote an oversized request (" +
                      std::to_string(s.len) + " bytes, limit " + std::to_string(o_.request_bytes) +
                      ")");
      const auto slot = static_cast<std::uint32_t>(i - peers_.base[static_cast<std::size_t>(r)]);
      if (source_of(frame) != static_cast<std::uint32_t>(r) || slot_of(frame) != slot)
        return failed("requester " + std::to_string(r) + " wrote a request with foreign ids");
      if (!admit(Arrival{r, slot, s.seq, s.len, s.bye, frame})) continue;  // next round
      last_seq_[i] = s.seq;
      if (dense) flag_seen_[i] = static_cast<std::uint8_t>(s.seq % 255 + 1);
    }
    return Status::ok;
  }

  // Arrivals a batched round could not take (a second request of one requester) come first
  // in the next round.
  template <class Admit>
  Status receive(Admit& admit) noexcept {
    std::size_t kept = 0;
    for (const Arrival& a : deferred_)
      if (!admit_arrival(a, admit)) deferred_[kept++] = a;
    deferred_.resize(kept);
    auto& c = rx_scratch_;
    int n = in_place_ ? t_.poll_rx_in_place(c) : t_.poll_rx(c);
    if (n < 0) return failed("receive failed: " + t_.last_error());
    for (int k = 0; k < n; ++k) {
      Arrival a;
      Status s = arrival_of(c[k], &a);
      if (s != Status::ok) return s;
      if (!admit_arrival(a, admit)) deferred_.push_back(a);
    }
    return Status::ok;
  }

  // A checked arrival; false when the round is full for it.
  template <class Admit>
  bool admit_arrival(const Arrival& a, Admit& admit) noexcept {
    if (!admit(a)) return false;
    last_seq_[peers_.base[static_cast<std::size_t>(a.requester)] + a.slot] = a.seq;
    return true;
  }

  // Checks a receive completion and reads its request. Each field of the frame is read once:
  // a frame read in place still lies in memory the sender can write.
  Status arrival_of(const Completion& c, Arrival* out) noexcept {
    const std::byte* frame;
    std::size_t b = SIZE_MAX;
    if (in_place_) {
      frame = static_cast<const std::byte*>(c.buf);
      ++stats_.in_place_receives;
    } else {
      if (c.context >= peers_.total_slots) return failed("receive completion with unknown context");
      b = c.context;
      frame = mailbox(b);
    }
    if (c.length < frame_bytes(0, framing_)) return failed("received a truncated request");
    std::uint32_t r = source_of(frame), slot = slot_of(frame);
    if (r >= static_cast<std::uint32_t>(peers_.requesters) || slot >= peers_.slots[r])
      return failed("received a request with ids out of range (requester " + std::to_string(r) +
                    ", slot " + std::to_string(slot) + ")");
    // Requester r is rank r; in place the transport names the sender.
    const int sender = in_place_ ? c.peer : per_endpoint_ ? owner_of(b) : static_cast<int>(r);
    if (sender != static_cast<int>(r))
      return failed("requester " + std::to_string(sender) + " sent a request as requester " +
                    std::to_string(r));
    Stamp s;
    if (!read_received(frame, c.length, o_.request_bytes, &s, framing_))
      return failed("requester " + std::to_string(r) + " sent a malformed or oversized request (" +
                    std::to_string(c.length) + " bytes)");
    if (s.seq <= last_seq_[peers_.base[r] + slot])
      return failed("requester " + std::to_string(r) + " replayed sequence " +
                    std::to_string(s.seq));
    *out = Arrival{static_cast<int>(r), slot, s.seq, s.len, s.bye, frame, b};
    return Status::ok;
  }

  // The receive buffer goes back to its queue once the handler is done with it, before the
  // response lets the requester send again; a frame read in place goes back to the transport
  // right after the response (serve, serve_batch).
  Status give_back(const Arrival& a) noexcept {
    if (in_place_) return give_back_in_place(a.requester, a.frame);
    return a.buffer == SIZE_MAX ? Status::ok : repost(a.buffer);
  }

  int queue_peer(std::size_t buffer) const noexcept { return per_endpoint_ ? owner_of(buffer) : 0; }
  Status repost(std::size_t b) noexcept {
    return post(
        [&] { return t_.post_recv(queue_peer(b), mailbox(b), layout_->req_slot, mr_desc_, b); });
  }

  // Takes arrival `a`: a close, or a request whose response it builds in the slot's
  // transmit frame with `handler` when given (*len: its payload length).
  Status take(const Handler* handler, const Arrival& a, bool* answer, std::size_t* len) noexcept {
    const auto ri = static_cast<std::size_t>(a.requester);
    auto who = [&] { return "requester " + std::to_string(a.requester); };  // errors only
    *answer = false;
    if (a.bye) {
      if (a.len != 0 || closed_by_[ri]) return failed(who() + " sent a malformed close");
      closed_by_[ri] = true;
      ++closed_;
      return Status::ok;
    }
    if (closed_by_[ri]) return failed(who() + " sent a request after closing");
    *len = o_.response_bytes;
    if (handler && *handler) {
      std::byte* out = tx_frame(peers_.base[ri] + a.slot);
      try {
        *len =
            (*handler)(a.requester, {a.frame + kHeader, a.len}, {out + kHeader, o_.response_bytes});
      } catch (const std::exception& e) {
        return failed(std::string("handler failed: ") + e.what());
      }
      if (*len > o_.response_bytes) return failed("handler returned an oversized response");
    }
    *answer = true;
    return Status::ok;
  }

  Status respond(int r, std::uint32_t slot, std::uint64_t seq, std::size_t len,
                 unsigned more) noexcept {
    const auto ri = static_cast<std::size_t>(r);
    std::byte* out = tx_frame(peers_.base[ri] + slot);
    seal(out, Stamp{seq, len, false}, static_cast<std::uint32_t>(me_), slot, framing_);
    const std::size_t bytes = frame_bytes(len, framing_);
    ++stats_.requests;
    if (!response_by_write(o_.pattern))
      return post(
          [&] { return t_.post_send(r, out, bytes, mr_desc_, 1, next_flags(bytes) | more); });
    const RemoteMemory& dst = peers_.remote[ri];
    const std::size_t off = requester_rx_off_[ri] + slot * layout_->resp_slot;
    return write_frame(r, out, bytes, dst, off, more);
  }

  int me_;
  std::optional<ResponderLayout> layout_;
  std::unique_ptr<MemoryRegion> mr_;
  Peers peers_;
  std::size_t mailboxes_ = 0;
  std::vector<std::uint64_t> last_seq_;
  std::vector<std::uint8_t> flag_seen_;
  std::vector<std::size_t> requester_rx_off_;
  std::vector<bool> closed_by_;
  int closed_ = 0;
  std::vector<Arrival> round_;       // this round's arrivals
  std::vector<bool> in_round_;       // per requester: already in this round
  std::vector<Arrival> deferred_;    // checked arrivals left for the next round
  bool in_place_ = false;            // SEND requests read in place (reads_in_place)
  std::vector<BatchRequest> batch_;  // serve_batch's requests
  Completion rx_scratch_[16];        // poll_rx's output, not constructed per poll
};

}  // namespace

std::unique_ptr<Requester> make_requester(Transport& t, Bootstrap& boot, const ChannelOptions& o,
                                          int requesters, unsigned slots) {
  if (std::string why = why_unsupported(t.caps(), o); !why.empty()) throw UsageError("rr: " + why);
  if (slots == 0 || slots > kMaxSlots) throw UsageError("rr: slots must be in 1..65536");
  if (o.request_bytes > kMaxPayload || o.response_bytes > kMaxPayload)
    throw UsageError("rr: requests and responses are limited to 4 MiB");
  if (o.signal_every == 0) throw UsageError("rr: signal_every must be at least 1");
  return std::make_unique<RequesterImpl>(t, boot, o, requesters, slots);
}

std::unique_ptr<Responder> make_responder(Transport& t, Bootstrap& boot, const ChannelOptions& o,
                                          int requesters) {
  if (std::string why = why_unsupported(t.caps(), o); !why.empty()) throw UsageError("rr: " + why);
  if (o.request_bytes > kMaxPayload || o.response_bytes > kMaxPayload)
    throw UsageError("rr: requests and responses are limited to 4 MiB");
  if (o.signal_every == 0) throw UsageError("rr: signal_every must be at least 1");
  return std::make_unique<ResponderImpl>(t, boot, o, requesters);
}

void Requester::call(unsigned slot, int responder, std::size_t len, Response* out,
                     Bootstrap& boot) {
  BoundedWait watch(options().peer_timeout, &boot, {}, 256);
  for (;;) {
    Status s = submit(slot, responder, len);
    if (s == Status::ok) break;
    if (s != Status::again) throw Error(error());
    watch.idle("rr", "submitting a request");
  }
  watch.reset();
  for (;;) {
    Status s = poll(out);
    if (s == Status::ok) {
      if (out->slot == slot) return;
      throw Error("rr: a response to slot " + std::to_string(out->slot) +
                  " arrived during a call on slot " + std::to_string(slot));
    }
    if (s != Status::empty) throw Error(error());
    watch.idle("rr", "waiting for a response");
  }
}

}  // namespace fabflow::rr
