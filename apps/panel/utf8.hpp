// UTF-8 as the panel takes it at its edge (PostgreSQL refuses anything else with 22021, which
// must be the client's 400, not a server error) and as `holdfast logs` prints it.
#pragma once

#include <cstddef>
#include <string_view>

namespace holdfast::panel {

// The length (1 to 4) of the well-formed UTF-8 sequence that starts at text[i], or 0 when the
// bytes there are not one: a stray continuation byte, a truncated sequence, an overlong form,
// a surrogate or a code point past U+10FFFF (RFC 3629). NUL is a well-formed sequence.
// REQUIRES: i < text.size().
[[nodiscard]] inline std::size_t utf8_sequence_at(std::string_view text, std::size_t i) noexcept {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char lead = at(0);
  if (lead < 0x80) return 1;
  const std::size_t len = lead >= 0xc2 && lead <= 0xdf   ? 2
                          : lead >= 0xe0 && lead <= 0xef ? 3
                          : lead >= 0xf0 && lead <= 0xf4 ? 4
                                                         : 0;
  if (len == 0 || text.size() - i < len) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((at(k) & 0xc0) != 0x80) return 0;
  }
  const unsigned char second = at(1);
  if (lead == 0xe0 && second < 0xa0) return 0;   // overlong
  if (lead == 0xed && second >= 0xa0) return 0;  // UTF-16 surrogates
  if (lead == 0xf0 && second < 0x90) return 0;   // overlong
  if (lead == 0xf4 && second >= 0x90) return 0;  // past U+10FFFF
  return len;
}

// True when all of `text` is well-formed UTF-8.
[[nodiscard]] inline bool valid_utf8(std::string_view text) noexcept {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t len = utf8_sequence_at(text, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

}  // namespace holdfast::panel
