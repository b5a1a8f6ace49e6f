// What both sides of a request-response channel share: what setup learns about the other
// ranks (Peers), the setup steps (defined in channel.cc) and Endpoint, the reaping, signalling
// and retrying that RequesterImpl (requester.cc) and ResponderImpl (responder.cc) build on.
// Wire format and layouts: frame.h and docs/request-response.md.
#pragma once

#include <fabflow/bootstrap.h>
#include <fabflow/rr.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/cldemote.h"
#include "rr/frame.h"

namespace fabflow::rr::detail {

inline bool per_endpoint(const Capabilities& caps) { return caps.endpoint == EndpointType::msg; }

// Frames without a trailer where the transport places a write's bytes in order and writes in
// posting order (frame.h).
inline Framing framing_of(const Capabilities& caps) {
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

inline std::size_t request_rx_buffers(const ChannelOptions& o, std::size_t total_slots) {
  return total_slots + (request_by_write(o.pattern) ? o.empty_mailboxes : 0);
}
inline std::size_t response_rx_buffers(const ChannelOptions& o, const Capabilities& caps,
                                       std::size_t slots, int responders) {
  if (response_by_write(o.pattern)) return slots;
  return per_endpoint(caps) ? slots * static_cast<std::size_t>(responders) : slots;
}

inline Hello hello_of(const ChannelOptions& o, std::uint8_t role, unsigned slots,
                      std::size_t bytes) {
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
Peers gather_slots(Bootstrap& boot, int requesters, unsigned mine);

// Setup step 2: all-gathers hellos and keys; checks that every rank agrees and imports the
// other role's regions, each checked to hold the layout this side will address.
void exchange(Transport& t, Bootstrap& boot, const ChannelOptions& o, Peers& p, Hello mine,
              const MemoryRegion& mr);

// auto: `o` with the pattern chosen for `caps` (choose_pattern), and the line that says so.
ChannelOptions resolve_auto(const Capabilities& caps, const ChannelOptions& o, std::string* why);

// Sets an end's why() (a friend of Requester and Responder).
struct AutoNote {
  template <class End>
  static std::unique_ptr<End> note(std::unique_ptr<End> end, std::string why) {
    end->why_ = std::move(why);
    return end;
  }
};

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

}  // namespace fabflow::rr::detail
