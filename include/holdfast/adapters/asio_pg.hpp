/// @file
/// PostgreSQL on an Asio event loop, with holdfast's decisions and no thread per round trip.
/// Header-only over the compiled holdfast::pg (link holdfast::pg); needs standalone Asio 1.22
/// or Boost.Asio 1.81 (HOLDFAST_ASIO_BOOST, as for holdfast/adapters/asio.hpp) and C++20
/// coroutines.
///
/// A Client keeps a small pool of pg::LoopConnection (libpq's non-blocking API) on one
/// executor. Each call runs through holdfast::asio::async_run on the Client's Shield: one
/// retry window per request (the RequestContext's, which an upstream deadline caps), retries
/// by the engine's verdict (a read is repeated, a write only when nothing was applied, a keyed
/// write always), the breaker, the concurrency limit and the retry throttle. Every wait --
/// connecting, sending, the server's answer, a backoff, a place under the limit -- is a wait
/// on the event loop. At the request's deadline the statement is cancelled (libpq 15's cancel
/// request blocks, so it alone is sent off the loop, by holdfast's canceller thread); a
/// server that answers neither within the grace after it loses the connection, and the
/// outcome of a write sent on it is unknown (Outcome::kUnknown: never repeated).
///
/// @code
///   asio::io_context io;
///   holdfast::asio::pg::ClientOptions options;
///   options.connect.conninfo = "postgresql://app@db1:5432,db2:5432/app";
///   std::shared_ptr<holdfast::asio::pg::Client<>> client =
///       holdfast::asio::pg::Client<>::open(io.get_executor(), options).value();
///   asio::co_spawn(io, [&]() -> asio::awaitable<void> {
///     holdfast::RequestContext request;                       // one window for the request
///     const holdfast::pg::Param on[] = {day};
///     holdfast::Result<holdfast::pg::Rows> games = co_await client->async_read(
///         request, "schedule.games", "SELECT name FROM games WHERE day = $1", on,
///         asio::use_awaitable);
///     const holdfast::pg::Param payment[] = {member, cents};
///     holdfast::Result<holdfast::KeyedResult> paid = co_await client->async_once(
///         request, key, "INSERT INTO payments (member, cents) VALUES ($1, $2) RETURNING id",
///         payment, asio::use_awaitable);
///   }, asio::detached);
/// @endcode
///
/// Parameters: a span (a named array, as above) or, outside coroutines, a braced list. g++ 12
/// cannot keep a braced list of Params across a co_await ("array used as initializer"), so
/// coroutines name them first. The SQL and the parameters are copied when the call starts. The
/// Client outlives its operations; destroy it after the io_context stopped running them. The
/// executor runs one handler at a time for a Client (an io_context run by one thread, or a strand).
///
/// Reads go to a hot standby (ClientOptions::standby) when it has replayed the request's own
/// writes: each write reads its commit position in its own round trip and keeps it in the
/// RequestContext, and a standby read asks for the standby's replay position in its own.
/// A standby read not answered within the standby's normal latency is hedged to the primary,
/// and a standby far slower than the primary is used less (ClientOptions::hedge_budget and
/// slow_copy_floor: the blocking pg::Database's rule, docs/adr/0041).
///
/// A read (on the primary or a standby) and a write are prepared once per connection and then
/// executed by name (ClientOptions::pooling: not behind a pooler in transaction mode), the
/// first Parse in the same round trip.
///
/// Transactions of several statements are coroutines of the caller's (async_transaction(),
/// async_once() with a function): each statement a round trip on the loop, BEGIN sent with the
/// first and COMMIT with the commit's position, a COMMIT in doubt resolved as pg::Database
/// resolves it.
///
/// A standby that has not replayed what it received for ClientOptions::max_standby_lag answers
/// no reads, and a read whose position is of a timeline older than the newest the primary's
/// writes showed goes to the primary (pg::Database's rules, docs/adr/0050).
///
/// Every call tells the server what its deadline leaves (SET LOCAL statement_timeout, in the
/// same round trip: a read's setting lasts for the implicit transaction of its pipeline), so
/// that the server ends the statement by itself even when the cancel cannot reach it.
///
/// Several standbys (the hosts of ClientOptions::standby) share the reads in turn, each judged
/// on its own.
///
/// Not yet here (the blocking pg::Database has them): Statements prepared inside a
/// transaction.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "holdfast/adapters/asio.hpp"
#include "holdfast/adapters/asio_pg_options.hpp"
#include "holdfast/adapters/asio_pg_slot.hpp"
#include "holdfast/core/idempotency.hpp"
#include "holdfast/core/liveness.hpp"
#include "holdfast/core/random.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/detail/read_route.hpp"
#include "holdfast/detail/slow_copy.hpp"
#include "holdfast/pg/loop.hpp"
#include "holdfast/pg/lost_writes_watch.hpp"
#include "holdfast/pg/lsn.hpp"
#include "holdfast/pg/options.hpp"
#include "holdfast/pg/sql.hpp"
#include "holdfast/pg/transactions.hpp"

/// PostgreSQL on Asio through libpq's non-blocking API (see the top of asio_pg.hpp).
namespace holdfast::asio::pg {

/// PostgreSQL calls on an Asio executor (see the top of asio_pg.hpp). Not copyable or movable.
template <class Executor = detail::net::any_io_executor>
class Client : public std::enable_shared_from_this<Client<Executor>> {
 public:
  /// A client of the server `options.connect` names, on `ex`. It connects lazily, on the first
  /// call, so a server that is away now is no error here. Fails on options that can never work
  /// (ClientOptions::check()), naming the field. The Client is shared: a hedged read's losing try
  /// keeps it alive until it has stopped, so the caller may let go of it as soon as its own calls
  /// have completed.
  static Result<std::shared_ptr<Client>> open(const Executor& ex, ClientOptions options) {
    if (Status bad = options.check(); !bad.ok()) return bad;
    std::shared_ptr<Client> c(new Client(ex, std::move(options)));
    c->primary_.verdict->clients.push_back(c);
    return c;
  }
  /// A Client for the same primary as `sibling`, with a Shield and connections of its own,
  /// that shares with it (and its other siblings) whether the primary answers: silence found
  /// by one trips every sibling's breaker and answers their calls at once, one probe looks for
  /// the server, and its answer closes every breaker. For example one Client for reads and one
  /// for writes, so that failing writes do not stop the reads, yet a frozen server the reads
  /// found answers the next write at once instead of after a silence of its own.
  /// REQUIRES: `sibling` runs on the same executor (one handler at a time for both).
  /// INVALID_ARGUMENT when its options are invalid or `sibling` reaches another primary
  /// (connect.conninfo differs).
  static Result<std::shared_ptr<Client>> open(const Executor& ex, ClientOptions options,
                                              const std::shared_ptr<Client>& sibling);
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// The executor the Client's calls run on.
  [[nodiscard]] const Executor& get_executor() const noexcept { return ex_; }
  /// The Shield every call runs through (its breaker, limit, throttle and metrics).
  [[nodiscard]] Shield& shield() noexcept { return shield_; }
  /// Connections open now to the primary (idle or in use).
  [[nodiscard]] std::size_t open_connections() const noexcept { return primary_.open; }
  /// Reads a standby answered (the rest went to the primary). Like the two below, readable
  /// from any thread (a metrics page's).
  [[nodiscard]] std::uint64_t standby_reads() const noexcept {
    std::uint64_t n = 0;
    for (const auto& sb : standbys_)
      n += sb->reads.load(std::memory_order_relaxed);
    return n;
  }
  /// The standbys reads are spread over: one per host of ClientOptions::standby.
  [[nodiscard]] std::size_t standbys() const noexcept { return standbys_.size(); }
  /// Reads the standby of host `i` (0-based, in ClientOptions::standby's order) answered; 0
  /// when there is no such standby.
  [[nodiscard]] std::uint64_t standby_reads(std::size_t i) const noexcept {
    return i < standbys_.size() ? standbys_[i]->reads.load(std::memory_order_relaxed) : 0;
  }
  /// Reads that were hedged (also sent to the primary), and those the primary's answer won.
  [[nodiscard]] std::uint64_t hedged_reads() const noexcept {
    return hedged_.load(std::memory_order_relaxed);
  }
  /// Hedged reads the primary answered first.
  [[nodiscard]] std::uint64_t hedges_won() const noexcept {
    return hedges_won_.load(std::memory_order_relaxed);
  }
  /// Whether a standby is used less now because it answers far slower than the primary
  /// (ClientOptions::slow_copy_floor): it gets no reads but its probes.
  [[nodiscard]] bool standby_slow() const noexcept {
    return std::any_of(standbys_.begin(), standbys_.end(),
                       [](const auto& sb) { return sb->copy.slow.ejected(); });
  }
  /// How often a standby was found slow and used less (ClientOptions::slow_copy_floor).
  [[nodiscard]] std::uint64_t standby_ejections() const noexcept {
    std::uint64_t n = 0;
    for (const auto& sb : standbys_)
      n += sb->copy.slow.ejections();
    return n;
  }
  /// Checks of whether the primary answers at all, run so far (silence_after; the probe's
  /// rechecks included), by this Client and its siblings.
  [[nodiscard]] std::uint64_t silence_checks() const noexcept {
    return primary_.verdict->live->checks();
  }
  /// Reads a standby was asked and had not replayed the request's own writes, so its answer
  /// was not taken. After each, that standby is held off such reads for a while.
  [[nodiscard]] std::uint64_t standby_behind_reads() const noexcept {
    return behind_reads_.load(std::memory_order_relaxed);
  }
  /// Reads whose standby answer was not taken because the standby had not replayed WAL it
  /// received for longer than ClientOptions::max_standby_lag (the primary answered them).
  [[nodiscard]] std::uint64_t standby_lagging_reads() const noexcept {
    return lagging_reads_.load(std::memory_order_relaxed);
  }

  /// What the lost-writes watch found so far (ClientOptions::lost_writes; all zero when it is
  /// off). Readable from any thread.
  [[nodiscard]] holdfast::pg::LostWritesReport lost_writes() const {
    return lost_ != nullptr ? lost_->report() : holdfast::pg::LostWritesReport{};
  }

  /// Runs a read: repeated after any failure the engine says may pass, within the request's
  /// window; answered by a standby that has the request's writes, else by the primary.
  /// Completes with void(Result<pg::Rows>).
  template <class Token>
  auto async_read(const RequestContext& request, std::string_view label, std::string_view sql,
                  std::span<const holdfast::pg::Param> params, Token&& token) {
    return call(request, Operation::read(label), sql, params, false, std::forward<Token>(token));
  }
  /// async_read() with the parameters in braces.
  template <class Token>
  auto async_read(const RequestContext& request, std::string_view label, std::string_view sql,
                  std::initializer_list<holdfast::pg::Param> params, Token&& token) {
    return async_read(request, label, sql, std::span(params.begin(), params.size()),
                      std::forward<Token>(token));
  }
  /// async_read() with the blocking pg::Database's ReadOptions: the operation (its label and
  /// its priority class; a read is idempotent whatever it says), a retry schedule of its own
  /// (e.g. RetryPolicy::session_reads() for a session lookup; it must outlive the call) and
  /// where the call's RetryStats go (filled in before the completion runs).
  template <class Token>
  auto async_read(const RequestContext& request, std::string_view sql,
                  std::span<const holdfast::pg::Param> params,
                  const holdfast::pg::ReadOptions& read, Token&& token) {
    Operation op = read.operation;
    op.idempotency = Idempotency::kIdempotent;
    RunOptions run = run_options(request);
    run.policy = read.policy;
    run.stats = read.stats;
    return call(request, op, sql, params, false, run, std::forward<Token>(token));
  }

  /// Runs a write (one statement, its own transaction, with its commit position read in the
  /// same round trip and kept in the request for its later reads): repeated only when the
  /// failed attempt provably applied nothing; a write whose outcome is unknown completes with
  /// that failure (Fault::outcome kUnknown), and the request's reads then go to the primary.
  /// Completes with void(Result<pg::Rows>).
  template <class Token>
  auto async_write(const RequestContext& request, std::string_view label, std::string_view sql,
                   std::span<const holdfast::pg::Param> params, Token&& token) {
    return call(request, Operation::write(label), sql, params, true, std::forward<Token>(token));
  }
  /// async_write() with an Operation, as pg::Database::write() takes one: its label, its
  /// priority class, and whether repeating it is safe (Operation::idempotent_write(): a
  /// write whose outcome is unknown is then repeated too).
  template <class Token>
  auto async_write(const RequestContext& request, std::string_view sql,
                   std::span<const holdfast::pg::Param> params, const Operation& op,
                   Token&& token) {
    return call(request, op, sql, params, true, std::forward<Token>(token));
  }
  /// async_write() with the parameters in braces.
  template <class Token>
  auto async_write(const RequestContext& request, std::string_view label, std::string_view sql,
                   std::initializer_list<holdfast::pg::Param> params, Token&& token) {
    return async_write(request, label, sql, std::span(params.begin(), params.size()),
                       std::forward<Token>(token));
  }

  /// Runs a write at most once for `key`, however often it is retried or called again: the
  /// key's row and the write commit in one transaction. The first column of the write's first
  /// row (`RETURNING id`), if any, is recorded and returned to a later call with the same key
  /// (KeyedResult::replayed). So it is repeated whatever happened, even when a commit's outcome
  /// was unknown. A key is one row of one table for every caller: scope it by who sends it
  /// ("user:payments:" + the client's key, as the demo panel does), or another user's call
  /// with the same key is answered with that user's recorded result and does not run.
  /// REQUIRES: the table (ClientOptions::idempotency_table) exists
  /// (async_create_idempotency_table()). Completes with void(Result<KeyedResult>).
  template <class Token>
  auto async_once(const RequestContext& request, std::string_view key, std::string_view sql,
                  std::span<const holdfast::pg::Param> params, Token&& token) {
    holdfast::pg::TransactionOptions options;
    options.operation = Operation::transaction(true, "pg.once");
    auto statement = std::make_shared<Plain>(request, sql, params, true);
    return async_once(
        request, key,
        [statement](Transaction& tx) -> awaitable<Result<std::string>> {
          Result<Rows> rows = co_await tx.query(statement->sql, statement->params.params);
          if (!rows.ok()) co_return rows.status();
          co_return rows->empty() ? std::string() : std::string(rows->text(0, 0));
        },
        options, std::forward<Token>(token));
  }
  /// async_once() with the parameters in braces.
  template <class Token>
  auto async_once(const RequestContext& request, std::string_view key, std::string_view sql,
                  std::initializer_list<holdfast::pg::Param> params, Token&& token) {
    return async_once(request, key, sql, std::span(params.begin(), params.size()),
                      std::forward<Token>(token));
  }

  class Transaction;

  /// Runs `fn`, a coroutine taking a Transaction&, as one transaction on the primary: BEGIN
  /// (`options.isolation`, `options.read_only`) goes with its first statement, COMMIT with
  /// the commit's position after it returns OK; an error it returns (or a failed statement,
  /// or an exception) rolls back. `fn` returns awaitable<Result<T>>; the call completes with
  /// void(Result<T>): `fn`'s result once committed.
  ///
  /// It runs again, within the request's window, only when the engine says the failure may
  /// pass and nothing was applied: after a failed statement or COMMIT the server rolled the
  /// transaction back (a serialization failure, a deadlock, a lost connection before
  /// COMMIT), but only a function marked re-runnable (`options.operation` =
  /// Operation::transaction(true, label)) is called again; any other is answered with the
  /// failure. A COMMIT that lost its connection is resolved on a new one (pg_xact_status(),
  /// for up to the window or 2 s): committed is success, rolled back is a failure that
  /// applied nothing, and a commit that cannot be resolved completes with Outcome::kUnknown,
  /// never repeated (async_once() is the transaction that may be). `options.report`, if set,
  /// is filled in before the completion runs.
  ///
  /// @code
  ///   holdfast::Result<std::int64_t> id = co_await client->async_transaction(
  ///       request,
  ///       [&](Client<>::Transaction& tx) -> asio::awaitable<holdfast::Result<std::int64_t>> {
  ///         const holdfast::pg::Param game[] = {game_id};
  ///         holdfast::Result<holdfast::pg::Rows> seats = co_await tx.query(
  ///             "SELECT capacity FROM games WHERE id = $1 FOR UPDATE", game);
  ///         ...
  ///       },
  ///       options, asio::use_awaitable);
  /// @endcode
  template <class Fn, class Token>
  requires std::is_invocable_v<Fn&, Transaction&>
  auto async_transaction(const RequestContext& request, Fn fn,
                         const holdfast::pg::TransactionOptions& options, Token&& token) {
    using R = typename std::invoke_result_t<Fn&, Transaction&>::value_type;
    auto state = std::make_shared<Transacted<R>>(request, std::move(fn), options);
    auto attempt = [this, state](Done<R> done) {
      spawn<R>(transaction_attempt(state), std::move(done));
    };
    RunOptions run = run_options(request);
    if (options.report != nullptr) run.stats = &options.report->retry;
    return async_run<R>(ex_, shield_, options.operation, run, std::move(attempt),
                        std::forward<Token>(token));
  }

  /// async_once() with a transaction of the caller's: `fn` (a coroutine taking a
  /// Transaction&, returning awaitable<Result<std::string>>) runs at most once for `key`,
  /// in the key's transaction; the string it returns is recorded with the key and is the
  /// KeyedResult's `result`, for this call and every later one with the same key. Repeated
  /// whatever happened, an unknown commit included (the key tells the next attempt). A key is
  /// one row for every caller: scope it as async_once() says. `options.isolation` applies;
  /// the operation's label and priority too (it is idempotent whatever it says).
  /// REQUIRES: the table exists (async_create_idempotency_table()).
  template <class Fn, class Token>
  requires std::is_invocable_v<Fn&, Transaction&>
  auto async_once(const RequestContext& request, std::string_view key, Fn fn,
                  const holdfast::pg::TransactionOptions& options, Token&& token) {
    Operation op = options.operation;
    op.idempotency = Idempotency::kIdempotent;
    auto state = std::make_shared<Keyed>(request, std::string(key), KeyedFunction(std::move(fn)),
                                         begin_statement(options));
    auto attempt = [this, state](Done<Result<KeyedResult>> done) {
      spawn<Result<KeyedResult>>(once_attempt(state), std::move(done));
    };
    RunOptions run = run_options(request);
    if (options.report != nullptr) run.stats = &options.report->retry;
    return async_run<Result<KeyedResult>>(ex_, shield_, op, run, std::move(attempt),
                                          std::forward<Token>(token));
  }

  /// Creates async_once()'s table when it is missing (the same table pg::Database's
  /// create_idempotency_table() makes). Completes with void(Result<pg::Rows>).
  template <class Token>
  auto async_create_idempotency_table(const RequestContext& request, Token&& token) {
    return call(request, Operation::idempotent_write("pg.idempotency_table"), create_sql_, {}, true,
                std::forward<Token>(token));
  }

 private:
  using Slot = detail::Slot;
  using Want = holdfast::pg::Want;
  using Rows = holdfast::pg::Rows;
  using Piece = holdfast::pg::LoopConnection::Piece;
  template <class T>
  using awaitable = detail::net::awaitable<T>;

  // Whether a server answers. The primary's: its Liveness (the watch pg::Database keeps of each
  // server, its checks run on the loop: ADR 0058), whether its probe runs, and the newest
  // timeline its writes' commit positions showed; shared by the Clients opened as siblings,
  // which `clients` lists (each Client's own lists itself). A standby's: whether it could not be
  // reached, and until when reads leave it alone.
  struct Verdict {
    bool silent = false;
    TimePoint verdict_until{};
    bool checking = false;
    std::unique_ptr<Liveness> live;  // the primary's
    bool probing = false;
    // Raised only by the primary's own answers, never by a position a request brought: a
    // forged cookie would send every other request's reads to the primary.
    std::uint32_t newest_timeline = 0;
    TimePoint asked_at{};  // the last call that found the server silent while it was probed
    // A standby of several: how long it was last left alone (zero: it is not).
    Duration alone_for{};
    std::vector<std::weak_ptr<Client>> clients;
  };
  // Calls `f` with this Client and each live sibling sharing its primary's verdict.
  template <class F>
  void for_each_sibling(F f) {
    for (const std::weak_ptr<Client>& w : primary_.verdict->clients) {
      if (std::shared_ptr<Client> c = w.lock()) f(*c);
    }
  }

  // The connections to one server (the primary, or the standbys).
  struct Pool {
    Pool(const Executor& ex, holdfast::pg::ConnectOptions o, std::size_t most)
        : options(std::move(o)), max(most), vacancy(ex) {
      vacancy.expires_at(TimePoint::max());
    }
    holdfast::pg::ConnectOptions options;
    std::size_t max;
    std::vector<std::unique_ptr<Slot>> idle;
    std::size_t open = 0;
    detail::net::steady_timer vacancy;  // cancelled whenever a connection comes free
    // Failed connects in a row (the primary's): until next_connect_at a call that finds no
    // idle connection is answered at once, as pg::Database's pool answers (ADR 0017).
    int connect_failures = 0;
    TimePoint next_connect_at{};
    Duration previous_delay{};
    Status last_connect_error;
    // The last silence check's verdict (the primary's: shared with the sibling Clients).
    std::shared_ptr<Verdict> verdict = std::make_shared<Verdict>();
    // The one host of options it connects to (a standby of several); none: the first of them
    // that takes it.
    std::optional<std::size_t> only_host;
  };

  // One standby: a host of ClientOptions::standby, with its connections, what its reads
  // showed of its speed (ADR 0041) and since when its replay lags (ADR 0050). Reads are spread
  // over the standbys in turn.
  struct Standby {
    Standby(const Executor& ex, holdfast::pg::ConnectOptions o, std::size_t most,
            std::optional<std::size_t> host, holdfast::pg::detail::SlowCopyRule rule)
        : pool(ex, std::move(o), most), copy(rule) {
      pool.only_host = host;
    }
    Pool pool;
    holdfast::pg::detail::CopyState copy;
    // How far its replay was seen, and its hold after it was found behind a request's writes.
    holdfast::pg::detail::CatchUp catch_up;
    // Until when reads skip it because its replay lags (TimePoint{}: it did not).
    TimePoint lagging_until{};
    std::atomic<std::uint64_t> reads{0};
  };

  // What one call keeps for all its attempts.
  struct Plain {
    Plain(const RequestContext& r, std::string_view s, std::span<const holdfast::pg::Param> p,
          bool w)
        : request(r), sql(s), params(p), write(w) {}
    RequestContext request;
    std::string sql;
    detail::Params params;
    bool write;
    bool primary_failed = false;  // a read's primary try failed: its next one reads the standby
    bool standby_behind = false;  // the standby last asked had not replayed the request's writes
  };
  // What one async_once() keeps for all its attempts.
  using KeyedFunction = std::function<awaitable<Result<std::string>>(Transaction&)>;
  struct Keyed {
    Keyed(const RequestContext& r, std::string k, KeyedFunction f, std::string_view b)
        : request(r), key(std::move(k)), fn(std::move(f)), begin(b) {}
    RequestContext request;
    std::string key;
    KeyedFunction fn;
    std::string_view begin;  // static text (holdfast::pg::begin_statement())
  };
  // What one async_transaction() keeps for all its attempts (R: its Result<T>).
  template <class R>
  struct Transacted {
    template <class Fn>
    Transacted(const RequestContext& r, Fn&& f, const holdfast::pg::TransactionOptions& o)
        : request(r),
          fn(std::forward<Fn>(f)),
          begin(begin_statement(o)),
          writes(!o.read_only),
          report(o.report) {}
    RequestContext request;
    std::function<awaitable<R>(Transaction&)> fn;
    std::string_view begin;  // static text
    bool writes;             // not READ ONLY: its id is read (for a COMMIT in doubt)
    holdfast::pg::TransactionReport* report;
  };
  static std::string_view begin_statement(const holdfast::pg::TransactionOptions& o) {
    return holdfast::pg::begin_statement(o.isolation, o.read_only);
  }

  // A write's commit position and timeline, read in the write's own round trip (as
  // pg::Database's writes do).
  static constexpr std::string_view kPositionSql = holdfast::pg::detail::kWalPositionSql;
  // What a standby has replayed, whether it is a standby at all (a promoted one keeps its
  // last replay position and is no replica), and what it has received (its replay lag).
  static constexpr std::string_view kStandbyHead =
      "SELECT pg_catalog.pg_last_wal_replay_lsn()::text, pg_catalog.pg_is_in_recovery(), "
      "pg_catalog.pg_last_wal_receive_lsn()::text";

  Client(const Executor& ex, ClientOptions options)
      : ex_(ex),
        options_(std::move(options)),
        shield_(options_.shield_name, options_.shield),
        primary_(ex, connect_options(options_, options_.connect), options_.max_connections) {
    primary_.verdict->live = make_liveness(*primary_.verdict);
    if (!options_.standby.conninfo.empty()) {
      // Each host of the standby's conninfo is a standby of its own, reads spread over them.
      const holdfast::pg::ConnectOptions o = connect_options(options_, options_.standby);
      const std::size_t n = holdfast::pg::LoopConnection::host_count(o);
      for (std::size_t i = 0; i < n; ++i) {
        standbys_.push_back(std::make_unique<Standby>(ex, o, options_.standby_connections,
                                                      n > 1 ? std::optional(i) : std::nullopt,
                                                      slow_copy_rule(options_)));
      }
    }
    const std::string& t = options_.idempotency_table;
    claim_sql_ = "INSERT INTO " + t + " (key) VALUES ($1) ON CONFLICT (key) DO NOTHING";
    recorded_sql_ = "SELECT result FROM " + t + " WHERE key = $1";
    record_sql_ = "UPDATE " + t + " SET result = $2 WHERE key = $1";
    const std::vector<std::pair<std::string, std::string>>& set = options_.connect.settings;
    if (options_.pooling == holdfast::pg::Pooling::kTransaction && !set.empty()) {
      settings_sql_ = "SELECT ";
      for (std::size_t i = 0; i < set.size(); ++i) {
        if (i > 0) settings_sql_ += ", ";
        settings_sql_ += "pg_catalog.set_config($" + std::to_string(2 * i + 1) + ", $" +
                         std::to_string(2 * i + 2) + ", true)";
      }
      for (const auto& [name, value] : set) {
        settings_params_.emplace_back(name);
        settings_params_.emplace_back(value);
      }
    }
    several_hosts_ = holdfast::pg::LoopConnection::host_count(options_.connect) > 1;
    if (options_.lost_writes.remember > 0) {
      // The checker reaches the writer as the primary's pool does (a blocking connection of
      // its own, off the loop). Options were checked: only memory can fail it (then no watch).
      Result<std::unique_ptr<holdfast::pg::LostWritesWatch>> watch =
          holdfast::pg::LostWritesWatch::open(options_.lost_writes, primary_.options,
                                              options_.idempotency_table, shield_.metrics(),
                                              holdfast::Clock::system());
      if (watch.ok()) lost_ = std::move(*watch);
    }
    resolve_sql_ = "SELECT w.*, pg_catalog.pg_xact_status($1::pg_catalog.xid8) FROM (" +
                   std::string(kPositionSql) + ") w";
    create_sql_ = "CREATE TABLE IF NOT EXISTS " + t +
                  " (key text PRIMARY KEY, result text, "
                  "created_at timestamptz NOT NULL DEFAULT now())";
  }

  // What a pool connects with: behind a pooler in transaction mode, without the session's
  // settings (the pooler refuses them at connect; they are set in each transaction instead).
  static holdfast::pg::ConnectOptions connect_options(const ClientOptions& o,
                                                      holdfast::pg::ConnectOptions c) {
    if (o.pooling == holdfast::pg::Pooling::kTransaction) c.settings.clear();
    return c;
  }

  static holdfast::pg::detail::SlowCopyRule slow_copy_rule(const ClientOptions& o) {
    holdfast::pg::detail::SlowCopyRule rule;
    rule.floor = o.slow_copy_floor;
    rule.factor = o.slow_copy_factor;
    rule.probe_every = o.slow_copy_probe_every;
    return rule;
  }

  // When this attempt must be over: the request's deadline. PostgreSQL does not say that a
  // statement waits for a lock, so the request's window opens when it first goes to the
  // database (as pg::Database's does), not at its first failure.
  static TimePoint attempt_deadline(const RequestContext& request) {
    request.window().open(detail::Clock::now());
    return request.deadline();
  }

  static RunOptions run_options(const RequestContext& request) {
    RunOptions o;
    o.window = &request.window();
    return o;
  }

  template <class Token>
  auto call(const RequestContext& request, Operation op, std::string_view sql,
            std::span<const holdfast::pg::Param> params, bool write, Token&& token) {
    return call(request, op, sql, params, write, run_options(request), std::forward<Token>(token));
  }
  template <class Token>
  auto call(const RequestContext& request, Operation op, std::string_view sql,
            std::span<const holdfast::pg::Param> params, bool write, const RunOptions& run,
            Token&& token) {
    auto state = std::make_shared<Plain>(request, sql, params, write);
    auto attempt = [this, state](Done<Result<Rows>> done) {
      spawn<Result<Rows>>(plain_attempt(state), std::move(done));
    };
    return async_run<Result<Rows>>(ex_, shield_, op, run, std::move(attempt),
                                   std::forward<Token>(token));
  }

  // Runs one attempt as a coroutine on the executor and hands its outcome to `done`.
  template <class R>
  void spawn(awaitable<R> attempt, Done<R> done) {
    auto out = std::make_shared<std::optional<R>>();
    detail::net::co_spawn(
        ex_,
        [](awaitable<R> a, std::shared_ptr<std::optional<R>> o) -> awaitable<void> {
          o->emplace(co_await std::move(a));
        }(std::move(attempt), out),
        [out, done = std::move(done)](std::exception_ptr e) mutable {
          if (e || !out->has_value()) {
            done(R(Status(Code::kInternal, "the PostgreSQL attempt ended without an outcome")));
            return;
          }
          done(std::move(**out));
        });
  }

  // A connection from `pool` (or a new one, connected on the loop), before `until`.
  awaitable<Result<std::unique_ptr<Slot>>> lease(Pool& pool, TimePoint until);

  // Waits until `signal` is cancelled (true: something changed) or `until` passes (false).
  // `signal` never expires by itself (it is set to TimePoint::max()).
  awaitable<bool> signalled(detail::net::steady_timer& signal, TimePoint until);
  // Waits until a connection of `pool` may have come free (true) or `until` passed (false).
  awaitable<bool> vacancy(Pool& pool, TimePoint until);

  // A new connection, connected on the loop before `until`. With several hosts, one host at a
  // time (libpq does not time a non-blocking connect: a frozen host would hold it), each
  // within host_connect_timeout (the last one tried gets what is left), from the one that took
  // a connection last; a refusal moves on to the next at once.
  awaitable<Result<std::unique_ptr<Slot>>> connect(Pool& pool, TimePoint until);

  awaitable<Result<std::unique_ptr<Slot>>> connect_host(const holdfast::pg::ConnectOptions& o,
                                                        std::size_t host, bool alone,
                                                        TimePoint until);

  // A connect of the primary's failed with `why`: the next one waits a step of
  // ClientOptions::reconnect_backoff (a refusing or frozen server is not asked by every call).
  // Returns that wait.
  Duration connect_failed(Pool& pool, const Status& why);

  // The answer while the primary's pool waits to connect again: the last connect's failure,
  // as no load of ours on the server (not overload, nothing applied), with when to come back.
  // Like an open breaker: the retry loop answers now rather than wait to be refused.
  static Status connect_backing_off(const Pool& pool, Duration left);

  // Returns a connection to `pool` (or closes it when it is not idle and open) and wakes the
  // calls waiting for one.
  void give_back(Pool& pool, std::unique_ptr<Slot> s);

  // Closes every idle connection of `pool`.
  static void drop_idle(Pool& pool);

  // Closes `s` and every idle connection of `pool` (they reach the same server).
  static void drop_all(Pool& pool, Slot& s);

  // Steps what was sent on `s` until it is complete, cancelling it at `until` and giving up
  // on it (closing the connection) when the cancel's grace passes too. With `silence` (the
  // primary's pool) the wait is watched by its Liveness: once work has heard nothing from the
  // server for silence_after (longer after checks it answered), a check asks whether it answers
  // at all, and every wait on it gives up at once when it does not. OK when complete.
  awaitable<Status> drive(Slot& s, Want w, TimePoint until, Pool* silence = nullptr);

  // The primary's watch, the holdfast::Liveness pg::Database keeps of each server: a wait quiet
  // for silence_after is suspect (each check, as the Client always did: no doubling), rechecks
  // every health_probe_every (silence_check without a probe). Its verdict is acted on for every
  // sibling (on_primary_silence()).
  std::unique_ptr<Liveness> make_liveness(Verdict& v);
  // The primary found silent (true) or answering again (false), for this Client and its
  // siblings: their breakers, idle connections and waiting calls; the probe starts.
  void on_primary_silence(bool silent) noexcept;
  // Starts the probe (health_probe_every) unless it runs or none is set.
  void start_probe();
  // Whether the primary is found silent, so that a call is answered at once. Without a probe
  // running, a call rechecks it itself when a recheck is due.
  awaitable<bool> primary_silent();
  // The check a Liveness asked for: whether `pool`'s server answers, on a connection of its own
  // and SELECT 1 within silence_check (a refusal is an answer too).
  awaitable<holdfast::Liveness::CheckResult> check_server(Pool& pool);

  // The primary's health probe (ClientOptions::health_probe_every), started when a check
  // found it silent: the Liveness's rechecks, health_probe_every apart, each a connection of its
  // own to each host (but one still being probed) and SELECT 1, until one that takes writes
  // answers (the pool is answering again, keeps that connection and the Shield's breaker
  // closes) or no call has come for kProbeIdle (the next call looks for itself). `self` keeps
  // the Client while it runs.
  awaitable<void> probe(std::shared_ptr<Client> self);
  static constexpr Duration kProbeIdle = std::chrono::seconds(10);
  // What a probe's hosts share: which are being probed, the first connection that answered
  // as the primary, and whether the probe is over.
  struct Probing {
    Probing(const Executor& ex, std::size_t hosts) : busy(hosts, false), wake(ex) {
      wake.expires_at(TimePoint::max());
    }
    std::vector<bool> busy;
    std::unique_ptr<Slot> answered;
    bool over = false;
    std::uint64_t check = 0;  // the current check, and how many of its probes are still out
    std::size_t left = 0;
    detail::net::steady_timer wake;  // cancelled when a host answered, or the check's probes ended
  };
  // The probe of `host`: connected before `until`, a primary (with several hosts), and
  // SELECT 1 answered within silence_check.
  awaitable<void> probe_host(std::shared_ptr<Client> self, std::shared_ptr<Probing> probing,
                             std::size_t host, std::uint64_t check, TimePoint until);

  // Sends one statement on `s` and waits for its result (drive()).
  awaitable<Result<Rows>> exchange(Slot& s, std::string_view sql,
                                   std::span<const holdfast::pg::Param> params, TimePoint until,
                                   Pool* silence = nullptr) {
    Status st = co_await drive(s, s.conn.send(sql, params), until, silence);
    lost(s);
    if (!st.ok()) co_return st;
    co_return s.conn.result();
  }

  // exchange()'s `settings_at` when the pipeline begins no transaction (nothing to set).
  static constexpr std::size_t kNoSettings = static_cast<std::size_t>(-1);
  static constexpr std::string_view kStatementTimeoutSql =
      "SELECT pg_catalog.set_config('statement_timeout', $1, true)";
  // A deadline further away than this sends no statement_timeout (PostgreSQL's largest is
  // INT_MAX milliseconds; a call without a deadline has TimePoint::max()).
  static constexpr Duration kLongestStatementTimeout = std::chrono::hours(24 * 24);
  // holdfast::pg::statement_timeout_text() of the time from now to `until`; nothing when
  // `until` is further than kLongestStatementTimeout.
  static std::optional<std::string_view> timeout_text_until(TimePoint until, char (&buf)[24]);

  // Sends `pieces` on `s` as one pipeline and waits for its results (drive()). `settings_at`
  // is where the transaction the pipeline runs in begins: there go what the deadline leaves as
  // the server's statement_timeout (as pg::Database sends it), and, behind a pooler in
  // transaction mode, the session's settings (set in each transaction instead of at connect).
  // `out` and `failed` count only `pieces`. `prepare_timeout`: the statement_timeout's piece is
  // a prepared statement of the connection (not behind a pooler in transaction mode).
  awaitable<Status> exchange(Slot& s, std::span<const Piece> pieces, std::span<Rows> out,
                             std::size_t* failed, TimePoint until,
                             std::size_t settings_at = kNoSettings, Pool* silence = nullptr,
                             bool prepare_timeout = false);

  // Whether a call's statements go as prepared statements of their connection: not behind a
  // pooler in transaction mode (the next transaction may run on a session that never saw them).
  [[nodiscard]] bool prepares() const noexcept {
    return options_.pooling == holdfast::pg::Pooling::kSession;
  }

  // A read outside any transaction, in the same round trip as what its deadline leaves as the
  // server's statement_timeout (the pipeline's implicit transaction is what the setting lasts
  // for) and, behind a pooler in transaction mode, the session's settings (exchange() above).
  // `prepared`: the read and its setting are prepared statements of the connection.
  awaitable<Result<Rows>> read_once(Slot& s, std::string_view sql,
                                    std::span<const holdfast::pg::Param> params, TimePoint until,
                                    Pool* silence, bool prepared) {
    const Piece piece[] = {{sql, params, prepared}};
    Rows out[1];
    std::size_t failed = 1;
    Status st = co_await exchange(s, piece, out, &failed, until, 0, silence, prepared);
    if (!st.ok()) co_return st;
    co_return std::move(out[0]);
  }

  // A connection found lost (libpq closed its socket) stops being watched at once: its socket's
  // number may be given to the next connection, whose watch the old one's release would end
  // (a COMMIT in doubt is resolved on a new connection while the lost one is still held).
  static void lost(Slot& s) {
    if (!s.conn.is_open()) s.forget();
  }

  // Keeps a write's commit position in its request (for its later reads on a standby), or
  // marks it unknown: its reads then go to the primary. The write was confirmed on `s`'s
  // server (with idempotency key `key`): the lost-writes watch remembers it.
  void wrote(const RequestContext& request, const Rows* position, const Slot& s,
             std::string_view key = {});
  // Whether the COMMIT answered on `s` since its notice `heard` committed on the primary alone
  // (its wait for a synchronous standby was cancelled: ADR 0053). Then the request's reads
  // go to the primary, and the call answers holdfast::pg::unconfirmed_commit().
  static bool unconfirmed(const Slot& s, std::uint64_t heard, const RequestContext& request) {
    if (!s.conn.standby_wait_cancelled(heard)) [[likely]]
      return false;
    request.position_unknown();
    return true;
  }

  awaitable<Result<Rows>> plain_attempt(std::shared_ptr<Plain> state);

  // The primary's part of a call: a write, or a read. `in_use` (a hedged read's) is pointed at
  // the connection while the statement runs, so that the other try can stop it.
  awaitable<Result<Rows>> primary_call(std::shared_ptr<Plain> state, TimePoint until,
                                       Slot** in_use);

  // A hedged read's two tries: what each said, and the connection each is on (to stop it).
  struct Race {
    explicit Race(const Executor& ex) : wake(ex) { wake.expires_at(TimePoint::max()); }
    detail::net::steady_timer wake;                      // cancelled when either try ends
    std::optional<std::optional<Result<Rows>>> standby;  // ended (inner: its answer, if any)
    std::optional<Result<Rows>> primary;                 // ended
    Slot* standby_slot = nullptr;
    Slot* primary_slot = nullptr;
    bool hedged = false;  // the primary's try was started
    bool judged = false;  // what the read says of the standby's speed was judged
  };

  // Stops the try on `s` (the loser of a hedged read) at once.
  static void stop(Slot& s);

  // Waits until `race` changed (a try ended) or `until`.
  awaitable<void> race_wait(Race& race, TimePoint until);

  // A standby's normal latency: the 95th percentile of its last answers (none yet: none).
  static std::optional<Duration> standby_p95(const Standby& sb) {
    const Duration p95 = sb.copy.latency.p95();
    if (p95 <= Duration::zero()) return std::nullopt;
    return p95;
  }

  // standby_read()'s `took` when the standby did not answer in time (a hedge it lost, a try
  // given up, standby_wait passed): a slow answer whose latency is unknown.
  static constexpr Duration kUnanswered = Duration::max();

  // Whether a read with the request's `position` may go to a standby (read_route.hpp), the
  // newest timeline being what the primary's writes showed through this Client or a sibling.
  bool standby_may_answer(const holdfast::WritePosition& position) const {
    return holdfast::pg::detail::standby_may_answer(position.primary_only, position.timeline,
                                                    primary_.verdict->newest_timeline);
  }
  // Whether `sb` may answer reads now: not while its replay was last found lagging
  // (max_standby_lag): then one read every kLagRecheck looks again, and the others go
  // elsewhere meanwhile.
  static bool replay_allows(Standby& sb, TimePoint now) {
    if (sb.lagging_until == TimePoint{}) return true;
    if (now < sb.lagging_until) return false;
    sb.lagging_until = now + kLagRecheck;  // this read looks
    return true;
  }
  // Whether standby `sb` may be asked now a read that needs position `need` (when there are
  // others: not left alone; not held off after it was found behind `need`, unless the
  // primary failed; its replay not lagging; not used less for slowness but for a probe), and
  // how (`use`: kUse or kProbe).
  using Use = holdfast::pg::detail::SlowCopy::Use;
  bool may_ask(Standby& sb, TimePoint now, std::uint64_t need, bool primary_failed, Use& use);
  // The standbys `pass` gives, each asked when may_ask() lets it (the read needs position
  // `need`), until one answers (its answer) or the pass ends (nothing: the primary answers).
  awaitable<std::optional<Result<Rows>>> standby_pass(std::shared_ptr<Plain> state,
                                                      holdfast::pg::detail::StandbyPass& pass,
                                                      TimePoint until, std::uint64_t need);
  static constexpr Duration kLagRecheck = std::chrono::milliseconds(250);
  // The longest one of several standbys that could not be reached, or is no standby (a list
  // of hosts whose roles change: the primary among them, refused by target_session_attrs or
  // answering as a primary), gets no reads before a check off the request path looks again.
  static constexpr Duration kStandbyRecheck = std::chrono::seconds(5);
  // Looks at standby `sb` (one of several, left alone) again, off the request path: a connect
  // to its host that finds a standby gives it reads again; anything else leaves it alone.
  static awaitable<void> recheck_standby(std::shared_ptr<Client> self, Standby* sb);
  // Leaves the pool of a standby of several alone (no reads): for silence_check, then twice
  // as long each time a check finds it still away, up to kStandbyRecheck (or silence_check
  // when that is longer). The other standbys take its reads meanwhile.
  void leave_alone(Pool& pool) const {
    Verdict& v = *pool.verdict;
    const Duration longest = std::max(options_.silence_check, kStandbyRecheck);
    v.alone_for = v.alone_for == Duration::zero() ? options_.silence_check
                                                  : std::min(2 * v.alone_for, longest);
    v.silent = true;
    v.verdict_until = detail::Clock::now() + v.alone_for;
  }

  // What a standby read says of the standby's speed: `took` from standby_read(), or
  // kUnanswered; nothing when negative (no answer from a standby). Outlier ejection, with
  // the blocking driver's code (holdfast/detail/slow_copy.hpp).
  void judge_standby(Standby& sb, Duration took) {
    if (took < Duration::zero()) return;
    const bool unanswered = took == kUnanswered;
    (void)holdfast::pg::detail::judge_replica(sb.copy, primary_latency_.recent(), unanswered,
                                              unanswered ? Duration::zero() : took,
                                              detail::Clock::now());
  }

  // A read on the standby that, when it has not answered within the standby's normal latency,
  // also goes to the primary (within the hedge budget, and only when a primary connection is
  // free); the first answer wins and the other try is stopped. A `probe` of a standby used
  // less, or a read of one whose last answer was slow (`suspect`), waits for it at most the
  // slow threshold: then it is hedged (a probe needs no budget) or given up. No answer (the
  // standby left the read to the others and no hedge runs): the caller tries the next copy.
  awaitable<std::optional<Result<Rows>>> hedged_read(std::shared_ptr<Plain> state, Standby& sb,
                                                     TimePoint until, bool probe, bool suspect);

  // BEGIN, the write, COMMIT and the commit's position: one round trip.
  awaitable<Result<Rows>> write_once(Slot& s, const Plain& state, TimePoint until);

  // A read on standby `sb`: its replay position and the statement in one round trip, answered
  // there when it has replayed the request's writes. Nothing when the primary should answer
  // instead (no standby within standby_wait, behind, promoted, or failed by its own state);
  // `state.standby_behind` is set when it was only behind the request's writes.
  // `took` (when given) is set to the time from `started` to the standby's answer, or to a
  // negative duration when it did not answer as a standby.
  awaitable<std::optional<Result<Rows>>> standby_read(Standby& sb, Plain& state, TimePoint until,
                                                      TimePoint started, Slot** in_use = nullptr,
                                                      Duration* took = nullptr);

  // A write refused because the server is read-only (25006: a primary demoted, or a standby
  // reached): nothing was applied. Its connection and the idle ones (to the same server) go,
  // so that the next connect finds the server that takes writes (with several hosts and
  // target_session_attrs=read-write), and the write may go once more.
  // `scope`: what may run again (a transaction's function only when it is re-runnable).
  Status demoted(Slot& s, const Status& refused, RetryScope scope = RetryScope::kReconnect) {
    drop_all(primary_, s);
    Status again(Code::kUnavailable, std::string(refused.message()),
                 Fault{scope, Outcome::kNotApplied, Pace::kFast, true});
    again.with_sqlstate("25006");
    return again;
  }

  awaitable<Result<KeyedResult>> once_attempt(std::shared_ptr<Keyed> state);

  // One attempt of an async_transaction(): a connection, the function, COMMIT or ROLLBACK.
  template <class R>
  awaitable<R> transaction_attempt(std::shared_ptr<Transacted<R>> state);

  // Calls a transaction function; an exception it throws is an internal error (R's).
  template <class R, class Fn>
  static awaitable<R> call_function(Fn& fn, Transaction& tx) {
    try {
      co_return co_await fn(tx);
    } catch (const std::exception& e) {
      co_return R(
          Status(Code::kInternal, std::string("the transaction function threw: ") + e.what()));
    } catch (...) {
      co_return R(Status(Code::kInternal, "the transaction function threw"));
    }
  }

  // What the function's outcome means for the transaction: its error, or the failure of a
  // statement it went on after (its own error returned as it is), or OK.
  static Status function_failure(const Status& returned, const Transaction& tx);

  // COMMIT (with the commit's position when it may have written) of `tx` on `s`; a COMMIT
  // that lost its connection is resolved.
  awaitable<Status> commit(Slot& s, Transaction& tx, const RequestContext& request,
                           holdfast::pg::TransactionReport* report);

  // Whether transaction `xid`, whose COMMIT lost its connection (`lost`), committed: asked on
  // new connections (pg_xact_status()) until the request's deadline, and for at least
  // kMinResolveTime. Success when it committed (its position kept in the request), but
  // unconfirmed_commit() when its wait for a synchronous standby ended first (`alone`: its
  // backend was terminated during that wait, ADR 0053). `in_doubt`: the connection the
  // COMMIT was lost on (its server confirmed it, if anyone).
  awaitable<Status> resolve(const std::string& xid, const Status& lost,
                            const RequestContext& request, holdfast::pg::TransactionReport* report,
                            const Slot& in_doubt, bool alone);

  // Ends a transaction left open on `s` (ROLLBACK on the loop); one that cannot be ended
  // leaves `s` not idle, and give_back() closes it.
  awaitable<void> roll_back(Slot& s, TimePoint until) {
    if (s.conn.is_open() && s.conn.txn_status() != holdfast::pg::TxnStatus::kIdle) {
      (void)co_await exchange(s, "ROLLBACK", {}, until);
    }
  }

  // BEGIN with the key's claim, then the function and its recorded result, or the recorded
  // result of an earlier call; COMMIT with the commit's position. Round trips on the loop.
  awaitable<Result<KeyedResult>> keyed(Slot& s, const Keyed& state,
                                       std::span<const holdfast::pg::Param> key, TimePoint until);

  Executor ex_;
  ClientOptions options_;
  Shield shield_;
  Pool primary_;
  std::vector<std::unique_ptr<Standby>> standbys_;  // fixed at construction
  std::size_t next_standby_ = 0;                    // the next read's first choice
  // Hedging: the budget (a share of a token per read) and the counts.
  double hedge_tokens_ = 0;
  std::atomic<std::uint64_t> hedged_{0};
  std::atomic<std::uint64_t> hedges_won_{0};
  // What reads have shown of the primary's speed, against which the standbys' is judged (ADR
  // 0041); the same class as pg::Database's, used on the executor only.
  holdfast::pg::detail::CopyLatency primary_latency_;
  std::atomic<std::uint64_t> lagging_reads_{0};
  std::atomic<std::uint64_t> behind_reads_{0};
  std::string claim_sql_;
  std::string recorded_sql_;
  std::string record_sql_;
  std::string create_sql_;
  std::string resolve_sql_;
  // Behind a pooler in transaction mode: the session's settings, set in each transaction
  // (empty otherwise), and their names and values as its parameters.
  std::string settings_sql_;
  std::vector<holdfast::pg::Param> settings_params_;
  // The primary's conninfo names several hosts: a read-only refusal (25006) is a primary
  // demoted under us, and the call goes again to the host that takes writes. With one host it
  // is the server's answer (default_transaction_read_only), as pg::Database takes it.
  bool several_hosts_ = false;
  // The reconnect backoff's jitter.
  holdfast::Random rng_ = holdfast::Random::from_thread();
  // Confirmed writes a change of writer lost (null: ClientOptions::lost_writes.remember is 0).
  std::unique_ptr<holdfast::pg::LostWritesWatch> lost_;
};

}  // namespace holdfast::asio::pg

// The Client's members defined out of its class, by what they do.
#include "holdfast/adapters/asio_pg_attempts.hpp"
#include "holdfast/adapters/asio_pg_connections.hpp"
#include "holdfast/adapters/asio_pg_transactions.hpp"
