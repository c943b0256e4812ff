// libFuzzer target: the panel's HTTP server reads any bytes as a request (Beast's parser with
// the panel's limits, then its Host and body checks) without crashing, and what it lets
// through to a route stays within those limits.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "http_server.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const holdfast::panel::HttpServer::Options limits;
  holdfast::panel::http::Request request;
  const int status = holdfast::panel::HttpServer::parse_request(bytes, limits, request);
  if (status == 200) {
    if (request.body.size() > limits.max_body_bytes) __builtin_trap();
    if (request.path.empty() && request.target.empty()) __builtin_trap();
    if (request.headers.count("Host") != 1) __builtin_trap();
  } else if (status != 0 && status != 400 && status != 413 && status != 421 && status != 431) {
    __builtin_trap();
  }
  return 0;
}
