// The requester side of a request-response channel (RequesterImpl over endpoint.h's Endpoint),
// make_requester and Requester::call.
#include <fabflow/bootstrap.h>
#include <fabflow/rr.h>

#include "common/bounded_wait.h"
#include "rr/endpoint.h"

namespace fabflow::rr {

using namespace detail;

namespace {

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

}  // namespace

std::unique_ptr<Requester> make_requester(Transport& t, Bootstrap& boot, const ChannelOptions& o,
                                          int requesters, unsigned slots) {
  if (o.automatic) {
    std::string why;
    const ChannelOptions chosen = resolve_auto(t.caps(), o, &why);
    return AutoNote::note(make_requester(t, boot, chosen, requesters, slots), why);
  }
  if (std::string why = why_unsupported(t.caps(), o); !why.empty()) throw UsageError("rr: " + why);
  if (slots == 0 || slots > kMaxSlots) throw UsageError("rr: slots must be in 1..65536");
  if (o.request_bytes > kMaxPayload || o.response_bytes > kMaxPayload)
    throw UsageError("rr: requests and responses are limited to 4 MiB");
  if (o.signal_every == 0) throw UsageError("rr: signal_every must be at least 1");
  return std::make_unique<RequesterImpl>(t, boot, o, requesters, slots);
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
