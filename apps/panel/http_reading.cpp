#include "http_reading.hpp"

#include <algorithm>
#include <iterator>
#include <limits>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>

namespace holdfast::panel {
namespace reading {
namespace {

namespace bhttp = boost::beast::http;

bool starts_with_ci(std::string_view s, std::string_view prefix) noexcept {
  return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

std::string_view trimmed(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

std::size_t field_count(const Parser& parser) noexcept {
  const auto& fields = parser.get();
  return static_cast<std::size_t>(std::distance(fields.begin(), fields.end()));
}

}  // namespace

void BodyGuard::OnChunk::operator()(std::uint64_t, boost::beast::string_view extensions,
                                    boost::beast::error_code& ec) {
  if (extensions.size() > max_extension) {
    too_long = true;
    ec = bhttp::error::bad_chunk_extension;
  }
}

BodyGuard::BodyGuard(Parser& parser, const HttpServer::Options& options) {
  on_chunk_.max_extension = options.max_chunk_extension_bytes;
  parser.on_chunk_header(on_chunk_);
}

void BodyGuard::head_read(const Parser& parser) noexcept {
  head_fields_ = field_count(parser);
}

HeadCheck BodyGuard::check_done(const Parser& parser) const {
  HeadCheck out;
  // Beast adds a chunked body's trailer fields to the head's: any field past the head's is
  // one. Refused rather than dropped: a client that sends them means something by them.
  if (field_count(parser) != head_fields_) {
    out.status = 400;
    out.why = "bad request: trailer fields are not accepted\n";
  }
  return out;
}

HeadCheck over_limit(boost::beast::error_code ec, bool head_done, const BodyGuard& guard,
                     const HttpServer::Options& options) {
  HeadCheck out;
  if (ec == bhttp::error::header_limit || (ec == bhttp::error::buffer_overflow && !head_done)) {
    out.status = 431;
    out.why = "request header fields too large: the head is over " +
              std::to_string(options.max_head_bytes) + " bytes\n";
  } else if (ec == bhttp::error::body_limit) {
    out.status = 413;
    out.why = "request body too large: forms up to " +
              std::to_string(options.max_form_bytes / 1024) + " KiB, other bodies up to " +
              std::to_string(options.max_body_bytes / 1024) + " KiB\n";
  } else if (ec == bhttp::error::buffer_overflow) {
    out.status = 400;
    out.why = "bad request: a chunk line or the trailer section is over " +
              std::to_string(options.max_read_buffer_bytes) + " bytes\n";
  } else if (ec == bhttp::error::bad_chunk_extension && guard.extension_too_long()) {
    out.status = 400;
    out.why = "bad request: a chunk extension is over " +
              std::to_string(options.max_chunk_extension_bytes) + " bytes\n";
  }
  return out;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x | 0x20) == (y | 0x20);
         });
}

void limit_parser(Parser& parser, const HttpServer::Options& options) {
  parser.header_limit(static_cast<std::uint32_t>(
      std::min<std::size_t>(options.max_head_bytes, std::numeric_limits<std::uint32_t>::max())));
  parser.body_limit(options.max_body_bytes);
}

HeadCheck check_head(const Parser& parser, const HttpServer::Options& options) {
  const auto& head = parser.get();
  HeadCheck out;
  const auto target = head.target();
  if (target.empty() || target.front() != '/') {
    out.status = 400;
    out.why = "bad request: the target must be a path (\"/...\")\n";
    return out;
  }
  if (static_cast<std::size_t>(std::distance(head.begin(), head.end())) >
      options.max_header_fields) {
    out.status = 431;
    out.why = "request header fields too large: more than " +
              std::to_string(options.max_header_fields) + " fields\n";
    return out;
  }
  // One Host, naming this server.
  if (head.count(bhttp::field::host) != 1) {
    out.status = 400;
    out.why = "bad request: send one Host field\n";
    return out;
  }
  const auto host = head[bhttp::field::host];
  if (!HttpServer::host_allowed(std::string_view(host.data(), host.size()), options)) {
    out.status = 421;
    out.why = "misdirected request: this server does not answer for that Host\n";
    return out;
  }
  // A body's length from exactly one framing (RFC 9112 6.1 and 6.3): Transfer-Encoding, when
  // sent, is "chunked" alone. Anything else ("chunked;q=1", "xchunked", "chunked, identity",
  // "identity", two fields) leaves its length to guesswork, where a request can be smuggled.
  if (const std::size_t codings = head.count(bhttp::field::transfer_encoding); codings > 0) {
    const auto coding = head[bhttp::field::transfer_encoding];
    if (codings != 1 ||
        !iequals(trimmed(std::string_view(coding.data(), coding.size())), "chunked")) {
      out.status = 400;
      out.why = "bad request: Transfer-Encoding must be exactly \"chunked\"\n";
      return out;
    }
    if (head.count(bhttp::field::content_length) > 0) {
      out.status = 400;
      out.why = "bad request: send Transfer-Encoding or Content-Length, not both\n";
      return out;
    }
  }
  const auto type = head[bhttp::field::content_type];
  out.form = starts_with_ci(std::string_view(type.data(), type.size()),
                            "application/x-www-form-urlencoded");
  out.body_limit = out.form ? options.max_form_bytes : options.max_body_bytes;
  if (parser.content_length() && *parser.content_length() > out.body_limit) out.status = 413;
  return out;
}

void fill_request(bhttp::request<bhttp::string_body> message, bool form, std::string_view client,
                  http::Request& r) {
  r.method.assign(message.method_string().data(), message.method_string().size());
  r.target.assign(message.target().data(), message.target().size());
  const std::string_view target(r.target);
  const std::size_t question = target.find('?');
  r.path = http::percent_decode(target.substr(0, question), /*plus_is_space=*/false);
  if (question != std::string_view::npos) http::parse_params(target.substr(question + 1), r.params);
  for (const auto& field : message) {
    r.headers.emplace(std::string(field.name_string()), std::string(field.value()));
  }
  r.body = std::move(message.body());
  if (form) http::parse_params(r.body, r.params);
  r.remote_addr.assign(client);
}

}  // namespace reading

using reading::Parser;
namespace bhttp = boost::beast::http;

bool HttpServer::host_allowed(std::string_view host, const Options& options) noexcept {
  // name[:port]; an IPv6 literal keeps its brackets ("[::1]:8080").
  std::string_view name = host;
  const std::size_t colon = host.rfind(':');
  if (colon != std::string_view::npos && host.find(']', colon) == std::string_view::npos) {
    name = host.substr(0, colon);
    const std::string_view port = host.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      return false;
    }
  }
  if (name.empty()) return false;
  // The port does not matter for rebinding (the page's own name gives it away) and may be
  // a proxy's, so a name without a port allows any.
  for (std::string_view loopback : {"localhost", "127.0.0.1", "[::1]"}) {
    if (reading::iequals(name, loopback)) return true;
  }
  if (reading::iequals(name, options.host)) return true;
  for (const std::string& allowed : options.allowed_hosts) {
    if (reading::iequals(host, allowed) || reading::iequals(name, allowed)) return true;
  }
  return false;
}

int HttpServer::parse_request(std::string_view bytes, const Options& options, http::Request& out) {
  Parser parser;
  reading::limit_parser(parser, options);
  reading::BodyGuard guard(parser, options);
  boost::beast::error_code ec;
  std::size_t used = 0;
  // As a connection reads: what the parser has not taken yet must fit the read buffer.
  const auto refusal = [&](bool head_done) {
    if (ec == bhttp::error::need_more) {
      return bytes.size() - used > options.max_read_buffer_bytes
                 ? reading::over_limit(bhttp::error::buffer_overflow, head_done, guard, options)
                       .status
                 : 0;
    }
    const int status = reading::over_limit(ec, head_done, guard, options).status;
    return status != 0 ? status : 400;
  };
  while (!ec && used < bytes.size() && !parser.is_header_done()) {
    used += parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
  }
  if (ec) return refusal(false);
  if (!parser.is_header_done()) return 0;
  const reading::HeadCheck check = reading::check_head(parser, options);
  if (check.status != 0) return check.status;
  guard.head_read(parser);
  parser.body_limit(check.body_limit);
  parser.eager(true);
  while (!ec && !parser.is_done() && used < bytes.size()) {
    used += parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
  }
  if (ec) return refusal(true);
  if (!parser.is_done()) {
    parser.put_eof(ec);
    if (ec || !parser.is_done()) return 0;
  }
  if (const reading::HeadCheck done = guard.check_done(parser); done.status != 0) {
    return done.status;
  }
  reading::fill_request(parser.release(), check.form, "127.0.0.1", out);
  return 200;
}

bool HttpServer::is_light(std::string_view method, std::string_view path) noexcept {
  if (method != "GET" && method != "HEAD") return false;
  return path == "/healthz" || path == "/metrics" || path == "/login";
}

}  // namespace holdfast::panel
