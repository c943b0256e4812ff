#include "idempotency.hpp"

#include <openssl/sha.h>

#include <charconv>

#include <fmt/format.h>

#include "utf8.hpp"

namespace holdfast::panel {

Status check_idempotency_key(std::string_view key) {
  if (key.size() > kMaxIdempotencyKeyBytes) {
    return Status(Code::kInvalidArgument,
                  fmt::format("Idempotency-Key must be at most {} bytes", kMaxIdempotencyKeyBytes));
  }
  for (const char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      return Status(Code::kInvalidArgument,
                    "Idempotency-Key must not contain control characters (NUL, newline, tab...)");
    }
  }
  if (!valid_utf8(key)) return Status(Code::kInvalidArgument, "Idempotency-Key must be UTF-8");
  return Status();
}

std::string request_fingerprint(
    std::initializer_list<std::pair<std::string_view, std::string_view>> params) {
  std::string canonical;
  for (const auto& [name, value] : params) {
    // Lengths first, so that no two parameter lists write the same text.
    canonical += fmt::format("{}:{}={}:{}\n", name.size(), name, value.size(), value);
  }
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(canonical.data()), canonical.size(), digest);
  std::string hex;
  hex.reserve(2 * sizeof digest);
  for (const unsigned char b : digest)
    hex += fmt::format("{:02x}", b);
  return hex;
}

Status same_request(std::string_view stored, std::string_view request) {
  if (stored == request) return Status();
  return Status(Code::kFailedPrecondition, std::string(kKeyReusedMessage));
}

bool is_key_reused(const Status& s) noexcept {
  return s.code() == Code::kFailedPrecondition && s.backend() == Backend::kNone &&
         s.message() == kKeyReusedMessage;
}

std::string scoped_key(std::int64_t user_id, std::string_view route, std::string_view key) {
  return fmt::format("{}:{}:{}", user_id, route, key);
}

std::string key_record(std::string_view fingerprint, std::int64_t id) {
  return fmt::format("{}:{}", fingerprint, id);
}

Result<std::int64_t> recorded_id(std::string_view record, std::string_view fingerprint) {
  const std::size_t colon = record.rfind(':');
  if (colon == std::string_view::npos) {
    return Status(Code::kInternal, "the idempotency record has no fingerprint");
  }
  if (Status same = same_request(record.substr(0, colon), fingerprint); !same.ok()) return same;
  const std::string_view text = record.substr(colon + 1);
  std::int64_t id = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return Status(Code::kInternal,
                  "the idempotency record holds '" + std::string(text) + "', not an id");
  }
  return id;
}

}  // namespace holdfast::panel
