#include "club_store.hpp"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "club_store_sqlite.hpp"
#include "holdfast/policy_file.hpp"
#include "idempotency.hpp"
#include "utf8.hpp"
#ifdef HOLDFAST_PANEL_HAVE_PG
#include "club_store_pg.hpp"
#endif

namespace holdfast::panel {
namespace {

Status bad(std::string_view what) {
  return Status(Code::kInvalidArgument, std::string(what));
}

bool has_control_byte(std::string_view text) {
  return std::any_of(text.begin(), text.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 || byte == 0x7f;
  });
}

}  // namespace

Result<std::unique_ptr<ClubStore>> ClubStore::open(Options options) {
  if (options.strategy == Strategy::kHoldfast && !options.policy) {
    if (const std::optional<std::string> path = policy_path_from_environment()) {
      Result<Shield::Options> policy = load_policy(*path);
      if (!policy.ok()) {
        return Status(policy.status().code(), std::string(kPolicyEnvironmentVariable) + ": " +
                                                  std::string(policy.status().message()));
      }
      options.policy = std::move(*policy);
    }
  }
  if (options.pg_url.empty()) return SqliteClubStore::open(std::move(options));
#ifdef HOLDFAST_PANEL_HAVE_PG
  return PgClubStore::open(std::move(options));
#else
  return Status(Code::kFailedPrecondition,
                "this build of the panel has no PostgreSQL support (libpq was not found when "
                "it was configured): use a SQLite file instead");
#endif
}

ClubStore::ClubStore(Options options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &Clock::system()),
      baseline_(options_.strategy, *clock_) {}

ClubStore::~ClubStore() = default;

namespace {
Status no_async_calls() {
  return Status(Code::kUnimplemented, "this store's calls are not driven asynchronously");
}

}  // namespace

IdempotencyKey payment_key(std::int64_t amount_cents, std::string_view method,
                           std::string_view key) {
  IdempotencyKey keyed{key, {}};
  if (!key.empty()) {
    keyed.fingerprint =
        request_fingerprint({{"amount_cents", std::to_string(amount_cents)}, {"method", method}});
  }
  return keyed;
}

IdempotencyKey sign_up_key(std::int64_t game_id, std::string_view key) {
  IdempotencyKey keyed{key, {}};
  if (!key.empty()) keyed.fingerprint = request_fingerprint({{"game_id", std::to_string(game_id)}});
  return keyed;
}

Result<ClubStore::StampedSession> ClubStore::stamped_session_once(std::string_view,
                                                                  std::string_view) {
  return no_async_calls();
}

Result<std::vector<Game>> ClubStore::games_once(std::string_view) {
  return no_async_calls();
}

Result<ScheduleContext> ClubStore::context_once(std::string_view) {
  return no_async_calls();
}

Status ClubStore::end_session_once(std::string_view) {
  return no_async_calls();
}

Status ClubStore::do_record_report_once(std::string_view, std::string_view, std::string_view,
                                        std::string_view) {
  return no_async_calls();
}

Result<std::optional<ClubStore::Credentials>> ClubStore::credentials_once(std::string_view) {
  return no_async_calls();
}

Status ClubStore::rehash_once(std::int64_t, std::string_view, std::string_view) {
  return no_async_calls();
}

Status ClubStore::insert_session_once(std::string_view, std::int64_t, std::string_view) {
  return no_async_calls();
}

Status ClubStore::cap_sessions_once(std::int64_t, std::string_view) {
  return no_async_calls();
}

std::string ClubStore::dummy_hash() {
  std::lock_guard<std::mutex> lock(dummy_mutex_);
  if (dummy_hash_.empty()) {
    // Of the store's cost, as every hash a sign-in writes: verifying against it costs what
    // verifying against a user's does.
    if (Result<std::string> made = hash_password(new_token() + new_token(), password_cost());
        made.ok()) {
      dummy_hash_ = std::move(*made);
    }
  }
  return dummy_hash_;
}

ClubStore::SignInCheck ClubStore::check_sign_in(const Credentials* found, std::string_view email,
                                                std::string_view password) {
  SignInCheck out;
  const PasswordCost cost = password_cost();
  if (found == nullptr || !is_argon2id_hash(found->password_hash)) {
    // The one Argon2id verification of this sign-in: its answer means nothing.
    (void)check_password(dummy_hash(), email, password, cost);
  }
  if (found == nullptr) return out;
  const PasswordCheck check = check_password(found->password_hash, email, password, cost);
  out.right = check != PasswordCheck::kWrong;
  if (check == PasswordCheck::kRightRehash) {
    if (Result<std::string> fresh = hash_password(password, cost); fresh.ok()) {
      out.fresh_hash = std::move(*fresh);
    }
  }
  return out;
}

Result<PaymentReceipt> ClubStore::do_pay_once(std::int64_t, std::int64_t, std::string_view,
                                              const IdempotencyKey&, std::string_view) {
  return no_async_calls();
}

Result<SignupReceipt> ClubStore::do_sign_up_once(std::int64_t, std::int64_t, const IdempotencyKey&,
                                                 std::string_view) {
  return no_async_calls();
}

sqlite::Database& ClubStore::database() {
  sqlite::Database* db = sqlite_database();
  if (db == nullptr) {
    throw std::logic_error("ClubStore::database(): this is the " + std::string(backend()) +
                           " store, not SQLite; use sqlite_database()");
  }
  return *db;
}

std::string ClubStore::new_token() {
  // Straight from the operating system's entropy: a session token must not be predictable
  // from the tokens an attacker has seen (a seeded Mersenne Twister is).
  std::random_device os;
  std::uint64_t words[2];
  for (std::uint64_t& w : words)
    w = (std::uint64_t{os()} << 32) | os();
  return fmt::format("{:016x}{:016x}", words[0], words[1]);
}

Status ClubStore::check_login(std::string_view email, std::string_view password) {
  if (email.empty() || email.size() > 200) return bad("email must be 1 to 200 characters");
  if (has_control_byte(email)) {
    return bad("email must not contain control characters (NUL, newline, tab...)");
  }
  if (!valid_utf8(email)) return bad("email must be UTF-8");
  if (password.empty() || password.size() > 200) return bad("password must be 1 to 200 characters");
  if (password.find('\0') != std::string_view::npos) {
    return bad("password must not contain a NUL byte");
  }
  return Status();
}

Status ClubStore::check_payment(std::int64_t amount_cents, std::string_view method,
                                std::string_view key) {
  if (amount_cents <= 0 || amount_cents > 10'000'000) {
    return bad("amount_cents must be between 1 and 10000000");
  }
  if (method != "cash" && method != "card") return bad("method must be \"cash\" or \"card\"");
  return check_idempotency_key(key);
}

Status ClubStore::check_sign_up(std::int64_t game_id, std::string_view key) {
  if (game_id <= 0) return bad("game_id must be a positive number");
  return check_idempotency_key(key);
}

Status ClubStore::check_report(std::string_view path, std::string_view digest,
                               std::string_view note) {
  if (path.size() > 500 || digest.size() > 64 || note.size() > 2000) {
    return bad("path (500), digest (64) or note (2000 characters) too long");
  }
  for (const auto& [name, text] :
       {std::pair{"path", path}, std::pair{"digest", digest}, std::pair{"note", note}}) {
    if (text.find('\0') != std::string_view::npos) {
      return bad(fmt::format("{} must not contain a NUL byte", name));
    }
  }
  if (!valid_utf8(path) || !valid_utf8(digest) || !valid_utf8(note)) {
    return bad("path, digest and note must be UTF-8");
  }
  return Status();
}

Result<std::int64_t> ClubStore::prune(std::string_view now_utc, int batch_size, Duration pause) {
  if (batch_size < 1) return bad("prune: batch_size must be at least 1");
  std::int64_t deleted = 0;
  for (bool keys : {false, true}) {
    for (;;) {
      Result<int> batch = keys ? delete_old_idempotency_keys(now_utc, batch_size)
                               : delete_expired_sessions(now_utc, batch_size);
      if (!batch.ok()) {
        Status s = batch.status();
        return s.annotate("prune: deleted " + std::to_string(deleted) + " rows, then");
      }
      deleted += *batch;
      if (*batch < batch_size) break;
      if (pause > Duration::zero()) clock_->sleep_for(pause);
    }
  }
  return deleted;
}

Result<PaymentReceipt> ClubStore::pay(std::int64_t user_id, std::int64_t amount_cents,
                                      std::string_view method, std::string_view key,
                                      std::string_view now_utc) {
  if (Status s = check_payment(amount_cents, method, key); !s.ok()) return s;
  return do_pay(user_id, amount_cents, method, payment_key(amount_cents, method, key), now_utc);
}

Result<PaymentReceipt> ClubStore::pay_once(std::int64_t user_id, std::int64_t amount_cents,
                                           std::string_view method, std::string_view key,
                                           std::string_view now_utc) {
  if (Status s = check_payment(amount_cents, method, key); !s.ok()) return s;
  return do_pay_once(user_id, amount_cents, method, payment_key(amount_cents, method, key),
                     now_utc);
}

Result<SignupReceipt> ClubStore::sign_up(std::int64_t user_id, std::int64_t game_id,
                                         std::string_view key, std::string_view now_utc) {
  if (Status s = check_sign_up(game_id, key); !s.ok()) return s;
  return do_sign_up(user_id, game_id, sign_up_key(game_id, key), now_utc);
}

Result<SignupReceipt> ClubStore::sign_up_once(std::int64_t user_id, std::int64_t game_id,
                                              std::string_view key, std::string_view now_utc) {
  if (Status s = check_sign_up(game_id, key); !s.ok()) return s;
  return do_sign_up_once(user_id, game_id, sign_up_key(game_id, key), now_utc);
}

Status ClubStore::record_report(std::string_view path, std::string_view digest,
                                std::string_view note, std::string_view now_utc) {
  if (Status s = check_report(path, digest, note); !s.ok()) return s;
  return do_record_report(path, digest, note, now_utc);
}

Status ClubStore::record_report_once(std::string_view path, std::string_view digest,
                                     std::string_view note, std::string_view now_utc) {
  if (Status s = check_report(path, digest, note); !s.ok()) return s;
  return do_record_report_once(path, digest, note, now_utc);
}

}  // namespace holdfast::panel
