// An HTTP request as the panel's routes see it, and the answer they fill in: plain values,
// with no server type in them, so the routes (routes_*.cpp) and their helpers compile
// without Beast and can be called from a test with a hand-made Request.
//
// HttpServer (http_server.hpp) reads each request with Beast's parser and the panel's limits
// and fills a Request; a route fills the Response; the server writes it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "holdfast/core/clock.hpp"

namespace holdfast::panel::http {

// Orders header names without regard to ASCII case ("content-type" == "Content-Type").
struct CaseInsensitiveLess {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const noexcept {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
      const auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? char(c | 0x20) : c; };
      return lower(x) < lower(y);
    });
  }
};

using Headers = std::multimap<std::string, std::string, CaseInsensitiveLess>;
// Query and form fields by name, in the order they came.
using Params = std::multimap<std::string, std::string, std::less<>>;

struct Request {
  std::string method;  // "GET", "POST", ... as sent
  std::string target;  // the request-target as sent ("/dashboard/schedule?date=...")
  std::string path;    // the target's path, percent-decoded, without the query
  Headers headers;
  // The query's fields, then a form body's (application/x-www-form-urlencoded).
  Params params;
  std::string body;
  std::string remote_addr;  // the peer's IP address
  // When the server had read the whole head, on the server's Clock: the request's window
  // may open then (ADR 0023), so time spent queued for a worker counts.
  TimePoint received{};

  [[nodiscard]] bool has_header(std::string_view name) const { return headers.count(name) > 0; }
  // The first value of header `name`, or "" when there is none.
  [[nodiscard]] std::string get_header_value(std::string_view name) const;
  [[nodiscard]] bool has_param(std::string_view name) const { return params.count(name) > 0; }
  // The first value of field `name`, or "" when there is none.
  [[nodiscard]] std::string get_param_value(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string body;
  // In the order they were set; several of one name are kept (Set-Cookie).
  std::vector<std::pair<std::string, std::string>> headers;

  // Adds a header (a second of the same name too: Set-Cookie). A value with CR, LF or NUL
  // is dropped, never sent: it could end the head early.
  void set_header(std::string_view name, std::string_view value);
  // The body and its Content-Type.
  void set_content(std::string content, std::string_view content_type);
  // A redirect to `location` (a path on this server): 303 unless told otherwise.
  void set_redirect(std::string_view location, int status_code = 303);
  [[nodiscard]] bool has_header(std::string_view name) const;
  [[nodiscard]] std::string get_header_value(std::string_view name) const;
};

// Decodes an application/x-www-form-urlencoded string ("a=1&b=x+y%21") into `out`:
// '+' is a space, %XX a byte (a bad escape is kept as it came). Fields without '=' have an
// empty value; empty fields are skipped. Any bytes are fine.
void parse_params(std::string_view text, Params& out);

// `text` with each %XX replaced by its byte (and, when `plus_is_space`, '+' by ' ').
[[nodiscard]] std::string percent_decode(std::string_view text, bool plus_is_space);

}  // namespace holdfast::panel::http
