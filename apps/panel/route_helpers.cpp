#include "route_helpers.hpp"

#include <fmt/format.h>

#include "holdfast/log/logger.hpp"
#include "utf8.hpp"

namespace holdfast::panel {

std::string now_utc() {
  return std::string(utc_stamp(WallClock::system().now()).view());
}

std::string cookie_value(const http::Request& req, std::string_view name) {
  const std::string header = req.get_header_value("Cookie");
  std::string_view rest = header;
  while (!rest.empty()) {
    const auto semi = rest.find(';');
    std::string_view part = rest.substr(0, semi);
    rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
    while (!part.empty() && part.front() == ' ')
      part.remove_prefix(1);
    if (part.size() > name.size() && part.substr(0, name.size()) == name &&
        part[name.size()] == '=') {
      return std::string(part.substr(name.size() + 1));
    }
  }
  return {};
}

std::string session_token(const http::Request& req) {
  std::string token = cookie_value(req, "session");
  if (token.size() > 64 || !valid_utf8(token)) return {};
  return token;
}

void set_cookie(http::Response& res, std::string_view name, std::string_view value,
                long max_age_seconds, bool secure) {
  res.set_header("Set-Cookie", fmt::format("{}={}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{}",
                                           name, value, max_age_seconds, secure ? "; Secure" : ""));
}

}  // namespace holdfast::panel
