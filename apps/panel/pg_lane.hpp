// The async lane's PostgreSQL reads on the event loop (ADR 0043): the session, the
// schedule's games and context, and a sign-in's credentials, each one call of the library's
// holdfast::asio::pg::Client. A round trip is a wait on the lane's loop, not a thread: the
// Client drives libpq's non-blocking API there, routes each read to the standby when it has
// the request's writes (else the primary), hedges a slow standby's read, finds silence, and
// retries within the request's window through its Shield ("club.reads"). The writes are
// still the store's blocking transactions (async_call.hpp's write_call()).
//
// Used when the store is holdfast's on PostgreSQL with at most one standby, directly or
// behind PgBouncer in transaction mode (the Client then sets the session's settings in each
// transaction): PgLane::wanted(). With several standbys the reads are blocking jobs routed
// by pg::Database (async_call.hpp's routed_read()).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "async_call.hpp"
#include "club_model.hpp"
#include "club_store.hpp"
#include "club_store_pg.hpp"
#include "holdfast/adapters/asio_pg.hpp"

namespace holdfast::panel {

class PgLane final : public LaneReads {
 public:
  // The Client's options for `store`, checked as the Client checks them (a Status naming
  // what is wrong); nullopt when the lane's reads stay blocking jobs (see the top).
  static std::optional<Result<asio::pg::ClientOptions>> wanted(const ClubStore& store);
  // A Client on `loop` (the lane's one event loop) for `store`, attached to it
  // (PgClubStore::attach_lane()) so that its Shield and attempts are the store's reads'.
  static Result<std::unique_ptr<PgLane>> open(ClubStore& store,
                                              const boost::asio::any_io_executor& loop,
                                              asio::pg::ClientOptions options);
  // Detaches from the store and lets go of the Client: call it before the loop goes
  // (HttpServer::LaneHooks::stopped).
  ~PgLane() override;
  PgLane(const PgLane&) = delete;
  PgLane& operator=(const PgLane&) = delete;

  // ClubStore's session(), games_on(), context_on() and credentials, on the loop; each one
  // database call (ClubStore::calls()).
  boost::asio::awaitable<Result<std::optional<User>>> session(lane::Context& ctx,
                                                              const std::string& token,
                                                              const std::string& now,
                                                              Priority priority);
  boost::asio::awaitable<Result<std::vector<Game>>> games(lane::Context& ctx,
                                                          const std::string& date);
  boost::asio::awaitable<Result<ScheduleContext>> context(lane::Context& ctx,
                                                          const std::string& date);
  boost::asio::awaitable<Result<std::optional<ClubStore::Credentials>>> credentials(
      lane::Context& ctx, const std::string& email);

  Shield& shield() noexcept override { return client_->shield(); }
  [[nodiscard]] std::uint64_t standby_reads() const noexcept override {
    return client_->standby_reads();
  }

 private:
  PgLane(PgClubStore& store, std::shared_ptr<asio::pg::Client<>> client);
  boost::asio::awaitable<Result<pg::Rows>> read(lane::Context& ctx, std::string_view sql,
                                                std::span<const pg::Param> params,
                                                const pg::ReadOptions& options);
  // read() with `op`, its rows decoded by `decode` (club_reads_pg.hpp).
  template <class T, class Decode>
  boost::asio::awaitable<Result<T>> decoded(lane::Context& ctx, std::string_view sql,
                                            std::span<const pg::Param> params, Operation op,
                                            Decode decode);

  PgClubStore& store_;
  std::shared_ptr<asio::pg::Client<>> client_;
};

}  // namespace holdfast::panel
