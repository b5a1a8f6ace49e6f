// Fuzz target: the memory key blobs a peer sends (export_key of the libfabric and local
// transports), decoded as import_key does before it maps anything.
#include <cstddef>
#include <cstdint>
#include <span>

#include <fabflow/transport.h>

#include "transport/libfabric/fabric_transport.h"
#include "transport/local/local_transport.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const int peer = data[1] % 8;
  const std::span<const std::byte> blob(reinterpret_cast<const std::byte*>(data + 2), size - 2);
  try {
    switch (data[0] % 3) {
      case 0: {
        const auto k = fabflow::local::decode_local_key(blob, peer);
        if (k.id == 0) __builtin_trap();  // the decoder promises a region id
        break;
      }
      default: {
        const bool want_raw = data[0] % 3 == 2;
        const auto k = fabflow::ofi::decode_fabric_key(blob, peer, want_raw);
        // What the decoder promises: the raw part lies inside the blob, and the range does not
        // wrap the address space.
        if (want_raw == k.raw.empty()) __builtin_trap();
        if (!k.raw.empty() &&
            (k.raw.data() < blob.data() || k.raw.data() + k.raw.size() > blob.data() + blob.size()))
          __builtin_trap();
        if (k.base + k.length < k.base) __builtin_trap();
        break;
      }
    }
  } catch (const fabflow::PeerError&) {
  }
  return 0;
}
