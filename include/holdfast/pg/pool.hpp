/// @file
/// holdfast::pg::Pool: a bounded pool of libpq connections.
///
/// @code
///   holdfast::pg::PoolOptions options;
///   options.connect.conninfo = "postgresql://app@127.0.0.1:5432/app";
///   options.size = 8;
///   holdfast::pg::Pool pool(options);
///   auto conn = pool.acquire();                 // waits no longer than the request's window
///   if (!conn) return conn.status();
///   auto rows = (*conn)->query("SELECT 1");     // returned to the pool when `conn` goes
/// @endcode
///
/// - At most `size` connections are open (or being opened) at once.
/// - acquire() hands out an idle connection after a cheap health check (no round trip): a
///   backend terminated while idle has sent its FATAL, and such a connection is replaced
///   instead of failing the caller's next statement.
/// - When no connection is idle and the pool is full, acquire() waits for one, no longer
///   than the current RequestScope's window (which it opens: waiting for a connection is
///   time the request spends), or `window` outside any scope. It never waits forever.
/// - Connections are opened in one place, connect(). After a failed connect the next one
///   waits for a backoff delay, and while connects fail only one at a time is tried: a
///   restarting server sees no reconnect storm. A request that comes during the backoff
///   is answered at once with the last connect error, stop_reason kBreakerOpen and
///   retry_after() (the rest of the backoff). After it, the request that comes first
///   starts the next connect on a thread of the pool's own, so no request waits on a
///   server that may not answer: it and every request that comes while that connect is
///   tried wait for its result at most 50 ms (a connection, or its failure for the request
///   that started it), then are answered as during the backoff. The first failed
///   connect's own error carries retry_after() (the backoff) with no stop reason: a retry
///   loop may try again once it passed (RetryState::on_failure). A connect that fails while
///   connects fail (the pool's probe of the server) is answered with stop_reason
///   kProbeFailed and retry_after(): its request is not retried, as during the backoff,
///   and breakers count it as the server's refusal (ADR 0022). A failure that no connect
///   followed within a second of its backoff's end is forgotten: requests connect side by
///   side again, each on its own thread.
/// - While pg::Database finds the server silent (ConnectOptions::watch; DESIGN.md §10), a
///   request is answered at once instead of waiting for a connection or a connect; waiters
///   are woken when the silence is found (wake_waiters()).
/// - A connection returned inside a transaction, broken, or (read-only pools) with its
///   read-only default switched off is closed instead of being reused.
///
/// Thread safety: all methods may be called from any thread. The pool must outlive every
/// PooledConnection it handed out.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "holdfast/core/backoff.hpp"
#include "holdfast/core/clock.hpp"
#include "holdfast/core/random.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/pg/connection.hpp"

namespace holdfast {
class RetryWindow;  // holdfast/core/window.hpp
}  // namespace holdfast

namespace holdfast::pg {

/// How a Pool connects and how many connections it keeps. Validated by the Pool's
/// constructor.
struct PoolOptions {
  /// How to connect. connect.clock is also the pool's clock.
  ConnectOptions connect;
  /// Most connections open at once. REQUIRES: >= 1.
  int size = 4;
  /// Every session starts with default_transaction_read_only=on, so each statement runs in
  /// a READ ONLY transaction and a write fails with 25006. A setting sent at connect: not
  /// through a transaction pooler (pg::Database sets READ ONLY per call instead).
  bool read_only = false;
  /// Delay before the next connect after n consecutive failed ones: 50 ms doubling to 1 s,
  /// "equal" jitter (half fixed, half random) so restarting clients spread out. The cap
  /// bounds how long a restarted server waits for its clients to notice (about a second).
  Backoff reconnect_backoff = Backoff::exponential(std::chrono::milliseconds(50), 2.0,
                                                   std::chrono::seconds(1), Jitter::equal());
  /// Longest wait for a connection outside any RequestScope. REQUIRES: > 0.
  Duration window = std::chrono::seconds(6);  // RetryWindow::kDefaultLength
};

/// A Pool's counters and state (Pool::stats()).
struct PoolStats {
  int open = 0;                          ///< connections open or being opened
  int idle = 0;                          ///< connections open and not lent
  std::uint64_t connects = 0;            ///< successful connects
  std::uint64_t connect_failures = 0;    ///< failed connects
  std::uint64_t discarded = 0;           ///< found broken at hand-out, or returned unusable
  std::uint64_t waits = 0;               ///< acquisitions that had to wait
  std::uint64_t timeouts = 0;            ///< acquisitions that gave up at their deadline
  int consecutive_connect_failures = 0;  ///< connects that failed in a row (0 after a success)
  /// While consecutive_connect_failures > 0: when the next connect may start. Until then a
  /// request that finds no idle connection is answered at once (the pool's breaker on
  /// connects).
  TimePoint next_connect_at{};
};

class Pool;

/// A connection lent by a Pool; goes back to it when destroyed. Move-only.
class PooledConnection {
 public:
  PooledConnection() noexcept = default;
  /// Takes over `other`'s connection; `other` is left empty.
  PooledConnection(PooledConnection&& other) noexcept;
  /// Gives back this connection, then takes over `other`'s.
  PooledConnection& operator=(PooledConnection&& other) noexcept;
  PooledConnection(const PooledConnection&) = delete;
  PooledConnection& operator=(const PooledConnection&) = delete;
  ~PooledConnection();

  /// The connection.
  Connection& operator*() noexcept { return conn_; }
  /// The connection's members.
  Connection* operator->() noexcept { return &conn_; }
  /// Closes the connection instead of returning it.
  void discard() noexcept;
  /// Closes the connection because a pooler in front of the server (PgBouncer) said, on it,
  /// that it cannot reach the server (pooler_cannot_reach_server()). The pool counts this as
  /// a failed connect: it closes its idle connections (the pooler would refuse them too),
  /// backs off its connects, and checks each new connection with a query until one passes.
  /// Returns `why` with Status::retry_after() set to when the pool connects again.
  Status server_unreachable(Status why);
  /// True when acquire() opened this connection (rather than reusing an idle one).
  [[nodiscard]] bool fresh() const noexcept { return fresh_; }

 private:
  friend class Pool;
  PooledConnection(Pool* pool, Connection conn, bool fresh) noexcept
      : pool_(pool), conn_(std::move(conn)), fresh_(fresh) {}
  void give_back(bool unusable) noexcept;

  Pool* pool_ = nullptr;
  Connection conn_;
  bool fresh_ = false;
};

/// A bounded pool of libpq connections (see the top of this file). Not copyable; every
/// method may be called from any thread.
class Pool {
 public:
  /// Validates `options` (std::invalid_argument naming the field). Opens nothing yet.
  explicit Pool(PoolOptions options);
  /// REQUIRES: every PooledConnection has been returned. Waits for a connect under way on
  /// the pool's thread (bounded by connect.connect_timeout).
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  /// A healthy connection, waiting no later than the current RequestScope's window (opened
  /// if we must wait) or options().window outside any scope. On failure: the connect
  /// failure, or UNAVAILABLE / RESOURCE_EXHAUSTED naming why no connection came in time.
  Result<PooledConnection> acquire();
  /// Same, with an explicit deadline.
  Result<PooledConnection> acquire(TimePoint deadline);
  /// Never waits for a busy pool or for the reconnect backoff: an idle connection, a new one
  /// (connecting no later than `connect_deadline`), or UNAVAILABLE at once. While connects
  /// fail, a connect it starts is waited for as acquire() waits for one (at most 50 ms).
  /// For callers that have somewhere else to go (a read that can fall back from a replica
  /// to the primary).
  Result<PooledConnection> try_acquire(TimePoint connect_deadline);
  /// An idle connection, only while more than `leave` are idle; never connects, never
  /// waits: UNAVAILABLE otherwise. For work that is worth doing only when the pool has a
  /// connection to spare (a hedged read, which may close it).
  Result<PooledConnection> try_idle(std::size_t leave);
  /// For a health probe: as try_acquire(), but while connects fail it connects at once,
  /// whatever the backoff (the probe is itself paced). When that connect works the pool
  /// serves again, so a server that is back is found within one probe interval.
  Result<PooledConnection> acquire_for_probe(TimePoint connect_deadline);

  /// Wakes every acquire() waiting for a connection so that it looks again: the server was
  /// found silent (ConnectOptions::watch), and while it is, acquire() and try_acquire()
  /// answer at once (UNAVAILABLE, stop_reason kBreakerOpen, retry_after()) instead of
  /// waiting for connections stuck on it. acquire_for_probe() still connects.
  void wake_waiters();

  /// Closes every idle connection: they reach a server that can no longer serve this pool
  /// (a demoted primary answers writes with 25006). The next acquire() connects anew.
  void drop_idle();
  /// Closes every idle connection that reaches the same host and port as `like` (as libpq
  /// reports them; `like` itself is not touched): that server can no longer serve this
  /// pool (a replica's standby that was promoted), the others still can. The next
  /// acquire() that finds none idle connects anew, through the conninfo's host list.
  void drop_idle_to(const Connection& like);

  /// A connect to the same server (a health probe's) just worked and answered: while connects
  /// fail, the next one need not wait for the backoff. Changes nothing while a connect is
  /// under way (its result will tell).
  void server_answered();
  /// Opens one connection for this pool (its settings, its application_name): the only
  /// place the pool connects. Does not count against size() (acquire() does that).
  Result<Connection> connect(TimePoint deadline);

  /// A copy of the counters and state now.
  [[nodiscard]] PoolStats stats() const;
  /// The options it was built with.
  [[nodiscard]] const PoolOptions& options() const noexcept { return options_; }
  /// The pool's clock (connect.clock, or Clock::system()).
  [[nodiscard]] Clock& clock() const noexcept { return *clock_; }

 private:
  friend class PooledConnection;
  enum class Mode : std::uint8_t {
    kWait,    ///< for an idle connection, a connect, or the backoff, until the deadline
    kNoWait,  ///< an idle connection or a connect that may start now, else an answer at once
    kProbe,   ///< kNoWait, and a connect even while the backoff lasts
  };
  Result<PooledConnection> acquire_impl(RetryWindow* window, const TimePoint* fixed, Mode mode);
  // `lock` holds mutex_: the warmest idle connection that still works, the dead discarded.
  std::optional<PooledConnection> take_idle(std::unique_lock<std::mutex>& lock);
  // connect(), then, when a pooler could not reach the server (`verify`), a query.
  Result<Connection> connect_checked(TimePoint until, bool verify);
  // REQUIRES: `lock` holds mutex_ and a connect may start. Opens one connection, connecting
  // no later than `until` (the lock released meanwhile), and counts what happened.
  Result<PooledConnection> connect_locked(std::unique_lock<std::mutex>& lock, TimePoint until);
  // REQUIRES: mutex_ held, connects failing, and a connect may start. Starts it on
  // connector_: a new connection goes to the idle list; a failure is counted and kept for
  // the request that started it. Returns its id, or 0 when no thread could be started.
  std::uint64_t connect_in_background(TimePoint until);
  // REQUIRES: mutex_ held. Counts a connect that worked: connects no longer fail.
  void connected();
  // REQUIRES: mutex_ held. The answer while connects fail and the next is `left` away.
  Status connect_backing_off(Duration left) const;
  // REQUIRES: mutex_ held. The answer while connects fail and another request tries one.
  Status connect_being_tried() const;
  // REQUIRES: mutex_ held. The last connect error, as this pool's answer: `what` happened.
  Status last_connect_failure(const std::string& what) const;
  void release(Connection conn, bool unusable) noexcept;
  Status server_unreachable(Connection conn, Status why);
  // REQUIRES: mutex_ held. Counts a failed connect (`why`) and returns the backoff.
  Duration connect_failed(Status why);
  Status no_connection_in_time(Duration waited) const;
  // The answer while the server is silent.
  Status server_silent() const;

  const PoolOptions options_;
  ConnectOptions connect_;  // options_.connect plus the pool's own session settings
  Clock* clock_;
  mutable std::mutex mutex_;
  Signal returned_;  // a connection came back, a slot freed, or a connect finished
  std::vector<Connection> idle_;
  int open_ = 0;
  int waiters_ = 0;
  int failures_ = 0;  // consecutive failed connects
  int probing_ = 0;   // connects under way while connects fail (a health probe may overlap one)
  // A pooler said it cannot reach the server: a connect (to the pooler) proves nothing
  // until a query on it passes.
  bool verify_connects_ = false;
  TimePoint next_connect_at_{};
  Duration previous_delay_{};
  Random rng_;
  Status last_connect_error_;
  std::uint64_t connects_started_ = 0;      // by connect_in_background()
  std::uint64_t failed_in_background_ = 0;  // the id of the last one that failed
  Status background_failure_;               // and its failure, as its request's answer
  PoolStats stats_;
  std::thread connector_;  // last: its body uses the members above
};

}  // namespace holdfast::pg
