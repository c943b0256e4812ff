// libFuzzer target: console escaping. Whatever a log entry's context, message and fields
// hold (a multi-line database error, control bytes, quotes), its console line is one line
// with no control byte in it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "format.hpp"

namespace {
struct Line {
  std::string text;
  void push(char c) { text.push_back(c); }
  void append(std::string_view s) { text.append(s); }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  // Four parts: context, message, a field's key and value.
  std::string_view parts[4];
  std::size_t at = 0;
  for (int i = 0; i < 4; ++i) {
    const std::size_t n = std::min<std::size_t>(in.size() - at, (in.size() + 3) / 4);
    parts[i] = in.substr(at, n);
    at += n;
  }
  const holdfast::LogField fields[] = {{parts[2], parts[3]}};
  holdfast::LogEntry e;
  e.context = parts[0];
  e.message = parts[1];
  e.fields = fields;
  Line line;
  holdfast::log_detail::append_console_line(line, e);
  for (char c : line.text) {
    if (holdfast::log_detail::is_control(c)) __builtin_trap();
  }
  return 0;
}
