// The responder side of a request-response channel (ResponderImpl over endpoint.h's Endpoint)
// and make_responder.
#include <fabflow/bootstrap.h>
#include <fabflow/rr.h>

#include <algorithm>

#include "rr/endpoint.h"

namespace fabflow::rr {

using namespace detail;

namespace {

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
    ++stats_.scans;
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
    stats_.mailboxes_read += n;
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
      ++stats_.mailboxes_with_request;
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

std::unique_ptr<Responder> make_responder(Transport& t, Bootstrap& boot, const ChannelOptions& o,
                                          int requesters) {
  if (o.automatic) {
    std::string why;
    const ChannelOptions chosen = resolve_auto(t.caps(), o, &why);
    return AutoNote::note(make_responder(t, boot, chosen, requesters), why);
  }
  if (std::string why = why_unsupported(t.caps(), o); !why.empty()) throw UsageError("rr: " + why);
  if (o.request_bytes > kMaxPayload || o.response_bytes > kMaxPayload)
    throw UsageError("rr: requests and responses are limited to 4 MiB");
  if (o.signal_every == 0) throw UsageError("rr: signal_every must be at least 1");
  return std::make_unique<ResponderImpl>(t, boot, o, requesters);
}

}  // namespace fabflow::rr
