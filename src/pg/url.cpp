#include "holdfast/pg/url.hpp"

#include <vector>

namespace holdfast::pg {
namespace {

struct Span {
  std::size_t begin = 0;
  std::size_t end = 0;
};

bool is_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool is_uri(std::string_view s) noexcept {
  return s.rfind("postgresql://", 0) == 0 || s.rfind("postgres://", 0) == 0;
}

// The user-info password and every `password` query parameter of a URL.
void uri_passwords(std::string_view url, std::vector<Span>& out) {
  const std::size_t start = url.find("://") + 3;
  std::size_t end = url.find_first_of("/?", start);
  if (end == std::string_view::npos) end = url.size();
  const std::string_view authority = url.substr(start, end - start);
  const std::size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    const std::size_t colon = authority.substr(0, at).find(':');
    if (colon != std::string_view::npos) out.push_back({start + colon + 1, start + at});
  }
  const std::size_t query = url.find('?', end);
  if (query == std::string_view::npos) return;
  for (std::size_t i = query + 1; i <= url.size();) {
    std::size_t amp = url.find('&', i);
    if (amp == std::string_view::npos) amp = url.size();
    if (url.substr(i, amp - i).rfind("password=", 0) == 0) out.push_back({i + 9, amp});
    i = amp + 1;
  }
}

// The value of every `password` keyword of key=value conninfo.
void keyword_passwords(std::string_view s, std::vector<Span>& out) {
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space(s[i]))
      ++i;
    const std::size_t key_begin = i;
    while (i < s.size() && s[i] != '=' && !is_space(s[i]))
      ++i;
    const std::string_view key = s.substr(key_begin, i - key_begin);
    while (i < s.size() && is_space(s[i]))
      ++i;
    if (i >= s.size() || s[i] != '=') continue;  // a word without a value: read on
    ++i;
    while (i < s.size() && is_space(s[i]))
      ++i;
    Span value{i, i};
    if (i < s.size() && s[i] == '\'') {
      value.begin = ++i;
      while (i < s.size() && s[i] != '\'')
        i += (s[i] == '\\' && i + 1 < s.size()) ? 2 : 1;
      value.end = i;
      if (i < s.size()) ++i;
    } else {
      while (i < s.size() && !is_space(s[i]))
        i += (s[i] == '\\' && i + 1 < s.size()) ? 2 : 1;
      value.end = i;
    }
    if (key == "password") out.push_back(value);
  }
}

std::vector<Span> passwords(std::string_view url) {
  std::vector<Span> out;
  if (is_uri(url)) {
    uri_passwords(url, out);
  } else {
    keyword_passwords(url, out);
  }
  return out;
}

}  // namespace

std::string redact_password(std::string_view url) {
  std::string out(url);
  const std::vector<Span> spans = passwords(url);
  for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
    out.replace(it->begin, it->end - it->begin, "***");
  }
  return out;
}

std::string without_password(std::string_view text, std::string_view url) {
  std::string out(text);
  for (const Span& p : passwords(url)) {
    const std::string secret(url.substr(p.begin, p.end - p.begin));
    if (secret.size() < 4) continue;
    for (std::size_t at = out.find(secret); at != std::string::npos;
         at = out.find(secret, at + 3)) {
      out.replace(at, secret.size(), "***");
    }
  }
  return out;
}

}  // namespace holdfast::pg
