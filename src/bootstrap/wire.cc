#include "bootstrap/wire.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>

#include "fabflow/status.h"

namespace fabflow::bootstrap_detail {
namespace {

void put_u32(Bytes& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::byte>(v >> shift));
}

std::uint32_t get_u32(const std::byte* p) {
  return (std::uint32_t{std::to_integer<std::uint8_t>(p[0])} << 24) |
         (std::uint32_t{std::to_integer<std::uint8_t>(p[1])} << 16) |
         (std::uint32_t{std::to_integer<std::uint8_t>(p[2])} << 8) |
         std::uint32_t{std::to_integer<std::uint8_t>(p[3])};
}

std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

Mac hmac(std::string_view secret, const Bytes& data) {
  Mac out{};
  unsigned int len = 0;
  const auto* result = HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
                            reinterpret_cast<const unsigned char*>(data.data()), data.size(),
                            reinterpret_cast<unsigned char*>(out.data()), &len);
  if (result == nullptr || len != out.size()) throw Error("bootstrap: HMAC-SHA256 failed");
  return out;
}

// `peer` names who sent the message, `self` who reads it.
void check_magic_version(BodyReader& r, const std::string& peer, const std::string& self) {
  if (r.left() < 8) throw ProtocolError("malformed " + peer + " message");
  const std::uint32_t magic = r.u32();
  const std::uint32_t version = r.u32();
  if (magic != kMagic) throw ProtocolError("bad magic (not a fabflow bootstrap " + peer + ")");
  if (version != kVersion) {
    throw ProtocolError("protocol version " + std::to_string(version) + " is not supported (" +
                        self + " speaks " + std::to_string(kVersion) + ")");
  }
}

}  // namespace

const char* collective_name(Collective kind) {
  return kind == Collective::barrier ? "barrier" : "allgather";
}

FrameBuilder::FrameBuilder(Msg type) {
  put_u32(buf_, static_cast<std::uint32_t>(type));
  put_u32(buf_, 0);
}

FrameBuilder& FrameBuilder::u32(std::uint32_t v) {
  put_u32(buf_, v);
  return *this;
}

FrameBuilder& FrameBuilder::bytes(std::span<const std::byte> b) {
  buf_.insert(buf_.end(), b.begin(), b.end());
  return *this;
}

FrameBuilder& FrameBuilder::text(std::string_view s) { return bytes(as_bytes(s)); }

Bytes FrameBuilder::finish() {
  const auto len = static_cast<std::uint32_t>(buf_.size() - kHeaderSize);
  for (int i = 0; i < 4; ++i) buf_[4 + i] = static_cast<std::byte>(len >> (24 - 8 * i));
  return std::move(buf_);
}

std::uint32_t BodyReader::u32() { return get_u32(bytes(4).data()); }

std::span<const std::byte> BodyReader::bytes(std::size_t n) {
  if (n > left()) throw ProtocolError("truncated message");
  auto out = body_.subspan(pos_, n);
  pos_ += n;
  return out;
}

std::span<const std::byte> BodyReader::rest() { return bytes(left()); }

std::span<std::byte> FrameBuffer::prepare(std::size_t n) {
  if (data_.size() - end_ < n) {
    if (begin_ > 0) {
      std::memmove(data_.data(), data_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (data_.size() - end_ < n) data_.resize(end_ + n);
  }
  return {data_.data() + end_, data_.size() - end_};
}

void FrameBuffer::commit(std::size_t n) { end_ += n; }

std::optional<Frame> FrameBuffer::take(std::size_t max_body) {
  if (buffered() < kHeaderSize) return std::nullopt;
  const std::byte* head = data_.data() + begin_;
  const std::uint32_t len = get_u32(head + 4);
  if (len > max_body) {
    throw ProtocolError("frame of " + std::to_string(len) + " bytes exceeds the limit of " +
                        std::to_string(max_body));
  }
  if (buffered() < kHeaderSize + len) return std::nullopt;
  Frame f{get_u32(head), Bytes(head + kHeaderSize, head + kHeaderSize + len)};
  begin_ += kHeaderSize + len;
  if (begin_ == end_) begin_ = end_ = 0;
  return f;
}

Bytes encode_empty(Msg type) { return FrameBuilder(type).finish(); }

Bytes encode_text(Msg type, std::string_view text) {
  return FrameBuilder(type).text(text.substr(0, kMaxReason)).finish();
}

Bytes encode_challenge(const Nonce& nonce) {
  return FrameBuilder(Msg::challenge).u32(kMagic).u32(kVersion).bytes(nonce).finish();
}

Bytes encode_hello(const Hello& h, std::uint32_t magic, std::uint32_t version) {
  return FrameBuilder(Msg::hello)
      .u32(magic)
      .u32(version)
      .u32(h.rank)
      .u32(h.size)
      .bytes(h.client_nonce)
      .bytes(h.mac)
      .finish();
}

Bytes encode_welcome(const Mac& mac) { return FrameBuilder(Msg::welcome).bytes(mac).finish(); }

Bytes encode_gather(Collective kind, std::span<const std::byte> blob) {
  return FrameBuilder(Msg::gather).u32(static_cast<std::uint32_t>(kind)).bytes(blob).finish();
}

Bytes encode_result(std::span<const Bytes> blobs) {
  FrameBuilder b(Msg::result);
  b.u32(static_cast<std::uint32_t>(blobs.size()));
  for (const auto& blob : blobs) b.u32(static_cast<std::uint32_t>(blob.size()));
  for (const auto& blob : blobs) b.bytes(blob);
  return b.finish();
}

Bytes encode_abort(int rank, std::string_view reason) {
  return FrameBuilder(Msg::abort)
      .u32(static_cast<std::uint32_t>(rank))
      .text(reason.substr(0, kMaxReason))
      .finish();
}

Bytes encode_heartbeat(std::uint32_t seq) { return FrameBuilder(Msg::heartbeat).u32(seq).finish(); }

Bytes encode_liveness(std::uint32_t echo, std::span<const std::uint32_t> silent_ms) {
  FrameBuilder b(Msg::liveness);
  b.u32(echo);
  b.u32(static_cast<std::uint32_t>(silent_ms.size()));
  for (const std::uint32_t ms : silent_ms) b.u32(ms);
  return b.finish();
}

Nonce decode_challenge(std::span<const std::byte> body) {
  BodyReader r(body);
  check_magic_version(r, "coordinator", "this process");
  if (r.left() != kNonceSize) throw ProtocolError("malformed challenge");
  Nonce n;
  std::ranges::copy(r.rest(), n.begin());
  return n;
}

Hello decode_hello(std::span<const std::byte> body) {
  BodyReader r(body);
  check_magic_version(r, "client", "the coordinator");
  if (body.size() != kHelloSize) throw ProtocolError("malformed HELLO");
  Hello h;
  h.rank = r.u32();
  h.size = r.u32();
  std::ranges::copy(r.bytes(kNonceSize), h.client_nonce.begin());
  std::ranges::copy(r.bytes(kMacSize), h.mac.begin());
  return h;
}

std::vector<Bytes> decode_result(std::span<const std::byte> body, std::size_t expected_count) {
  BodyReader r(body);
  const std::uint32_t count = r.u32();
  if (count != expected_count) {
    throw ProtocolError("result with " + std::to_string(count) + " blobs, expected " +
                        std::to_string(expected_count));
  }
  std::vector<std::uint32_t> lens(count);
  std::uint64_t total = 0;
  for (auto& len : lens) total += len = r.u32();
  if (total != r.left()) throw ProtocolError("result lengths do not add up");
  std::vector<Bytes> blobs;
  blobs.reserve(count);
  for (auto len : lens) {
    auto b = r.bytes(len);
    blobs.emplace_back(b.begin(), b.end());
  }
  return blobs;
}

std::uint32_t decode_heartbeat(std::span<const std::byte> body) {
  if (body.size() != 4)
    throw ProtocolError("heartbeat of " + std::to_string(body.size()) + " bytes");
  return BodyReader(body).u32();
}

Liveness decode_liveness(std::span<const std::byte> body, std::size_t expected_count) {
  BodyReader r(body);
  Liveness l;
  l.echo = r.u32();
  const std::uint32_t count = r.u32();
  if (count != expected_count || r.left() != std::size_t{4} * count) {
    throw ProtocolError("liveness report of " + std::to_string(body.size()) + " bytes for " +
                        std::to_string(expected_count) + " ranks");
  }
  l.silent_ms.resize(count);
  for (auto& ms : l.silent_ms) ms = r.u32();
  return l;
}

Nonce random_nonce() {
  Nonce n;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1) {
    throw Error("bootstrap: RAND_bytes failed to produce a nonce");
  }
  return n;
}

Mac hello_mac(std::string_view secret, const Nonce& challenge, std::uint32_t rank,
              std::uint32_t size, const Nonce& client_nonce) {
  Bytes data;
  const auto label = as_bytes("fabflow-bootstrap-hello");
  data.insert(data.end(), label.begin(), label.end());
  data.insert(data.end(), challenge.begin(), challenge.end());
  put_u32(data, rank);
  put_u32(data, size);
  data.insert(data.end(), client_nonce.begin(), client_nonce.end());
  return hmac(secret, data);
}

Mac welcome_mac(std::string_view secret, const Nonce& challenge, const Nonce& client_nonce) {
  Bytes data;
  const auto label = as_bytes("fabflow-bootstrap-welcome");
  data.insert(data.end(), label.begin(), label.end());
  data.insert(data.end(), client_nonce.begin(), client_nonce.end());
  data.insert(data.end(), challenge.begin(), challenge.end());
  return hmac(secret, data);
}

bool same_mac(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string printable(std::span<const std::byte> text) {
  std::string out;
  const std::size_t n = std::min(text.size(), kMaxReason);
  out.reserve(n + 3);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = std::to_integer<unsigned char>(text[i]);
    out.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
  }
  if (text.size() > n) out += "...";
  return out;
}

}  // namespace fabflow::bootstrap_detail
