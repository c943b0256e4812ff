// Idempotency keys as the panel honours them (DESIGN §8), on both stores:
//
//   - a key is scoped to (user, route): another user's key, or the same key on another
//     route, is a different key;
//   - the key is stored with the request's fingerprint; the same key with the same request
//     replays the first answer, with different parameters it is refused (422) and nothing is
//     applied;
//   - a key is 1 to 255 bytes of UTF-8 with no control bytes (NUL included); an empty header
//     means "no key".
//
// Both stores keep keys with the driver's once() (holdfast/core/idempotency.hpp): the key
// recorded is "<user id>:<route>:<Idempotency-Key>", its result "<fingerprint>:<row id>".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"

namespace holdfast::panel {

inline constexpr std::size_t kMaxIdempotencyKeyBytes = 255;

// The message of the Status a store returns when a key meets a request with other
// parameters (Code::kFailedPrecondition); the server answers it 422.
inline constexpr std::string_view kKeyReusedMessage =
    "this Idempotency-Key was already used with different parameters; nothing was applied "
    "(use a new key for a new request)";

// OK, or INVALID_ARGUMENT with a message fit for the client.
[[nodiscard]] Status check_idempotency_key(std::string_view key);

// The fingerprint of a request: the hex SHA-256 of its parameters as "name=value" lines, in
// the order given (the caller fixes the order per route).
[[nodiscard]] std::string request_fingerprint(
    std::initializer_list<std::pair<std::string_view, std::string_view>> params);

// A store's answer for a key already recorded with `stored` when the request's fingerprint
// is `request`: OK when they match, the kKeyReusedMessage Status otherwise.
[[nodiscard]] Status same_request(std::string_view stored, std::string_view request);

// True for the Status same_request() returns on a mismatch.
[[nodiscard]] bool is_key_reused(const Status& s) noexcept;

// The row a keyed create made, or the one an earlier request with the key made (replayed).
struct CreatedRow {
  std::int64_t id = 0;
  bool replayed = false;
};

// The key once() records for `key` of `user_id` on `route`.
[[nodiscard]] std::string scoped_key(std::int64_t user_id, std::string_view route,
                                     std::string_view key);
// The result once() records: the request's fingerprint and the row it made.
[[nodiscard]] std::string key_record(std::string_view fingerprint, std::int64_t id);
// The row id of a key_record(), after checking it was made by the request with
// `fingerprint` (same_request()).
[[nodiscard]] Result<std::int64_t> recorded_id(std::string_view record,
                                               std::string_view fingerprint);

}  // namespace holdfast::panel
