// What HttpServer checks in a request once Beast's parser has read its head, and how it turns
// what the parser read into the http::Request a route sees. Internal to the panel's server
// (http_server.cpp, http_reading.cpp): it includes Beast's parser.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "http_message.hpp"
#include "http_server.hpp"

namespace holdfast::panel::reading {

using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

bool iequals(std::string_view a, std::string_view b) noexcept;

// A parser with the limits of `options` (the body's is raised or lowered by check_head()).
void limit_parser(Parser& parser, const HttpServer::Options& options);

// What a request's head allows: its status is 0, or the refusal (400, 413, 421) with why.
struct HeadCheck {
  int status = 0;
  std::string why;
  bool form = false;           // application/x-www-form-urlencoded
  std::size_t body_limit = 0;  // the most of a body this request may send
};

HeadCheck check_head(const Parser& parser, const HttpServer::Options& options);

// The Request a route sees, from what the parser read.
void fill_request(boost::beast::http::request<boost::beast::http::string_body> message, bool form,
                  std::string_view client, http::Request& r);

}  // namespace holdfast::panel::reading
