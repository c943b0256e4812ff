#include "security.hpp"

#include <openssl/sha.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace holdfast::panel {
namespace {

bool starts_with_ci(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) !=
        std::tolower(static_cast<unsigned char>(prefix[i])))
      return false;
  }
  return true;
}

bool same_ci(std::string_view a, std::string_view b) {
  return a.size() == b.size() && starts_with_ci(a, b);
}

// The name and port of "host", "host:port" or "[v6]:port" (an Origin's or a Host's), the
// port `default_port` when none is given; nullopt for anything else.
struct Authority {
  std::string_view host;
  int port = 0;
};
std::optional<Authority> authority_of(std::string_view text, int default_port) {
  Authority out{text, default_port};
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    out.host = text.substr(0, close + 1);
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return std::nullopt;
    if (!rest.empty()) port = rest.substr(1);
  } else if (const std::size_t colon = text.find(':'); colon != std::string_view::npos) {
    out.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (out.host.empty() || out.host.find_first_of("/?#@\\ \t") != std::string_view::npos) {
    return std::nullopt;
  }
  if (!port.empty()) {  // "h:" is h with the default port (RFC 3986 §3.2.3)
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) {
      return std::nullopt;
    }
    out.port = std::stoi(std::string(port));
    if (out.port > 65535) return std::nullopt;
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> security_headers() {
  return {
      {"X-Frame-Options", "DENY"},
      // The pages are one document each: inline <style>, style attributes and inline SVG;
      // no scripts, images, fonts or frames from anywhere.
      {"Content-Security-Policy",
       "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
       "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"},
      {"X-Content-Type-Options", "nosniff"},
      {"Referrer-Policy", "same-origin"},
  };
}

std::string cross_site_refusal(const http::Request& req, bool https) {
  if (req.method == "GET" || req.method == "HEAD" || req.method == "OPTIONS") return {};
  if (req.get_header_value("Sec-Fetch-Site") == "cross-site") {
    return "cross-site request refused (Sec-Fetch-Site: cross-site)";
  }
  if (!req.has_header("Origin")) return {};
  const std::string origin = req.get_header_value("Origin");
  const std::string_view scheme = https ? "https" : "http";
  const int default_port = https ? 443 : 80;
  const std::size_t end = origin.find("://");
  const std::optional<Authority> from =
      end == std::string::npos
          ? std::nullopt
          : authority_of(std::string_view(origin).substr(end + 3), default_port);
  const std::string host = req.get_header_value("Host");
  const std::optional<Authority> to = authority_of(host, default_port);
  if (end == std::string::npos || !same_ci(std::string_view(origin).substr(0, end), scheme) ||
      !from || !to || from->port != to->port || !same_ci(from->host, to->host)) {
    return "cross-site request refused: its Origin is not this server";
  }
  return {};
}

std::string csrf_token(std::string_view session_token) {
  const std::string input = "holdfast-panel-csrf-v1:" + std::string(session_token);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(input.data()), input.size(), digest);
  std::string hex;
  for (std::size_t i = 0; i < 16; ++i)
    hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

bool csrf_ok(const http::Request& req, std::string_view session_token) {
  if (starts_with_ci(req.get_header_value("Content-Type"), "application/json")) return true;
  const std::string expected = csrf_token(session_token);
  const std::string given = req.has_header("X-CSRF-Token") ? req.get_header_value("X-CSRF-Token")
                                                           : req.get_param_value("csrf_token");
  return same_secret(given, expected);
}

bool same_secret(std::string_view given, std::string_view expected) noexcept {
  if (given.size() != expected.size()) return false;
  unsigned char diff = 0;  // the same time whatever matches
  for (std::size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ expected[i]);
  return diff == 0;
}

std::string request_field(const http::Request& req, const std::string& name) {
  if (!starts_with_ci(req.get_header_value("Content-Type"), "application/json")) {
    return req.get_param_value(name);
  }
  const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains(name)) return {};
  const nlohmann::json& v = body[name];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  return "?";  // present but not a string or whole number: refused by the route's checks
}

void AttemptLimiter::forget_old(std::deque<TimePoint>& events, TimePoint now) const {
  while (!events.empty() && events.front() + window_ <= now)
    events.pop_front();
}

bool AttemptLimiter::make_room(TimePoint now) {
  if (events_.size() < max_keys_) return true;
  if (now < no_room_until_) return false;
  ++sweeps_;
  // Keys that may go: nothing in flight and under the limit. The rest stay, and the soonest
  // one of them may go is when the table is worth looking over again.
  struct Candidate {
    std::size_t counted;
    TimePoint last;
    std::unordered_map<std::string, Events>::iterator at;
  };
  std::vector<Candidate> candidates;
  TimePoint soonest = now + kBusyWait;
  for (auto it = events_.begin(); it != events_.end();) {
    Events& e = it->second;
    forget_old(e.counted, now);
    const auto counted = static_cast<int>(e.counted.size());
    if (counted == 0 && e.in_flight == 0) {
      it = events_.erase(it);
      continue;
    }
    if (e.in_flight == 0 && counted < limit_) {
      candidates.push_back({e.counted.size(), e.counted.back(), it});
    } else if (e.in_flight == 0) {
      // Under the limit again once all but limit_ - 1 of its events have left the window.
      soonest = std::min(soonest, e.counted[static_cast<std::size_t>(counted - limit_)] + window_);
    }
    ++it;
  }
  // Room for a batch of newcomers, so that a flood of new keys looks the table over once per
  // max_keys / 16 of them, not once each.
  const std::size_t batch = std::max<std::size_t>(max_keys_ / 16, 1);
  const std::size_t target = max_keys_ - std::min(batch, max_keys_);
  if (events_.size() > target && !candidates.empty()) {
    const std::size_t n = std::min(candidates.size(), events_.size() - target);
    const auto least_harmful = [](const Candidate& a, const Candidate& b) {
      return a.counted != b.counted ? a.counted < b.counted : a.last < b.last;
    };
    std::nth_element(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(n - 1),
                     candidates.end(), least_harmful);
    for (std::size_t i = 0; i < n; ++i)
      events_.erase(candidates[i].at);
  }
  // Little room made: the table holds keys that must stay, and looking it over again before
  // one of them may go would only cost a scan per newcomer.
  if (events_.size() + batch > max_keys_) no_room_until_ = soonest;
  return events_.size() < max_keys_;
}

Duration AttemptLimiter::acquire_locked(const std::string& key, TimePoint now) {
  auto it = events_.find(key);
  if (it != events_.end()) {
    Events& e = it->second;
    forget_old(e.counted, now);
    if (static_cast<int>(e.counted.size()) >= limit_) return e.counted.front() + window_ - now;
    if (static_cast<int>(e.counted.size()) + e.in_flight >= limit_) return kBusyWait;
  } else {
    // A key the table has no room for is refused as if limited, never let through uncounted.
    if (!make_room(now)) return kBusyWait;
    it = events_.try_emplace(key).first;
  }
  ++it->second.in_flight;
  return Duration::zero();
}

Duration AttemptLimiter::try_acquire(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return acquire_locked(key, clock_.now());
}

void AttemptLimiter::settle(const std::string& key, bool counts) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = events_.find(key);
  if (it == events_.end()) return;
  Events& e = it->second;
  if (e.in_flight > 0) --e.in_flight;
  if (counts) e.counted.push_back(clock_.now());
  if (e.counted.empty() && e.in_flight == 0) events_.erase(it);
}

Duration AttemptLimiter::try_count(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  const TimePoint now = clock_.now();
  const Duration wait = acquire_locked(key, now);
  if (wait > Duration::zero()) return wait;
  Events& e = events_[key];
  --e.in_flight;
  e.counted.push_back(now);
  return Duration::zero();
}

int AttemptLimiter::events(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = events_.find(key);
  if (it == events_.end()) return 0;
  forget_old(it->second.counted, clock_.now());
  return static_cast<int>(it->second.counted.size());
}

std::size_t AttemptLimiter::keys() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

std::uint64_t AttemptLimiter::sweeps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sweeps_;
}

std::string client_address(const http::Request& req) {
  return req.remote_addr;
}

int retry_after_header(Duration wait) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wait).count();
  return std::max<int>(1, static_cast<int>((ms + 999) / 1000));
}

}  // namespace holdfast::panel
