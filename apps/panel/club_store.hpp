// The demo club's database: schema, demo data, and every query the panel makes, each run
// through the panel's Strategy (holdfast, or a baseline's loop: apps/drill/baselines), with
// every database attempt counted so the drill can report attempts per request.
//
// Two backends behind one interface, chosen by ClubStore::open():
//   - SQLite (Options::path; club_store_sqlite.cpp): the drill's backend;
//   - PostgreSQL (Options::pg_url; club_store_pg.cpp) through holdfast::pg.
// Both validate input the same way (here) and answer the same values (club_model.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "baselines/runner.hpp"
#include "club_model.hpp"
#include "holdfast/core/clock.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/retry.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/pg/lost_writes.hpp"
#include "holdfast/sqlite.hpp"
#include "passwords.hpp"
#include "strategy.hpp"

namespace holdfast::panel {

// A checked Idempotency-Key with the fingerprint of the request it came with. An empty
// `key`: the request has none.
struct IdempotencyKey {
  std::string_view key;
  std::string fingerprint;
};

// The key of a payment or a sign-up, with the fingerprint of the request's parameters (none
// without a key).
[[nodiscard]] IdempotencyKey payment_key(std::int64_t amount_cents, std::string_view method,
                                         std::string_view key);
[[nodiscard]] IdempotencyKey sign_up_key(std::int64_t game_id, std::string_view key);

// The refusal of a sign-up for a game that has already started; the server answers it 409.
inline constexpr std::string_view kGameStartedMessage =
    "the game has already started: sign-ups are closed";

// The class of a write route's transaction (ADR 0035): a payment is critical, anything else
// (a sign-up) as normal as a page.
[[nodiscard]] constexpr Priority route_priority(std::string_view route) noexcept {
  return route == "payments" ? Priority::kCritical : Priority::kNormal;
}

class ClubStore {
 public:
  struct Options {
    // The SQLite file, used when pg_url is empty.
    std::string path = "club.db";
    // A PostgreSQL connection URL or key=value string. Not empty: the PostgreSQL store.
    std::string pg_url;
    Strategy strategy = Strategy::kHoldfast;
    Clock* clock = nullptr;  // nullptr: Clock::system()
    // How long one attempt waits for a lock: SQLite's busy_timeout, PostgreSQL's
    // lock_timeout. The origin's 5 s; holdfast caps it by the request's remaining window.
    Duration busy_timeout = std::chrono::seconds(5);
    int read_connections = 4;
    // PostgreSQL only: the write pool's size and pg_stat_activity.application_name.
    int pg_write_connections = 4;
    std::string pg_application_name = "holdfast-panel";
    // PostgreSQL only: hot standbys the reads prefer (holdfast::pg's read-your-writes and
    // lag checks decide), and whether the URLs reach a pooler in transaction mode
    // (PgBouncer's pool_mode = transaction).
    std::vector<std::string> pg_replica_urls;
    bool pg_transaction_pooling = false;
    // The cost of the Argon2id hash a sign-in writes when the stored one is of the legacy
    // form or of another cost (passwords.hpp).
    PasswordCost password_cost = PasswordCost::interactive();
    // holdfast only: the Shields' options (a policy file, policy_file.hpp). nullopt: the
    // file HOLDFAST_POLICY names when it is set (open() fails on a bad one), else the
    // library's defaults with the origin's schedules.
    std::optional<Shield::Options> policy;
  };

  // Opens the SQLite file (creating it if needed) or connects to PostgreSQL once to check
  // the server answers. A bad path gives a Status naming the file; a bad URL or an
  // unreachable server a Status naming the URL (its password masked).
  static Result<std::unique_ptr<ClubStore>> open(Options options);
  virtual ~ClubStore();
  ClubStore(const ClubStore&) = delete;
  ClubStore& operator=(const ClubStore&) = delete;

  // Creates the schema and, if the club has no courts yet, demo data around `today`
  // ("YYYY-MM-DD"): courts, activity types, games over several weeks, users, holidays,
  // settings, cash and payments. Demo users' password is "demo". Safe when several panels
  // start on one database at once: one creates the data, the others find it.
  virtual Status ensure_demo_data(std::string_view today) = 0;

  // --- reads (retried as the strategy allows) ---
  // The user of a live session, or nullopt. `now_utc` is ISO-8601.
  virtual Result<std::optional<User>> session(std::string_view token, std::string_view now_utc) = 0;
  virtual Result<std::vector<Game>> games_on(std::string_view date) = 0;
  virtual Result<ScheduleContext> context_on(std::string_view date) = 0;
  virtual Result<std::optional<std::int64_t>> user_id_by_email(std::string_view email) = 0;

  // --- writes ---
  // Moves the session's last_seen forward (at most once a minute per session).
  virtual Status refresh_session(std::string_view token, std::string_view now_utc) = 0;
  // Ends the session (signing out): its row is deleted; OK when there is none. Safe to repeat.
  virtual Status end_session(std::string_view token) = 0;
  // A sign-in's steps, each retried as the strategy allows (the route checks the password
  // with check_sign_in(), off its event loop, in a place of the panel's SignInGate): the
  // user's id and stored hash (nullopt: no such email); and the stored hash replaced by
  // `fresh`, only over `stored` (a password changed meanwhile stays changed), when the
  // stored one is of the legacy form or of another cost. Should that write fail, the sign-in
  // still succeeds and the next one tries again.
  struct Credentials {
    std::int64_t user_id = 0;
    std::string password_hash;
  };
  Result<std::optional<Credentials>> credentials(std::string_view email) {
    return do_credentials(email);
  }
  Status rehash(std::int64_t user_id, std::string_view fresh, std::string_view stored) {
    return do_rehash(user_id, fresh, stored);
  }
  // Opens a session for `user_id` (after a sign-in's check, or without a password: the
  // server's one-time sign-in links): the token. The user's expired sessions and the oldest
  // beyond kSessionsPerUser are deleted on the way.
  Result<std::string> open_session(std::int64_t user_id, std::string_view now_utc) {
    return do_open_session(user_id, now_utc);
  }
  // All or nothing. With an idempotency key (see idempotency.hpp: scoped to the user and
  // the route, stored with the request's fingerprint), a repeat of the same request returns
  // the first receipt and applies nothing; the key with other parameters is refused
  // (is_key_reused()) and applies nothing.
  Result<PaymentReceipt> pay(std::int64_t user_id, std::int64_t amount_cents,
                             std::string_view method, std::string_view idempotency_key,
                             std::string_view now_utc);
  // A game that has started (or is over) takes no sign-ups: OUT_OF_RANGE with
  // kGameStartedMessage.
  Result<SignupReceipt> sign_up(std::int64_t user_id, std::int64_t game_id,
                                std::string_view idempotency_key, std::string_view now_utc);
  // The input checks pay(), sign_up(), a sign-in and record_report() make first: OK, or
  // INVALID_ARGUMENT with a message fit for the client. The server calls them before the
  // store, so that a store's INVALID_ARGUMENT is never mistaken for the client's. Text that
  // reaches the database must be UTF-8 on both engines (PostgreSQL refuses anything else
  // with 22021, which would be a server error), and free of NUL bytes (libpq sends text as C
  // strings: "a@b\0x" would be looked up as "a@b", two strings naming one account). Each
  // refusal names the field.
  static Status check_payment(std::int64_t amount_cents, std::string_view method,
                              std::string_view idempotency_key);
  static Status check_sign_up(std::int64_t game_id, std::string_view idempotency_key);
  static Status check_login(std::string_view email, std::string_view password);
  static Status check_report(std::string_view path, std::string_view digest, std::string_view note);
  Status record_report(std::string_view path, std::string_view digest, std::string_view note,
                       std::string_view now_utc);

  // --- retention (off the request path: the panel's Housekeeper) ---
  // A session is valid for 30 days from its sign-in; a user keeps at most kSessionsPerUser
  // (a sign-in deletes that user's expired sessions and the oldest beyond the newest
  // kSessionsPerUser; should that delete fail, the sign-in still stands and the next one
  // tries again). Idempotency keys are kept kIdempotencyKeyAge.
  static constexpr int kSessionsPerUser = 20;
  static constexpr std::chrono::hours kIdempotencyKeyAge{24};
  // Deletes at most `limit` sessions expired at `now_utc` (ISO-8601, UTC): one short write.
  // How many it deleted.
  virtual Result<int> delete_expired_sessions(std::string_view now_utc, int limit) = 0;
  // Deletes at most `limit` idempotency keys stored more than kIdempotencyKeyAge before
  // `now_utc`: one short write. How many it deleted.
  virtual Result<int> delete_old_idempotency_keys(std::string_view now_utc, int limit) = 0;
  // Both, batch by batch as prune_logs() does (database_sink.hpp): each batch one short
  // write of at most `batch_size` rows, `pause` on the store's clock between batches so
  // that writers waiting for the lock get it, until a batch deletes fewer than batch_size.
  // Rows deleted; a failed batch stops it (running again is safe).
  Result<std::int64_t> prune(std::string_view now_utc, int batch_size = 500,
                             Duration pause = std::chrono::milliseconds(10));

  // --- read-your-writes across processes ---
  // The position the current request's reads must see (its own writes included), as text
  // for the client to carry to its next request (the panel's hf_wal cookie), so that any
  // process honours it. Empty when there is none: outside a RequestScope, before any write,
  // and always on SQLite (no standby to be behind).
  [[nodiscard]] virtual std::string write_position() const { return {}; }
  // Makes the current request's reads see `position` (what write_position() gave), on top
  // of what this process remembers itself. Anything that is not a position (malformed, too
  // long) is ignored: a client can only send its own reads to the primary. No-op outside a
  // RequestScope and on SQLite.
  virtual void require_position(std::string_view /*position*/) {}

  // --- calls driven by holdfast::asio::async_run (ADRs 0029, 0030) ---
  // What a caller needs to run the schedule's reads, the payments, the sign-ups and the
  // sign-outs itself, so that their waits (a backoff, a place under the limit, the
  // breaker's probe) are timer waits that hold no thread: the Shields they go through, the
  // schedules they follow, and how many read connections the attempts (which block, in the
  // driver) share.
  struct AsyncAccess {
    Shield* shield = nullptr;               // the reads'
    Shield* write_shield = nullptr;         // the writes'
    const RetryPolicy* sessions = nullptr;  // session()'s schedule
    const RetryPolicy* reads = nullptr;     // games_on()'s and context_on()'s
    const RetryPolicy* writes = nullptr;    // the writes'
    int connections = 0;
    Duration busy_timeout{};  // Options::busy_timeout: one attempt's wait for a lock
    // PostgreSQL: the lane's calls are the library's asio::pg::Client's, on one event loop
    // (PgLane, ADRs 0043, 0044); the *_once() forms below are SQLite's.
    bool postgres = false;
  };
  // nullptr when this store has none (a baseline, whose loop is what the drill compares):
  // its calls block the calling thread.
  [[nodiscard]] virtual const AsyncAccess* async_access() const noexcept { return nullptr; }
  // A session as session() reads it, and the file's change epoch (sqlite::ChangeEpoch,
  // holdfast/sqlite/change_epoch.hpp) observed by the same statement: a schedule read after
  // it is still the file's while a later observation answers the same epoch.
  struct StampedSession {
    std::optional<User> user;
    std::uint64_t epoch = 0;  // 0: this store keeps none (then every schedule is read)
  };
  // One attempt of session() (with the epoch), games_on() and context_on() (on SQLite the
  // context's four queries in one attempt), with no retry and no Shield: what an async_run
  // attempt calls, inside a RequestScope of the request's window. The base class answers
  // UNIMPLEMENTED.
  virtual Result<StampedSession> stamped_session_once(std::string_view token,
                                                      std::string_view now_utc);
  virtual Result<std::vector<Game>> games_once(std::string_view date);
  virtual Result<ScheduleContext> context_once(std::string_view date);
  // One attempt of pay(), sign_up() and end_session(), the same way. Each attempt is the
  // whole transaction; one that fails has applied nothing (it rolled back), or, with an
  // idempotency key, may be made again and applies at most once. The input is checked as
  // pay() and sign_up() check it.
  Result<PaymentReceipt> pay_once(std::int64_t user_id, std::int64_t amount_cents,
                                  std::string_view method, std::string_view idempotency_key,
                                  std::string_view now_utc);
  Result<SignupReceipt> sign_up_once(std::int64_t user_id, std::int64_t game_id,
                                     std::string_view idempotency_key, std::string_view now_utc);
  virtual Status end_session_once(std::string_view token);
  Status record_report_once(std::string_view path, std::string_view digest, std::string_view note,
                            std::string_view now_utc);
  // A sign-in's steps, one attempt each, for a caller that checks the password itself
  // with check_sign_in() off its event loop (tens of milliseconds of CPU): the user's id
  // and stored hash (nullopt: no such email); the stored hash replaced by `fresh`, only over
  // `stored` (a password changed meanwhile stays changed); the session `token` (a
  // new_token(): inserting it again changes nothing) opened for the user; and the user's
  // expired sessions and the oldest beyond kSessionsPerUser deleted.
  virtual Result<std::optional<Credentials>> credentials_once(std::string_view email);
  virtual Status rehash_once(std::int64_t user_id, std::string_view fresh, std::string_view stored);
  virtual Status insert_session_once(std::string_view token, std::int64_t user_id,
                                     std::string_view now_utc);
  virtual Status cap_sessions_once(std::int64_t user_id, std::string_view now_utc);
  // Whether `password` signs `email` in over the stored hash of `found`, and the hash of
  // cost `password_cost()` to store instead when the stored one is of the legacy form or of
  // another cost (empty otherwise, or when hashing failed: the next sign-in tries again).
  // Every check costs one Argon2id verification, so that its time tells nothing: an
  // unknown email (`found` null) and a stored hash of the legacy form are verified against
  // dummy_hash() (and are never right by it). Thread-safe.
  struct SignInCheck {
    bool right = false;
    std::string fresh_hash;
  };
  [[nodiscard]] SignInCheck check_sign_in(const Credentials* found, std::string_view email,
                                          std::string_view password);
  // An Argon2id hash of password_cost() of a random secret nobody knows, made once (the
  // first call; the panel makes it when it starts, so no sign-in waits for it). Empty only
  // while libsodium cannot get the memory (then the next call tries again). Thread-safe.
  [[nodiscard]] std::string dummy_hash();
  [[nodiscard]] PasswordCost password_cost() const noexcept { return options_.password_cost; }
  // Counts one database call (see calls()) made by a caller driving the *_once() reads.
  void count_call() noexcept { calls_.fetch_add(1, std::memory_order_relaxed); }

  [[nodiscard]] Strategy strategy() const noexcept { return options_.strategy; }
  // "sqlite" or "postgresql".
  [[nodiscard]] virtual std::string_view backend() const noexcept = 0;
  // Database attempts made so far (each statement or transaction try).
  [[nodiscard]] virtual std::uint64_t attempts() const noexcept { return baseline_.attempts(); }
  // Database calls the panel made so far: each statement or transaction it asked the
  // driver (holdfast) or the baseline's retry loop for, before any retry or refusal.
  [[nodiscard]] std::uint64_t calls() const noexcept {
    return calls_.load(std::memory_order_relaxed);
  }
  // PostgreSQL: the attempts that reached each server, for every strategy (from the
  // Shields the driver runs each call through, one-attempt ones for the baselines): the
  // primary's and the standbys'. Zeros on SQLite.
  struct ServerAttempts {
    std::uint64_t primary = 0;
    std::uint64_t standby = 0;
  };
  [[nodiscard]] virtual ServerAttempts server_attempts() const noexcept { return {}; }
  // PostgreSQL: whether the primary's read or write pool is backing off after failed
  // connects: until its next connect is due it answers a request that finds no idle
  // connection at once with the last connect error (stop reason kBreakerOpen: a breaker
  // on connects). False on SQLite.
  [[nodiscard]] virtual bool pool_backing_off(bool /*writes*/) const { return false; }
  // holdfast only (nullptr for the baselines): the Shields reads and writes go through.
  [[nodiscard]] Shield* read_shield() noexcept { return read_shield_; }
  [[nodiscard]] Shield* write_shield() noexcept { return write_shield_; }
  // holdfast on PostgreSQL: what the writes' Database found of confirmed writes a change of
  // writer lost (ADR 0036); nullopt on SQLite and for the baselines.
  [[nodiscard]] virtual std::optional<pg::LostWritesReport> lost_writes() const {
    return std::nullopt;
  }
  // holdfast on PostgreSQL: the Shields of the standbys reads may go to; empty otherwise.
  [[nodiscard]] virtual std::vector<const Shield*> standby_shields() const { return {}; }
  // origin-breaker only (nullptr otherwise): the breaker in front of its loop.
  [[nodiscard]] baselines::OriginBreaker* origin_breaker() noexcept { return baseline_.breaker(); }
  // The SQLite store's database; nullptr for PostgreSQL.
  [[nodiscard]] virtual sqlite::Database* sqlite_database() noexcept { return nullptr; }
  // The same as a reference, for the SQLite-only drill and tests. REQUIRES: the SQLite
  // store (std::logic_error otherwise: a programming error).
  [[nodiscard]] sqlite::Database& database();
  [[nodiscard]] Clock& clock() const noexcept { return *clock_; }
  // A fresh random token (128 bits from the OS, hex): sessions, sign-in links.
  static std::string new_token();

 protected:
  explicit ClubStore(Options options);

  // What the public calls run once their input is checked: a sign-in's read of the user's id
  // and stored hash, and its write of a fresh hash over `stored` (each retried as the
  // strategy allows).
  virtual Result<std::optional<Credentials>> do_credentials(std::string_view email) = 0;
  virtual Status do_rehash(std::int64_t user_id, std::string_view fresh,
                           std::string_view stored) = 0;
  virtual Result<std::string> do_open_session(std::int64_t user_id, std::string_view now_utc) = 0;
  virtual Result<PaymentReceipt> do_pay(std::int64_t user_id, std::int64_t amount_cents,
                                        std::string_view method, const IdempotencyKey& key,
                                        std::string_view now_utc) = 0;
  virtual Result<SignupReceipt> do_sign_up(std::int64_t user_id, std::int64_t game_id,
                                           const IdempotencyKey& key, std::string_view now_utc) = 0;
  virtual Status do_record_report(std::string_view path, std::string_view digest,
                                  std::string_view note, std::string_view now_utc) = 0;
  // One attempt of do_pay(), do_sign_up() and do_record_report() (pay_once(),
  // sign_up_once(), record_report_once()). The base class answers UNIMPLEMENTED.
  virtual Result<PaymentReceipt> do_pay_once(std::int64_t user_id, std::int64_t amount_cents,
                                             std::string_view method, const IdempotencyKey& key,
                                             std::string_view now_utc);
  virtual Result<SignupReceipt> do_sign_up_once(std::int64_t user_id, std::int64_t game_id,
                                                const IdempotencyKey& key,
                                                std::string_view now_utc);
  virtual Status do_record_report_once(std::string_view path, std::string_view digest,
                                       std::string_view note, std::string_view now_utc);

  Options options_;
  Clock* clock_;
  // holdfast: set by the backend to the Shields it owns or its driver owns.
  Shield* read_shield_ = nullptr;
  Shield* write_shield_ = nullptr;
  // The baselines: the backends hand it each call when the strategy is not holdfast
  // (baseline_.run(op, attempt)); it counts their attempts (holdfast's are its Shields').
  baselines::Runner baseline_;

 private:
  std::atomic<std::uint64_t> calls_{0};
  std::mutex dummy_mutex_;
  std::string dummy_hash_;  // dummy_hash(), once made
};

}  // namespace holdfast::panel
