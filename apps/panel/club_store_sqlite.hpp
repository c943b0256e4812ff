// The club on a SQLite file (the drill's backend): one sqlite::Database, and for holdfast a
// Shield for reads and one for writes.
#pragma once

#include <memory>

#include "club_store.hpp"
#include "holdfast/health_probe.hpp"
#include "holdfast/sqlite.hpp"

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
  Status refresh_session(std::string_view token, std::string_view now_utc) override;

  [[nodiscard]] std::string_view backend() const noexcept override { return "sqlite"; }
  [[nodiscard]] sqlite::Database* sqlite_database() noexcept override { return &db_; }

 private:
  SqliteClubStore(Options options, sqlite::Database db);

  Result<std::string> do_login(std::string_view email, std::string_view password,
                               std::string_view now_utc) override;
  Result<std::string> do_open_session(std::int64_t user_id, std::string_view now_utc) override;
  Result<PaymentReceipt> do_pay(std::int64_t user_id, std::int64_t amount_cents,
                                std::string_view method, const IdempotencyKey& key,
                                std::string_view now_utc) override;
  Result<SignupReceipt> do_sign_up(std::int64_t user_id, std::int64_t game_id,
                                   const IdempotencyKey& key, std::string_view now_utc) override;
  Status do_record_report(std::string_view path, std::string_view digest, std::string_view note,
                          std::string_view now_utc) override;

  // Every database operation of the panel goes through here: one attempt is one call of
  // `attempt`, run as the strategy says (holdfast: through the read or the write Shield).
  // `session_read`: the origin's session schedule.
  enum class Access : std::uint8_t { kRead, kWrite };
  template <class F>
  auto run(Access access, Operation op, F&& attempt, bool session_read = false)
      -> std::invoke_result_t<F&>;

  sqlite::Database db_;
  RetryPolicy session_reads_;
  std::unique_ptr<Shield> reads_;
  std::unique_ptr<Shield> writes_;
  // While a breaker is open, ask the file every 250 ms whether reads (a shared lock) or
  // writes (the write lock) are possible again: service comes back within a probe interval
  // of the lock's release, not at the end of an open period that doubled.
  std::unique_ptr<HealthProbe> read_probe_;
  std::unique_ptr<HealthProbe> write_probe_;
};

}  // namespace holdfast::panel
