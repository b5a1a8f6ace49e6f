#include "bulk/descriptor.h"

#include <fabflow/status.h>

#include <cstring>
#include <string>

namespace fabflow::bulk::detail {

std::vector<std::byte> encode_descriptor(int exporter, int importer, std::uint32_t memory,
                                         std::uint64_t length,
                                         const std::vector<std::vector<std::byte>>& keys) {
  DescriptorHeader h;
  h.endpoints = static_cast<std::uint16_t>(keys.size());
  h.exporter = exporter;
  h.importer = importer;
  h.memory = memory;
  h.length = length;
  std::vector<std::byte> out(sizeof h);
  for (const auto& k : keys) {
    const auto n = static_cast<std::uint32_t>(k.size());
    const auto* p = reinterpret_cast<const std::byte*>(&n);
    out.insert(out.end(), p, p + sizeof n);
    out.insert(out.end(), k.begin(), k.end());
  }
  h.key_len = static_cast<std::uint32_t>(out.size() - sizeof h);
  std::memcpy(out.data(), &h, sizeof h);
  return out;
}

DecodedDescriptor decode_descriptor(std::span<const std::byte> blob, int exporter, int importer) {
  auto bad = [&](const std::string& why) {
    return PeerError(exporter,
                     "transfer: the descriptor from rank " + std::to_string(exporter) + " " + why);
  };
  DescriptorHeader h;
  if (blob.size() < sizeof h) throw bad("is truncated (" + std::to_string(blob.size()) + " bytes)");
  std::memcpy(&h, blob.data(), sizeof h);
  if (h.magic != DescriptorHeader::kMagic || h.version != 2)
    throw bad("is not a transfer engine descriptor of this version");
  if (h.endpoints == 0 || h.endpoints > kMaxEndpoints)
    throw bad("names " + std::to_string(h.endpoints) + " endpoints (1.." +
              std::to_string(kMaxEndpoints) + ")");
  if (h.exporter != exporter) throw bad("describes memory of rank " + std::to_string(h.exporter));
  if (h.importer != importer)
    throw bad("was made for rank " + std::to_string(h.importer) + ", not for rank " +
              std::to_string(importer));
  if (h.key_len == 0 || h.key_len > kMaxKeyBytes || h.key_len != blob.size() - sizeof h)
    throw bad("has a key of " + std::to_string(h.key_len) + " bytes in " +
              std::to_string(blob.size() - sizeof h));
  if (h.length == 0) throw bad("describes no memory");
  DecodedDescriptor d{h.memory, h.length, blob.subspan(sizeof h), {}};
  std::span<const std::byte> rest = d.key;
  bool any = false;
  for (unsigned e = 0; e < h.endpoints; ++e) {
    std::uint32_t n = 0;
    if (rest.size() < sizeof n) throw bad("ends inside the key of endpoint " + std::to_string(e));
    std::memcpy(&n, rest.data(), sizeof n);
    rest = rest.subspan(sizeof n);
    if (n > rest.size())
      throw bad("gives endpoint " + std::to_string(e) + " a key of " + std::to_string(n) +
                " bytes in " + std::to_string(rest.size()));
    d.keys.push_back(rest.first(n));
    rest = rest.subspan(n);
    any = any || n > 0;
  }
  if (!rest.empty()) throw bad("has " + std::to_string(rest.size()) + " bytes after its keys");
  if (!any) throw bad("gives no endpoint a key");
  return d;
}

}  // namespace fabflow::bulk::detail
