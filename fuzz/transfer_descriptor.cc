// Fuzz target: what the transfer engine takes from a peer before it writes anywhere: a memory's
// descriptor (decode_descriptor, which must accept only a whole descriptor made by the named
// rank for this one, of 1..16 endpoints whose keys lie one after the other inside the bytes
// given, at least one of them not empty). An accepted descriptor must encode back to the same
// bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

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
    if (d.keys.empty() || d.keys.size() > bd::kMaxEndpoints) __builtin_trap();
    // Each endpoint's key follows its 4-byte length, right after the key before it, and the
    // last ends where the descriptor ends.
    const std::byte* at = d.key.data();
    bool any = false;
    std::vector<std::vector<std::byte>> copies;
    for (const auto& k : d.keys) {
      std::uint32_t n = 0;
      std::memcpy(&n, at, sizeof n);
      if (k.data() != at + sizeof n || k.size() != n) __builtin_trap();
      at = k.data() + k.size();
      any = any || !k.empty();
      copies.emplace_back(k.begin(), k.end());
    }
    if (!any || at != blob.data() + blob.size()) __builtin_trap();
    const auto again = bd::encode_descriptor(exporter, importer, d.memory, d.length, copies);
    if (again.size() != blob.size() || std::memcmp(again.data(), blob.data(), blob.size()) != 0)
      __builtin_trap();
  } catch (const fabflow::PeerError&) {
  }
  return 0;
}
