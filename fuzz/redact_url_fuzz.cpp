// libFuzzer target: the connection-URL password redaction never crashes, and a password it
// was given in the common URL form never survives it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "holdfast/pg/url.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)holdfast::pg::redact_password(text);
  // postgresql://user:SECRET@host/db with a fuzzed user and host: SECRET must go.
  std::string url = "postgresql://";
  for (char c : text.substr(0, 16)) {
    if (c != ':' && c != '@' && c != '/' && c != '?' && c != '%' && c > ' ') url += c;
  }
  if (url.find("Zq8") != std::string::npos) return 0;  // the user name is not the secret
  url += ":Zq8SECRETpw@127.0.0.1:5432/db";
  if (holdfast::pg::redact_password(url).find("Zq8SECRETpw") != std::string::npos) {
    __builtin_trap();
  }
  return 0;
}
