#include "launcher/relay.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace fabflow::launcher {

ErrorRelay::ErrorRelay(int out_fd, int streams) : out_fd_(out_fd), streams_(streams) {}

void ErrorRelay::feed(int stream, std::string_view bytes) {
  Stream& s = streams_.at(stream);
  s.pending.append(bytes);
  std::size_t start = 0;
  for (std::size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    relay_piece(s, std::string_view(s.pending).substr(start, nl + 1 - start), true);
  }
  s.pending.erase(0, start);
  if (s.pending.size() >= kMaxLine) {
    relay_piece(s, s.pending, false);
    s.pending.clear();
  }
}

void ErrorRelay::finish(int stream) {
  Stream& s = streams_.at(stream);
  if (!s.pending.empty()) {
    s.pending.push_back('\n');
    relay_piece(s, s.pending, true);
  } else if (s.mid_line) {
    relay_piece(s, "\n", true);
  }
  s = Stream{};
}

void ErrorRelay::emit(std::string_view line) {
  Stream own;
  std::string text(line);
  text.push_back('\n');
  relay_piece(own, text, true);
}

void ErrorRelay::relay_piece(Stream& s, std::string_view piece, bool ends_line) {
  if (!s.mid_line) {
    const bool is_error = piece.starts_with(kErrorPrefix);
    s.suppress = is_error && error_shown_;
    error_shown_ = error_shown_ || is_error;
  }
  if (!s.suppress) write_out(piece);
  s.mid_line = !ends_line;
}

void ErrorRelay::write_out(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(out_fd_, bytes.data(), bytes.size());
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{out_fd_, POLLOUT, 0};
      if (::poll(&p, 1, 1000) <= 0) return;  // a stuck reader loses output, never the launcher
    } else {
      return;
    }
  }
}

}  // namespace fabflow::launcher
