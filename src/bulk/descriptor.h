// The transfer engine's wire formats (fabflow/bulk/transfer.h): a memory's descriptor and the
// notification message. Decoding trusts nothing of the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace fabflow::bulk::detail {

// A descriptor: this header, then `key_len` bytes of keys: for each of the exporter's
// `endpoints`, a 4-byte length and that endpoint's key for the memory (length 0: the endpoint
// cannot reach the memory; at least one can).
struct DescriptorHeader {
  static constexpr std::uint32_t kMagic = 0x44584646;  // "FFXD"
  std::uint32_t magic = kMagic;
  std::uint16_t version = 2;
  std::uint16_t endpoints = 1;
  std::int32_t exporter = -1;  // the rank whose memory it is
  std::int32_t importer = -1;  // the one rank it was made for
  std::uint32_t memory = 0;    // the exporter's Memory::id
  std::uint32_t key_len = 0;
  std::uint64_t length = 0;
};
static_assert(sizeof(DescriptorHeader) == 32);

inline constexpr std::size_t kMaxKeyBytes = 4096;  // all endpoints' keys and their lengths
inline constexpr std::size_t kMaxEndpoints = 16;

// `keys`: one per endpoint, empty where that endpoint cannot reach the memory.
std::vector<std::byte> encode_descriptor(int exporter, int importer, std::uint32_t memory,
                                         std::uint64_t length,
                                         const std::vector<std::vector<std::byte>>& keys);

struct DecodedDescriptor {
  std::uint32_t memory = 0;
  std::uint64_t length = 0;
  std::span<const std::byte> key;                // the key bytes, inside the blob
  std::vector<std::span<const std::byte>> keys;  // each endpoint's key, inside `key`
};
// Throws PeerError (blaming `exporter`) unless `blob` is a whole descriptor of this version,
// made by `exporter` for `importer`, of 1..kMaxEndpoints endpoints whose keys (at most
// kMaxKeyBytes in all, one at least not empty) fill exactly the bytes after the header, with a
// length above 0.
DecodedDescriptor decode_descriptor(std::span<const std::byte> blob, int exporter, int importer);

// A notification: {magic, sender, tag}, 16 bytes.
struct NotificationWire {
  static constexpr std::uint32_t kMagic = 0x4e584646;  // "FFXN"
  // "FFXR": the sender released its memory whose Memory::id is in `tag`.
  static constexpr std::uint32_t kReleasedMagic = 0x52584646;
  std::uint32_t magic = kMagic;
  std::int32_t sender = -1;
  std::uint64_t tag = 0;
};
static_assert(sizeof(NotificationWire) == 16);

}  // namespace fabflow::bulk::detail
