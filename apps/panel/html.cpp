#include "html.hpp"

#include <fmt/format.h>

#include "svg_plot.hpp"

namespace holdfast::panel {
namespace {

constexpr std::string_view kStyle = R"(<style>
body{font-family:system-ui,sans-serif;margin:0;background:#f5f6f8;color:#1d2430}
header{background:#1f4e79;color:#fff;padding:12px 24px;display:flex;justify-content:space-between}
main{padding:16px 24px;max-width:1100px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{border:1px solid #d8dde6;padding:6px 8px;text-align:left;font-size:14px}
th{background:#eef1f6}
.banner{padding:10px 14px;border-radius:6px;margin:0 0 12px}
.stale{background:#fff4ce;border:1px solid #e0c060}
.holiday{background:#e8f4ea;border:1px solid #8cc59a}
.busy{background:#fff;border:1px solid #d8dde6;padding:24px;border-radius:8px;max-width:560px}
.dot{display:inline-block;width:10px;height:10px;border-radius:50%;margin-right:6px}
footer{padding:12px 24px;font-size:13px;color:#556}
</style>)";

std::string money(std::int64_t cents, std::string_view currency) {
  return fmt::format("{}.{:02} {}", cents / 100, cents % 100, escape_html(currency));
}

// What every page begins with, up to and including <body>: `head` (a refresh, a page's own
// style rules) before the title, and the panel's style after it. kPageEnd closes the page.
void open_page(std::string& out, std::string_view title, std::string_view head) {
  out += "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">";
  out += head;
  out += "<title>";
  out += escape_html(title);
  out += "</title>";
  out += kStyle;
  out += "</head><body>";
}
constexpr std::string_view kPageEnd = "</body></html>";

std::string time_of(std::string_view iso) {
  // "2026-11-30T18:00" -> "18:00"
  const auto t = iso.find('T');
  return std::string(t == std::string_view::npos ? iso : iso.substr(t + 1, 5));
}

}  // namespace

std::string page(std::string_view title, std::string_view body, std::string_view head) {
  std::string out;
  out.reserve(kStyle.size() + head.size() + body.size() + 256);
  open_page(out, title, head);
  out += body;
  out += kPageEnd;
  return out;
}

std::string escape_html(std::string_view text) {
  return svg::escape(text);
}

std::shared_ptr<const SchedulePage> SchedulePage::of(Schedule schedule) {
  const Schedule& s = schedule;
  std::string body;
  for (const auto& h : s.context.holidays) {
    body += fmt::format("<div class=\"banner holiday\">Holiday: {}</div>", escape_html(h));
  }
  body += fmt::format("<h1 id=\"schedule-title\">Schedule for {}</h1>", escape_html(s.date));
  body += fmt::format("<p>{} courts &middot; {} games &middot; today's payments: {} ({})</p>",
                      s.context.courts.size(), s.games.size(), s.context.payments_today,
                      money(s.context.cash_today_cents, s.context.currency));
  body +=
      "<table id=\"schedule\"><thead><tr><th>Time</th><th>Court</th><th>Activity</th>"
      "<th>Signed up</th></tr></thead><tbody>";
  for (const auto& g : s.games) {
    body += fmt::format(
        "<tr data-game=\"{}\"><td>{}&ndash;{}</td><td>{}</td><td><span class=\"dot\" "
        "style=\"background:{}\"></span>{}</td><td>{} / {}</td></tr>",
        g.id, time_of(g.starts_at), time_of(g.ends_at), escape_html(g.court), escape_html(g.color),
        escape_html(g.activity), g.signed_up, g.capacity);
  }
  if (s.games.empty()) body += "<tr><td colspan=\"4\">No games on this day.</td></tr>";
  body += "</tbody></table></main>";
  return std::make_shared<const SchedulePage>(SchedulePage{std::move(schedule), std::move(body)});
}

std::string render_schedule(const SchedulePage& page, const User& user,
                            const std::optional<std::string>& stale_as_of, std::string_view csrf) {
  // Appended in place, as page() does: the copy's part is the bulk of the bytes.
  std::string out;
  out.reserve(kStyle.size() + page.body.size() + 1024);
  open_page(out, "Schedule", {});
  out += "<header><strong>";
  out += escape_html(page.schedule.context.club_name);
  out += "</strong><span>Dashboard &rarr; Schedule &middot; ";
  out += escape_html(user.name);
  out += " (";
  out += escape_html(user.role);
  out += ")</span></header><main>";
  if (stale_as_of) {
    out +=
        "<div class=\"banner stale\" id=\"stale-banner\">The database is busy right now. "
        "This schedule is as of ";
    out += escape_html(*stale_as_of);
    out += " and will refresh by itself.</div>";
  }
  out += page.body;
  out += "<footer><form method=\"post\" action=\"/report\">";
  if (!csrf.empty()) {
    out += "<input type=\"hidden\" name=\"csrf_token\" value=\"";
    out += escape_html(csrf);
    out += "\">";
  }
  out +=
      "<input type=\"hidden\" name=\"path\" value=\"/dashboard/schedule\"><button>Report a "
      "problem</button></form></footer>";
  out += kPageEnd;
  return out;
}

std::string render_busy(int retry_after_seconds, std::string_view digest) {
  const std::string body = fmt::format(
      "<main><div class=\"busy\" id=\"busy\"><h1>The database is busy</h1>"
      "<p>Nothing is lost: reading is paused for a moment, and payments and sign-ups either "
      "happen in full or not at all.</p><p>Please try again in {} s &mdash; this page will "
      "not break anything if you refresh it.</p><p>If it keeps happening, press "
      "<em>Report a problem</em> and quote <code id=\"digest\">{}</code>.</p>"
      "<form method=\"post\" action=\"/report\"><input type=\"hidden\" name=\"digest\" "
      "value=\"{}\"><button>Report a problem</button></form></div></main>",
      retry_after_seconds, escape_html(digest), escape_html(digest));
  return page("Busy - try again shortly", body);
}

std::string render_login(std::string_view error) {
  std::string body =
      "<main><h1>Sign in</h1><form method=\"post\" action=\"/login\">"
      "<p><label>Email <input name=\"email\" type=\"email\"></label></p>"
      "<p><label>Password <input name=\"password\" type=\"password\"></label></p>"
      "<p><button>Sign in</button></p></form>";
  if (!error.empty()) body += fmt::format("<p role=\"alert\">{}</p>", escape_html(error));
  body += "</main>";
  return page("Sign in", body);
}

std::string render_bad_request(std::string_view what) {
  return page(
      "Bad request",
      fmt::format("<main><h1>That request was not valid</h1><p>{}</p></main>", escape_html(what)));
}

}  // namespace holdfast::panel
