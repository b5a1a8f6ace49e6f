// Fuzz target: the TCP bootstrap's framing and message decoders (src/bootstrap/wire.h), as the
// coordinator and a rank client read them from a socket. The input is split into the reads a
// socket could deliver; every complete frame is decoded as the side that receives it would.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "bootstrap/wire.h"

using namespace fabflow::bootstrap_detail;

namespace {

// Decodes one frame's body the way its receiver does; a ProtocolError is the expected answer
// to garbage, anything else (a crash, another exception, a sanitizer report) is a bug.
void decode(const Frame& f) {
  const std::span<const std::byte> body(f.body);
  switch (static_cast<Msg>(f.type)) {
    case Msg::challenge: (void)decode_challenge(body); break;
    case Msg::hello: (void)decode_hello(body); break;
    case Msg::result: {
      // The client knows the count it expects (the job size): take the announced count when
      // it is a plausible job size, so that the decoder's later checks are reached.
      std::size_t expected = 0;
      if (body.size() >= 4) {
        BodyReader r(body);
        expected = r.u32();
        if (expected > 64) expected = 0;
      }
      for (const Bytes& b : decode_result(body, expected)) (void)b.size();
      break;
    }
    case Msg::gather: {
      BodyReader r(body);
      (void)collective_name(static_cast<Collective>(r.u32()));
      (void)r.rest();
      break;
    }
    case Msg::abort: {
      BodyReader r(body);
      (void)r.u32();
      (void)printable(r.rest());
      break;
    }
    default: (void)printable(body); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // First byte: how the stream is cut into reads (1..16 bytes, or everything at once).
  const std::size_t chunk = data[0] % 17 == 0 ? size : data[0] % 17;
  const auto* in = reinterpret_cast<const std::byte*>(data + 1);
  std::size_t left = size - 1;
  FrameBuffer buf;
  bool authenticated = false;  // the first frame is held to the handshake limit
  try {
    while (left > 0) {
      const std::size_t n = chunk < left ? chunk : left;
      auto space = buf.prepare(n);
      std::memcpy(space.data(), in, n);
      buf.commit(n);
      in += n;
      left -= n;
      while (auto f = buf.take(authenticated ? kMaxFrame : kMaxHandshakeFrame)) {
        authenticated = true;
        try {
          decode(*f);
        } catch (const ProtocolError&) {
        }
      }
    }
  } catch (const ProtocolError&) {
    // an oversized header: the connection is dropped
  }
  return 0;
}
