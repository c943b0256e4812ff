#include "passwords.hpp"

#include <sodium.h>

#include <atomic>
#include <cstdint>
#include <semaphore>

#include <fmt/format.h>

#include "security.hpp"

namespace holdfast::panel {
namespace {

constexpr std::string_view kLegacyPrefix = "fnv1a:";
constexpr std::string_view kArgon2idPrefix = "$argon2id$";

// sodium_init() is idempotent and thread-safe; false only when no random source exists.
bool sodium_ready() noexcept {
  static const bool ready = sodium_init() >= 0;
  return ready;
}

// At most this many Argon2id computations at once in the process: each takes its memlimit
// (64 MiB at the interactive cost) for about 0.1 s of one core, so a burst of sign-ins on
// every worker would otherwise hold workers x 64 MiB (measured: 340 MiB resident in an abuse
// soak with 16 workers). The rest wait their turn; the work is CPU-bound anyway.
constexpr std::ptrdiff_t kConcurrentHashes = 2;

std::counting_semaphore<kConcurrentHashes>& hash_turns() noexcept {
  static std::counting_semaphore<kConcurrentHashes> turns(kConcurrentHashes);
  return turns;
}

// Holds one of the kConcurrentHashes turns while it lives.
class HashTurn {
 public:
  HashTurn() { hash_turns().acquire(); }
  ~HashTurn() { hash_turns().release(); }
  HashTurn(const HashTurn&) = delete;
  HashTurn& operator=(const HashTurn&) = delete;
};

std::atomic<std::uint64_t> verifications{0};

}  // namespace

bool is_argon2id_hash(std::string_view stored) noexcept {
  return stored.substr(0, kArgon2idPrefix.size()) == kArgon2idPrefix;
}

std::uint64_t password_verifications() noexcept {
  return verifications.load(std::memory_order_relaxed);
}

PasswordCost PasswordCost::interactive() noexcept {
  return {crypto_pwhash_OPSLIMIT_INTERACTIVE, crypto_pwhash_MEMLIMIT_INTERACTIVE};
}

PasswordCost PasswordCost::minimal() noexcept {
  return {crypto_pwhash_OPSLIMIT_MIN, crypto_pwhash_MEMLIMIT_MIN};
}

Result<std::string> hash_password(std::string_view password, PasswordCost cost) {
  if (!sodium_ready()) return Status(Code::kInternal, "libsodium could not be initialised");
  char out[crypto_pwhash_STRBYTES];
  const HashTurn turn;
  if (crypto_pwhash_str_alg(out, password.data(), password.size(), cost.opslimit, cost.memlimit,
                            crypto_pwhash_ALG_ARGON2ID13) != 0) {
    return Status(Code::kResourceExhausted,
                  fmt::format("Argon2id could not hash a password ({} passes over {} bytes: out "
                              "of memory?)",
                              cost.opslimit, cost.memlimit));
  }
  return std::string(out);
}

PasswordCheck check_password(std::string_view stored, std::string_view email,
                             std::string_view password, PasswordCost cost) {
  if (stored.substr(0, kLegacyPrefix.size()) == kLegacyPrefix) {
    return same_secret(stored, legacy_password_hash(email, password)) ? PasswordCheck::kRightRehash
                                                                      : PasswordCheck::kWrong;
  }
  if (!is_argon2id_hash(stored) || !sodium_ready() || stored.size() >= crypto_pwhash_STRBYTES) {
    return PasswordCheck::kWrong;
  }
  const std::string text(stored);  // crypto_pwhash_str_verify wants a NUL-terminated string
  const HashTurn turn;
  verifications.fetch_add(1, std::memory_order_relaxed);
  if (crypto_pwhash_str_verify(text.c_str(), password.data(), password.size()) != 0) {
    return PasswordCheck::kWrong;
  }
  return crypto_pwhash_str_needs_rehash(text.c_str(), cost.opslimit, cost.memlimit) != 0
             ? PasswordCheck::kRightRehash
             : PasswordCheck::kRight;
}

std::string legacy_password_hash(std::string_view email, std::string_view password) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::string_view part : {email, std::string_view("\x1f"), password}) {
    for (unsigned char c : part) {
      h ^= c;
      h *= 1099511628211ULL;
    }
  }
  return fmt::format("fnv1a:{:016x}", h);
}

}  // namespace holdfast::panel
