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
///
/// Not yet here (the blocking pg::Database has them): silence found by a liveness check before
/// the deadline, a standby's lag and timeline judged, statement_timeout sent with each call,
/// prepared statements, transactions of several statements written by the caller.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(HOLDFAST_ASIO_BOOST)
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#else
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#endif

#include "holdfast/adapters/asio.hpp"
#include "holdfast/core/idempotency.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/pg/loop.hpp"
#include "holdfast/pg/lsn.hpp"

/// PostgreSQL on Asio through libpq's non-blocking API (see the top of asio_pg.hpp).
namespace holdfast::asio::pg {

/// How a Client connects and how many connections it keeps.
struct ClientOptions {
  /// The server (or servers: a multi-host URL; writes need target_session_attrs=read-write
  /// when some of them are standbys), keepalives and session settings.
  holdfast::pg::ConnectOptions connect;
  /// The most connections open at once; a call that finds them all busy waits on the loop
  /// for one (within its window).
  std::size_t max_connections = 8;
  /// How long a cancelled statement may take to end before its connection is closed.
  Duration cancel_grace = std::chrono::milliseconds(200);
  /// The table of async_once()'s keys (the blocking pg::Database's default name and shape:
  /// key text PRIMARY KEY, result text, created_at timestamptz).
  std::string idempotency_table = "holdfast_idempotency";
  /// The Shield's name (its metrics and log lines).
  std::string shield_name = "postgres";
  /// The Shield's settings (limit, breaker, throttle).
  Shield::Options shield;
  /// Hot standbys that may answer reads (a plain or multi-host conninfo; empty: none). A read
  /// goes to a standby that has replayed the request's own writes (their commit positions,
  /// kept in its RequestContext), else to the primary.
  holdfast::pg::ConnectOptions standby;
  /// The most connections to the standbys.
  std::size_t standby_connections = 8;
  /// How long a read waits for a standby (its connect and its answer) before the primary
  /// answers it instead, within the same attempt.
  Duration standby_wait = std::chrono::milliseconds(500);
  /// Hedged reads: a standby read that has not answered within the standby's normal latency
  /// (the 95th percentile of its last 64 answers, at least hedge_min_delay) is also sent to the
  /// primary; the first answer wins and the other is cancelled. At most this share of reads is
  /// hedged (a budget earned by each read); 0 turns hedging off. Never while the primary's
  /// connections are all busy.
  double hedge_budget = 0.02;
  /// The least a standby read waits before it is hedged.
  Duration hedge_min_delay = std::chrono::milliseconds(5);
  /// Silence (DESIGN.md section 10): a read that has heard nothing from the primary for this
  /// long asks whether the server answers at all (a connection of its own and SELECT 1 within
  /// silence_check); a server that does not is silent, and the read gives up at once, as do
  /// the calls that come while the verdict holds (silence_check). A server that answers is
  /// only slow (a lock wait): the read waits on. Writes wait for their deadline: their outcome
  /// may still become known.
  Duration silence_after = std::chrono::seconds(1);
  /// How long the check may take, and how long its verdict holds.
  Duration silence_check = std::chrono::milliseconds(500);
};

namespace detail {

namespace net = ::holdfast::asio::detail::net;
using ::holdfast::asio::detail::error_code;
using Clock = std::chrono::steady_clock;

// One connection of the pool and the descriptor the loop watches its socket through. The
// descriptor never owns the socket (libpq does): it is released before libpq closes it.
struct Slot {
  explicit Slot(const net::any_io_executor& ex) : descriptor(ex) {}
  ~Slot() { forget(); }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

  void forget() noexcept {
    if (fd >= 0) {
      error_code ec;
      descriptor.cancel(ec);
      (void)descriptor.release();
      fd = -1;
    }
  }
  // The descriptor watches the connection's socket as it is now (a connect to several
  // hosts makes a new socket for each). `fresh`: watch it anew even if its number is the
  // same (during a connect, libpq may close a socket and get the same number again).
  void watch(bool fresh) {
    const int now = conn.socket();
    if (now == fd && !fresh) return;
    forget();
    if (now < 0) return;
    error_code ec;
    descriptor.assign(now, ec);
    if (!ec) fd = now;
  }

  holdfast::pg::LoopConnection conn;
  net::posix::stream_descriptor descriptor;
  int fd = -1;
  // Set by the winner of a hedged read: the loser gives up its statement at its next step.
  bool stop = false;
};

// Waits until the slot's socket is ready for `want`, or `until`. True when ready (or when
// there is no socket to wait on: libpq then reports the lost connection). At `until` the
// timer cancels the descriptor's wait; `race` tells a timer that fires after the wait ended
// (its handler already queued) to leave the descriptor alone.
inline net::awaitable<bool> ready(Slot& s, holdfast::pg::Want want, TimePoint until, bool fresh) {
  s.watch(fresh);
  if (s.fd < 0) co_return true;
  struct Race {
    bool over = false;
    bool expired = false;
  };
  auto race = std::make_shared<Race>();
  net::steady_timer timer(s.descriptor.get_executor(), until);
  timer.async_wait([race, d = &s.descriptor](const error_code& ec) {
    if (ec || race->over) return;
    race->expired = true;
    error_code ignored;
    d->cancel(ignored);
  });
  error_code ec;
  const auto what = want == holdfast::pg::Want::kRead ? net::posix::descriptor_base::wait_read
                                                      : net::posix::descriptor_base::wait_write;
  co_await s.descriptor.async_wait(what, net::redirect_error(net::use_awaitable, ec));
  race->over = true;
  timer.cancel();
  co_return !race->expired;
}

// One statement's parameters, copied so that every attempt of the call can send them.
struct Params {
  explicit Params(std::span<const holdfast::pg::Param> given) {
    text.reserve(given.size());
    for (const holdfast::pg::Param& p : given)
      text.emplace_back(p.is_null() ? std::string() : std::string(p.text()));
    params.reserve(given.size());
    for (std::size_t i = 0; i < given.size(); ++i) {
      params.push_back(given[i].is_null() ? holdfast::pg::Param(nullptr)
                                          : holdfast::pg::Param::typed(text[i], given[i].oid()));
    }
  }
  std::vector<std::string> text;
  std::vector<holdfast::pg::Param> params;
};

}  // namespace detail

/// PostgreSQL calls on an Asio executor (see the top of asio_pg.hpp). Not copyable or movable.
template <class Executor = detail::net::any_io_executor>
class Client : public std::enable_shared_from_this<Client<Executor>> {
 public:
  /// A client of the server `options.connect` names, on `ex`. It connects lazily, on the first
  /// call, so a server that is away now is no error here. Fails on options that can never work
  /// (no conninfo, no connection allowed, a table name that is not an identifier), naming the
  /// field. The Client is shared: a hedged read's losing try keeps it alive until it has
  /// stopped, so the caller may let go of it as soon as its own calls have completed.
  static Result<std::shared_ptr<Client>> open(const Executor& ex, ClientOptions options) {
    if (options.connect.conninfo.empty()) {
      return Status(Code::kInvalidArgument, "ClientOptions::connect.conninfo is empty");
    }
    if (options.max_connections == 0) {
      return Status(Code::kInvalidArgument, "ClientOptions::max_connections must be at least 1");
    }
    if (!options.standby.conninfo.empty() && options.standby_connections == 0) {
      return Status(Code::kInvalidArgument,
                    "ClientOptions::standby_connections must be at least 1 with a standby");
    }
    if (!holdfast::detail::is_table_name(options.idempotency_table)) {
      return Status(Code::kInvalidArgument, "ClientOptions::idempotency_table '" +
                                                options.idempotency_table +
                                                "' is not a plain or schema-qualified identifier");
    }
    if (options.cancel_grace < Duration::zero() || options.standby_wait < Duration::zero()) {
      return Status(Code::kInvalidArgument,
                    "ClientOptions::cancel_grace and standby_wait must not be negative");
    }
    return std::shared_ptr<Client>(new Client(ex, std::move(options)));
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// The Shield every call runs through (its breaker, limit, throttle and metrics).
  [[nodiscard]] Shield& shield() noexcept { return shield_; }
  /// Connections open now to the primary (idle or in use).
  [[nodiscard]] std::size_t open_connections() const noexcept { return primary_.open; }
  /// Reads a standby answered (the rest went to the primary).
  [[nodiscard]] std::uint64_t standby_reads() const noexcept { return standby_reads_; }
  /// Reads that were hedged (also sent to the primary), and those the primary's answer won.
  [[nodiscard]] std::uint64_t hedged_reads() const noexcept { return hedged_; }
  /// Hedged reads the primary answered first.
  [[nodiscard]] std::uint64_t hedges_won() const noexcept { return hedges_won_; }

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
    Operation op = Operation::transaction(true, "pg.once");
    op.idempotency = Idempotency::kIdempotent;
    auto state = std::make_shared<Keyed>(request, std::string(key), std::string(sql), params);
    auto attempt = [this, state](Done<Result<KeyedResult>> done) {
      spawn<Result<KeyedResult>>(once_attempt(state), std::move(done));
    };
    return async_run<Result<KeyedResult>>(ex_, shield_, op, run_options(request),
                                          std::move(attempt), std::forward<Token>(token));
  }
  /// async_once() with the parameters in braces.
  template <class Token>
  auto async_once(const RequestContext& request, std::string_view key, std::string_view sql,
                  std::initializer_list<holdfast::pg::Param> params, Token&& token) {
    return async_once(request, key, sql, std::span(params.begin(), params.size()),
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
    // The last silence check's verdict, and until when it holds.
    bool silent = false;
    TimePoint verdict_until{};
    bool checking = false;
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
  };
  struct Keyed : Plain {
    Keyed(const RequestContext& r, std::string k, std::string s,
          std::span<const holdfast::pg::Param> p)
        : Plain(r, s, p, true), key(std::move(k)) {}
    std::string key;
  };

  // A write's commit position and timeline, read in the write's own round trip (as
  // pg::Database's writes do).
  static constexpr std::string_view kPositionSql =
      "SELECT pg_catalog.pg_current_wal_insert_lsn()::text, "
      "pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_insert_lsn()), 1, "
      "8)";
  // What a standby has replayed, and whether it is a standby at all (a promoted one keeps
  // its last replay position and is no replica).
  static constexpr std::string_view kStandbyHead =
      "SELECT pg_catalog.pg_last_wal_replay_lsn()::text, pg_catalog.pg_is_in_recovery()";

  Client(const Executor& ex, ClientOptions options)
      : ex_(ex),
        options_(std::move(options)),
        shield_(options_.shield_name, options_.shield),
        primary_(ex, options_.connect, options_.max_connections) {
    if (!options_.standby.conninfo.empty()) {
      standby_.emplace(ex, options_.standby, options_.standby_connections);
    }
    const std::string& t = options_.idempotency_table;
    claim_sql_ = "INSERT INTO " + t + " (key) VALUES ($1) ON CONFLICT (key) DO NOTHING";
    recorded_sql_ = "SELECT result FROM " + t + " WHERE key = $1";
    record_sql_ = "UPDATE " + t + " SET result = $2 WHERE key = $1";
    create_sql_ = "CREATE TABLE IF NOT EXISTS " + t +
                  " (key text PRIMARY KEY, result text, "
                  "created_at timestamptz NOT NULL DEFAULT now())";
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
    auto state = std::make_shared<Plain>(request, sql, params, write);
    auto attempt = [this, state](Done<Result<Rows>> done) {
      spawn<Result<Rows>>(plain_attempt(state), std::move(done));
    };
    return async_run<Result<Rows>>(ex_, shield_, op, run_options(request), std::move(attempt),
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
  awaitable<Result<std::unique_ptr<Slot>>> lease(Pool& pool, TimePoint until) {
    if (pool.silent && detail::Clock::now() < pool.verdict_until) {
      // Found silent a moment ago: answered at once (the Shield's backoff and breaker decide
      // when to look again).
      Status s(Code::kUnavailable, "the server was found silent (no answer to a check)",
               Fault{RetryScope::kReconnect, Outcome::kNotApplied, Pace::kSlow, true});
      s.with_sqlstate("");
      co_return s;
    }
    for (;;) {
      while (!pool.idle.empty()) {
        std::unique_ptr<Slot> s = std::move(pool.idle.back());
        pool.idle.pop_back();
        if (s->conn.is_open()) co_return s;
        --pool.open;  // lost while idle (a terminated backend): find another
      }
      if (pool.open < pool.max) {
        ++pool.open;
        co_return co_await connect(pool, until);
      }
      if (!co_await vacancy(pool, until)) {
        co_return Status(Code::kDeadlineExceeded,
                         "no PostgreSQL connection came free within the request's window",
                         Fault{RetryScope::kNone, Outcome::kNotApplied, Pace::kFast, false});
      }
    }
  }

  // Waits until a connection of `pool` may have come free (true) or `until` passed (false).
  awaitable<bool> vacancy(Pool& pool, TimePoint until) {
    auto expired = std::make_shared<bool>(false);
    detail::net::steady_timer deadline(ex_, until);
    deadline.async_wait([expired, &pool](const detail::error_code& ec) {
      if (ec || *expired) return;
      *expired = true;
      pool.vacancy.cancel();  // wakes every waiter; each looks again
    });
    detail::error_code ec;
    co_await pool.vacancy.async_wait(detail::net::redirect_error(detail::net::use_awaitable, ec));
    const bool came_free = !*expired;
    *expired = true;  // a deadline that fires now finds nothing to do
    deadline.cancel();
    co_return came_free || detail::Clock::now() < until;
  }

  // A new connection, connected on the loop before `until`. With several hosts, one host at a
  // time (libpq does not time a non-blocking connect: a frozen host would hold it), each
  // within host_connect_timeout (the last one tried gets what is left), from the one that took
  // a connection last; a refusal moves on to the next at once.
  awaitable<Result<std::unique_ptr<Slot>>> connect(Pool& pool, TimePoint until) {
    const holdfast::pg::ConnectOptions& o = pool.options;
    const TimePoint cap = std::min(until, detail::Clock::now() + o.connect_timeout);
    const std::size_t n = holdfast::pg::LoopConnection::host_count(o);
    const std::size_t first = holdfast::pg::LoopConnection::preferred_host(o);
    Status last;
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t host = (first + k) % n;
      const TimePoint host_cap =
          k + 1 < n ? std::min(cap, detail::Clock::now() + o.host_connect_timeout) : cap;
      Result<std::unique_ptr<Slot>> s = co_await connect_host(o, host, n > 1, host_cap);
      if (s.ok()) {
        if (n > 1) holdfast::pg::LoopConnection::remember_host(o, host);
        co_return s;
      }
      last = s.status();
      if (detail::Clock::now() >= cap) break;
    }
    give_back(pool, nullptr);
    co_return last;
  }

  awaitable<Result<std::unique_ptr<Slot>>> connect_host(const holdfast::pg::ConnectOptions& o,
                                                        std::size_t host, bool alone,
                                                        TimePoint until) {
    Result<holdfast::pg::LoopConnection> started =
        alone ? holdfast::pg::LoopConnection::start(o, host)
              : holdfast::pg::LoopConnection::start(o);
    if (!started.ok()) co_return started.status();
    auto s = std::make_unique<Slot>(ex_);
    s->conn = std::move(*started);
    for (Want w = s->conn.want(); w != Want::kNothing; w = s->conn.connect_step()) {
      if (!co_await detail::ready(*s, w, until, true)) {
        s->forget();
        co_return Status(Code::kUnavailable, "no PostgreSQL connection within the deadline",
                         Fault{RetryScope::kReconnect, Outcome::kNotApplied, Pace::kSlow, true})
            .with_sqlstate("");
      }
    }
    Status st = s->conn.connect_status();
    if (!st.ok()) {
      s->forget();
      co_return st;
    }
    co_return s;
  }

  // Returns a connection to `pool` (or closes it when it is not idle and open) and wakes the
  // calls waiting for one.
  void give_back(Pool& pool, std::unique_ptr<Slot> s) {
    if (s != nullptr && s->conn.is_open() &&
        s->conn.txn_status() == holdfast::pg::TxnStatus::kIdle) {
      pool.idle.push_back(std::move(s));
    } else {
      if (s != nullptr) s->forget();
      --pool.open;
    }
    pool.vacancy.cancel();
  }

  // Closes every idle connection of `pool`.
  static void drop_idle(Pool& pool) {
    for (std::unique_ptr<Slot>& idle : pool.idle) {
      idle->forget();
      idle->conn.close();
    }
    pool.open -= pool.idle.size();
    pool.idle.clear();
  }

  // Closes `s` and every idle connection of `pool` (they reach the same server).
  static void drop_all(Pool& pool, Slot& s) {
    s.forget();
    s.conn.close();
    drop_idle(pool);
  }

  // Steps what was sent on `s` until it is complete, cancelling it at `until` and giving up
  // on it (closing the connection) when the cancel's grace passes too. With `silence` (a
  // read's pool), a wait that hears nothing for silence_after asks whether the server answers
  // at all, and gives up at once when it does not. OK when complete.
  awaitable<Status> drive(Slot& s, Want w, TimePoint until, Pool* silence = nullptr) {
    bool cancelled = false;
    TimePoint check_at =
        silence != nullptr ? detail::Clock::now() + options_.silence_after : TimePoint::max();
    while (w != Want::kNothing) {
      const TimePoint wake = cancelled ? until : std::min(until, check_at);
      const bool ready = co_await detail::ready(s, w, wake, false);
      if (s.stop) {
        // The other copy answered a hedged read first: this one is not wanted any more.
        s.conn.cancel();
        s.forget();
        co_return s.conn.abandon(false);
      }
      if (ready) {
        w = s.conn.step();
        if (silence != nullptr) check_at = detail::Clock::now() + options_.silence_after;
        continue;
      }
      if (!cancelled && detail::Clock::now() < until) {
        // Nothing heard for silence_after: is the server there at all?
        check_at = detail::Clock::now() + options_.silence_after;
        if (co_await answers(*silence)) continue;  // only slow: wait on
        s.conn.cancel();
        s.forget();
        co_return s.conn.abandon(true);
      }
      if (!cancelled) {
        s.conn.cancel();
        cancelled = true;
        until = detail::Clock::now() + options_.cancel_grace;
        continue;
      }
      s.forget();
      co_return s.conn.abandon(false);
    }
    co_return Status();
  }

  // Whether `pool`'s server answers: a connection of its own and SELECT 1 within
  // silence_check. One check at a time per pool; its verdict holds for silence_check. While
  // one runs, others take the server as answering (they look again at their next tick).
  awaitable<bool> answers(Pool& pool) {
    const TimePoint now = detail::Clock::now();
    if (now < pool.verdict_until || pool.checking) co_return !pool.silent || pool.checking;
    pool.checking = true;
    const TimePoint until = now + options_.silence_check;
    const std::size_t host = holdfast::pg::LoopConnection::preferred_host(pool.options);
    const bool several = holdfast::pg::LoopConnection::host_count(pool.options) > 1;
    Result<std::unique_ptr<Slot>> probe = co_await connect_host(pool.options, host, several, until);
    bool answered = false;
    if (probe.ok()) {
      Result<Rows> one = co_await exchange(**probe, "SELECT 1", {}, until);
      answered = one.ok() || !one.status().sqlstate().empty();
      (*probe)->forget();
    } else {
      // A refusal is an answer; only a connect that heard nothing until the end is silence.
      answered = detail::Clock::now() < until;
    }
    pool.checking = false;
    pool.silent = !answered;
    pool.verdict_until = detail::Clock::now() + options_.silence_check;
    if (pool.silent) {
      // Its idle connections reach a server that answers nothing: none is worth keeping.
      drop_idle(pool);
    }
    co_return answered;
  }

  // Sends one statement on `s` and waits for its result (drive()).
  awaitable<Result<Rows>> exchange(Slot& s, std::string_view sql,
                                   std::span<const holdfast::pg::Param> params, TimePoint until,
                                   Pool* silence = nullptr) {
    Status st = co_await drive(s, s.conn.send(sql, params), until, silence);
    if (!st.ok()) co_return st;
    co_return s.conn.result();
  }

  // Sends `pieces` on `s` as one pipeline and waits for its results (drive()).
  awaitable<Status> exchange(Slot& s, std::span<const Piece> pieces, std::span<Rows> out,
                             std::size_t* failed, TimePoint until) {
    *failed = pieces.size();
    Status st = co_await drive(s, s.conn.send_pipeline(pieces), until);
    if (!st.ok()) co_return st;
    co_return s.conn.pipeline_result(out, failed);
  }

  // Keeps a write's commit position in its request (for its later reads on a standby), or
  // marks it unknown: its reads then go to the primary.
  static void wrote(const RequestContext& request, const Rows* position) {
    if (position == nullptr || position->is_null(0, 0)) {
      request.position_unknown();
      return;
    }
    Result<holdfast::pg::Lsn> lsn = holdfast::pg::Lsn::parse(position->text(0, 0));
    std::uint32_t timeline = 0;
    const std::string_view t = position->text(0, 1);
    if (std::from_chars(t.data(), t.data() + t.size(), timeline, 16).ec != std::errc()) {
      timeline = 0;
    }
    if (lsn.ok()) {
      request.raise_position(lsn->value, timeline);
    } else {
      request.position_unknown();
    }
  }

  awaitable<Result<Rows>> plain_attempt(std::shared_ptr<Plain> state) {
    const TimePoint until = attempt_deadline(state->request);
    if (!state->write && standby_) {
      if (options_.hedge_budget > 0) co_return co_await hedged_read(state, until);
      std::optional<Result<Rows>> answered = co_await standby_read(*state, until);
      if (answered.has_value()) co_return std::move(*answered);
    }
    co_return co_await primary_call(state, until, nullptr);
  }

  // The primary's part of a call: a write, or a read. `in_use` (a hedged read's) is pointed at
  // the connection while the statement runs, so that the other try can stop it.
  awaitable<Result<Rows>> primary_call(std::shared_ptr<Plain> state, TimePoint until,
                                       Slot** in_use) {
    Result<std::unique_ptr<Slot>> slot = co_await lease(primary_, until);
    if (!slot.ok()) co_return slot.status();
    if (in_use != nullptr) *in_use = slot->get();
    // (Not a conditional expression: g++ 12 loses the result of a co_await inside one.)
    Result<Rows> r = Status(Code::kInternal, "not run");
    if (state->write) {
      r = co_await write_once(**slot, *state, until);
    } else {
      r = co_await exchange(**slot, state->sql, state->params.params, until, &primary_);
    }
    if (!r.ok() && r.status().sqlstate() == "25006") {
      r = Result<Rows>(demoted(**slot, r.status()));
    }
    if (in_use != nullptr) *in_use = nullptr;
    (*slot)->stop = false;
    give_back(primary_, std::move(*slot));
    co_return r;
  }

  // A hedged read's two tries: what each said, and the connection each is on (to stop it).
  struct Race {
    explicit Race(const Executor& ex) : wake(ex) { wake.expires_at(TimePoint::max()); }
    detail::net::steady_timer wake;                      // cancelled when either try ends
    std::optional<std::optional<Result<Rows>>> standby;  // ended (inner: its answer, if any)
    std::optional<Result<Rows>> primary;                 // ended
    Slot* standby_slot = nullptr;
    Slot* primary_slot = nullptr;
    bool hedged = false;  // the primary's try was started
  };

  // Stops the try on `s` (the loser of a hedged read) at once.
  static void stop(Slot& s) {
    s.stop = true;
    detail::error_code ignored;
    s.descriptor.cancel(ignored);
  }

  // Waits until `race` changed (a try ended) or `until`.
  awaitable<void> race_wait(Race& race, TimePoint until) {
    auto expired = std::make_shared<bool>(false);
    detail::net::steady_timer deadline(ex_, until);
    deadline.async_wait([expired, &race](const detail::error_code& ec) {
      if (ec || *expired) return;
      *expired = true;
      race.wake.cancel();
    });
    detail::error_code ec;
    co_await race.wake.async_wait(detail::net::redirect_error(detail::net::use_awaitable, ec));
    *expired = true;
    deadline.cancel();
  }

  // The standby's normal latency: the 95th percentile of its last answers (none yet: none).
  std::optional<Duration> standby_p95() const {
    if (latency_count_ < 16) return std::nullopt;
    const std::size_t n = std::min<std::size_t>(latency_count_, latencies_.size());
    std::array<Duration, 64> sorted{};
    std::copy(latencies_.begin(), latencies_.begin() + static_cast<std::ptrdiff_t>(n),
              sorted.begin());
    std::sort(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(n));
    return sorted[(n * 95) / 100];
  }

  // A read on the standby that, when it has not answered within the standby's normal latency,
  // also goes to the primary (within the hedge budget, and only when a primary connection is
  // free); the first answer wins and the other try is stopped.
  awaitable<Result<Rows>> hedged_read(std::shared_ptr<Plain> state, TimePoint until) {
    hedge_tokens_ = std::min(hedge_tokens_ + options_.hedge_budget, 10.0);
    auto race = std::make_shared<Race>(ex_);
    const TimePoint started = detail::Clock::now();
    detail::net::co_spawn(
        ex_,
        [self = this->shared_from_this(), state, race, until, started]() -> awaitable<void> {
          std::optional<Result<Rows>> answer =
              co_await self->standby_read(*state, until, &race->standby_slot);
          if (answer.has_value() && answer->ok()) {
            self->latencies_[self->latency_count_++ % self->latencies_.size()] =
                detail::Clock::now() - started;
          }
          race->standby.emplace(std::move(answer));
          race->wake.cancel();
        },
        detail::net::detached);
    const std::optional<Duration> p95 = standby_p95();
    const Duration delay = std::max(options_.hedge_min_delay, p95.value_or(options_.standby_wait));
    const TimePoint hedge_at = std::min(until, started + delay);
    while (!race->standby.has_value() && detail::Clock::now() < hedge_at) {
      co_await race_wait(*race, hedge_at);
    }
    const bool primary_free = !primary_.idle.empty() || primary_.open < primary_.max;
    if (!race->standby.has_value() && p95.has_value() && hedge_tokens_ >= 1.0 && primary_free) {
      hedge_tokens_ -= 1.0;
      ++hedged_;
      race->hedged = true;
      detail::net::co_spawn(
          ex_,
          [self = this->shared_from_this(), state, race, until]() -> awaitable<void> {
            Result<Rows> r = co_await self->primary_call(state, until, &race->primary_slot);
            race->primary.emplace(std::move(r));
            race->wake.cancel();
          },
          detail::net::detached);
    }
    // The first usable answer: the standby's when it has one, else the primary's.
    for (;;) {
      if (race->standby.has_value() && race->standby->has_value()) {
        if (race->primary_slot != nullptr) stop(*race->primary_slot);
        co_return std::move(**race->standby);
      }
      if (race->primary.has_value()) {
        if (race->standby_slot != nullptr) stop(*race->standby_slot);
        if (!race->standby.has_value()) ++hedges_won_;
        co_return std::move(*race->primary);
      }
      if (race->standby.has_value() && !race->hedged) {
        // The standby left the read to the primary, and no hedge is running: ask it now.
        co_return co_await primary_call(state, until, nullptr);
      }
      if (detail::Clock::now() >= until) {
        if (race->standby_slot != nullptr) stop(*race->standby_slot);
        if (race->primary_slot != nullptr) stop(*race->primary_slot);
        co_return Status(Code::kDeadlineExceeded, "no copy answered the read within its window",
                         Fault{RetryScope::kStatement, Outcome::kNotApplied, Pace::kSlow, true});
      }
      co_await race_wait(*race, until);
    }
  }

  // BEGIN, the write, COMMIT and the commit's position: one round trip.
  awaitable<Result<Rows>> write_once(Slot& s, const Plain& state, TimePoint until) {
    const Piece pieces[] = {
        {"BEGIN"}, {state.sql, state.params.params}, {"COMMIT"}, {kPositionSql}};
    Rows out[4];
    std::size_t failed = 4;
    Status st = co_await exchange(s, pieces, out, &failed, until);
    if (st.ok() || failed == 3) {
      // Committed (a failure after the COMMIT leaves only the position unknown).
      wrote(state.request, st.ok() ? &out[3] : nullptr);
      co_return std::move(out[1]);
    }
    // Whether it committed may be unknown: its reads go to the primary from now on.
    if (st.fault().outcome == Outcome::kUnknown) state.request.position_unknown();
    co_return st;
  }

  // A read on a standby: its replay position and the statement in one round trip, answered
  // there when it has replayed the request's writes. Nothing when the primary should answer
  // instead (no standby within standby_wait, behind, promoted, or failed by its own state).
  awaitable<std::optional<Result<Rows>>> standby_read(const Plain& state, TimePoint until,
                                                      Slot** in_use = nullptr) {
    const holdfast::WritePosition mine = state.request.position();
    if (mine.primary_only) co_return std::nullopt;
    const TimePoint cap = std::min(until, detail::Clock::now() + options_.standby_wait);
    Result<std::unique_ptr<Slot>> slot = co_await lease(*standby_, cap);
    if (!slot.ok()) co_return std::nullopt;
    Slot& s = **slot;
    if (in_use != nullptr) *in_use = &s;
    const Piece pieces[] = {{kStandbyHead}, {state.sql, state.params.params}};
    Rows out[2];
    std::size_t failed = 2;
    Status st = co_await exchange(s, pieces, out, &failed, cap);
    std::optional<Result<Rows>> answer;
    if (st.ok()) {
      Result<holdfast::pg::Lsn> replayed = holdfast::pg::Lsn::parse(out[0].text(0, 0));
      if (out[0].text(0, 1) != "t") {
        drop_all(*standby_, s);  // promoted: no replica any more
      } else if (replayed.ok() && replayed->value >= mine.value) {
        ++standby_reads_;
        answer = std::move(out[1]);
      }
    } else if (failed == 1 && !st.fault().transient()) {
      answer = Result<Rows>(std::move(st));  // the statement's own error: the primary's too
    }
    if (in_use != nullptr) *in_use = nullptr;
    s.stop = false;
    give_back(*standby_, std::move(*slot));
    co_return answer;
  }

  // A write refused because the server is read-only (25006: a primary demoted, or a standby
  // reached): nothing was applied. Its connection and the idle ones (to the same server) go,
  // so that the next connect finds the server that takes writes (with several hosts and
  // target_session_attrs=read-write), and the write may go once more.
  Status demoted(Slot& s, const Status& refused) {
    drop_all(primary_, s);
    Status again(Code::kUnavailable, std::string(refused.message()),
                 Fault{RetryScope::kReconnect, Outcome::kNotApplied, Pace::kFast, true});
    again.with_sqlstate("25006");
    return again;
  }

  awaitable<Result<KeyedResult>> once_attempt(std::shared_ptr<Keyed> state) {
    const TimePoint until = attempt_deadline(state->request);
    Result<std::unique_ptr<Slot>> leased = co_await lease(primary_, until);
    if (!leased.ok()) co_return leased.status();
    Slot& s = **leased;
    const holdfast::pg::Param key[] = {holdfast::pg::Param(state->key)};
    Result<KeyedResult> out = co_await keyed(s, *state, key, until);
    if (!out.ok() && out.status().sqlstate() == "25006") {
      out = Result<KeyedResult>(demoted(s, out.status()));
    }
    if (!out.ok() && s.conn.is_open() && s.conn.txn_status() != holdfast::pg::TxnStatus::kIdle) {
      // Roll back on the loop: the connection is reused only once it is idle again.
      (void)co_await exchange(s, "ROLLBACK", {}, until);
    }
    give_back(primary_, std::move(*leased));
    co_return out;
  }

  // BEGIN with the key's claim, then the write and its recorded result, or the recorded result
  // of an earlier call; COMMIT with the commit's position. Each a round trip on the loop.
  awaitable<Result<KeyedResult>> keyed(Slot& s, const Keyed& state,
                                       std::span<const holdfast::pg::Param> key, TimePoint until) {
    const Piece begin[] = {{"BEGIN"}, {claim_sql_, key}};
    Rows begun[2];
    std::size_t failed = 2;
    Status claimed = co_await exchange(s, begin, begun, &failed, until);
    if (!claimed.ok()) co_return claimed;
    KeyedResult kept;
    if (begun[1].affected() == 1) {
      Result<Rows> wrote_rows = co_await exchange(s, state.sql, state.params.params, until);
      if (!wrote_rows.ok()) co_return wrote_rows.status();
      if (!wrote_rows->empty()) kept.result = std::string(wrote_rows->text(0, 0));
    } else {
      Result<Rows> recorded = co_await exchange(s, recorded_sql_, key, until);
      if (!recorded.ok()) co_return recorded.status();
      if (recorded->empty()) {
        // The row that conflicted was rolled back after all: run the transaction again.
        co_return Status(Code::kAborted, "idempotency key conflicted but is not recorded",
                         Fault{RetryScope::kTransaction, Outcome::kNotApplied, Pace::kFast, false});
      }
      kept.result = std::string(recorded->text(0, 0));
      kept.replayed = true;
      Result<Rows> ended = co_await exchange(s, "ROLLBACK", {}, until);
      if (!ended.ok()) co_return ended.status();
      co_return kept;
    }
    const holdfast::pg::Param record[] = {holdfast::pg::Param(state.key),
                                          holdfast::pg::Param(kept.result)};
    const Piece end[] = {{record_sql_, record}, {"COMMIT"}, {kPositionSql}};
    Rows ended[3];
    failed = 3;
    Status committed = co_await exchange(s, end, ended, &failed, until);
    if (committed.ok() || failed == 2) {
      wrote(state.request, committed.ok() ? &ended[2] : nullptr);
      co_return kept;
    }
    if (committed.fault().outcome == Outcome::kUnknown) state.request.position_unknown();
    co_return committed;
  }

  Executor ex_;
  ClientOptions options_;
  Shield shield_;
  Pool primary_;
  std::optional<Pool> standby_;
  std::uint64_t standby_reads_ = 0;
  // Hedging: the budget (a share of a token per read), the count, and the standby's recent
  // latencies (a ring).
  double hedge_tokens_ = 0;
  std::uint64_t hedged_ = 0;
  std::uint64_t hedges_won_ = 0;
  std::array<Duration, 64> latencies_{};
  std::size_t latency_count_ = 0;
  std::string claim_sql_;
  std::string recorded_sql_;
  std::string record_sql_;
  std::string create_sql_;
};

}  // namespace holdfast::asio::pg
