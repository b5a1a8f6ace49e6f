// Fuzz target: the bulk channel's control messages (src/bulk/wire.h) as a rank receives them
// into a receive buffer: wire::parse checks the header's shape (magic, type, sender rank) and
// that the inline bytes and the memory key fit in what arrived.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "bulk/wire.h"

using namespace fabflow::bulk;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // First byte: the job (2 to 17 ranks) and which of them receives.
  const int ranks = 2 + (data[0] & 15);
  const int self = (data[0] >> 4) % ranks;
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  wire::Message m;
  try {
    m = wire::parse(in, ranks, self);
  } catch (const fabflow::PeerError&) {
    return 0;  // the expected answer to garbage; anything else escapes and is a bug
  }
  // What parse accepts: a known type from another rank of the job, and the inline bytes then
  // the key inside the input, after the header, adding up to it (a NACK carries none).
  const auto type = static_cast<std::uint8_t>(m.h.type);
  const std::byte* begin = in.data() + wire::kHeader;
  const std::byte* end = in.data() + in.size();
  const bool ok = m.h.magic == wire::kMagic && type >= 1 && type <= wire::kLastType &&
                  static_cast<int>(m.h.src) < ranks && static_cast<int>(m.h.src) != self &&
                  m.key.size() == m.h.key_len && m.key.size() <= wire::kMaxKey &&
                  m.inline_bytes.data() == begin &&
                  m.inline_bytes.size() <= in.size() - wire::kHeader &&
                  m.key.data() == m.inline_bytes.data() + m.inline_bytes.size() &&
                  m.key.size() <= static_cast<std::size_t>(end - m.key.data()) &&
                  (m.h.type == wire::Type::nack ? m.inline_bytes.empty()
                                                : m.inline_bytes.size() == m.h.length) &&
                  m.inline_bytes.size() + m.key.size() == in.size() - wire::kHeader &&
                  (m.h.type == wire::Type::rts || m.h.type == wire::Type::data ||
                   m.h.type == wire::Type::nack || m.h.length == 0);
  if (!ok) std::abort();
  // Touch every byte parse handed out, so that ASan sees any read past the input.
  volatile std::uint8_t sink = 0;
  for (std::byte b : m.inline_bytes) sink = sink ^ static_cast<std::uint8_t>(b);
  for (std::byte b : m.key) sink = sink ^ static_cast<std::uint8_t>(b);
  return 0;
}
