// libFuzzer target: the panel's front parses any request head without crashing, and what it
// passes on stays within its limits.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "front.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view head(reinterpret_cast<const char*>(data), size);
  const holdfast::panel::HttpFront::Options limits;
  const holdfast::panel::HttpFront::Head parsed =
      holdfast::panel::HttpFront::parse_head(head, "203.0.113.9", limits);
  if (parsed.status == 0) {
    if (parsed.body_len > limits.max_body_bytes) __builtin_trap();
    if (parsed.rewritten.find("\r\nConnection: close\r\n") == std::string::npos) __builtin_trap();
  }
  return 0;
}
