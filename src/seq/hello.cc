// decode_spec_hello: the Spec-S0 setup hello as a peer sent it (internal.h). A pure function
// of the blob, so that the fuzz target (fuzz/seq_messages.cc) reaches it without a transport.
#include <cstring>

#include "seq/internal.h"

namespace fabflow::seq::detail {

SpecHello decode_spec_hello(std::span<const std::byte> blob, int rank, unsigned outstanding,
                            std::span<const std::byte>* key) {
  auto bad = [&](const char* why) {
    return PeerError(rank, "seq: rank " + std::to_string(rank) + " " + why);
  };
  SpecHello h;
  if (blob.size() < sizeof h) throw bad("sent a malformed hello");
  std::memcpy(&h, blob.data(), sizeof h);
  // key_len is 32 bits: the sum cannot overflow a 64-bit size.
  if (h.magic != kSpecMagic || blob.size() != sizeof h + std::size_t{h.key_len})
    throw bad("sent a malformed hello");
  if (h.outstanding != outstanding) throw bad("disagrees on the requests in flight");
  *key = blob.subspan(sizeof h, h.key_len);
  return h;
}

}  // namespace fabflow::seq::detail
