// Fuzz target: what the transfer engine takes from a peer before it writes anywhere: a memory's
// descriptor (decode_descriptor, which must accept only a whole descriptor made by the named
// rank for this one, its key inside the bytes given).
#include <cstddef>
#include <cstdint>
#include <span>

#include "bulk/descriptor.h"
#include "fabflow/status.h"

namespace bd = fabflow::bulk::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  // Byte 0: who sent it (low 4 bits) and who takes it (high 4 bits).
  const int exporter = data[0] & 0xf, importer = data[0] >> 4;
  const std::span<const std::byte> blob(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  try {
    const auto d = bd::decode_descriptor(blob, exporter, importer);
    if (d.key.empty() || d.key.size() > bd::kMaxKeyBytes || d.length == 0) __builtin_trap();
    if (d.key.data() < blob.data() || d.key.data() + d.key.size() != blob.data() + blob.size())
      __builtin_trap();
  } catch (const fabflow::PeerError&) {
  }
  return 0;
}
