// A small synchronous HTTP/1.1 client (plain TCP, no TLS) for the drill's load and the
// end-to-end tests: the shape of cpp-httplib's Client, built on Boost.Beast in
// http_client.cpp (this header includes no Boost, so its users compile as fast as before).
//
// What a caller can rely on:
//   - Errors are values: a call returns a Result, never throws; a Result without a
//     Response says why in error().
//   - The request goes out as given: the path, and each header's name and value, byte for
//     byte (invalid UTF-8, long values, tabs...). What cannot be sent without changing the
//     message's framing is refused with Error::InvalidRequest and nothing is sent: a path
//     with a byte below 0x21 or DEL (space, CR, LF, NUL, ...), a header name that is not a
//     token, a header value with CR, LF or NUL, a caller's Content-Length or
//     Transfer-Encoding.
//   - Added unless the caller gave its own: Host ("host:port"), Content-Type for a body
//     (a form's is application/x-www-form-urlencoded), Connection: close without
//     keep-alive. Always added to a POST: Content-Length. Nothing else (no Accept,
//     User-Agent or Accept-Encoding: the body arrives as the server sent it).
//   - Timeouts are idle times, as cpp-httplib's: the connection timeout bounds connecting,
//     the write timeout each wait to write more, the read timeout each wait for the next
//     bytes of the answer (a 10 MB answer that keeps arriving is not cut off). Defaults as
//     cpp-httplib 0.11: connect 300 s, read 5 s, write 5 s.
//   - Without keep-alive (the default) every request has a connection of its own. With it,
//     a connection the server left open is reused; one the server closed while it was idle
//     is replaced before the request goes, and when writing on a reused connection fails
//     (the server closed it meanwhile, so it never got the whole request) the request is
//     sent once more on a new one. A request that was all written is never sent again,
//     nor one that failed on a new connection: it may have reached the server.
//   - An answer's head up to 64 KiB and body up to 64 MiB are read whole; a larger one fails
//     with Error::Read.
//
// Thread safety: one Client serves one call at a time; use a Client per thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace holdfast::http_client {

// Orders header names without regard to ASCII case ("set-cookie" finds "Set-Cookie").
struct CaseInsensitiveLess {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const noexcept;
};

// Header fields, in the order sent or received for equal names.
using Headers = std::multimap<std::string, std::string, CaseInsensitiveLess>;
// Form fields, sent as application/x-www-form-urlencoded (see encode_form).
using Params = std::multimap<std::string, std::string>;

enum class Error {
  Success,
  Unknown,            // anything else (out of memory, ...)
  Connection,         // the name did not resolve, or connecting failed (refused, ...)
  ConnectionTimeout,  // connecting took longer than the connection timeout
  Read,               // no whole answer: closed, reset, read timeout, or a malformed answer
  Write,              // the request could not be written (closed, reset, write timeout)
  InvalidRequest,     // the request cannot be sent as given (see above); nothing was sent
};

// "Read", "ConnectionTimeout", ...
[[nodiscard]] std::string_view to_string(Error e) noexcept;

struct Response {
  int status = 0;
  std::string body;
  Headers headers;

  // The i-th value of header `name`, "" when there are fewer.
  [[nodiscard]] std::string get_header_value(std::string_view name, std::size_t i = 0) const;
  [[nodiscard]] bool has_header(std::string_view name) const;
  [[nodiscard]] std::size_t get_header_value_count(std::string_view name) const;
};

// A Response, or the Error that kept one from coming. Default-constructed: failed, Unknown.
class Result {
 public:
  Result() = default;
  explicit Result(Response response) : response_(std::move(response)), error_(Error::Success) {}
  explicit Result(Error error) : error_(error) {}

  // Whether an answer came (any status).
  explicit operator bool() const noexcept { return response_.has_value(); }
  // Only when an answer came.
  [[nodiscard]] const Response& operator*() const { return *response_; }
  [[nodiscard]] Response& operator*() { return *response_; }
  [[nodiscard]] const Response* operator->() const { return &*response_; }
  [[nodiscard]] Response* operator->() { return &*response_; }
  // Success when an answer came.
  [[nodiscard]] Error error() const noexcept { return error_; }

 private:
  std::optional<Response> response_;
  Error error_ = Error::Unknown;
};

// "a=1&b=x%20y": each name and value percent-encoded except ALPHA, DIGIT and "-._~".
[[nodiscard]] std::string encode_form(const Params& params);

class Client {
 public:
  // A client of the server at `host` (a name or an IP address) and `port`. Connects on the
  // first request.
  Client(std::string host, int port);
  ~Client();  // closes a kept-alive connection
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Result Get(const std::string& path);
  Result Get(const std::string& path, const Headers& headers);
  Result Post(const std::string& path, const Params& form);
  Result Post(const std::string& path, const Headers& headers, const Params& form);
  // `content_type` empty: no Content-Type sent.
  Result Post(const std::string& path, const std::string& body, const std::string& content_type);
  Result Post(const std::string& path, const Headers& headers, const std::string& body,
              const std::string& content_type);

  void set_connection_timeout(std::chrono::microseconds t) noexcept { connect_timeout_ = t; }
  void set_connection_timeout(long sec, long usec = 0) noexcept {
    connect_timeout_ = std::chrono::seconds(sec) + std::chrono::microseconds(usec);
  }
  void set_read_timeout(std::chrono::microseconds t) noexcept { read_timeout_ = t; }
  void set_read_timeout(long sec, long usec = 0) noexcept {
    read_timeout_ = std::chrono::seconds(sec) + std::chrono::microseconds(usec);
  }
  void set_write_timeout(std::chrono::microseconds t) noexcept { write_timeout_ = t; }
  void set_write_timeout(long sec, long usec = 0) noexcept {
    write_timeout_ = std::chrono::seconds(sec) + std::chrono::microseconds(usec);
  }
  // Takes effect from the next request; off closes a kept-alive connection then.
  void set_keep_alive(bool on) noexcept { keep_alive_ = on; }

 private:
  Result send(std::string_view method, const std::string& path, const Headers& headers,
              const std::string* body, std::string_view content_type) noexcept;
  void close_kept() noexcept;

  std::string host_;
  int port_;
  std::chrono::microseconds connect_timeout_ = std::chrono::seconds(300);
  std::chrono::microseconds read_timeout_ = std::chrono::seconds(5);
  std::chrono::microseconds write_timeout_ = std::chrono::seconds(5);
  bool keep_alive_ = false;
  // The kept-alive connection's socket, or -1. An io_context holds three descriptors
  // (epoll, eventfd, timerfd); the drill keeps hundreds of clients, so each call makes its
  // own and only the socket stays between calls.
  int kept_ = -1;
};

}  // namespace holdfast::http_client
