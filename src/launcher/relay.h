// Line relay for the children's stderr: passes lines through, but of the lines that start with
// "fabflow: error: " shows only the first of the whole run (later ones are consequences).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fabflow::launcher {

inline constexpr std::string_view kErrorPrefix = "fabflow: error: ";

// Splits each child's byte stream into lines and writes them to one fd; owned by the
// launcher's wait loop, not thread-safe.
class ErrorRelay {
 public:
  ErrorRelay(int out_fd, int streams);

  // Bytes read from stream `stream`; every completed line is relayed.
  void feed(int stream, std::string_view bytes);
  // End of stream: relays an unterminated last line with a newline added.
  void finish(int stream);
  // A line of the launcher's own (no newline); subject to the same first-error rule.
  void emit(std::string_view line);

  bool error_shown() const noexcept { return error_shown_; }

  // A line longer than this is relayed in pieces (classified by its first piece).
  static constexpr std::size_t kMaxLine = 64 * 1024;

 private:
  struct Stream {
    std::string pending;
    bool mid_line = false;  // a piece of the current line was already relayed
    bool suppress = false;  // the current line is a suppressed error line
  };
  void relay_piece(Stream& s, std::string_view piece, bool ends_line);
  void write_out(std::string_view bytes);

  int out_fd_;
  bool error_shown_ = false;
  std::vector<Stream> streams_;
};

}  // namespace fabflow::launcher
