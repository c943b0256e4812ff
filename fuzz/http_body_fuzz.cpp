// libFuzzer target: the panel's body reader (issue #42). Any bytes after a chunked head:
// chunk sizes, extensions, trailers, lines that never end. The reader never crashes, never
// lets a body past its limit or a trailer field through to a route, and refuses only with
// the statuses a connection would send.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "http_server.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static constexpr std::string_view kHead =
      "POST /report HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
      "Content-Type: application/json\r\n\r\n";
  // The first byte picks small limits now and then, so that the fuzzer reaches them.
  holdfast::panel::HttpServer::Options limits;
  if (size > 0 && (data[0] & 1) != 0) {
    limits.max_body_bytes = 64;
    limits.max_read_buffer_bytes = 256;
    limits.max_chunk_extension_bytes = 8;
  }
  std::string bytes(kHead);
  if (size > 1) bytes.append(reinterpret_cast<const char*>(data) + 1, size - 1);
  holdfast::panel::http::Request request;
  const int status = holdfast::panel::HttpServer::parse_request(bytes, limits, request);
  if (status == 200) {
    if (request.body.size() > limits.max_body_bytes) __builtin_trap();
    // The head has three fields: anything more is a trailer that got through.
    if (request.headers.size() != 3) __builtin_trap();
  } else if (status != 0 && status != 400 && status != 413 && status != 431) {
    __builtin_trap();
  }
  return 0;
}
