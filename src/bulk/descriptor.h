// The transfer engine's wire formats (fabflow/bulk/transfer.h): a memory's descriptor and the
// notification message. Decoding trusts nothing of the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace fabflow::bulk::detail {

// A descriptor: this header, then `key_len` bytes of the transport's key for the memory.
struct DescriptorHeader {
  static constexpr std::uint32_t kMagic = 0x44584646;  // "FFXD"
  std::uint32_t magic = kMagic;
  std::uint16_t version = 1;
  std::uint16_t reserved = 0;
  std::int32_t exporter = -1;  // the rank whose memory it is
  std::int32_t importer = -1;  // the one rank it was made for
  std::uint32_t memory = 0;    // the exporter's Memory::id
  std::uint32_t key_len = 0;
  std::uint64_t length = 0;
};
static_assert(sizeof(DescriptorHeader) == 32);

inline constexpr std::size_t kMaxKeyBytes = 4096;

std::vector<std::byte> encode_descriptor(int exporter, int importer, std::uint32_t memory,
                                         std::uint64_t length, std::span<const std::byte> key);

struct DecodedDescriptor {
  std::uint32_t memory = 0;
  std::uint64_t length = 0;
  std::span<const std::byte> key;  // inside the blob
};
// Throws PeerError (blaming `exporter`) unless `blob` is a whole descriptor of this version,
// made by `exporter` for `importer`, with a key of 1..kMaxKeyBytes and a length above 0.
DecodedDescriptor decode_descriptor(std::span<const std::byte> blob, int exporter, int importer);

// A notification: {magic, sender, tag}, 16 bytes.
struct NotificationWire {
  static constexpr std::uint32_t kMagic = 0x4e584646;  // "FFXN"
  std::uint32_t magic = kMagic;
  std::int32_t sender = -1;
  std::uint64_t tag = 0;
};
static_assert(sizeof(NotificationWire) == 16);

}  // namespace fabflow::bulk::detail
