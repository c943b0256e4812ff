// Passwords as the panel stores them (DESIGN §8): Argon2id through libsodium's
// crypto_pwhash_str (the string carries the algorithm, its cost and a random salt), checked
// with crypto_pwhash_str_verify. Hashes of the demo panel's first form ("fnv1a:...", an
// unsalted-per-user 64-bit FNV-1a, legacy_password_hash()) still sign in, and the store
// replaces them with Argon2id at that successful sign-in; so does a hash made with a lower
// cost than the store's. At most two hashes are computed at once in the process (each holds
// its memlimit, 64 MiB by default); more callers wait their turn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "holdfast/core/result.hpp"

namespace holdfast::panel {

// Argon2id's work per hash: passes over `memlimit` bytes.
struct PasswordCost {
  unsigned long long opslimit = 0;
  std::size_t memlimit = 0;
  // libsodium's "interactive" limits (2 passes over 64 MiB: about 0.1 s on one core): the
  // panel's default.
  [[nodiscard]] static PasswordCost interactive() noexcept;
  // The least libsodium allows (1 pass over 8 KiB): for tests that sign in many times,
  // never for real users.
  [[nodiscard]] static PasswordCost minimal() noexcept;
};

// An Argon2id hash of `password` ("$argon2id$v=19$m=...,t=...,p=1$salt$hash"), or an error
// (RESOURCE_EXHAUSTED when libsodium cannot get the memory).
[[nodiscard]] Result<std::string> hash_password(std::string_view password, PasswordCost cost);

enum class PasswordCheck {
  kWrong,
  kRight,
  // Right, and the stored hash should be replaced by hash_password(password, cost): a
  // legacy "fnv1a:" hash, or Argon2id with other limits than `cost`.
  kRightRehash,
};
// Whether `password` is the one `stored` was made from (`email` salts the legacy form).
[[nodiscard]] PasswordCheck check_password(std::string_view stored, std::string_view email,
                                           std::string_view password, PasswordCost cost);

// Whether `stored` is of the Argon2id form ("$argon2id$..."), the only one whose check
// costs an Argon2id computation.
[[nodiscard]] bool is_argon2id_hash(std::string_view stored) noexcept;

// Argon2id verifications (crypto_pwhash_str_verify) made so far in the process: what a
// sign-in costs, counted instead of timed (tests: an unknown email costs one, as a wrong
// password does).
[[nodiscard]] std::uint64_t password_verifications() noexcept;

// The demo panel's first password hash, kept to check (and replace) old rows: "fnv1a:" and a
// 64-bit FNV-1a of the email, a separator and the password.
[[nodiscard]] std::string legacy_password_hash(std::string_view email, std::string_view password);

}  // namespace holdfast::panel
