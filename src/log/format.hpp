// Text helpers shared by the console line and the logs table's message column.
// Internal to holdfast_core (not installed).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "holdfast/log/logger.hpp"

namespace holdfast::log_detail {

// Out: anything with push(char) and append(std::string_view).

inline bool is_control(char c) noexcept {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

// An Out that appends to a std::string (the writers below take any Out with push and append).
class StringOut {
 public:
  explicit StringOut(std::string& s) noexcept : s_(s) {}
  void push(char c) { s_.push_back(c); }
  void append(std::string_view text) { s_.append(text); }

 private:
  std::string& s_;
};

template <class Out>
void append_control(Out& out, char c) {
  switch (c) {
    case '\n':
      out.append("\\n");
      return;
    case '\r':
      out.append("\\r");
      return;
    case '\t':
      out.append("\\t");
      return;
    default: {
      static constexpr char kHex[] = "0123456789abcdef";
      const auto u = static_cast<unsigned char>(c);
      const char text[4] = {'\\', 'x', kHex[u >> 4], kHex[u & 0xf]};
      out.append(std::string_view(text, 4));
    }
  }
}

// `text` with control characters escaped (\n, \r, \t, \xHH): one entry is one line.
template <class Out>
void append_escaped(Out& out, std::string_view text) {
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!is_control(text[i])) continue;
    out.append(text.substr(start, i - start));
    append_control(out, text[i]);
    start = i + 1;
  }
  out.append(text.substr(start));
}

inline bool needs_quotes(std::string_view value) noexcept {
  if (value.empty()) return true;
  for (char c : value) {
    if (c == ' ' || c == '"' || c == '=' || is_control(c)) return true;
  }
  return false;
}

// " key=value" per field; a value that needs it is quoted, with \" and \\ inside quotes.
template <class Out>
void append_fields(Out& out, std::span<const LogField> fields) {
  for (const LogField& f : fields) {
    out.push(' ');
    append_escaped(out, f.key());
    out.push('=');
    const std::string_view v = f.value();
    if (!needs_quotes(v)) {
      out.append(v);
      continue;
    }
    out.push('"');
    for (char c : v) {
      if (c == '"' || c == '\\') {
        out.push('\\');
        out.push(c);
      } else if (is_control(c)) {
        append_control(out, c);
      } else {
        out.push(c);
      }
    }
    out.push('"');
  }
}

// "2026-11-30T11:40:21.123Z INFO  [context] message key=value": console::write's layout
// (level padded to five characters), with the entry's own created_at.
template <class Out>
void append_console_line(Out& out, const LogEntry& e) {
  const UtcStamp stamp = utc_stamp(e.created_at);
  out.append(stamp.view());
  out.push(' ');
  const std::string_view level = to_string(e.level);
  out.append(level);
  for (std::size_t i = level.size(); i < 5; ++i)
    out.push(' ');
  out.append(" [");
  append_escaped(out, e.context);
  out.append("] ");
  append_escaped(out, e.message);
  append_fields(out, e.fields);
}

}  // namespace holdfast::log_detail
