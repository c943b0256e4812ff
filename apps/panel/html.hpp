// Server-rendered pages of the demo panel. Pure functions from values to HTML; every
// value is escaped.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "club_model.hpp"

namespace holdfast::panel {

std::string escape_html(std::string_view text);

// A page in the panel's style: `title` (escaped), `body` (HTML), and `head`, more HTML for
// the head (a refresh, a page's own style rules).
std::string page(std::string_view title, std::string_view body, std::string_view head = {});

// A day's schedule with the part of its page that depends on nothing else (the holidays,
// the title, the games' table) rendered once: every request a copy answers reuses it.
struct SchedulePage {
  Schedule schedule;
  std::string body;  // that part of the page, HTML
  // `schedule` with its part of the page rendered.
  static std::shared_ptr<const SchedulePage> of(Schedule schedule);
};

// The schedule page for `user`: the page's own part, with around it the club, the user, a
// banner when `stale_as_of` ("HH:MM:SS") says the data is the last good copy shown because
// the database is busy, and the report form carrying the CSRF token `csrf` (none if empty).
std::string render_schedule(const SchedulePage& page, const User& user,
                            const std::optional<std::string>& stale_as_of, std::string_view csrf);

// HTTP 503 page: the database is busy; the worker is told when to try again and is given
// the digest that also appears in the console log line.
std::string render_busy(int retry_after_seconds, std::string_view digest);

std::string render_login(std::string_view error);

// A plain page for 4xx answers: says what was wrong with the request.
std::string render_bad_request(std::string_view what);

}  // namespace holdfast::panel
