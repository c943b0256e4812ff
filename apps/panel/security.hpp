// Web security of the panel (DESIGN §8, issue #13):
//
//   - every answer carries kSecurityHeaders (no framing, no sniffing, same-origin referrers,
//     a CSP that allows the pages' inline CSS and SVG and nothing else);
//   - a state-changing request (anything but GET/HEAD/OPTIONS) from another site is refused
//     with 403: its Origin must be absent or name this server (scheme, host and port), and
//     Sec-Fetch-Site must not be "cross-site";
//   - writes made with a session (/payments, /signups) sent as a form also carry the
//     session's CSRF token (form field csrf_token or header X-CSRF-Token). A JSON body
//     (Content-Type: application/json) needs none: a browser sends one cross-site only
//     after a CORS preflight, which the panel never grants;
//   - AttemptLimiter counts failures or hits per key in a sliding window (sign-in per
//     account and per address, /report per address), on the panel's Clock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "holdfast/core/clock.hpp"

#include "http_message.hpp"

namespace holdfast::panel {

// The headers set on every answer.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> security_headers();

// Why `req` is refused as a cross-site state-changing request, or "" when it may proceed.
// An Origin must name this server: the scheme it is served over ("https" when `https`, the
// panel's --secure-cookies, else "http"), and the Host's name and port, a missing port being
// the scheme's default (http://h is h:80). Names compare without regard to ASCII case.
[[nodiscard]] std::string cross_site_refusal(const http::Request& req, bool https);

// The CSRF token of a session: the hex SHA-256 of a domain tag and the session token.
// Unguessable without the session cookie (HttpOnly), the same on every panel sharing the
// database and across restarts, so a page keeps working after a panel restarts.
[[nodiscard]] std::string csrf_token(std::string_view session_token);

// True when `req` carries `session_token`'s CSRF token or needs none (a JSON body).
[[nodiscard]] bool csrf_ok(const http::Request& req, std::string_view session_token);

// Whether a secret a client sent is the expected one, in a time that does not depend on
// how much of it matches.
[[nodiscard]] bool same_secret(std::string_view given, std::string_view expected) noexcept;

// The request's field `name`: from a JSON object body (Content-Type: application/json;
// strings and numbers), else from the query or form.
[[nodiscard]] std::string request_field(const http::Request& req, const std::string& name);

// At most `limit` events per key within `window`; thread-safe. An attempt whose outcome is
// not known yet holds a place until it is settled, so callers racing on a key cannot all
// pass the check before any of them counts.
//
// Memory is bounded by `max_keys` without letting anyone reset a key by filling the table
// (issue 42: 10,100 unknown emails evicted a victim's account): a new key that finds the
// table full makes room by dropping the least harmful keys, those with the fewest counted
// events and the oldest among equals, 1/16 of the table at once. A key at its limit within
// the window, or with an attempt in flight, is never dropped; when nothing but those is
// left, the new key is refused as if limited (kBusyWait), and the table is looked over
// again only once one of them may have left it (at most once per kBusyWait).
class AttemptLimiter {
 public:
  // How long a caller turned away only by attempts still in flight (or by a table full of
  // limited keys) is told to wait.
  static constexpr Duration kBusyWait = std::chrono::seconds(1);

  AttemptLimiter(Clock& clock, int limit, Duration window, std::size_t max_keys = 10'000)
      : clock_(clock),
        limit_(limit),
        window_(window),
        max_keys_(std::max<std::size_t>(max_keys, 1)) {}

  // Zero when an attempt for `key` may go ahead: it then holds a place until settle().
  // Otherwise how long until one may: until the oldest counted event leaves the window,
  // or kBusyWait when the places are held by attempts in flight.
  [[nodiscard]] Duration try_acquire(const std::string& key);
  // Ends an attempt try_acquire() let through; `counts`: it is an event of the limit.
  void settle(const std::string& key, bool counts);
  // try_acquire() and settle(key, true) in one: every attempt counts.
  [[nodiscard]] Duration try_count(const std::string& key);
  // The events of `key` counted within the window now (the sign-in gate's order).
  [[nodiscard]] int events(const std::string& key);
  // Keys kept, and how often a full table was looked over for room (for tests).
  [[nodiscard]] std::size_t keys() const;
  [[nodiscard]] std::uint64_t sweeps() const;

 private:
  struct Events {
    std::deque<TimePoint> counted;
    int in_flight = 0;
  };
  void forget_old(std::deque<TimePoint>& events, TimePoint now) const;
  Duration acquire_locked(const std::string& key, TimePoint now);
  // True when a new key fits (after dropping the least harmful keys if it had to).
  bool make_room(TimePoint now);

  Clock& clock_;
  int limit_;
  Duration window_;
  std::size_t max_keys_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Events> events_;
  TimePoint no_room_until_{};  // a full table is not looked over again before this
  std::uint64_t sweeps_ = 0;
};

// The client's address: the peer's (the panel is not behind a proxy it trusts).
[[nodiscard]] std::string client_address(const http::Request& req);

// Whole seconds for Retry-After (at least 1).
[[nodiscard]] int retry_after_header(Duration wait);

}  // namespace holdfast::panel
