// LoopConnection: one libpq connection in non-blocking mode, stepped by the caller's event
// loop. The same Impl as Connection (its parameter binding, its notices, its classification
// of failures), without a single wait: where Connection::Impl polls, this returns Want.
#include "holdfast/pg/loop.hpp"

#include <libpq-fe.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "connection_impl.hpp"
#include "exchange_results.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg {

using detail::ConnectionAccess;
// Connection's Impl, which this file shares (its name is Connection's own).
using Impl = std::remove_pointer_t<decltype(ConnectionAccess::impl(std::declval<Connection&>()))>;

LoopConnection::LoopConnection() noexcept = default;
LoopConnection::LoopConnection(Connection connection) noexcept
    : connection_(std::move(connection)) {}

LoopConnection::~LoopConnection() {
  close();
}

void LoopConnection::take(LoopConnection& other) noexcept {
  connection_ = std::move(other.connection_);
  want_ = std::exchange(other.want_, Want::kNothing);
  sent_ = std::exchange(other.sent_, false);
  connecting_ = std::exchange(other.connecting_, false);
  good_ = std::exchange(other.good_, nullptr);
  bad_ = std::exchange(other.bad_, nullptr);
  pieces_ = std::exchange(other.pieces_, 0);
  at_ = std::exchange(other.at_, 0);
  bad_at_ = std::exchange(other.bad_at_, 0);
  synced_ = std::exchange(other.synced_, false);
  for (std::size_t i = 0; i < kMaxPieces; ++i)
    out_[i] = std::exchange(other.out_[i], nullptr);
  prepared_ = std::move(other.prepared_);
  other.prepared_.clear();
  preparing_ = std::exchange(other.preparing_, kMaxPrepared);
}

LoopConnection::LoopConnection(LoopConnection&& other) noexcept {
  take(other);
}

LoopConnection& LoopConnection::operator=(LoopConnection&& other) noexcept {
  if (this != &other) {
    close();
    take(other);
  }
  return *this;
}

Result<LoopConnection> LoopConnection::start(const ConnectOptions& options) {
  return start(options, 0);
}

std::size_t LoopConnection::host_count(const ConnectOptions& options) {
  return std::max<std::size_t>(1, ConnectionAccess::host_count(options.conninfo));
}

std::size_t LoopConnection::preferred_host(const ConnectOptions& options) {
  const std::size_t n = host_count(options);
  return n > 1 ? ConnectionAccess::preferred_host(options.conninfo) % n : 0;
}

void LoopConnection::remember_host(const ConnectOptions& options, std::size_t host) {
  if (host_count(options) > 1) ConnectionAccess::remember_host(options.conninfo, host);
}

Result<LoopConnection> LoopConnection::start(const ConnectOptions& options, std::size_t host) {
  Result<Connection> c =
      ConnectionAccess::start(options, ConnectionAccess::host_keywords(options, host));
  if (!c.ok()) return c.status();
  LoopConnection loop(std::move(*c));
  PGconn* conn = ConnectionAccess::native(loop.connection_);
  // libpq: after PQconnectStartParams, wait as if PQconnectPoll had said "writing".
  loop.connecting_ = PQstatus(conn) != CONNECTION_BAD;
  loop.want_ = loop.connecting_ ? Want::kWrite : Want::kNothing;
  return loop;
}

int LoopConnection::socket() const noexcept {
  PGconn* conn = ConnectionAccess::native(connection_);
  return conn != nullptr ? PQsocket(conn) : -1;
}

Want LoopConnection::connect_step() noexcept {
  PGconn* conn = ConnectionAccess::native(connection_);
  if (!connecting_ || conn == nullptr) return want_ = Want::kNothing;
  switch (PQconnectPoll(conn)) {
    case PGRES_POLLING_READING:
      return want_ = Want::kRead;
    case PGRES_POLLING_WRITING:
      return want_ = Want::kWrite;
    case PGRES_POLLING_OK:
      // Sends never block from here on: a full socket buffer makes PQflush() say so.
      connecting_ = false;
      PQsetErrorVerbosity(conn, PQERRORS_DEFAULT);
      if (PQsetnonblocking(conn, 1) != 0) connection_.close();
      return want_ = Want::kNothing;
    default:
      connecting_ = false;
      return want_ = Want::kNothing;
  }
}

Status LoopConnection::connect_status() const {
  return ConnectionAccess::start_failure(connection_, !connecting_);
}

bool LoopConnection::is_open() const noexcept {
  return !connecting_ && connection_.is_open();
}

bool LoopConnection::check() noexcept {
  if (connecting_ || want_ != Want::kNothing) return false;
  return connection_.check();
}

bool LoopConnection::in_hot_standby() const noexcept {
  PGconn* conn = ConnectionAccess::native(connection_);
  if (conn == nullptr || connecting_) return false;
  const char* on = PQparameterStatus(conn, "in_hot_standby");
  return on != nullptr && std::string_view(on) == "on";
}

TxnStatus LoopConnection::txn_status() const noexcept {
  return connection_.txn_status();
}

Want LoopConnection::flush() noexcept {
  PGconn* conn = ConnectionAccess::native(connection_);
  switch (PQflush(conn)) {
    case 0:
      return Want::kRead;
    case 1:
      return Want::kWrite;
    default:
      return Want::kNothing;  // lost: result() says so
  }
}

Want LoopConnection::send(std::string_view sql, std::span<const Param> params) {
  PQclear(std::exchange(good_, nullptr));
  PQclear(std::exchange(bad_, nullptr));
  sent_ = false;
  auto* impl = ConnectionAccess::impl(connection_);
  if (impl == nullptr || connecting_ || !impl->ready().ok()) return want_ = Want::kNothing;
  impl->sql.assign(sql);
  impl->bind(params);
  sent_ = PQsendQueryParams(impl->conn, impl->sql.c_str(), static_cast<int>(params.size()),
                            impl->types.data(), impl->values.data(), nullptr, nullptr, 0) != 0;
  if (!sent_) return want_ = Want::kNothing;
  return want_ = flush();
}

namespace {

// The name of send_prepared()'s statement `id` on a connection.
void statement_name(std::size_t id, std::string& out) {
  out.assign("holdfast_loop_");
  out.append(std::to_string(id));
}

}  // namespace

Want LoopConnection::send_prepared(std::string_view sql, std::span<const Param> params) {
  std::size_t id = 0;
  while (id < prepared_.size() && prepared_[id] != sql)
    ++id;
  if (id == prepared_.size() && id >= kMaxPrepared) return send(sql, params);
  PQclear(std::exchange(good_, nullptr));
  PQclear(std::exchange(bad_, nullptr));
  sent_ = false;
  preparing_ = kMaxPrepared;
  auto* impl = ConnectionAccess::impl(connection_);
  if (impl == nullptr || connecting_ || !impl->ready().ok()) return want_ = Want::kNothing;
  statement_name(id, impl->name);
  const int n = static_cast<int>(params.size());
  if (id < prepared_.size()) {
    impl->bind(params);
    sent_ = PQsendQueryPrepared(impl->conn, impl->name.c_str(), n, impl->values.data(), nullptr,
                                nullptr, 0) != 0;
    if (!sent_) return want_ = Want::kNothing;
    return want_ = flush();
  }
  // Prepared first; step() executes it once the server has it, with the values bound here
  // (copied: the caller's may be gone by then). Remembered now, forgotten if it fails.
  prepared_.reserve(kMaxPrepared);
  prepared_.emplace_back(sql);
  impl->bind(params, /*copy_all=*/true);
  if (PQsendPrepare(impl->conn, impl->name.c_str(), prepared_.back().c_str(), n,
                    impl->types.data()) == 0) {
    prepared_.pop_back();
    return want_ = Want::kNothing;
  }
  preparing_ = id;
  return want_ = flush();
}

// The statement send_prepared() prepared is there (or failed): executes it, or ends.
Want LoopConnection::execute_prepared() noexcept {
  preparing_ = kMaxPrepared;
  auto* impl = ConnectionAccess::impl(connection_);
  if (bad_ != nullptr || impl == nullptr) {
    prepared_.pop_back();  // not prepared: result() says why (nothing ran)
    return Want::kNothing;
  }
  PQclear(std::exchange(good_, nullptr));  // the prepare's own result
  sent_ = PQsendQueryPrepared(impl->conn, impl->name.c_str(), static_cast<int>(impl->values.size()),
                              impl->values.data(), nullptr, nullptr, 0) != 0;
  if (!sent_) return Want::kNothing;
  return flush();
}

Want LoopConnection::step() noexcept {
  PGconn* conn = ConnectionAccess::native(connection_);
  if (conn == nullptr || want_ == Want::kNothing) return want_ = Want::kNothing;
  if (want_ == Want::kWrite) {
    want_ = flush();
    if (want_ != Want::kRead) return want_;
  }
  if (PQconsumeInput(conn) == 0) {
    // Lost: PQgetResult() reports it (or nothing does, and result() says it was lost).
    while (PGresult* r = PQgetResult(conn))
      keep_error(bad_, r);
    return want_ = Want::kNothing;
  }
  if (pieces_ != 0) return want_ = pipeline_step(conn);
  while (PQisBusy(conn) == 0) {
    PGresult* r = PQgetResult(conn);
    if (r == nullptr && preparing_ != kMaxPrepared) {
      want_ = execute_prepared();
      if (want_ != Want::kRead) return want_;
      continue;
    }
    if (r == nullptr) return want_ = Want::kNothing;
    const ExecStatusType st = PQresultStatus(r);
    if (is_rows(st)) {
      PQclear(std::exchange(good_, r));
    } else if (is_copy(st)) {
      end_copy(conn, r);
    } else {
      keep_error(bad_, r);
    }
  }
  return want_ = Want::kRead;
}

std::size_t LoopConnection::prepared_id(std::string_view sql, bool& parse) {
  parse = false;
  std::size_t id = 0;
  while (id < prepared_.size() && prepared_[id] != sql)
    ++id;
  if (id < prepared_.size()) return id;
  if (id >= kMaxPrepared) return kNoParse;
  prepared_.reserve(kMaxPrepared);
  prepared_.emplace_back(sql);
  parse = true;
  return id;
}

void LoopConnection::not_prepared(std::size_t id) noexcept {
  if (id < prepared_.size()) prepared_.resize(id);
}

Want LoopConnection::send_pipeline(std::span<const Piece> pieces) {
  PQclear(std::exchange(good_, nullptr));
  PQclear(std::exchange(bad_, nullptr));
  clear_pipeline();
  sent_ = false;
  auto* impl = ConnectionAccess::impl(connection_);
  if (impl == nullptr || connecting_ || !impl->ready().ok() || pieces.empty() ||
      pieces.size() > kMaxPieces) {
    return want_ = Want::kNothing;
  }
  PGconn* conn = impl->conn;
  if (PQenterPipelineMode(conn) == 0) return want_ = Want::kNothing;
  pieces_ = pieces.size();
  bool ok = true;
  for (std::size_t i = 0; i < pieces.size() && ok; ++i) {
    const Piece& piece = pieces[i];
    const int n = static_cast<int>(piece.params.size());
    impl->bind(piece.params);
    bool parse = false;
    const std::size_t id = piece.prepared ? prepared_id(piece.sql, parse) : kNoParse;
    if (id == kNoParse) {
      impl->sql.assign(piece.sql);
      ok = PQsendQueryParams(conn, impl->sql.c_str(), n, impl->types.data(), impl->values.data(),
                             nullptr, nullptr, 0) != 0;
    } else {
      // libpq copies the text and the values into its buffer as each is sent.
      statement_name(id, impl->name);
      if (parse) {
        ok = PQsendPrepare(conn, impl->name.c_str(), prepared_[id].c_str(), n,
                           impl->types.data()) != 0;
        if (!ok) {
          not_prepared(id);
          break;
        }
        group_piece_[groups_] = i;
        group_parse_[groups_++] = id;
      }
      ok = PQsendQueryPrepared(conn, impl->name.c_str(), n, impl->values.data(), nullptr, nullptr,
                               0) != 0;
    }
    group_piece_[groups_] = i;
    group_parse_[groups_++] = kNoParse;
  }
  sent_ = ok && PQpipelineSync(conn) != 0;
  if (!sent_) {
    // Out of step with the server: never reuse this connection (nor its prepared statements).
    connection_.close();
    prepared_.clear();
    return want_ = Want::kNothing;
  }
  return want_ = flush();
}

// In pipeline mode a nullptr ends one piece's results, and PGRES_PIPELINE_SYNC the whole.
Want LoopConnection::pipeline_step(pg_conn* conn) noexcept {
  while (!synced_ && PQisBusy(conn) == 0) {
    PGresult* r = PQgetResult(conn);
    if (r == nullptr) {
      if (PQstatus(conn) != CONNECTION_OK) return Want::kNothing;
      ++at_;
      continue;
    }
    const ExecStatusType st = PQresultStatus(r);
    const bool known = at_ < groups_;
    const std::size_t parse = known ? group_parse_[at_] : kNoParse;
    if (st == PGRES_PIPELINE_SYNC) {
      synced_ = true;
      PQclear(r);
    } else if (parse != kNoParse && (is_rows(st) || st == PGRES_PIPELINE_ABORTED)) {
      if (st == PGRES_PIPELINE_ABORTED) not_prepared(parse);
      PQclear(r);  // a Parse's own result
    } else if (is_rows(st) && known) {
      PQclear(std::exchange(out_[group_piece_[at_]], r));
    } else if (is_copy(st)) {
      end_copy(conn, r);
    } else if (st == PGRES_PIPELINE_ABORTED || is_rows(st)) {
      PQclear(r);
    } else {
      if (parse != kNoParse) not_prepared(parse);
      // An error after the last piece's results is no piece's own.
      if (keep_error(bad_, r)) bad_at_ = known ? group_piece_[at_] : pieces_;
    }
  }
  if (!synced_) return Want::kRead;
  if (PQexitPipelineMode(conn) == 0) connection_.close();  // out of step: never reused
  return Want::kNothing;
}

void LoopConnection::clear_pipeline() noexcept {
  for (pg_result*& r : out_)
    PQclear(std::exchange(r, nullptr));
  pieces_ = 0;
  groups_ = 0;
  at_ = 0;
  bad_at_ = 0;
  synced_ = false;
}

Status LoopConnection::pipeline_result(std::span<Rows> out, std::size_t* failed) {
  const std::size_t n = pieces_;
  if (failed != nullptr) *failed = n;
  for (std::size_t i = 0; i < n && i < out.size(); ++i)
    out[i] = Rows(std::exchange(out_[i], nullptr));
  Rows bad(std::exchange(bad_, nullptr));
  const std::size_t bad_at = bad_at_;
  const bool synced = synced_;
  clear_pipeline();
  forget_prepared_if_discarded(bad.native());
  auto* impl = ConnectionAccess::impl(connection_);
  if (impl == nullptr || impl->conn == nullptr) {
    if (bad.native() == nullptr) {
      Status s(Code::kInternal, "the pipeline's results did not end in its Sync",
               Fault{RetryScope::kReconnect, sent_ ? Outcome::kUnknown : Outcome::kNotApplied,
                     Pace::kFast, false});
      return s;
    }
    return Impl::closed();
  }
  const bool up = PQstatus(impl->conn) == CONNECTION_OK;
  if (bad.native() != nullptr || !up || !synced || !sent_) {
    if (failed != nullptr && up && bad.native() != nullptr) *failed = bad_at;
    return impl->failure(bad.native(), sent_);
  }
  return Status();
}

void LoopConnection::forget_prepared_if_discarded(const pg_result* failure) noexcept {
  if (failure == nullptr) return;
  // The server has forgotten its prepared statements (a pooler's DISCARD ALL): prepare them
  // again.
  const char* state = PQresultErrorField(failure, PG_DIAG_SQLSTATE);
  if (state != nullptr && std::string_view(state) == "26000") prepared_.clear();
}

Result<Rows> LoopConnection::result() {
  Rows good(std::exchange(good_, nullptr));
  Rows bad(std::exchange(bad_, nullptr));
  forget_prepared_if_discarded(bad.native());
  auto* impl = ConnectionAccess::impl(connection_);
  if (impl == nullptr || impl->conn == nullptr) return Impl::closed();
  if (bad.native() != nullptr || !sent_ || PQstatus(impl->conn) != CONNECTION_OK) {
    if (!sent_ && PQstatus(impl->conn) == CONNECTION_OK && bad.native() == nullptr) {
      if (Status s = impl->ready(); !s.ok()) return s;
    }
    return impl->failure(bad.native(), sent_);
  }
  if (good.native() == nullptr) {
    Status s(Code::kInvalidArgument, "the statement returned no result");
    s.with_sqlstate("");
    return s;
  }
  return good;
}

std::uint64_t LoopConnection::notices_received() const noexcept {
  return connection_.notices_received();
}

bool LoopConnection::standby_wait_cancelled(std::uint64_t since) const noexcept {
  return connection_.standby_wait_cancelled(since);
}

void LoopConnection::cancel() noexcept {
  if (auto* impl = ConnectionAccess::impl(connection_)) impl->cancel();
}

Status LoopConnection::abandon(bool silent) {
  auto* impl = ConnectionAccess::impl(connection_);
  if (impl == nullptr || impl->conn == nullptr) return Impl::closed();
  PQclear(std::exchange(good_, nullptr));
  PQclear(std::exchange(bad_, nullptr));
  Impl::Wait w{TimePoint::max()};
  w.silent = silent;
  want_ = Want::kNothing;
  prepared_.clear();
  preparing_ = kMaxPrepared;
  return impl->stuck(w, sent_);  // closes the connection
}

void LoopConnection::close() noexcept {
  clear_pipeline();
  prepared_.clear();
  preparing_ = kMaxPrepared;
  PQclear(std::exchange(good_, nullptr));
  PQclear(std::exchange(bad_, nullptr));
  connecting_ = false;
  want_ = Want::kNothing;
  connection_.close();
}

}  // namespace holdfast::pg
