// The async lane's PostgreSQL calls on the event loop (ADR 0043): the session, the schedule's
// games and context, a sign-in's credentials, payments, sign-ups and problem reports, each one
// call of the library's holdfast::asio::pg::Client. A round trip is a wait on the lane's loop,
// not a thread: the Client drives libpq's non-blocking API there, routes each read to the
// standby when it has the request's writes (else the primary), hedges a slow standby's read,
// finds silence, retries within the request's window through its Shield ("club.reads"), keys
// payments and sign-ups with async_once() and watches for confirmed writes a failover lost;
// the sessions' writes (sign-in, sign-out) too. The writes' Client is the reads' sibling
// (ADR 0047): a silence one finds answers the other's calls at once.
//
// Used when the store is holdfast's on PostgreSQL, directly or behind PgBouncer in
// transaction mode (the Client then sets the session's settings in each transaction), with
// any number of standbys (one list of hosts, pg::any_of()): PgLane::wanted(). When it cannot
// be (standbys' URLs that differ in more than their hosts), the routes are served on the
// panel's workers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "club_model.hpp"
#include "club_store.hpp"
#include "club_store_pg.hpp"
#include "holdfast/adapters/asio_pg.hpp"
#include "holdfast/log/database_sink.hpp"
#include "store_calls.hpp"

namespace holdfast::panel {

class PgLane final : public LaneCalls, public StoreCalls {
 public:
  // The Clients' options for `store`, checked as a Client checks them (a Status naming what
  // is wrong); nullopt when the lane's calls stay blocking jobs (see the top).
  static std::optional<Result<PgClubStore::LaneOptions>> wanted(const ClubStore& store);
  // The two Clients on `loop` (the lane's one event loop) for `store`, attached to it
  // (PgClubStore::attach_lane()) so that their Shields and attempts are the store's.
  static Result<std::unique_ptr<PgLane>> open(ClubStore& store,
                                              const boost::asio::any_io_executor& loop,
                                              PgClubStore::LaneOptions options);
  // Detaches from the store and lets go of the Client: call it before the loop goes
  // (HttpServer::LaneHooks::stopped).
  ~PgLane() override;
  PgLane(const PgLane&) = delete;
  PgLane& operator=(const PgLane&) = delete;

  // The routes' calls (store_calls.hpp) on the loop, each one database call:
  //   - the session, the schedule's games and context, a sign-in's credentials: reads;
  //   - pay(), sign_up() and record_report(): one transaction each through the writes' Client
  //     (keyed with async_once() when the request has an Idempotency-Key), with the blocking
  //     store's statements and refusals (club_writes_pg.hpp) and its input checks first;
  //   - a sign-in's writes and a sign-out's (the blocking store's rehash_once(),
  //     insert_session_once(), cap_sessions_once() and end_session_once(), with their
  //     statements, operations and what they remember for the user's next reads).
  boost::asio::awaitable<Result<ClubStore::StampedSession>> session(lane::Context& ctx,
                                                                    const std::string& token,
                                                                    const std::string& now,
                                                                    Priority priority) override;
  boost::asio::awaitable<Result<std::vector<Game>>> games(lane::Context& ctx,
                                                          const std::string& date) override;
  boost::asio::awaitable<Result<ScheduleContext>> context(lane::Context& ctx,
                                                          const std::string& date) override;
  boost::asio::awaitable<Result<std::optional<ClubStore::Credentials>>> credentials(
      lane::Context& ctx, const std::string& email) override;
  boost::asio::awaitable<Result<PaymentReceipt>> pay(lane::Context& ctx, std::int64_t user_id,
                                                     std::int64_t amount_cents,
                                                     const std::string& method,
                                                     const std::string& key,
                                                     const std::string& now) override;
  boost::asio::awaitable<Result<SignupReceipt>> sign_up(lane::Context& ctx, std::int64_t user_id,
                                                        std::int64_t game_id,
                                                        const std::string& key,
                                                        const std::string& now) override;
  boost::asio::awaitable<Status> record_report(lane::Context& ctx, const std::string& path,
                                               const std::string& digest, const std::string& note,
                                               const std::string& now) override;
  boost::asio::awaitable<Status> rehash(lane::Context& ctx, std::int64_t user_id,
                                        const std::string& fresh,
                                        const std::string& stored) override;
  boost::asio::awaitable<Result<std::string>> open_session(lane::Context& ctx, std::int64_t user_id,
                                                           const std::string& now) override;
  boost::asio::awaitable<Status> end_session(lane::Context& ctx, const std::string& token) override;

  // A store for the logs table at `url` on the lane's loop (asio::pg::LogStore, for
  // LaneLogStore): through a Client of its own ("holdfast-panel-logs", two connections, the
  // library's Shield defaults), the writes' sibling when the logs are on the store's server,
  // else one that prepares nothing (any pooler). The lane keeps that Client: once the lane is
  // gone the store answers kUnavailable.
  Result<std::shared_ptr<LogStore>> open_logs(const std::string& url);

  Shield& shield() noexcept override { return reads_->shield(); }
  Shield& write_shield() noexcept override { return writes_->shield(); }
  [[nodiscard]] pg::LostWritesReport lost_writes() const override { return writes_->lost_writes(); }
  [[nodiscard]] std::uint64_t standby_reads() const noexcept override {
    return reads_->standby_reads();
  }

 private:
  PgLane(PgClubStore& store, std::shared_ptr<asio::pg::Client<>> reads,
         std::shared_ptr<asio::pg::Client<>> writes, asio::pg::ClientOptions writes_options);
  boost::asio::awaitable<Status> insert_session(lane::Context& ctx, const std::string& token,
                                                std::int64_t user_id, const std::string& now);
  boost::asio::awaitable<Status> cap_sessions(lane::Context& ctx, std::int64_t user_id,
                                              const std::string& now);
  boost::asio::awaitable<Result<pg::Rows>> read(lane::Context& ctx, std::string_view sql,
                                                std::span<const pg::Param> params,
                                                const pg::ReadOptions& options);
  // One write statement through the writes' Client.
  boost::asio::awaitable<Status> write(lane::Context& ctx, std::string_view sql,
                                       std::span<const pg::Param> params, const Operation& op);
  using Tx = asio::pg::Client<>::Transaction;
  // A transaction that makes one row and returns its id.
  using RowBody = std::function<boost::asio::awaitable<Result<std::int64_t>>(Tx&)>;
  // PgClubStore::create_row() on the loop: `body` as one transaction re-run after a rollback
  // (40001, 40P01), with `key` once for "<user>:<route>:<key>" and its record; {id, replayed}.
  boost::asio::awaitable<Result<std::pair<std::int64_t, bool>>> create_row(
      lane::Context& ctx, std::int64_t user_id, std::string_view route, const IdempotencyKey& key,
      RowBody body);
  // read() with `op`, its rows decoded by `decode` (club_reads_pg.hpp).
  template <class T, class Decode>
  boost::asio::awaitable<Result<T>> decoded(lane::Context& ctx, std::string_view sql,
                                            std::span<const pg::Param> params, Operation op,
                                            Decode decode);

  PgClubStore& store_;
  std::shared_ptr<asio::pg::Client<>> reads_;
  std::shared_ptr<asio::pg::Client<>> writes_;
  const asio::pg::ClientOptions writes_options_;  // what writes_ was opened with
  std::shared_ptr<asio::pg::Client<>> logs_;      // open_logs()'s
};

}  // namespace holdfast::panel
