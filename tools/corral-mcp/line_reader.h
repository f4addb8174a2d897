// LineReader: splits a byte stream into newline-terminated lines, each at most `max_line` bytes.
//
// A longer line is reported once as kTooLong and its bytes are dropped up to its newline, so
// the memory held never exceeds `max_line` plus one read's worth, whatever the peer sends.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace corral::mcp {

class LineReader {
 public:
  enum class Next { kNone, kLine, kTooLong };

  explicit LineReader(size_t max_line) : max_line_(max_line) {}

  void Feed(std::string_view bytes) { buffer_.append(bytes); }
  // Forgets everything fed so far (a new connection).
  void Clear() {
    Drop(buffer_.size());
    discarding_ = false;
  }

  // The next complete line (without "\n" or a "\r" before it), if there is one.
  Next Take(std::string* line) {
    for (;;) {
      const size_t newline = buffer_.find('\n', scanned_);
      if (newline == std::string::npos) {
        scanned_ = buffer_.size();
        if (discarding_) {
          Drop(buffer_.size());
          return Next::kNone;
        }
        if (buffer_.size() > max_line_) {
          Drop(buffer_.size());
          discarding_ = true;
          return Next::kTooLong;
        }
        return Next::kNone;
      }
      if (discarding_) {  // the end of a line already reported as too long
        Drop(newline + 1);
        discarding_ = false;
        continue;
      }
      if (newline > max_line_) {
        Drop(newline + 1);
        return Next::kTooLong;
      }
      size_t end = newline;
      if (end > 0 && buffer_[end - 1] == '\r') --end;
      line->assign(buffer_, 0, end);
      Drop(newline + 1);
      return Next::kLine;
    }
  }

 private:
  void Drop(size_t bytes) {
    buffer_.erase(0, bytes);
    scanned_ = 0;
  }

  const size_t max_line_;
  std::string buffer_;
  size_t scanned_ = 0;  // bytes of buffer_ known to hold no newline
  bool discarding_ = false;
};

}  // namespace corral::mcp
