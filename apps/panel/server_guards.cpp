// PanelServer's guards: what every request meets before its route (security.hpp).
#include "security.hpp"
#include "server.hpp"

namespace holdfast::panel {

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
