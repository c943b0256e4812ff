// PanelServer's guards: what every request meets before its route (security.hpp).
#include <charconv>
#include <optional>
#include <string>

#include "security.hpp"
#include "server.hpp"

namespace holdfast::panel {
namespace {

// Envoy's: the route's timeout in whole milliseconds, set on the request it forwards.
constexpr std::string_view kUpstreamTimeoutHeader = "x-envoy-expected-rq-timeout-ms";
constexpr std::int64_t kMaxUpstreamTimeoutMs = 24LL * 3600 * 1000;

// The upstream's timeout: none when the header is absent; an empty Duration (zero) with
// `bad` set when it is not a whole number of milliseconds in [1, one day].
std::optional<Duration> upstream_timeout(const http::Request& req, bool& bad) {
  bad = false;
  if (!req.has_header(kUpstreamTimeoutHeader)) return std::nullopt;
  const std::string text = req.get_header_value(kUpstreamTimeoutHeader);
  std::int64_t ms = 0;
  const char* end = text.data() + text.size();
  const auto [at, error] = std::from_chars(text.data(), end, ms);
  if (error != std::errc() || at != end || ms < 1 || ms > kMaxUpstreamTimeoutMs) {
    bad = true;
    return std::nullopt;
  }
  return std::chrono::milliseconds(ms);
}

}  // namespace

void PanelServer::cap_by_upstream(const http::Request& req, RetryWindow& window) {
  bool bad = false;
  const std::optional<Duration> timeout = upstream_timeout(req, bad);
  if (!timeout) return;
  const TimePoint arrived = req.received != TimePoint{} ? req.received : window.clock().now();
  window.cap(arrived + *timeout);
}

void PanelServer::install_guards() {
  Clock& clock = options_.store->clock();
  // 5 failed sign-ins per minute per account and per address; 10 reports per minute per
  // address, and kReportsPerMinute from all addresses together (addresses are cheap).
  sign_in_by_account_ = std::make_unique<AttemptLimiter>(clock, 5, std::chrono::minutes(1));
  sign_in_by_address_ = std::make_unique<AttemptLimiter>(clock, 5, std::chrono::minutes(1));
  reports_by_address_ = std::make_unique<AttemptLimiter>(clock, 10, std::chrono::minutes(1));
  all_reports_ =
      std::make_unique<AttemptLimiter>(clock, kReportsPerMinute, std::chrono::minutes(1));
}

bool PanelServer::refused_by_guards(const http::Request& req, http::Response& res) {
  if (bool bad = false; !upstream_timeout(req, bad) && bad) {
    counters_.bad_request++;
    res.status = 400;
    res.set_content(std::string(kUpstreamTimeoutHeader) +
                        ": not a whole number of milliseconds from 1 to 86400000\n",
                    "text/plain; charset=utf-8");
    return true;
  }
  if (std::string why = cross_site_refusal(req, options_.secure_cookies); !why.empty()) {
    counters_.bad_request++;
    res.status = 403;
    res.set_content(why + "\n", "text/plain; charset=utf-8");
    return true;
  }
  if (req.method == "POST" && req.path == "/report") {
    Duration wait = reports_by_address_->try_count(client_address(req));
    const bool this_address = wait > Duration::zero();
    if (!this_address) wait = all_reports_->try_count("all");
    if (wait > Duration::zero()) {
      counters_.bad_request++;
      res.status = 429;
      res.set_header("Retry-After", std::to_string(retry_after_header(wait)));
      res.set_content(this_address ? "too many reports from this address; try again later\n"
                                   : "too many reports; try again later\n",
                      "text/plain; charset=utf-8");
      return true;
    }
  }
  return false;
}

}  // namespace holdfast::panel
