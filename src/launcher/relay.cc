#include "launcher/relay.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace fabflow::launcher {

LineRelay::LineRelay(int out_fd, int streams, ErrorLines errors)
    : out_fd_(out_fd), errors_(errors), streams_(streams) {}

void LineRelay::set_label(int stream, std::string label) {
  streams_.at(stream).label = std::move(label);
}

void LineRelay::feed(int stream, std::string_view bytes) {
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

void LineRelay::finish(int stream) {
  Stream& s = streams_.at(stream);
  if (!s.pending.empty()) {
    s.pending.push_back('\n');
    relay_piece(s, s.pending, true);
  } else if (s.mid_line) {
    relay_piece(s, "\n", true);
  }
  s.pending.clear();
  s.mid_line = false;
  s.suppress = false;
}

void LineRelay::emit(std::string_view line) {
  Stream own;
  std::string text(line);
  text.push_back('\n');
  relay_piece(own, text, true);
}

void LineRelay::relay_piece(Stream& s, std::string_view piece, bool ends_line) {
  const bool line_start = !s.mid_line;
  if (line_start) {
    const bool is_error = piece.starts_with(kErrorPrefix);
    s.suppress = is_error && error_shown_ && errors_ == ErrorLines::first_of_run;
    error_shown_ = error_shown_ || is_error;
  }
  s.mid_line = !ends_line;
  if (s.suppress) return;
  if (line_start && !s.label.empty()) {
    std::string labelled = s.label;  // one write: the label never parts from its line
    labelled.append(piece);
    write_out(labelled);
  } else {
    write_out(piece);
  }
}

void LineRelay::write_out(std::string_view bytes) {
  while (!bytes.empty() && !output_gone_) {
    const ssize_t n = ::write(out_fd_, bytes.data(), bytes.size());
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{out_fd_, POLLOUT, 0};
      if (::poll(&p, 1, 1000) <= 0) return;  // a stuck reader loses output, never the launcher
    } else {
      output_gone_ = true;
    }
  }
}

}  // namespace fabflow::launcher
