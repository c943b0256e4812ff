#include "security.hpp"

#include <openssl/sha.h>

#include <algorithm>
#include <chrono>

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

std::string cross_site_refusal(const http::Request& req) {
  if (req.method == "GET" || req.method == "HEAD" || req.method == "OPTIONS") return {};
  if (req.get_header_value("Sec-Fetch-Site") == "cross-site") {
    return "cross-site request refused (Sec-Fetch-Site: cross-site)";
  }
  if (!req.has_header("Origin")) return {};
  const std::string origin = req.get_header_value("Origin");
  const std::string host = req.get_header_value("Host");
  const std::size_t scheme = origin.find("://");
  if (origin == "null" || scheme == std::string::npos || host.empty() ||
      origin.substr(scheme + 3) != host) {
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

std::string with_csrf_fields(std::string html, std::string_view token) {
  const std::string field =
      fmt::format("<input type=\"hidden\" name=\"csrf_token\" value=\"{}\">", token);
  for (std::size_t at = html.find("<form method=\"post\""); at != std::string::npos;
       at = html.find("<form method=\"post\"", at + 1)) {
    const std::size_t close = html.find('>', at);
    if (close == std::string::npos) break;
    html.insert(close + 1, field);
  }
  return html;
}

void AttemptLimiter::forget_old(std::deque<TimePoint>& events, TimePoint now) const {
  while (!events.empty() && events.front() + window_ <= now)
    events.pop_front();
}

Duration AttemptLimiter::acquire_locked(const std::string& key, TimePoint now) {
  if (auto it = events_.find(key); it != events_.end()) {
    Events& e = it->second;
    forget_old(e.counted, now);
    if (static_cast<int>(e.counted.size()) >= limit_) return e.counted.front() + window_ - now;
    if (static_cast<int>(e.counted.size()) + e.in_flight >= limit_) return kBusyWait;
  } else if (events_.size() >= max_keys_) {
    // Bounded memory: drop keys with nothing in flight whose events have all expired, or
    // else the first such key in order (an arbitrary one: the per-address limit still holds
    // a flood of names).
    for (auto i = events_.begin(); i != events_.end();) {
      forget_old(i->second.counted, now);
      const bool idle = i->second.counted.empty() && i->second.in_flight == 0;
      i = idle ? events_.erase(i) : std::next(i);
    }
    if (events_.size() >= max_keys_) {
      const auto quiet = std::find_if(events_.begin(), events_.end(),
                                      [](const auto& k) { return k.second.in_flight == 0; });
      if (quiet != events_.end()) events_.erase(quiet);
    }
  }
  ++events_[key].in_flight;
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

std::string client_address(const http::Request& req) {
  return req.remote_addr;
}

int retry_after_header(Duration wait) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wait).count();
  return std::max<int>(1, static_cast<int>((ms + 999) / 1000));
}

}  // namespace holdfast::panel
