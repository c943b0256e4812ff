// What HttpServer checks in a request once Beast's parser has read its head, and how it turns
// what the parser read into the http::Request a route sees. Internal to the panel's server
// (http_server.cpp, http_reading.cpp): it includes Beast's parser.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/beast/core/error.hpp>
#include <boost/beast/core/string.hpp>
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

// What the body reader refuses beyond Beast's own limits, for one parser: a chunk extension
// longer than Options::max_chunk_extension_bytes (400 as soon as its line is read), and any
// trailer field (400 once the last chunk is read: a trailer never becomes a request header,
// and the whole trailer section is bounded by the connection's read buffer meanwhile, as
// Beast reads it whole before it parses it). Bytes that never end a line are bounded by the
// read buffer (Options::max_read_buffer_bytes), not here. Lives as long as its parser.
class BodyGuard {
 public:
  BodyGuard(Parser& parser, const HttpServer::Options& options);
  BodyGuard(const BodyGuard&) = delete;
  BodyGuard& operator=(const BodyGuard&) = delete;
  // The head is read: the fields it has are the request's own.
  void head_read(const Parser& parser) noexcept;
  // The request is read: 0, or the refusal (400) with why.
  [[nodiscard]] HeadCheck check_done(const Parser& parser) const;
  // True when a chunk extension was too long (the parser's error is then bad_chunk_extension).
  [[nodiscard]] bool extension_too_long() const noexcept { return on_chunk_.too_long; }

 private:
  struct OnChunk {
    std::size_t max_extension = 0;
    bool too_long = false;
    void operator()(std::uint64_t size, boost::beast::string_view extensions,
                    boost::beast::error_code& ec);
  };
  OnChunk on_chunk_;
  std::size_t head_fields_ = 0;
};

// Why a read that failed with `ec` is refused: the status (400, 413, 431) and a line saying
// which limit it went past; 0 when `ec` is none of the limits (the caller decides).
HeadCheck over_limit(boost::beast::error_code ec, bool head_done, const BodyGuard& guard,
                     const HttpServer::Options& options);

// The Request a route sees, from what the parser read.
void fill_request(boost::beast::http::request<boost::beast::http::string_body> message, bool form,
                  std::string_view client, http::Request& r);

}  // namespace holdfast::panel::reading
