#include "bulk/descriptor.h"

#include <fabflow/status.h>

#include <cstring>
#include <string>

namespace fabflow::bulk::detail {

std::vector<std::byte> encode_descriptor(int exporter, int importer, std::uint32_t memory,
                                         std::uint64_t length, std::span<const std::byte> key) {
  DescriptorHeader h;
  h.exporter = exporter;
  h.importer = importer;
  h.memory = memory;
  h.key_len = static_cast<std::uint32_t>(key.size());
  h.length = length;
  std::vector<std::byte> out(sizeof h + key.size());
  std::memcpy(out.data(), &h, sizeof h);
  if (!key.empty()) std::memcpy(out.data() + sizeof h, key.data(), key.size());
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
  if (h.magic != DescriptorHeader::kMagic || h.version != 1 || h.reserved != 0)
    throw bad("is not a transfer engine descriptor of this version");
  if (h.exporter != exporter) throw bad("describes memory of rank " + std::to_string(h.exporter));
  if (h.importer != importer)
    throw bad("was made for rank " + std::to_string(h.importer) + ", not for rank " +
              std::to_string(importer));
  if (h.key_len == 0 || h.key_len > kMaxKeyBytes || h.key_len != blob.size() - sizeof h)
    throw bad("has a key of " + std::to_string(h.key_len) + " bytes in " +
              std::to_string(blob.size() - sizeof h));
  if (h.length == 0) throw bad("describes no memory");
  return {h.memory, h.length, blob.subspan(sizeof h)};
}

}  // namespace fabflow::bulk::detail
