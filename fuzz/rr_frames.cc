// Fuzz target: request-response frames as their readers check them (src/rr/frame.h): a mailbox
// a peer writes into (read_mailbox, as the responder scans request mailboxes and the requester
// its response mailboxes, sparse or dense alike) and a frame that arrived by SEND
// (read_received), with either framing. The buffer is exactly one slot, so a read past it is an
// ASan report.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rr/frame.h"

namespace rd = fabflow::rr::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t kHead = 2 + 8 + 4;
  if (size < kHead) return 0;
  const std::size_t max_len = (std::size_t{data[0]} | std::size_t{data[1]} << 8) % 4097;
  std::uint64_t awaited;
  std::memcpy(&awaited, data + 2, 8);
  std::uint32_t length;  // what a receive completion reports
  std::memcpy(&length, data + 10, 4);
  std::vector<std::byte> slot(rd::slot_bytes(max_len));
  std::memcpy(slot.data(), data + kHead, std::min(size - kHead, slot.size()));
  rd::Stamp s;
  for (rd::Framing f : {rd::Framing::trailer, rd::Framing::ordered}) {
    // Requester: only the outstanding sequence is fresh. Responder: anything newer than the last.
    for (bool exact : {true, false}) {
      const auto got = rd::read_mailbox(
          slot.data(), max_len,
          [&](std::uint64_t seq) { return exact ? seq == awaited : seq > awaited; }, &s, f);
      if (got == rd::MailboxState::complete &&
          (s.len > max_len || rd::frame_bytes(s.len, f) > slot.size()))
        __builtin_trap();
    }
    if (rd::read_received(slot.data(), length % (slot.size() + 1), max_len, &s, f) &&
        (s.len > max_len || rd::frame_bytes(s.len, f) != length % (slot.size() + 1)))
      __builtin_trap();
  }
  return 0;
}
