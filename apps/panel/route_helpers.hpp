// What the panel's route files (routes_*.cpp) share for reading a request and stamping it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "http_message.hpp"

namespace holdfast::panel {

// Now on the wall clock, as the store takes it: UTC ISO-8601 with milliseconds
// ("2026-11-30T11:40:21.123Z").
[[nodiscard]] std::string now_utc();

// The value of cookie `name` in `req`'s Cookie header, or "" when it has none.
[[nodiscard]] std::string cookie_value(const http::Request& req, std::string_view name);

// The session cookie's token, or "" when there is none or it cannot be one (over 64 bytes,
// not UTF-8): no database is asked about such a cookie.
[[nodiscard]] std::string session_token(const http::Request& req);

// Adds a Set-Cookie header for cookie `name`: Path=/, not readable by scripts (HttpOnly), not
// sent on cross-site subrequests (SameSite=Lax), kept `max_age_seconds`; Secure (HTTPS only)
// when `secure` (`--secure-cookies`). REQUIRES: `value` is a valid cookie value.
void set_cookie(http::Response& res, std::string_view name, std::string_view value,
                long max_age_seconds, bool secure);

// Sets `map[key] = value`; past `capacity` entries, drops the one whose value `older` ranks
// first. For the panel's small maps whose keys a client picks (a linear scan).
template <class Map, class Older>
void put_bounded(Map& map, const typename Map::key_type& key, typename Map::mapped_type value,
                 std::size_t capacity, Older older) {
  map[key] = std::move(value);
  if (map.size() <= capacity) return;
  auto oldest = map.begin();
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (older(it->second, oldest->second)) oldest = it;
  }
  map.erase(oldest);
}

// The cookie that carries the WAL position of a client's last write from process to process
// (read-your-writes behind a load balancer; ClubStore::write_position()).
inline constexpr std::string_view kWritePositionCookie = "hf_wal";

}  // namespace holdfast::panel
