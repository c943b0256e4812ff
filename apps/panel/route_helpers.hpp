// What the panel's route files (routes_*.cpp) share for reading a request and stamping it.
#pragma once

#include <string>
#include <string_view>

namespace httplib {
struct Request;
}

namespace holdfast::panel {

// Now on the wall clock, as the store takes it: UTC ISO-8601 with milliseconds
// ("2026-11-30T11:40:21.123Z").
[[nodiscard]] std::string now_utc();

// The value of cookie `name` in `req`'s Cookie header, or "" when it has none.
[[nodiscard]] std::string cookie_value(const httplib::Request& req, std::string_view name);

}  // namespace holdfast::panel
