#include "http_message.hpp"

namespace holdfast::panel::http {
namespace {

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool safe_header_text(std::string_view s) noexcept {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

bool same_name(std::string_view a, std::string_view b) noexcept {
  return !CaseInsensitiveLess{}(a, b) && !CaseInsensitiveLess{}(b, a);
}

}  // namespace

std::string Request::get_header_value(std::string_view name) const {
  const auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

std::string Request::get_param_value(std::string_view name) const {
  const auto it = params.find(name);
  return it == params.end() ? std::string() : it->second;
}

void Response::set_header(std::string_view name, std::string_view value) {
  if (!safe_header_text(name) || !safe_header_text(value) || name.empty()) return;
  headers.emplace_back(std::string(name), std::string(value));
}

void Response::set_content(std::string content, std::string_view content_type) {
  body = std::move(content);
  for (auto& [name, value] : headers) {
    if (!same_name(name, "Content-Type")) continue;
    value.assign(content_type);
    return;
  }
  set_header("Content-Type", content_type);
}

void Response::set_redirect(std::string_view location, int status_code) {
  status = status_code;
  set_header("Location", location);
}

bool Response::has_header(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(),
                     [name](const auto& h) { return same_name(h.first, name); });
}

std::string Response::get_header_value(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (same_name(n, name)) return v;
  }
  return {};
}

std::string percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%' && i + 2 < text.size()) {
      const int hi = hex_value(text[i + 1]);
      const int lo = hex_value(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && c == '+' ? ' ' : c);
  }
  return out;
}

void parse_params(std::string_view text, Params& out) {
  while (!text.empty()) {
    const std::size_t amp = text.find('&');
    const std::string_view field = text.substr(0, amp);
    text = amp == std::string_view::npos ? std::string_view() : text.substr(amp + 1);
    if (field.empty()) continue;
    const std::size_t eq = field.find('=');
    std::string name = percent_decode(field.substr(0, eq), true);
    std::string value =
        eq == std::string_view::npos ? std::string() : percent_decode(field.substr(eq + 1), true);
    out.emplace(std::move(name), std::move(value));
  }
}

}  // namespace holdfast::panel::http
