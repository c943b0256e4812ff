// The demo club's database: schema, demo data, and every query the panel makes, each run
// through the panel's Strategy (holdfast or a baseline), with every database attempt
// counted so the drill can report attempts per request.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "club_model.hpp"
#include "holdfast/clock.hpp"
#include "holdfast/result.hpp"
#include "holdfast/retry.hpp"
#include "holdfast/shield.hpp"
#include "holdfast/sqlite.hpp"
#include "strategy.hpp"

namespace holdfast::panel {

class ClubStore {
 public:
  struct Options {
    std::string path = "club.db";
    Strategy strategy = Strategy::kHoldfast;
    Clock* clock = nullptr;  // nullptr: Clock::system()
    // SQLite's busy_timeout for one attempt: the origin's 5 s. holdfast caps it by the
    // request's remaining window.
    Duration busy_timeout = std::chrono::seconds(5);
    int read_connections = 4;
  };

  // Opens (creating if needed) the database. Bad paths give a Status naming the file.
  static Result<std::unique_ptr<ClubStore>> open(Options options);
  ~ClubStore();

  // Creates the schema and, if the club has no courts yet, demo data around `today`
  // ("YYYY-MM-DD"): courts, activity types, games over several weeks, users, holidays,
  // settings, cash and payments. Demo users' password is "demo".
  Status ensure_demo_data(std::string_view today);

  // --- reads (retried as the strategy allows) ---
  // The user of a live session, or nullopt. `now_utc` is ISO-8601.
  Result<std::optional<User>> session(std::string_view token, std::string_view now_utc);
  Result<std::vector<Game>> games_on(std::string_view date);
  Result<ScheduleContext> context_on(std::string_view date);
  Result<std::optional<std::int64_t>> user_id_by_email(std::string_view email);

  // --- writes ---
  // Moves the session's last_seen forward (at most once a minute per session).
  Status refresh_session(std::string_view token, std::string_view now_utc);
  // Checks the password and opens a session: the token, or kPermissionDenied.
  Result<std::string> login(std::string_view email, std::string_view password,
                            std::string_view now_utc);
  // All or nothing; with an idempotency key, a repeat returns the first receipt and
  // applies nothing.
  Result<PaymentReceipt> pay(std::int64_t user_id, std::int64_t amount_cents,
                             std::string_view method, std::string_view idempotency_key,
                             std::string_view now_utc);
  Result<SignupReceipt> sign_up(std::int64_t user_id, std::int64_t game_id,
                                std::string_view idempotency_key, std::string_view now_utc);
  Status record_report(std::string_view path, std::string_view digest, std::string_view note,
                       std::string_view now_utc);

  [[nodiscard]] Strategy strategy() const noexcept { return options_.strategy; }
  // Database attempts made so far (each statement or transaction try).
  [[nodiscard]] std::uint64_t attempts() const noexcept {
    return attempts_.load(std::memory_order_relaxed);
  }
  // holdfast only (nullptr for the baselines): the Shields reads and writes go through.
  [[nodiscard]] Shield* read_shield() noexcept { return read_shield_.get(); }
  [[nodiscard]] Shield* write_shield() noexcept { return write_shield_.get(); }
  [[nodiscard]] OriginBreaker* origin_breaker() noexcept { return origin_breaker_.get(); }
  [[nodiscard]] sqlite::Database& database() noexcept { return db_; }
  [[nodiscard]] Clock& clock() const noexcept { return *clock_; }

 private:
  ClubStore(Options options, sqlite::Database db);

  // Every database operation of the panel goes through here: one attempt is one call of
  // `attempt`, run as the strategy says (holdfast: through the read or the write Shield).
  // `session_read`: the origin's session schedule.
  enum class Access : std::uint8_t { kRead, kWrite };
  template <class F>
  auto run(Access access, Operation op, F&& attempt, bool session_read = false)
      -> std::invoke_result_t<F&>;

  Options options_;
  Clock* clock_;
  sqlite::Database db_;
  std::atomic<std::uint64_t> attempts_{0};
  RetryPolicy naive_;
  RetryPolicy tenacity_;
  RetryPolicy session_reads_;
  std::unique_ptr<Shield> read_shield_;
  std::unique_ptr<Shield> write_shield_;
  std::unique_ptr<OriginBreaker> origin_breaker_;
};

}  // namespace holdfast::panel
