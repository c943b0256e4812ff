#include "pg_lane.hpp"

#include <utility>

#include <boost/asio/use_awaitable.hpp>

#include "club_reads_pg.hpp"

namespace holdfast::panel {

namespace net = boost::asio;

std::optional<Result<asio::pg::ClientOptions>> PgLane::wanted(const ClubStore& store) {
  const auto* pg_store = dynamic_cast<const PgClubStore*>(&store);
  if (pg_store == nullptr) return std::nullopt;
  std::optional<asio::pg::ClientOptions> options = pg_store->lane_options();
  if (!options) return std::nullopt;
  if (Status bad = options->check(); !bad.ok()) return Result<asio::pg::ClientOptions>(bad);
  return Result<asio::pg::ClientOptions>(std::move(*options));
}

Result<std::unique_ptr<PgLane>> PgLane::open(ClubStore& store, const net::any_io_executor& loop,
                                             asio::pg::ClientOptions options) {
  auto* pg_store = dynamic_cast<PgClubStore*>(&store);
  if (pg_store == nullptr) {
    return Status(Code::kInvalidArgument, "PgLane: the store is not on PostgreSQL");
  }
  Result<std::shared_ptr<asio::pg::Client<>>> client =
      asio::pg::Client<>::open(loop, std::move(options));
  if (!client.ok()) return client.status();
  std::unique_ptr<PgLane> lane(new PgLane(*pg_store, std::move(*client)));
  pg_store->attach_lane(lane.get());
  return lane;
}

PgLane::PgLane(PgClubStore& store, std::shared_ptr<asio::pg::Client<>> client)
    : store_(store), client_(std::move(client)) {}

PgLane::~PgLane() {
  store_.attach_lane(nullptr);
}

net::awaitable<Result<pg::Rows>> PgLane::read(lane::Context& ctx, std::string_view sql,
                                              std::span<const pg::Param> params,
                                              const pg::ReadOptions& options) {
  store_.count_call();
  co_return co_await client_->async_read(ctx.request, sql, params, options, net::use_awaitable);
}

net::awaitable<Result<std::optional<User>>> PgLane::session(lane::Context& ctx,
                                                            const std::string& token,
                                                            const std::string& now,
                                                            Priority priority) {
  // On the sessions' own schedule (ClubStore::session()); it must outlive the call.
  static const RetryPolicy sessions = RetryPolicy::origin_session();
  pg::ReadOptions lookup;
  lookup.operation = Operation::read("session.read").with_priority(priority);
  lookup.policy = &sessions;
  {
    const lane::OnThisThread request(ctx);
    store_.recall_session(token);  // a sign-in just now, on this process
  }
  const pg::Param params[] = {token, now};
  Result<pg::Rows> rows = co_await read(ctx, pgreads::kSession, params, lookup);
  if (!rows.ok()) co_return rows.status();
  Result<std::optional<User>> user = pgreads::session_of(*rows);
  if (user.ok() && user->has_value()) {
    const lane::OnThisThread request(ctx);
    store_.recall_user((*user)->id);  // the user's payments just now, on this process
  }
  co_return user;
}

template <class T, class Decode>
net::awaitable<Result<T>> PgLane::decoded(lane::Context& ctx, std::string_view sql,
                                          std::span<const pg::Param> params, Operation op,
                                          Decode decode) {
  pg::ReadOptions read_options;
  read_options.operation = op;
  Result<pg::Rows> rows = co_await read(ctx, sql, params, read_options);
  if (!rows.ok()) co_return rows.status();
  co_return decode(*rows);
}

net::awaitable<Result<std::vector<Game>>> PgLane::games(lane::Context& ctx,
                                                        const std::string& date) {
  const pg::Param params[] = {date};
  co_return co_await decoded<std::vector<Game>>(
      ctx, pgreads::kGames, params, Operation::read("schedule.games"), pgreads::games_of);
}

net::awaitable<Result<ScheduleContext>> PgLane::context(lane::Context& ctx,
                                                        const std::string& date) {
  const pg::Param params[] = {date};
  co_return co_await decoded<ScheduleContext>(
      ctx, pgreads::kContext, params, Operation::read("schedule.context"), pgreads::context_of);
}

net::awaitable<Result<std::optional<ClubStore::Credentials>>> PgLane::credentials(
    lane::Context& ctx, const std::string& email) {
  const pg::Param params[] = {email};
  co_return co_await decoded<std::optional<ClubStore::Credentials>>(
      ctx, pgreads::kCredentials, params, Operation::read("login.user").critical(),
      pgreads::credentials_of);
}

}  // namespace holdfast::panel
