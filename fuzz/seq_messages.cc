// Fuzz target: what a sequencer takes from a peer. Mode 0: the Spec-S0 setup hello
// (decode_spec_hello). Mode 1: a request's 32 bits of CQ data and a header-only answer, decoded
// and encoded back (include/fabflow/seq.h, namespace spec).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include <fabflow/status.h>

#include "seq/internal.h"

namespace ss = fabflow::seq::spec;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  if (data[0] < 128) {
    const std::span<const std::byte> blob(reinterpret_cast<const std::byte*>(data + 2), size - 2);
    std::span<const std::byte> key;
    try {
      const auto h = fabflow::seq::detail::decode_spec_hello(blob, 1, data[1] % 8 + 1, &key);
      if (key.size() != h.key_len || key.data() < blob.data() ||
          key.data() + key.size() > blob.data() + blob.size())
        __builtin_trap();
    } catch (const fabflow::PeerError&) {
    }
    return 0;
  }
  if (size < 11) return 0;
  std::uint32_t word, low;
  std::memcpy(&word, data + 1, 4);
  std::memcpy(&low, data + 5, 4);
  // Every request word decodes into fields (bye, client, guess) that encode back to it.
  if ((ss::is_bye(word) ? ss::kByeBit : 0) + ss::request(ss::client_of(word), ss::guess_of(word)) !=
      word)
    __builtin_trap();
  // A header-only answer stands for a value that confirms the guess it answered.
  const std::uint16_t guess = ss::guess_of(word);
  const std::uint64_t value = ss::value_of(guess, low);
  if (!ss::confirms(value, guess) || ss::guess_for(value) != guess) __builtin_trap();
  return 0;
}
