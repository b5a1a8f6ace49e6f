// Framing and messages of the TCP bootstrap protocol (docs/bootstrap.md), shared by the
// coordinator, the rank clients and the tests. Everything read from a peer goes through
// FrameBuffer and BodyReader, which range-check every length.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fabflow::bootstrap_detail {

using Bytes = std::vector<std::byte>;

inline constexpr std::uint32_t kMagic = 0x46464253;              // "FFBS"
inline constexpr std::uint32_t kVersion = 2;                     // 2: HEARTBEAT and LIVENESS
inline constexpr std::size_t kHeaderSize = 8;                    // u32 type, u32 body length
inline constexpr std::size_t kMaxFrame = std::size_t{64} << 20;  // body bytes, any frame
inline constexpr std::size_t kMaxHandshakeFrame = 256;           // before authentication
inline constexpr std::size_t kNonceSize = 32;
inline constexpr std::size_t kMacSize = 32;  // HMAC-SHA256
inline constexpr std::size_t kHelloSize = 16 + kNonceSize + kMacSize;
inline constexpr std::size_t kMaxReason = 400;  // printable chars kept

enum class Msg : std::uint32_t {
  challenge = 1,   // coordinator -> client: magic, version, nonce
  hello = 2,       // client -> coordinator: magic, version, rank, size, client nonce, mac
  welcome = 3,     // coordinator -> client: mac proving the coordinator knows the secret
  reject = 4,      // coordinator -> client: reason; the connection closes
  ready = 5,       // coordinator -> client: every rank joined
  gather = 6,      // client -> coordinator: collective kind, blob
  result = 7,      // coordinator -> client: count, lengths, blobs
  abort = 8,       // client -> coordinator: reason; coordinator -> client: rank (i32), reason
  bye = 9,         // client -> coordinator: orderly exit
  heartbeat = 10,  // client -> coordinator: sequence number (sent by a thread of its own)
  liveness = 11,   // coordinator -> client: the last heartbeat heard from it, count, then per
                   // rank the ms since that rank was last heard
  session = 12,    // node -> connecting peer, after WELCOME: its session's coordinator host:port
};

enum class Collective : std::uint32_t { allgather = 1, barrier = 2 };

const char* collective_name(Collective kind);

using Nonce = std::array<std::byte, kNonceSize>;
using Mac = std::array<std::byte, kMacSize>;

// A peer sent something that breaks the protocol; what() is a short phrase without prefix.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Frame {
  std::uint32_t type = 0;
  Bytes body;
};

// Appends the fields of one frame and patches its length. Move-only value; single-threaded.
class FrameBuilder {
 public:
  explicit FrameBuilder(Msg type);
  FrameBuilder& u32(std::uint32_t v);
  FrameBuilder& bytes(std::span<const std::byte> b);
  FrameBuilder& text(std::string_view s);
  Bytes finish();  // leaves the builder empty

 private:
  Bytes buf_;
};

// Reads the fields of one frame body, throwing ProtocolError past its end. Borrows the body.
class BodyReader {
 public:
  explicit BodyReader(std::span<const std::byte> body) : body_(body) {}
  std::uint32_t u32();
  std::span<const std::byte> bytes(std::size_t n);
  std::span<const std::byte> rest();
  std::size_t left() const { return body_.size() - pos_; }

 private:
  std::span<const std::byte> body_;
  std::size_t pos_ = 0;
};

// Bytes received from a socket, handed out as complete frames. Owns its storage; single-threaded.
class FrameBuffer {
 public:
  std::span<std::byte> prepare(std::size_t n);  // writable space for at least n bytes
  void commit(std::size_t n);                   // n bytes of the prepared space were filled
  // The next complete frame, if buffered. Throws ProtocolError when a header announces a body
  // longer than max_body, before any of it is buffered.
  std::optional<Frame> take(std::size_t max_body);
  std::size_t buffered() const { return end_ - begin_; }

 private:
  Bytes data_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

struct Hello {
  std::uint32_t rank = 0;
  std::uint32_t size = 0;
  Nonce client_nonce{};
  Mac mac{};
};

Bytes encode_empty(Msg type);
Bytes encode_text(Msg type, std::string_view text);  // reject, client abort
Bytes encode_challenge(const Nonce& nonce);
Bytes encode_hello(const Hello& hello, std::uint32_t magic = kMagic,
                   std::uint32_t version = kVersion);
Bytes encode_welcome(const Mac& mac);
Bytes encode_gather(Collective kind, std::span<const std::byte> blob);
Bytes encode_result(std::span<const Bytes> blobs);
Bytes encode_abort(int rank, std::string_view reason);
Bytes encode_heartbeat(std::uint32_t seq);
Bytes encode_liveness(std::uint32_t echo, std::span<const std::uint32_t> silent_ms);

// Throws ProtocolError with the reason to send back in REJECT.
Nonce decode_challenge(std::span<const std::byte> body);  // checks magic and version
Hello decode_hello(std::span<const std::byte> body);      // checks magic, version and length
std::vector<Bytes> decode_result(std::span<const std::byte> body, std::size_t expected_count);
std::uint32_t decode_heartbeat(std::span<const std::byte> body);
struct Liveness {
  std::uint32_t echo = 0;  // the receiver's last heartbeat the coordinator had heard (0: none)
  std::vector<std::uint32_t> silent_ms;
};
Liveness decode_liveness(std::span<const std::byte> body, std::size_t expected_count);

Nonce random_nonce();
Mac hello_mac(std::string_view secret, const Nonce& challenge, std::uint32_t rank,
              std::uint32_t size, const Nonce& client_nonce);
Mac welcome_mac(std::string_view secret, const Nonce& challenge, const Nonce& client_nonce);
bool same_mac(const Mac& a, const Mac& b);  // constant time

// Peer-supplied text made safe to print: printable ASCII only, at most kMaxReason characters.
std::string printable(std::span<const std::byte> text);

}  // namespace fabflow::bootstrap_detail
