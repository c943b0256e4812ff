// The HTTP client of http_client.hpp on Boost.Beast: the only translation unit that
// includes Boost. Each call runs its own io_context, with a tcp_stream deadline per wait.
// The request head is written by hand, not by Beast's fields: those trim a value's leading
// and trailing blanks and throw past 64 KiB, and the tests send headers as they mean them.
#include "http_client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace holdfast::http_client {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr std::uint64_t kBodyLimit = 64 * 1024 * 1024;
constexpr std::uint32_t kHeaderLimit = 64 * 1024;
constexpr std::size_t kReadChunk = 64 * 1024;

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// RFC 9110 tchar: what a header name is made of.
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    const bool alnum = (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z');
    if (!alnum && std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos)
      return false;
  }
  return true;
}

// A path goes on the request line: a space, a control byte or DEL would split or end it.
bool is_request_target(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) return false;
  }
  return true;
}

// CR or LF would end the field early, NUL cuts it in many parsers.
bool is_field_value(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

// Runs what `start` began on `ioc` to its end; the error its handler got.
template <class Start>
error_code run(asio::io_context& ioc, Start start, std::size_t* transferred = nullptr) {
  error_code result = asio::error::operation_aborted;  // when the handler never ran
  start([&](const error_code& ec, auto n) {
    result = ec;
    if constexpr (std::is_integral_v<decltype(n)>) {
      if (transferred != nullptr) *transferred = n;
    }
  });
  ioc.restart();
  ioc.run();
  return result;
}

// Whether the kept connection `fd` can carry a request: nothing to read on it. Readable
// means the server closed it while it was idle (or sent bytes nobody asked for).
bool idle_and_open(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

// The request's bytes, or "" when it cannot be sent as given.
std::string request_text(std::string_view method, const std::string& path, const Headers& headers,
                         const std::string* body, std::string_view content_type,
                         const std::string& host, int port, bool keep_alive) {
  if (!is_request_target(path) || !is_field_value(content_type)) return {};
  std::string out;
  out.reserve(256 + path.size() + (body != nullptr ? body->size() : 0));
  out.append(method).append(" ").append(path).append(" HTTP/1.1\r\n");
  if (!headers.contains("Host")) {
    const bool v6 = host.find(':') != std::string::npos;
    out.append("Host: ").append(v6 ? "[" + host + "]" : host);
    out.append(":").append(std::to_string(port)).append("\r\n");
  }
  for (const auto& [name, value] : headers) {
    if (!is_token(name) || !is_field_value(value)) return {};
    if (iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding")) return {};
    out.append(name).append(": ").append(value).append("\r\n");
  }
  if (body != nullptr) {
    if (!content_type.empty() && !headers.contains("Content-Type"))
      out.append("Content-Type: ").append(content_type).append("\r\n");
    out.append("Content-Length: ").append(std::to_string(body->size())).append("\r\n");
  }
  if (!keep_alive && !headers.contains("Connection")) out.append("Connection: close\r\n");
  out.append("\r\n");
  if (body != nullptr) out.append(*body);
  return out;
}

// Writes all of `text`, each wait for room bounded by `idle`.
error_code write_all(asio::io_context& ioc, beast::tcp_stream& stream, std::string_view text,
                     std::chrono::microseconds idle) {
  while (!text.empty()) {
    stream.expires_after(idle);
    std::size_t n = 0;
    const error_code ec = run(
        ioc, [&](auto handler) { stream.async_write_some(asio::buffer(text), handler); }, &n);
    if (ec) return ec;
    text.remove_prefix(n);
  }
  return {};
}

// Reads one answer into `parser`, each wait for more bytes bounded by `idle`. `buffer`
// keeps what came after it.
error_code read_answer(asio::io_context& ioc, beast::tcp_stream& stream, beast::flat_buffer& buffer,
                       http::response_parser<http::string_body>& parser,
                       std::chrono::microseconds idle) {
  for (;;) {
    while (buffer.size() > 0 && !parser.is_done()) {
      error_code ec;
      const std::size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec == http::error::need_more) break;
      if (ec) return ec;
    }
    if (parser.is_done()) return {};
    stream.expires_after(idle);
    std::size_t n = 0;
    error_code ec = run(
        ioc, [&](auto handler) { stream.async_read_some(buffer.prepare(kReadChunk), handler); },
        &n);
    buffer.commit(n);
    if (ec == asio::error::eof) {
      if (!parser.got_some()) return http::error::end_of_stream;
      parser.put_eof(ec);  // completes an answer whose body ends with the connection
      return ec;
    }
    if (ec) return ec;
  }
}

}  // namespace

bool CaseInsensitiveLess::operator()(std::string_view a, std::string_view b) const noexcept {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const char x = lower(a[i]);
    const char y = lower(b[i]);
    if (x != y) return static_cast<unsigned char>(x) < static_cast<unsigned char>(y);
  }
  return a.size() < b.size();
}

std::string_view to_string(Error e) noexcept {
  switch (e) {
    case Error::Success:
      return "Success";
    case Error::Unknown:
      return "Unknown";
    case Error::Connection:
      return "Connection";
    case Error::ConnectionTimeout:
      return "ConnectionTimeout";
    case Error::Read:
      return "Read";
    case Error::Write:
      return "Write";
    case Error::InvalidRequest:
      return "InvalidRequest";
  }
  return "Unknown";
}

std::string Response::get_header_value(std::string_view name, std::size_t i) const {
  auto [it, end] = headers.equal_range(name);
  for (; it != end && i > 0; ++it, --i) {
  }
  return it == end ? std::string() : it->second;
}

bool Response::has_header(std::string_view name) const {
  return headers.contains(name);
}

std::size_t Response::get_header_value_count(std::string_view name) const {
  return headers.count(name);
}

std::string encode_form(const Params& params) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  const auto append = [&out](std::string_view s) {
    for (const char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if ((u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || c == '-' ||
          c == '.' || c == '_' || c == '~') {
        out += c;
      } else {
        out += '%';
        out += kHex[u >> 4];
        out += kHex[u & 0xf];
      }
    }
  };
  for (const auto& [name, value] : params) {
    if (!out.empty()) out += '&';
    append(name);
    out += '=';
    append(value);
  }
  return out;
}

Client::Client(std::string host, int port) : host_(std::move(host)), port_(port) {}

Client::~Client() {
  close_kept();
}

void Client::close_kept() noexcept {
  if (kept_ >= 0) ::close(std::exchange(kept_, -1));
}

Result Client::Get(const std::string& path) {
  return send("GET", path, {}, nullptr, "");
}

Result Client::Get(const std::string& path, const Headers& headers) {
  return send("GET", path, headers, nullptr, "");
}

Result Client::Post(const std::string& path, const Params& form) {
  return Post(path, Headers{}, form);
}

Result Client::Post(const std::string& path, const Headers& headers, const Params& form) {
  const std::string body = encode_form(form);
  return send("POST", path, headers, &body, "application/x-www-form-urlencoded");
}

Result Client::Post(const std::string& path, const std::string& body,
                    const std::string& content_type) {
  return send("POST", path, {}, &body, content_type);
}

Result Client::Post(const std::string& path, const Headers& headers, const std::string& body,
                    const std::string& content_type) {
  return send("POST", path, headers, &body, content_type);
}

Result Client::send(std::string_view method, const std::string& path, const Headers& headers,
                    const std::string* body, std::string_view content_type) noexcept {
  try {
    if (!keep_alive_) close_kept();
    const std::string request =
        request_text(method, path, headers, body, content_type, host_, port_, keep_alive_);
    if (request.empty()) return Result(Error::InvalidRequest);

    asio::io_context ioc(1);
    beast::tcp_stream stream(ioc);
    error_code ec;
    bool reused = false;
    if (kept_ >= 0) {
      const int fd = std::exchange(kept_, -1);
      sockaddr_storage local{};
      socklen_t size = sizeof(local);
      if (idle_and_open(fd) && ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size) == 0) {
        stream.socket().assign(local.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
        reused = !ec;
      }
      if (!reused) ::close(fd);
    }
    for (;;) {
      if (!reused) {
        tcp::resolver resolver(ioc);
        const auto endpoints =
            resolver.resolve(host_, std::to_string(port_), tcp::resolver::numeric_service, ec);
        if (ec) return Result(Error::Connection);
        stream.expires_after(connect_timeout_);
        ec = run(ioc, [&](auto handler) { stream.async_connect(endpoints, handler); });
        if (ec == beast::error::timeout) return Result(Error::ConnectionTimeout);
        if (ec) return Result(Error::Connection);
      }
      ec = write_all(ioc, stream, request, write_timeout_);
      if (!ec) break;
      stream.close();
      // A kept connection that failed under the write was closed by the server before it
      // had the whole request: once more on a new one. On a new one, or when the server
      // only stopped reading, no second try.
      if (!reused || ec == beast::error::timeout) return Result(Error::Write);
      reused = false;
    }

    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(kBodyLimit);
    parser.header_limit(kHeaderLimit);
    ec = read_answer(ioc, stream, buffer, parser, read_timeout_);
    if (ec) return Result(Error::Read);

    Response response;
    response.status = static_cast<int>(parser.get().result_int());
    for (const auto& field : parser.get())
      response.headers.emplace(std::string(field.name_string()), std::string(field.value()));
    response.body = std::move(parser.get().body());
    if (keep_alive_ && parser.keep_alive() && buffer.size() == 0) {
      kept_ = stream.release_socket().release(ec);
      if (ec) kept_ = -1;
    }
    return Result(std::move(response));
  } catch (...) {
    return Result(Error::Unknown);
  }
}

}  // namespace holdfast::http_client
