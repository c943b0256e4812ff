// PanelServer::install_guards(): what every request meets before its route (security.hpp).
#include <httplib.h>

#include <fmt/format.h>

#include "security.hpp"
#include "server.hpp"

namespace holdfast::panel {
namespace {

// A short text for an error answer httplib makes itself (413, 431, 400, 404...).
std::string_view error_text(int status) {
  switch (status) {
    case 400:
      return "bad request: the request could not be read\n";
    case 404:
      return "not found\n";
    case 413:
      return "request body too large: forms up to 8 KiB, other bodies up to 64 KiB\n";
    case 414:
      return "request target too long\n";
    case 431:
      return "request header fields too large\n";
    default:
      return "the request could not be served\n";
  }
}

}  // namespace

void PanelServer::install_guards() {
  Clock& clock = options_.store->clock();
  // 5 failed sign-ins per minute per account and per address; 10 reports per minute per
  // address, and kReportsPerMinute from all addresses together (addresses are cheap).
  sign_in_by_account_ = std::make_unique<AttemptLimiter>(clock, 5, std::chrono::minutes(1));
  sign_in_by_address_ = std::make_unique<AttemptLimiter>(clock, 5, std::chrono::minutes(1));
  reports_by_address_ = std::make_unique<AttemptLimiter>(clock, 10, std::chrono::minutes(1));
  all_reports_ =
      std::make_unique<AttemptLimiter>(clock, kReportsPerMinute, std::chrono::minutes(1));

  httplib::Headers headers;
  for (auto& [name, value] : security_headers())
    headers.emplace(name, value);
  http_->set_default_headers(headers);
  // No route takes more than a form; a body over this is refused (413) as it arrives.
  http_->set_payload_max_length(kMaxBodyBytes);

  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // Only the front's requests: a local process that connects to the loopback port itself
    // would skip the front's limits and could name any client address.
    if (!same_secret(req.get_header_value("X-Holdfast-Front"), front_secret_)) {
      counters_.bad_request++;
      res.status = 403;
      res.set_content("connect through the panel's port\n", "text/plain; charset=utf-8");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (std::string why = cross_site_refusal(req); !why.empty()) {
      counters_.bad_request++;
      res.status = 403;
      res.set_content(why + "\n", "text/plain; charset=utf-8");
      return httplib::Server::HandlerResponse::Handled;
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
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  http_->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) res.set_content(std::string(error_text(res.status)), "text/plain");
  });
}

}  // namespace holdfast::panel
