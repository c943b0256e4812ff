// The service's own routes: GET /healthz, GET /metrics, and POST /report (a user's report
// of a problem, quoting the digest of the answer they got).

#include <algorithm>

#include <fmt/format.h>
#include <boost/asio/awaitable.hpp>

#include "holdfast/core/shield.hpp"
#include "html.hpp"
#include "route_helpers.hpp"
#include "server.hpp"
#include "store_calls.hpp"

namespace holdfast::panel {

void PanelServer::get_healthz(const http::Request&, http::Response& res) {
  counters_.requests++;
  counters_.ok++;
  res.set_content("ok\n", "text/plain");
}

void PanelServer::get_metrics(const http::Request&, http::Response& res) {
  res.set_content(metrics_text(), "text/plain; version=0.0.4");
}

std::string PanelServer::metrics_text() const {
  ClubStore& store = *options_.store;
  const std::string strategy(to_string(store.strategy()));
  std::string out;
  const auto counter = [&](std::string_view name, std::string_view help, std::uint64_t value) {
    out += fmt::format("# HELP holdfast_panel_{} {}\n# TYPE holdfast_panel_{} counter\n", name,
                       help, name);
    out += fmt::format("holdfast_panel_{}{{strategy=\"{}\"}} {}\n", name, strategy, value);
  };
  counter("requests_total", "HTTP requests received.", counters_.requests.load());
  counter("responses_ok_total", "Requests answered 2xx.", counters_.ok.load());
  counter("responses_busy_total", "Requests answered 503 (database busy).",
          counters_.busy_503.load());
  counter("responses_error_total", "Requests answered 500.", counters_.error_500.load());
  counter("stale_pages_total", "Schedules served from the last good copy.", counters_.stale.load());
  counter("current_copy_pages_total",
          "Schedules answered from the day's copy because nothing was committed since it was "
          "read, or from another request's read of the day (no schedule query made).",
          counters_.current_copy.load());
  counter("bad_requests_total", "Requests answered 4xx for bad input.",
          counters_.bad_request.load());
  counter("database_attempts_total", "Database attempts made by the panel.", store.attempts());
  counter("database_calls_total",
          "Database calls the panel made (statements or transactions, before retries).",
          store.calls());
  if (http_) {
    // The HTTP server's own: where requests ran, and what it answered before any route.
    const HttpServer::Counters& http = http_->counters();
    counter("http_connections_total", "Client connections accepted.", http.accepted.load());
    const std::uint64_t served = http.served.load();
    const std::uint64_t served_async = http.served_async.load();
    out +=
        "# HELP holdfast_panel_http_served_total Requests handed to a route, by where it ran: "
        "the async lane (waits hold no thread) or the workers.\n"
        "# TYPE holdfast_panel_http_served_total counter\n";
    out += fmt::format(
        "holdfast_panel_http_served_total{{strategy=\"{}\",lane=\"async\"}} {}\n"
        "holdfast_panel_http_served_total{{strategy=\"{}\",lane=\"workers\"}} {}\n",
        strategy, served_async, strategy, served - std::min(served, served_async));
    counter("http_shed_total",
            "Requests answered 503 at once: their lane was full, or a connection was cut to "
            "make room.",
            http.shed_503.load());
    counter("http_timed_out_total", "Requests answered 408: the head or the body came too late.",
            http.timed_out_408.load());
    counter("http_refused_total", "Requests refused with 400, 413, 421 or 431 before any route.",
            http.refused_4xx.load());
    counter("http_answers_cut_total",
            "Answers the client did not read within the send deadline (the connection was cut).",
            http.answers_cut.load());
  }
  if (store.backend() == "postgresql") {
    const ClubStore::ServerAttempts servers = store.server_attempts();
    out +=
        "# HELP holdfast_panel_server_attempts_total Database attempts that reached each "
        "server.\n"
        "# TYPE holdfast_panel_server_attempts_total counter\n";
    out += fmt::format(
        "holdfast_panel_server_attempts_total{{strategy=\"{}\",server=\"primary\"}} {}\n"
        "holdfast_panel_server_attempts_total{{strategy=\"{}\",server=\"standby\"}} {}\n",
        strategy, servers.primary, strategy, servers.standby);
    out +=
        "# HELP holdfast_panel_pool_backing_off 1 while the primary's pool backs off after "
        "failed connects (it answers at once when no connection is idle).\n"
        "# TYPE holdfast_panel_pool_backing_off gauge\n";
    for (const bool writes : {false, true}) {
      out += fmt::format("holdfast_panel_pool_backing_off{{strategy=\"{}\",pool=\"{}\"}} {}\n",
                         strategy, writes ? "writes" : "reads",
                         store.pool_backing_off(writes) ? 1 : 0);
    }
  }
  if (store.read_shield() != nullptr) {
    std::vector<Metrics::Labelled> shields = {
        {&store.read_shield()->metrics(), store.read_shield()->name()},
        {&store.write_shield()->metrics(), store.write_shield()->name()}};
    for (const Shield* standby : store.standby_shields())
      shields.push_back({&standby->metrics(), standby->name()});
    out += Metrics::prometheus_text(shields);
  }
  return out;
}

// The console always gets the report; the problem_reports table gets it when the database
// takes it, and the answer says which.
boost::asio::awaitable<void> PanelServer::post_report(const http::Request& req, http::Response& res,
                                                      lane::Context& ctx) {
  counters_.requests++;
  const std::optional<ReportAsk> ask = report_asked(req, res);
  if (!ask) co_return;
  const Status recorded =
      co_await ctx.calls.record_report(ctx, ask->path, ask->digest, ask->note, ask->now);
  answer_report(res, *ask, recorded);
}

std::optional<PanelServer::ReportAsk> PanelServer::report_asked(const http::Request& req,
                                                                http::Response& res) {
  ReportAsk ask;
  ask.path = req.has_param("path") ? req.get_param_value("path") : "";
  ask.digest = req.has_param("digest") ? req.get_param_value("digest") : "";
  ask.note = req.has_param("note") ? req.get_param_value("note") : "";
  ask.now = now_utc();
  if (Status input = ClubStore::check_report(ask.path, ask.digest, ask.note); !input.ok()) {
    answers_->client_error(res, 400, input.message(), false);
    return std::nullopt;
  }
  options_.logger->warn("report", "problem reported",
                        {{"path", std::string_view(ask.path)},
                         {"digest", std::string_view(ask.digest)},
                         {"at", std::string_view(ask.now)}});
  return ask;
}

void PanelServer::answer_report(http::Response& res, const ReportAsk& ask, const Status& recorded) {
  if (!recorded.ok()) {
    options_.logger->warn("report", "report not stored",
                          {{"status", std::string_view(recorded.to_string())}});
  }
  counters_.ok++;
  res.status = 202;
  res.set_content(
      fmt::format("<!doctype html><title>Thank you</title><p>Thank you. Your report{} was "
                  "recorded at {}{}.</p>",
                  ask.digest.empty() ? "" : " (" + escape_html(ask.digest) + ")",
                  escape_html(ask.now), recorded.ok() ? "" : " in the server log"),
      "text/html; charset=utf-8");
}

}  // namespace holdfast::panel
