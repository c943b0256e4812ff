// The club on PostgreSQL through holdfast::pg (`holdfast panel --pg URL`).
//
// Two pg::Database objects on the same server, so that the holdfast strategy keeps the
// SQLite store's two Shields: "club.reads" (its read pool: READ ONLY sessions, reads retried
// within the request's window) and "club.writes" (its write pool: transactions re-run on
// 40001/40P01, commits in doubt resolved, payments and sign-ups keyed with once()). Neither
// opens the pool it does not use.
//
// The baselines run each driver call as one attempt (a Shield with no retries and a breaker
// that never opens) inside the baseline's own retry loop, as on SQLite.
#pragma once

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "club_store.hpp"
#include "holdfast/adapters/asio_pg_options.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/pg.hpp"
#include "holdfast/pg/lsn.hpp"
#include "holdfast/pg/pool.hpp"

namespace holdfast::panel {

// The lane's calls when they run on its event loop (pg_lane.hpp): their Shields, how many
// reads a standby answered and what the writes' lost-writes watch found, so that the store's
// counts, breakers and findings include them.
class LaneCalls {
 public:
  virtual ~LaneCalls() = default;
  virtual Shield& shield() noexcept = 0;
  // The lane's writes' Shield.
  virtual Shield& write_shield() noexcept = 0;
  [[nodiscard]] virtual std::uint64_t standby_reads() const noexcept = 0;
  // What the lane's watch for confirmed writes a failover lost found (its writes').
  [[nodiscard]] virtual pg::LostWritesReport lost_writes() const = 0;
};

class PgClubStore final : public ClubStore {
 public:
  // Connects once to check the server answers (a Status naming the masked URL if not),
  // then builds the pools, which connect when first used.
  static Result<std::unique_ptr<ClubStore>> open(Options options);
  ~PgClubStore() override;

  Status ensure_demo_data(std::string_view today) override;
  Result<std::optional<User>> session(std::string_view token, std::string_view now_utc) override;
  Result<std::vector<Game>> games_on(std::string_view date) override;
  Result<ScheduleContext> context_on(std::string_view date) override;
  Result<std::optional<std::int64_t>> user_id_by_email(std::string_view email) override;
  Status end_session(std::string_view token) override;
  Status refresh_session(std::string_view token, std::string_view now_utc) override;
  Result<int> delete_expired_sessions(std::string_view now_utc, int limit) override;
  Result<int> delete_old_idempotency_keys(std::string_view now_utc, int limit) override;

  [[nodiscard]] std::string write_position() const override {
    const pg::Lsn lsn = pg::request_lsn();
    return lsn.empty() ? std::string() : lsn.to_string_with_timeline();
  }
  void require_position(std::string_view position) override {
    // At most "4294967295:FFFFFFFF/FFFFFFFF" (a timeline, and pg_lsn's text form).
    if (position.empty() || position.size() > 28) return;
    if (Result<pg::Lsn> lsn = pg::Lsn::parse(position); lsn.ok()) pg::require_lsn(*lsn);
  }

  // holdfast: the lane's access; its calls are PgLane's (the library's Client).
  [[nodiscard]] const AsyncAccess* async_access() const noexcept override {
    return async_ ? &*async_ : nullptr;
  }
  // One call each of the blocking sign-in's steps (credentials(), rehash(), open_session()).
  Result<std::optional<Credentials>> credentials_once(std::string_view email) override;
  Status rehash_once(std::int64_t user_id, std::string_view fresh,
                     std::string_view stored) override;
  Status insert_session_once(std::string_view token, std::int64_t user_id,
                             std::string_view now_utc) override;
  Status cap_sessions_once(std::int64_t user_id, std::string_view now_utc) override;

  [[nodiscard]] std::string_view backend() const noexcept override { return "postgresql"; }
  // The baselines count their calls; holdfast counts what its Shields let through.
  [[nodiscard]] std::uint64_t attempts() const noexcept override {
    std::uint64_t n = ClubStore::attempts();
    if (options_.strategy == Strategy::kHoldfast) {
      const ServerAttempts s = server_attempts();
      n += s.primary + s.standby;
    }
    return n;
  }
  [[nodiscard]] ServerAttempts server_attempts() const noexcept override {
    ServerAttempts s;
    s.primary = reads_->shield().metrics().snapshot().attempts +
                writes_->shield().metrics().snapshot().attempts;
    for (std::size_t i = 0; i < reads_->replica_count(); ++i)
      s.standby += reads_->replica_shield(i).metrics().snapshot().attempts;
    if (lane_ != nullptr) {
      // Each of the Clients' attempts went to one server; a standby's answered read is one.
      const std::uint64_t all = lane_->shield().metrics().snapshot().attempts;
      const std::uint64_t standby = std::min(lane_->standby_reads(), all);
      s.primary += all - standby + lane_->write_shield().metrics().snapshot().attempts;
      s.standby += standby;
    }
    return s;
  }

  // The Clients of the lane's calls on the event loop (pg_lane.hpp): the reads' (with the
  // standby) and the writes' (with the lost-writes watch and a Shield of their own), as the
  // store's two Databases.
  struct LaneOptions {
    asio::pg::ClientOptions reads;
    asio::pg::ClientOptions writes;
  };
  // Their options (several standbys as one list of hosts, pg::any_of()), or nullopt when
  // the store is not holdfast's (a baseline: its calls block, on the workers); an error when
  // the standbys' URLs differ in more than their hosts.
  [[nodiscard]] std::optional<Result<LaneOptions>> lane_options() const;
  // The lane's calls now run on the event loop (`lane`), or no longer (nullptr): the reads'
  // and the writes' Shields are its Clients'. REQUIRES: no request is being served (the
  // server starts or stopped).
  void attach_lane(LaneCalls* lane) noexcept {
    lane_ = lane;
    if (options_.strategy != Strategy::kHoldfast) return;
    read_shield_ = lane != nullptr ? &lane->shield() : &reads_->shield();
    write_shield_ = lane != nullptr ? &lane->write_shield() : &writes_->shield();
  }
  // Read-your-writes within this process (see remember_write()): the current request's
  // reads must see the last write of the session `token` (its sign-in), or of the user.
  void recall_session(std::string_view token) { recall_writes("session:" + std::string(token)); }
  void recall_user(std::int64_t id) { recall_writes("user:" + std::to_string(id)); }
  // The current request wrote for user `id` (a payment): its later requests on this process
  // must see the write (remember_write()).
  void remember_user_write(std::int64_t id) { remember_write("user:" + std::to_string(id)); }
  // The current request opened session `token` (a sign-in).
  void remember_session_write(std::string_view token) {
    remember_write("session:" + std::string(token));
  }
  [[nodiscard]] std::optional<pg::LostWritesReport> lost_writes() const override {
    if (options_.strategy != Strategy::kHoldfast) return std::nullopt;
    pg::LostWritesReport seen = writes_->lost_writes();
    if (lane_ != nullptr) seen = merged(seen, lane_->lost_writes());
    return seen;
  }
  [[nodiscard]] std::vector<const Shield*> standby_shields() const override {
    std::vector<const Shield*> out;
    if (options_.strategy != Strategy::kHoldfast) return out;
    for (std::size_t i = 0; i < reads_->replica_count(); ++i)
      out.push_back(&reads_->replica_shield(i));
    return out;
  }
  [[nodiscard]] bool pool_backing_off(bool writes) const override {
    const pg::PoolStats s = (writes ? writes_->write_pool() : reads_->read_pool()).stats();
    return s.consecutive_connect_failures > 0 && clock_->now() < s.next_connect_at;
  }

 private:
  PgClubStore(Options options, std::string where);

  Result<std::optional<Credentials>> do_credentials(std::string_view email) override;
  Status do_rehash(std::int64_t user_id, std::string_view fresh, std::string_view stored) override;
  Result<std::string> do_open_session(std::int64_t user_id, std::string_view now_utc) override;
  Result<PaymentReceipt> do_pay(std::int64_t user_id, std::int64_t amount_cents,
                                std::string_view method, const IdempotencyKey& key,
                                std::string_view now_utc) override;
  // One write transaction that creates one row (`body` returns its id), re-run on
  // 40001/40P01. With a key it commits together with the key "<user>:<route>:<key>" and the
  // record "<fingerprint>:<id>", so a repeat of the same request (the client's, or a retry
  // after a COMMIT in doubt) returns the first id: {id, replayed}; a repeat with another
  // fingerprint is refused (is_key_reused()).
  Result<std::pair<std::int64_t, bool>> create_row(
      std::int64_t user_id, std::string_view route, const IdempotencyKey& key,
      const std::function<Result<std::int64_t>(pg::Transaction&)>& body);
  Result<SignupReceipt> do_sign_up(std::int64_t user_id, std::int64_t game_id,
                                   const IdempotencyKey& key, std::string_view now_utc) override;
  Status do_record_report(std::string_view path, std::string_view digest, std::string_view note,
                          std::string_view now_utc) override;

  // One panel operation: holdfast lets the driver's Shield retry it; a baseline wraps the
  // driver's single attempt in its own loop.
  // One retention batch: a DELETE ... RETURNING wrapped in SELECT count(*); how many went.
  Result<int> delete_batch(const char* label, std::string_view sql,
                           std::initializer_list<pg::Param> params);
  template <class F>
  auto run(Operation op, F&& attempt) -> std::invoke_result_t<F&>;

  // Read-your-writes across requests: the WAL position of the last write of a session
  // ("session:<token>", its sign-in) or a user ("user:<id>", their payments) in this
  // process, which later requests must see (pg::require_lsn()) before a standby may answer
  // them. In memory, at most kMaxRemembered keys (then it starts afresh). Requests that
  // reach another process are covered by the client's hf_wal cookie (require_position()).
  void remember_write(const std::string& who) {
    const pg::Lsn lsn = pg::request_lsn();
    if (lsn.empty()) return;
    std::lock_guard<std::mutex> lock(last_write_mutex_);
    if (last_write_.size() >= kMaxRemembered) last_write_.clear();
    pg::Lsn& last = last_write_[who];
    last = std::max(last, lsn);
  }
  void recall_writes(const std::string& who) {
    pg::Lsn lsn;
    {
      std::lock_guard<std::mutex> lock(last_write_mutex_);
      if (auto it = last_write_.find(who); it != last_write_.end()) lsn = it->second;
    }
    if (!lsn.empty()) pg::require_lsn(lsn);
  }
  static constexpr std::size_t kMaxRemembered = 100'000;

  // Two watches' findings as one: the counts added, the later last finding.
  static pg::LostWritesReport merged(pg::LostWritesReport a, const pg::LostWritesReport& b) {
    a.changes += b.changes;
    a.checks += b.checks;
    a.checks_failed += b.checks_failed;
    a.missing_total += b.missing_total;
    a.unverified_total += b.unverified_total;
    a.split_brains += b.split_brains;
    a.dropped += b.dropped;
    if (!b.last_finding.empty() &&
        (a.last_finding.empty() || b.last_finding_at > a.last_finding_at)) {
      a.last_finding = b.last_finding;
      a.last_finding_at = b.last_finding_at;
      a.last_missing = b.last_missing;
    }
    return a;
  }

  std::string where_;  // the URL with its password masked, for messages
  std::mutex last_write_mutex_;
  std::map<std::string, pg::Lsn, std::less<>> last_write_;
  std::unique_ptr<pg::Database> reads_;
  std::unique_ptr<pg::Database> writes_;
  std::optional<AsyncAccess> async_;  // holdfast only
  LaneCalls* lane_ = nullptr;         // attach_lane()
};

}  // namespace holdfast::panel
