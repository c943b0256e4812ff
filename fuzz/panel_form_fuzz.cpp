// libFuzzer target: the panel's form handling: reading a field from any body (form or JSON),
// and putting the CSRF field into any HTML, never crash; the token appears only in forms.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "security.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  holdfast::panel::http::Request json;
  json.body = text;
  json.headers.emplace("Content-Type", "application/json");
  (void)holdfast::panel::request_field(json, "amount_cents");
  holdfast::panel::http::Request form;
  holdfast::panel::http::parse_params(text, form.params);
  (void)holdfast::panel::request_field(form, "game_id");
  const std::string html = holdfast::panel::with_csrf_fields(text, "TOKEN0123");
  if (text.find("TOKEN0123") == std::string::npos && text.find("<form") == std::string::npos &&
      text.find("<FORM") == std::string::npos && html.find("TOKEN0123") != std::string::npos) {
    __builtin_trap();
  }
  return 0;
}
