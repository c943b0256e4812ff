/// @file
/// A PostgreSQL connection that an event loop drives: libpq's non-blocking API, and nothing
/// in it ever waits. The caller owns the waiting: it watches socket() for what the last step
/// asked (readable or writable) and calls the next step when it is ready. The Asio adapter
/// (holdfast/adapters/asio_pg.hpp) drives it on an io_context; any other loop (epoll, libuv)
/// can drive it the same way.
///
/// @code
///   Result<pg::LoopConnection> c = pg::LoopConnection::start(options);   // sends nothing yet
///   for (pg::Want w = c->want(); w != pg::Want::kNothing; w = c->connect_step())
///     wait_for(c->socket(), w);                                         // the loop's wait
///   if (Status s = c->connect_status(); !s.ok()) return s;
///   for (pg::Want w = c->send(sql, params); w != pg::Want::kNothing; w = c->step())
///     wait_for(c->socket(), w);
///   Result<pg::Rows> rows = c->result();
/// @endcode
///
/// Results and failures are classified exactly as Connection::query() classifies them (the
/// same Status, Fault and outcome), so a retry loop decides on them the same way. A
/// statement whose deadline passed is cancelled with cancel() (the cancel request is the
/// one thing libpq 15 cannot send without blocking: it goes off the caller's thread), and
/// abandon() gives up on it: the connection closes and the outcome is unknown when the
/// statement was sent.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/pg/connection.hpp"

struct pg_conn;  // libpq's PGconn

namespace holdfast::pg {

/// What a LoopConnection waits for before its next step.
enum class Want : std::uint8_t {
  kRead,     ///< wait until socket() is readable, then call the step again
  kWrite,    ///< wait until socket() is writable, then call the step again
  kNothing,  ///< the step is complete: look at its status or result
};

/// One libpq connection driven by the caller's event loop (see the top of this file).
/// Move-only; used by one thread (or strand) at a time.
class LoopConnection {
 public:
  /// A closed connection.
  LoopConnection() noexcept;
  ~LoopConnection();
  /// Moves the connection; the moved-from one is closed.
  LoopConnection(LoopConnection&&) noexcept;
  /// Closes this one and takes `other`'s connection.
  LoopConnection& operator=(LoopConnection&&) noexcept;
  LoopConnection(const LoopConnection&) = delete;
  LoopConnection& operator=(const LoopConnection&) = delete;

  /// Starts connecting (PQconnectStartParams): resolves nothing that blocks and waits for
  /// nothing. Then wait for want() and call connect_step() until it returns Want::kNothing.
  /// Fails at once only when libpq cannot start (no memory, a malformed conninfo).
  static Result<LoopConnection> start(const ConnectOptions& options);
  /// start() on host `host` of the several a multi-host conninfo names, alone
  /// (0 <= host < host_count()). libpq does not time a non-blocking connect, so a host that
  /// accepts the connection and never answers (a frozen primary) would hold a connect to all of
  /// them: a caller tries one host at a time, each within ConnectOptions::host_connect_timeout,
  /// from preferred_host() on.
  static Result<LoopConnection> start(const ConnectOptions& options, std::size_t host);
  /// How many hosts `options` names: 1 for a plain conninfo (or one libpq will reject).
  [[nodiscard]] static std::size_t host_count(const ConnectOptions& options);
  /// The host to try first: the one that took a connection last, in this process (shared with
  /// pg::Database's pools).
  [[nodiscard]] static std::size_t preferred_host(const ConnectOptions& options);
  /// Remembers that host `host` took a connection, for preferred_host().
  static void remember_host(const ConnectOptions& options, std::size_t host);

  /// The socket to watch; -1 when closed. It may change during a connect (each host of a
  /// multi-host conninfo gets its own): look at it again after every step.
  [[nodiscard]] int socket() const noexcept;
  /// What the connection waits for now.
  [[nodiscard]] Want want() const noexcept { return want_; }

  /// Advances the connect after the socket became ready for want(). Returns what to wait for
  /// next; Want::kNothing once the connect succeeded or failed (connect_status() says which).
  Want connect_step() noexcept;
  /// Why the connect failed (classified as Connection::open() classifies it); OK once open.
  [[nodiscard]] Status connect_status() const;

  /// True while the connection is up and idle or running a statement.
  [[nodiscard]] bool is_open() const noexcept;
  /// Connection::check() for an idle connection (no round trip): false when what the server
  /// sent while it was idle says it is gone (a terminated backend's FATAL, end of file), so
  /// that a pool hands out another instead of sending a statement into a dead connection.
  [[nodiscard]] bool check() noexcept;
  /// Whether the server said it is a hot standby (in recovery: it takes no writes and may not
  /// have replayed a write yet): the in_hot_standby parameter PostgreSQL 14+ reports at connect
  /// and whenever it changes. False for a closed connection or an older server.
  [[nodiscard]] bool in_hot_standby() const noexcept;
  /// What libpq says of the session's transaction.
  [[nodiscard]] TxnStatus txn_status() const noexcept;

  /// Sends one statement with its parameters (PQsendQueryParams) without waiting. The text of
  /// `sql` and `params` is copied before it returns. Returns what to wait for before step();
  /// Want::kNothing when it could not be sent (result() then says why; nothing was applied).
  Want send(std::string_view sql, std::span<const Param> params = {});
  /// send() as a prepared statement of this connection: the first time a text is sent it is
  /// prepared (one more round trip, within the same step()s), then executed by name, so the
  /// server parses and plans it once per connection. At most kMaxPrepared texts per
  /// connection; others are sent as send() sends them. Not behind a pooler in transaction
  /// mode (the next transaction may run on a session that never saw the statement).
  Want send_prepared(std::string_view sql, std::span<const Param> params = {});
  /// How many statement texts one connection keeps prepared (send_prepared()).
  static constexpr std::size_t kMaxPrepared = 32;
  /// After the socket became ready for what the last send() or step() asked: sends what is
  /// still unsent and reads what arrived. Want::kNothing once the statement's result is
  /// complete (or the connection was lost): then call result().
  Want step() noexcept;
  /// The last statement's result, classified as Connection::query() classifies it. Call once
  /// per statement, after send() or step() returned Want::kNothing.
  Result<Rows> result();

  /// One statement of a pipeline: its SQL and parameters (copied by send_pipeline()).
  struct Piece {
    std::string_view sql;             ///< the statement
    std::span<const Param> params{};  ///< its parameters
    /// Sent as a prepared statement of this connection, as send_prepared() sends it; the
    /// first time, its Parse goes in the same pipeline, just before it (no round trip more).
    bool prepared = false;
  };
  /// Sends `pieces` as one pipeline closed by one Sync: one round trip. The server runs them
  /// in one implicit transaction (unless they begin or end one themselves) and skips the rest
  /// after a failed one. Returns what to wait for before step(), as send() does; then
  /// pipeline_result(). At most 8 pieces.
  Want send_pipeline(std::span<const Piece> pieces);
  /// The pipeline's results, once step() returned Want::kNothing: out[i] gets piece i's rows
  /// (REQUIRES out.size() >= the pieces sent). Returns OK, or the first failure with `failed`
  /// set to its piece (or to the number of pieces when the failure is not a piece's own: the
  /// connection was lost). Call once per pipeline.
  Status pipeline_result(std::span<Rows> out, std::size_t* failed = nullptr);

  /// Connection::notices_received() of this connection.
  [[nodiscard]] std::uint64_t notices_received() const noexcept;
  /// Connection::standby_wait_cancelled(): whether a COMMIT answered since notice `since`
  /// stopped waiting for the synchronous standbys.
  [[nodiscard]] bool standby_wait_cancelled(std::uint64_t since) const noexcept;

  /// Asks the server to cancel the running statement. libpq 15's cancel request blocks, so it
  /// is sent off the caller's thread; keep waiting for the statement's end (a cancelled
  /// statement ends with 57014) or abandon() it.
  void cancel() noexcept;
  /// Gives up on the running statement: closes the connection and returns why. `silent`: the
  /// server was found silent (else the deadline and a cancel went unanswered). The outcome is
  /// unknown when the statement was sent (whether it was applied cannot be known).
  Status abandon(bool silent);

  /// Closes now (also done by the destructor).
  void close() noexcept;

 private:
  explicit LoopConnection(Connection connection) noexcept;
  void take(LoopConnection& other) noexcept;
  Want flush() noexcept;
  Want pipeline_step(pg_conn* conn) noexcept;
  Want execute_prepared() noexcept;
  void clear_pipeline() noexcept;

  Connection connection_;
  Want want_ = Want::kNothing;
  bool sent_ = false;        // the statement went out (its outcome may be unknown)
  bool connecting_ = false;  // between start() and the end of the connect
  pg_result* good_ = nullptr;
  pg_result* bad_ = nullptr;
  // A pipeline in flight: its pieces, the results gathered so far, and where it stands. Each
  // piece's results end with a null result, and so do a prepared piece's Parse's: group g's
  // results are piece group_piece_[g]'s, or, where group_parse_[g] is not kNoParse, the
  // Parse of that prepared statement.
  static constexpr std::size_t kMaxPieces = 8;
  static constexpr std::size_t kNoParse = static_cast<std::size_t>(-1);
  std::size_t pieces_ = 0;  // 0: not a pipeline
  std::size_t groups_ = 0;  // result groups: the pieces and the Parses among them
  std::size_t at_ = 0;      // the group whose results come next
  std::size_t bad_at_ = 0;  // the piece that failed first
  bool synced_ = false;     // the Sync's result came
  pg_result* out_[kMaxPieces] = {};
  std::size_t group_piece_[2 * kMaxPieces] = {};
  std::size_t group_parse_[2 * kMaxPieces] = {};
  // A prepared piece's statement id: the one prepared already, or prepared in this pipeline
  // (added to prepared_). kNoParse: sent as send() sends it (kMaxPrepared are prepared).
  std::size_t prepared_id(std::string_view sql, bool& parse);
  // A Parse the pipeline sent did not happen (it failed, or an earlier piece did): that
  // statement, and any prepared after it, are not prepared.
  void not_prepared(std::size_t id) noexcept;
  // A failure of 26000 (the server forgot its prepared statements): prepared_ is emptied.
  void forget_prepared_if_discarded(const pg_result* failure) noexcept;
  // send_prepared(): the texts prepared on this connection (statement i is "holdfast_loop_i"),
  // and the one being prepared now (its execution follows once the server has it).
  std::vector<std::string> prepared_;
  std::size_t preparing_ = kMaxPrepared;  // kMaxPrepared: none
  std::span<const Param> preparing_params_{};
};

}  // namespace holdfast::pg
