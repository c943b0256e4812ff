// The club on a SQLite file (the drill's backend), through the library's public API: for
// holdfast a ResilientDatabase with a Shield for reads and one for writes (ADR 0006), the
// engine telling reads from writes; for a baseline the same database with a single-attempt
// policy inside the baseline's own retry loop.
#pragma once

#include <memory>
#include <optional>

#include "club_store.hpp"
#include "holdfast/core/health_probe.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/sqlite.hpp"
#include "holdfast/sqlite/change_epoch.hpp"
#include "idempotency.hpp"

namespace holdfast::panel {

class SqliteClubStore final : public ClubStore {
 public:
  // Opens (creating if needed) options.path. Bad paths give a Status naming the file.
  static Result<std::unique_ptr<ClubStore>> open(Options options);

  Status ensure_demo_data(std::string_view today) override;
  Result<std::optional<User>> session(std::string_view token, std::string_view now_utc) override;
  Result<std::vector<Game>> games_on(std::string_view date) override;
  Result<ScheduleContext> context_on(std::string_view date) override;
  Result<std::optional<std::int64_t>> user_id_by_email(std::string_view email) override;
  [[nodiscard]] const AsyncAccess* async_access() const noexcept override {
    return async_ ? &*async_ : nullptr;
  }
  Result<std::vector<Game>> games_once(std::string_view date) override;
  Result<ScheduleContext> context_once(std::string_view date) override;
  Result<StampedSession> stamped_session_once(std::string_view token,
                                              std::string_view now_utc) override;
  Status end_session(std::string_view token) override;
  Status end_session_once(std::string_view token) override;
  Result<std::optional<Credentials>> credentials_once(std::string_view email) override;
  Status rehash_once(std::int64_t user_id, std::string_view fresh,
                     std::string_view stored) override;
  Status insert_session_once(std::string_view token, std::int64_t user_id,
                             std::string_view now_utc) override;
  Status cap_sessions_once(std::int64_t user_id, std::string_view now_utc) override;
  Status refresh_session(std::string_view token, std::string_view now_utc) override;
  Result<int> delete_expired_sessions(std::string_view now_utc, int limit) override;
  Result<int> delete_old_idempotency_keys(std::string_view now_utc, int limit) override;

  [[nodiscard]] std::string_view backend() const noexcept override { return "sqlite"; }
  [[nodiscard]] sqlite::Database* sqlite_database() noexcept override { return &db_.database(); }
  [[nodiscard]] std::uint64_t attempts() const noexcept override;

 private:
  SqliteClubStore(Options options, sqlite::Database db, std::unique_ptr<sqlite::ChangeEpoch> epoch);

  Result<std::optional<Credentials>> do_credentials(std::string_view email) override;
  Status do_rehash(std::int64_t user_id, std::string_view fresh, std::string_view stored) override;
  Result<std::string> do_open_session(std::int64_t user_id, std::string_view now_utc) override;
  Result<PaymentReceipt> do_pay(std::int64_t user_id, std::int64_t amount_cents,
                                std::string_view method, const IdempotencyKey& key,
                                std::string_view now_utc) override;
  Result<SignupReceipt> do_sign_up(std::int64_t user_id, std::int64_t game_id,
                                   const IdempotencyKey& key, std::string_view now_utc) override;
  Result<PaymentReceipt> do_pay_once(std::int64_t user_id, std::int64_t amount_cents,
                                     std::string_view method, const IdempotencyKey& key,
                                     std::string_view now_utc) override;
  Result<SignupReceipt> do_sign_up_once(std::int64_t user_id, std::int64_t game_id,
                                        const IdempotencyKey& key,
                                        std::string_view now_utc) override;
  Status do_record_report(std::string_view path, std::string_view digest, std::string_view note,
                          std::string_view now_utc) override;
  Status do_record_report_once(std::string_view path, std::string_view digest,
                               std::string_view note, std::string_view now_utc) override;

  // Every database operation of the panel goes through here. holdfast: `call` runs at once
  // (db_ retries it). A baseline: `call` runs in the baseline's retry loop, each run counted
  // as an attempt.
  template <class F>
  auto run(Operation op, F&& call) -> std::invoke_result_t<F&>;
  // run() as a callable, for the calls written once for both ways they run.
  auto store_run() {
    return [this](Operation op, auto&& call) { return run(op, call); };
  }

  // What every connection of db_ reports its data_version to; outlives them.
  std::unique_ptr<sqlite::ChangeEpoch> epoch_;
  // holdfast only (nullptr for a baseline); built before db_, which refers to them.
  std::unique_ptr<Shield> reads_;
  std::unique_ptr<Shield> writes_;
  sqlite::ResilientDatabase db_;
  // db_ on the origin's session schedule (150/500/1500/3000 ms).
  sqlite::ResilientDatabase sessions_;
  // db_ with one attempt per operation and no Shield (the *_once() calls).
  sqlite::ResilientDatabase once_;
  std::optional<AsyncAccess> async_;  // holdfast only
  // While a breaker is open, ask the file every 250 ms whether reads (a shared lock) or
  // writes (the write lock) are possible again: service comes back within a probe interval
  // of the lock's release, not at the end of an open period that doubled.
  std::unique_ptr<HealthProbe> read_probe_;
  std::unique_ptr<HealthProbe> write_probe_;
};

}  // namespace holdfast::panel
