// libFuzzer target: the panel's form handling: reading a field from any body (form or JSON)
// never crashes; and the schedule page, with any text as the club's and the user's names,
// has exactly one form and the CSRF token only in it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "html.hpp"
#include "security.hpp"

namespace {

std::size_t count(std::string_view text, std::string_view what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string_view::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  holdfast::panel::http::Request json;
  json.body = text;
  json.headers.emplace("Content-Type", "application/json");
  (void)holdfast::panel::request_field(json, "amount_cents");
  holdfast::panel::http::Request form;
  holdfast::panel::http::parse_params(text, form.params);
  (void)holdfast::panel::request_field(form, "game_id");

  holdfast::panel::Schedule schedule;
  schedule.date = "2026-12-06";
  schedule.context.club_name = text;
  schedule.context.holidays.push_back(text);
  const auto page = holdfast::panel::SchedulePage::of(std::move(schedule));
  const holdfast::panel::User user{1, text, "someone@example.org", text};
  const std::string html = holdfast::panel::render_schedule(*page, user, text, "TOKEN0123");
  // The input is escaped wherever it shows: it adds no form, and no token outside the one form.
  if (count(html, "<form") != 1) __builtin_trap();
  if (text.find("TOKEN0123") == std::string::npos && count(html, "TOKEN0123") != 1) {
    __builtin_trap();
  }
  return 0;
}
