#include <algorithm>
#include <cstdio>
#include <string>

#include "format.hpp"
#include "holdfast/log/logger.hpp"

namespace holdfast {
namespace {

// Buffers a line and writes it in pieces while the caller holds the stream's lock, so a
// long line needs no allocation and is still never interleaved with another.
class LockedLineWriter {
 public:
  explicit LockedLineWriter(std::FILE* stream) noexcept : stream_(stream) {}
  LockedLineWriter(const LockedLineWriter&) = delete;
  LockedLineWriter& operator=(const LockedLineWriter&) = delete;

  void push(char c) noexcept {
    if (size_ == sizeof(buffer_)) drain();
    buffer_[size_++] = c;
  }
  void append(std::string_view text) noexcept {
    while (!text.empty()) {
      if (size_ == sizeof(buffer_)) drain();
      const std::size_t n = std::min(text.size(), sizeof(buffer_) - size_);
      text.copy(buffer_ + size_, n);
      size_ += n;
      text.remove_prefix(n);
    }
  }
  void drain() noexcept {
    if (size_ > 0) std::fwrite(buffer_, 1, size_, stream_);
    size_ = 0;
  }

 private:
  std::FILE* stream_;
  std::size_t size_ = 0;
  char buffer_[512];
};

}  // namespace

ConsoleSink::ConsoleSink(Options options) noexcept : options_(options) {}

bool ConsoleSink::accepts(Level level) const noexcept {
  return level >= (options_.level ? *options_.level : console::level());
}

void ConsoleSink::write(const LogEntry& entry) noexcept {
  if (!accepts(entry.level)) return;
  std::FILE* stream = options_.stream ? options_.stream : stderr;
  flockfile(stream);
  LockedLineWriter out(stream);
  log_detail::append_console_line(out, entry);
  out.push('\n');
  out.drain();
  funlockfile(stream);
}

void format_console_line(const LogEntry& entry, std::string& out) {
  log_detail::StringOut s(out);
  log_detail::append_console_line(s, entry);
}

}  // namespace holdfast
