// Line relay for the children's output: passes each child's lines through whole, optionally
// under a label per child ("[3] "). Of the lines that start with "fabflow: error: " it shows by
// default only the first of the whole run (later ones are consequences); `fabflow launch`,
// relaying programs that are not fabflow's own, shows every line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fabflow::launcher {

inline constexpr std::string_view kErrorPrefix = "fabflow: error: ";

// Which lines starting with kErrorPrefix a relay shows.
enum class ErrorLines { first_of_run, every };

// Splits each child's byte stream into lines and writes them to one fd; owned by the
// launcher's wait loop, not thread-safe.
class LineRelay {
 public:
  LineRelay(int out_fd, int streams, ErrorLines errors = ErrorLines::first_of_run);

  // Writes `label` before every line of `stream` (once before a long line relayed in pieces),
  // in the same write as the line.
  void set_label(int stream, std::string label);
  // Bytes read from stream `stream`; every completed line is relayed.
  void feed(int stream, std::string_view bytes);
  // End of stream: relays an unterminated last line with a newline added.
  void finish(int stream);
  // A line of the launcher's own (no newline, no label); subject to the same error rule.
  void emit(std::string_view line);

  bool error_shown() const noexcept { return error_shown_; }
  // True once a write failed for good (EPIPE: the reader exited, as `head` does); nothing is
  // written after that.
  bool output_gone() const noexcept { return output_gone_; }

  // A line longer than this is relayed in pieces (classified by its first piece); another
  // stream's line may then land between two pieces.
  static constexpr std::size_t kMaxLine = 64 * 1024;

 private:
  struct Stream {
    std::string label;
    std::string pending;
    bool mid_line = false;  // a piece of the current line was already relayed
    bool suppress = false;  // the current line is a suppressed error line
  };
  void relay_piece(Stream& s, std::string_view piece, bool ends_line);
  void write_out(std::string_view bytes);

  int out_fd_;
  ErrorLines errors_;
  bool error_shown_ = false;
  bool output_gone_ = false;
  std::vector<Stream> streams_;
};

}  // namespace fabflow::launcher
