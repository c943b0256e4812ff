// Connection: opening a libpq connection, and what can be asked of it without a round trip.
// Sending statements and collecting their results is exchange.cpp's.
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "connection_impl.hpp"
#include "holdfast/core/classify.hpp"
#include "holdfast/core/liveness.hpp"
#include "holdfast/pg/connection.hpp"
#include "holdfast/pg/sql.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg {

std::string trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return std::string(s);
}

const char* or_empty(const char* s) noexcept {
  return s != nullptr ? s : "";
}

namespace {

constexpr std::size_t kMaxNotices = 32;

// "-c name=value" with spaces and backslashes escaped as libpq's `options` wants.
void append_setting(std::string& out, std::string_view name, std::string_view value) {
  if (!out.empty()) out += ' ';
  out += "-c ";
  for (const std::string_view part : {name, std::string_view("="), value}) {
    for (const char c : part) {
      if (c == ' ' || c == '\\') out += '\\';
      out += c;
    }
  }
}

// The first line of a libpq connection failure, without "connection to server ... failed:".
// With PQERRORS_VERBOSE a server-sent error reads "FATAL:  53300: sorry, ..."; returns the
// SQLSTATE in `sqlstate` when there is one.
std::string parse_connect_error(std::string_view message, std::string& sqlstate) {
  sqlstate.clear();
  for (const std::string_view severity : {"FATAL:  ", "ERROR:  "}) {
    const std::size_t at = message.find(severity);
    if (at == std::string_view::npos) continue;
    std::string_view rest = message.substr(at + severity.size());
    if (rest.size() > 6 && rest[5] == ':' && rest[6] == ' ') {
      const std::string_view code = rest.substr(0, 5);
      if (std::all_of(code.begin(), code.end(),
                      [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z'); })) {
        sqlstate = std::string(code);
        rest = rest.substr(7);
      }
    }
    const std::size_t eol = rest.find('\n');
    return trim(rest.substr(0, eol));
  }
  // "connection to server at ... failed: Connection refused\n\tIs the server running...".
  return trim(message.substr(0, message.find('\n')));
}

// libpq's connection keywords for `options`; the strings they point to live in `options`
// and `settings`.
struct Keywords {
  std::vector<const char*> keys;
  std::vector<const char*> values;
  std::string settings;           // the `options` keyword: "-c name=value ..."
  std::deque<std::string> owned;  // values made here (a deque: they never move)
  // One host of several (host, hostaddr, port), after everything else: it wins.
  const detail::ConnectionAccess::HostKeywords* host = nullptr;
  long long statement_timeout_ms = -1;  // when the settings name one, in plain milliseconds
};

void fill_keywords(const ConnectOptions& options, Keywords& k) {
  // Before dbname, so that the conninfo's own keywords win over these defaults.
  if (options.keepalive_idle > Duration::zero()) {
    const auto secs = [](Duration d) {
      return std::to_string(
          std::max<long long>(1, std::chrono::ceil<std::chrono::seconds>(d).count()));
    };
    k.owned.emplace_back(secs(options.keepalive_idle));
    k.owned.emplace_back(secs(options.keepalive_interval));
    k.owned.emplace_back(std::to_string(std::max(1, options.keepalive_count)));
    k.owned.emplace_back(std::to_string(std::max<long long>(
        0, std::chrono::ceil<std::chrono::milliseconds>(options.tcp_user_timeout).count())));
    const char* names[] = {"keepalives_idle", "keepalives_interval", "keepalives_count",
                           "tcp_user_timeout"};
    k.keys.push_back("keepalives");
    k.values.push_back("1");
    for (std::size_t i = 0; i < 4; ++i) {
      k.keys.push_back(names[i]);
      k.values.push_back(k.owned[i].c_str());
    }
  }
  k.keys.push_back("dbname");
  k.values.push_back(options.conninfo.c_str());
  for (const auto& [key, value] : options.keywords) {
    k.keys.push_back(key.c_str());
    k.values.push_back(value.c_str());
  }
  if (k.host != nullptr) {
    for (const auto& [key, value] : *k.host) {
      k.keys.push_back(key);
      k.values.push_back(value.c_str());
    }
  }
  if (!options.application_name.empty()) {
    k.keys.push_back("application_name");
    k.values.push_back(options.application_name.c_str());
  }
  for (const auto& [name, value] : options.settings) {
    append_setting(k.settings, name, value);
    if (name == "statement_timeout") {
      // Remember what we asked for, so the first ensure_statement_timeout() is free.
      long long ms = -1;
      const auto r = std::from_chars(value.data(), value.data() + value.size(), ms);
      if (r.ec == std::errc() && r.ptr == value.data() + value.size()) k.statement_timeout_ms = ms;
    }
  }
  if (!k.settings.empty()) {
    k.keys.push_back("options");
    k.values.push_back(k.settings.c_str());
  }
  k.keys.push_back(nullptr);
  k.values.push_back(nullptr);
}

// Drives PQconnectPoll until the connection is up, has failed, or `until` passed. With a
// `watch`, the connect is work waiting on the server (its liveness hears of it and of what
// comes back), and it gives up when the server is found silent meanwhile.
PostgresPollingStatusType poll_connect(PGconn* conn, const Clock& clock, TimePoint until,
                                       const detail::ServerWatch* watch = nullptr) {
  PostgresPollingStatusType st =
      PQstatus(conn) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
  Liveness* live = watch != nullptr ? watch->liveness.load(std::memory_order_acquire) : nullptr;
  const int wake = watch != nullptr ? watch->wake_fd : -1;
  const std::uint32_t slot = live != nullptr ? live->waiting(clock.now()) : Liveness::kNoSlot;
  while (st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
    const int fd = PQsocket(conn);
    const Duration left = until - clock.now();
    if (left <= Duration::zero() || fd < 0) break;
    const bool reading = st == PGRES_POLLING_READING;
    pollfd p[2] = {{fd, static_cast<short>(reading ? POLLIN : POLLOUT), 0}, {wake, POLLIN, 0}};
    const int ms = static_cast<int>(
        std::max<long long>(1, std::chrono::ceil<std::chrono::milliseconds>(left).count()));
    const int r = ::poll(p, wake >= 0 ? 2 : 1, std::min(ms, 60'000));
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    if (p[0].revents == 0) break;  // only the watch's descriptor: the server went silent
    if (reading && live != nullptr) live->answered(clock.now(), slot);
    st = PQconnectPoll(conn);
  }
  if (live != nullptr) live->done(slot);
  return st;
}

// Why a connect failed: the server's SQLSTATE when it sent one, else classified by
// classify_pg_connect_failure().
Status connect_failure(PGconn* conn, PostgresPollingStatusType st) {
  std::string sqlstate;
  std::string why = parse_connect_error(or_empty(PQerrorMessage(conn)), sqlstate);
  if (st != PGRES_POLLING_FAILED && st != PGRES_POLLING_OK) {
    // libpq has only "connection to server ... failed:" so far: say what happened.
    why = "no connection within the deadline";
    sqlstate.clear();
  }
  if (why.empty()) why = "connection failed";
  if (!sqlstate.empty()) return postgres_status(sqlstate, why);
  const Classification c = classify_pg_connect_failure();
  return Status(c.code, why, c.fault).with_sqlstate("");
}

Status refused(const SqlClass& c) {
  Status s(Code::kInvalidArgument, "refused: " + c.explain());
  s.with_sqlstate("");
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Connection::Impl

Connection::Impl::~Impl() {
  if (conn != nullptr) PQfinish(conn);
}

void Connection::Impl::on_notice(void* arg, const PGresult* res) noexcept {
  auto* self = static_cast<Impl*>(arg);
  try {
    Notice n;
    n.severity = or_empty(PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED));
    n.sqlstate = or_empty(PQresultErrorField(res, PG_DIAG_SQLSTATE));
    n.message = or_empty(PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
    n.routine = or_empty(PQresultErrorField(res, PG_DIAG_SOURCE_FUNCTION));
    if (n.severity == "FATAL" || n.severity == "PANIC") {
      self->fatal_seen = true;
      self->fatal_sqlstate = n.sqlstate;
      self->fatal_message = n.message;
    }
    ++self->notices_received;
    if (self->notices.size() >= kMaxNotices) self->notices.pop_front();
    self->notices.push_back(std::move(n));
  } catch (...) {
    // Out of memory while keeping a notice: drop it.
  }
}

Status Connection::Impl::closed() {
  return Status(Code::kFailedPrecondition, "the connection is closed",
                Fault{RetryScope::kReconnect, Outcome::kNotApplied, Pace::kFast, false});
}

Status Connection::Impl::lost(std::string_view sqlstate, std::string_view message,
                              Outcome outcome) const {
  std::string_view state = sqlstate;
  std::string_view text = message;
  if (state.empty() && fatal_seen) {
    state = fatal_sqlstate;
    text = fatal_message;
  }
  std::string why(text);
  if (why.empty() && conn != nullptr) why = trim(or_empty(PQerrorMessage(conn)));
  if (why.empty()) why = "the connection to the server was lost";
  Status s = postgres_status(state, why);
  Fault f = s.fault();
  // PgBouncer's own refusals (08P01 whose message classifies as a refused connect or as
  // too many connections, such as query_wait_timeout) come while the client waits for a
  // server connection: no server saw the statement, so nothing was applied even if it was
  // sent. PostgreSQL's own 08P01 is permanent and is left as it is.
  const bool pooler_refusal =
      state == "08P01" && f.scope != RetryScope::kNone && f.outcome == Outcome::kNotApplied;
  // Whatever the SQLSTATE says, the connection is gone: only a new one can help, unless
  // the reason is permanent (the database was dropped, ...).
  if (state.empty() || f.scope != RetryScope::kNone) {
    f.scope = RetryScope::kReconnect;
    if (!pooler_refusal) f.outcome = outcome;
  }
  s.with_fault(f);
  return s;
}

void Connection::Impl::bind(std::span<const Param> params, bool copy_all) {
  values.resize(params.size());
  types.resize(params.size());
  std::size_t need = 0;
  for (const Param& p : params) {
    if (!p.is_null() && (copy_all || !p.terminated())) need += p.text().size() + 1;
  }
  arena.clear();
  arena.reserve(need);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    types[i] = p.oid();
    if (p.is_null()) {
      values[i] = nullptr;
    } else if (p.terminated() && !copy_all) {
      values[i] = p.text().data();
    } else {
      const std::size_t at = arena.size();
      arena.append(p.text());
      arena.push_back('\0');
      values[i] = arena.data() + at;  // arena never reallocates after reserve()
    }
  }
}

void Connection::Impl::cancel() const noexcept {
  detail::cancel_off_thread(conn);
}

// ---------------------------------------------------------------------------------------
// Connection

Connection::Connection() noexcept = default;
Connection::Connection(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
Connection::Connection(Connection&&) noexcept = default;
Connection& Connection::operator=(Connection&&) noexcept = default;
Connection::~Connection() = default;

Result<Connection> Connection::open(std::string_view conninfo) {
  ConnectOptions options;
  options.conninfo = std::string(conninfo);
  return open(options);
}

Result<Connection> detail::ConnectionAccess::open_one(const ConnectOptions& options,
                                                      const HostKeywords& host, TimePoint until,
                                                      bool* timed_out, Probe probe) {
  if (timed_out != nullptr) *timed_out = false;
  Result<Connection> started = start(options, host);
  if (!started.ok()) return started.status();
  Connection::Impl* impl = started->impl_.get();
  impl->watch = options.watch;
  PGconn* conn = impl->conn;
  // A connect that starts while the server is silent is a probe of it (a health probe's):
  // it waits for its deadline. One that starts before gives up when the silence is found.
  const bool probing = probe == Probe::kIfSilentNow
                           ? options.watch != nullptr && options.watch->silent()
                           : probe == Probe::kYes;
  const detail::ServerWatch* watch =
      options.watch != nullptr && !probing ? options.watch.get() : nullptr;
  const PostgresPollingStatusType st = poll_connect(conn, *impl->clock, until, watch);
  if (st != PGRES_POLLING_OK || PQstatus(conn) != CONNECTION_OK) {
    if (timed_out != nullptr) {
      *timed_out = st != PGRES_POLLING_FAILED && PQstatus(conn) != CONNECTION_BAD;
    }
    return connect_failure(conn, st);
  }
  PQsetErrorVerbosity(conn, PQERRORS_DEFAULT);
  return started;
}

Result<Connection> detail::ConnectionAccess::start(const ConnectOptions& options,
                                                   const HostKeywords& host) {
  using Impl = Connection::Impl;
  auto impl = std::make_unique<Impl>();
  impl->clock = options.clock != nullptr ? options.clock : &Clock::system();
  Keywords k;
  if (!host.empty()) k.host = &host;
  fill_keywords(options, k);
  impl->statement_timeout_ms = k.statement_timeout_ms;
  detail::prepare_cancels();
  PGconn* conn = PQconnectStartParams(k.keys.data(), k.values.data(), /*expand_dbname=*/1);
  if (conn == nullptr) {
    return Status(Code::kResourceExhausted, "libpq could not allocate a connection");
  }
  impl->conn = conn;
  PQsetNoticeReceiver(conn, &Impl::on_notice, impl.get());
  PQsetErrorVerbosity(conn, PQERRORS_VERBOSE);  // as open_one(): startup errors' SQLSTATE
  return Connection(std::move(impl));
}

Status detail::ConnectionAccess::start_failure(const Connection& c, bool done) {
  if (!c.impl_ || c.impl_->conn == nullptr) return Connection::Impl::closed();
  PGconn* conn = c.impl_->conn;
  if (PQstatus(conn) == CONNECTION_OK) {
    PQsetErrorVerbosity(conn, PQERRORS_DEFAULT);
    return Status();
  }
  return connect_failure(conn, done ? PGRES_POLLING_FAILED : PGRES_POLLING_ACTIVE);
}

Connection::Impl* detail::ConnectionAccess::impl(Connection& c) noexcept {
  return c.impl_.get();
}

bool Connection::is_open() const noexcept {
  return impl_ && impl_->conn != nullptr && PQstatus(impl_->conn) == CONNECTION_OK;
}

Result<Rows> Connection::query(std::string_view sql, std::span<const Param> params) {
  if (const SqlClass c = classify_sql(sql, standard_conforming_strings());
      c.kind == SqlKind::kInvalid) {
    return refused(c);
  }
  return detail::ConnectionAccess::query_unchecked(*this, sql, params);
}

Status Connection::prepare(std::string_view name, std::string_view sql,
                           std::span<const Param> params) {
  if (!impl_) return Impl::closed();
  const SqlClass c = classify_sql(sql, standard_conforming_strings());
  if (c.kind == SqlKind::kInvalid) return refused(c);
  Impl& impl = *impl_;
  impl.sql.assign(sql);
  impl.name.assign(name);
  impl.bind(params);
  Result<Rows> r = impl.run([&] {
    return PQsendPrepare(impl.conn, impl.name.c_str(), impl.sql.c_str(),
                         static_cast<int>(params.size()), impl.types.data());
  });
  return r.ok() ? Status() : r.status();
}

Result<Rows> Connection::query_prepared(std::string_view name, std::span<const Param> params) {
  if (!impl_) return Impl::closed();
  Impl& impl = *impl_;
  impl.name.assign(name);
  impl.bind(params);
  return impl.run([&] {
    return PQsendQueryPrepared(impl.conn, impl.name.c_str(), static_cast<int>(params.size()),
                               impl.values.data(), nullptr, nullptr, 0);
  });
}

bool Connection::check() noexcept {
  if (!is_open() || impl_->fatal_seen) return false;
  if (impl_->host != nullptr && impl_->host->silent()) return false;
  PGconn* conn = impl_->conn;
  // Read whatever arrived while idle: notifications, parameter changes, or the FATAL and
  // end-of-file of a terminated backend (which the notice receiver records).
  for (int round = 0; round < 4; ++round) {
    pollfd p{PQsocket(conn), POLLIN, 0};
    const int r = ::poll(&p, 1, 0);
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if ((p.revents & (POLLERR | POLLNVAL)) != 0) return false;
    if (PQconsumeInput(conn) == 0) return false;
    (void)PQisBusy(conn);  // parses what was read
    while (PGnotify* n = PQnotifies(conn))
      PQfreemem(n);
    if (impl_->fatal_seen || PQstatus(conn) != CONNECTION_OK) return false;
  }
  return PQtransactionStatus(conn) == PQTRANS_IDLE;
}

void Connection::set_deadline(TimePoint deadline) noexcept {
  if (impl_) impl_->deadline = deadline;
}

std::string_view statement_timeout_text(Duration timeout, char (&buf)[24]) noexcept {
  const long long ms = std::max<long long>(
      1, std::chrono::ceil<std::chrono::milliseconds>(std::max(timeout, Duration::zero())).count());
  char* end = std::to_chars(buf, buf + sizeof(buf) - 1, ms).ptr;
  *end = '\0';
  return std::string_view(buf, static_cast<std::size_t>(end - buf));
}

Status Connection::set_statement_timeout(Duration timeout) {
  if (!impl_) return Status(Code::kFailedPrecondition, "the connection is closed");
  char buf[24];
  const Param params[] = {Param(statement_timeout_text(timeout, buf).data())};
  // set_config() rather than SET: the extended protocol cannot bind a parameter into SET.
  Result<Rows> rows = detail::ConnectionAccess::query_unchecked(
      *this, "SELECT pg_catalog.set_config('statement_timeout', $1, false)", params);
  if (!rows.ok()) {
    impl_->statement_timeout_ms = -1;
    return rows.status();
  }
  impl_->statement_timeout_ms = std::atoll(buf);
  return Status();
}

Status Connection::ensure_statement_timeout(Duration timeout) {
  if (!impl_) return Status(Code::kFailedPrecondition, "the connection is closed");
  const long long want =
      std::max<long long>(1, std::chrono::ceil<std::chrono::milliseconds>(timeout).count());
  const long long have = impl_->statement_timeout_ms;
  if (have > 0 && std::llabs(want - have) <= std::max<long long>(20, want / 10)) {
    return Status();
  }
  return set_statement_timeout(std::chrono::milliseconds(want));
}

Duration Connection::statement_timeout() const noexcept {
  if (!impl_ || impl_->statement_timeout_ms < 0) return Duration(-1);
  return std::chrono::milliseconds(impl_->statement_timeout_ms);
}

TxnStatus Connection::txn_status() const noexcept {
  if (!impl_ || impl_->conn == nullptr) return TxnStatus::kUnknown;
  switch (PQtransactionStatus(impl_->conn)) {
    case PQTRANS_IDLE:
      return TxnStatus::kIdle;
    case PQTRANS_ACTIVE:
      return TxnStatus::kActive;
    case PQTRANS_INTRANS:
      return TxnStatus::kInTransaction;
    case PQTRANS_INERROR:
      return TxnStatus::kInError;
    case PQTRANS_UNKNOWN:
      return TxnStatus::kUnknown;
  }
  return TxnStatus::kUnknown;
}

int Connection::backend_pid() const noexcept {
  return impl_ && impl_->conn != nullptr ? PQbackendPID(impl_->conn) : 0;
}

std::string_view Connection::server_parameter(const char* name) const noexcept {
  if (!impl_ || impl_->conn == nullptr) return {};
  return or_empty(PQparameterStatus(impl_->conn, name));
}

bool Connection::standard_conforming_strings() const noexcept {
  return server_parameter("standard_conforming_strings") != "off";
}

std::vector<Notice> Connection::take_notices() {
  if (!impl_) return {};
  std::vector<Notice> out(std::make_move_iterator(impl_->notices.begin()),
                          std::make_move_iterator(impl_->notices.end()));
  impl_->notices.clear();
  return out;
}

std::uint64_t Connection::notices_received() const noexcept {
  return impl_ ? impl_->notices_received : 0;
}

bool Connection::standby_wait_cancelled(std::uint64_t since) const noexcept {
  if (!impl_ || impl_->notices_received <= since) return false;
  const std::size_t fresh = static_cast<std::size_t>(
      std::min<std::uint64_t>(impl_->notices_received - since, impl_->notices.size()));
  return std::any_of(impl_->notices.end() - static_cast<std::ptrdiff_t>(fresh),
                     impl_->notices.end(), &is_standby_wait_cancelled);
}

bool is_standby_wait_cancelled(const Notice& notice) noexcept {
  // syncrep.c's WARNINGs when a cancel (SQLSTATE 01000, any warning's) or a termination
  // (57P01) interrupts SyncRepWaitForLSN(). The function's name is never translated; the
  // English messages cover a server that does not send it.
  if (notice.severity != "WARNING") return false;
  if (notice.routine == "SyncRepWaitForLSN") return true;
  const std::string_view m = notice.message;
  return m.starts_with("canceling wait for synchronous replication") ||
         m.starts_with("canceling the wait for synchronous replication");
}

Status unconfirmed_commit() {
  Status s(Code::kUnavailable,
           "COMMIT stopped waiting for the synchronous standby (cancelled at the deadline, or "
           "its backend terminated): the transaction committed on the primary, but no standby "
           "confirmed it, so a failover may lose it",
           Fault{RetryScope::kNone, Outcome::kUnknown, Pace::kSlow, false});
  s.with_backend(Backend::kPostgres);
  s.with_txn_state(TxnState::kUnknown);
  return s;
}

void Connection::close() noexcept {
  impl_.reset();
}

// ---------------------------------------------------------------------------------------
// The liveness check

// ---------------------------------------------------------------------------------------
// detail::ConnectionAccess: what the driver's other files may do with a Connection

bool detail::ConnectionAccess::is_prepared(const Connection& c, std::uint32_t id) noexcept {
  return c.impl_ && id < c.impl_->prepared.size() && c.impl_->prepared[id];
}

void detail::ConnectionAccess::mark_prepared(Connection& c, std::uint32_t id) {
  if (!c.impl_) return;
  std::vector<bool>& prepared = c.impl_->prepared;
  if (id >= prepared.size()) prepared.resize(id + 16, false);
  prepared[id] = true;
}

pg_conn* detail::ConnectionAccess::native(const Connection& c) noexcept {
  return c.impl_ ? c.impl_->conn : nullptr;
}

bool detail::ConnectionAccess::same_server(const Connection& a, const Connection& b) noexcept {
  PGconn* x = native(a);
  PGconn* y = native(b);
  if (x == nullptr || y == nullptr) return false;
  return std::strcmp(or_empty(PQhost(x)), or_empty(PQhost(y))) == 0 &&
         std::strcmp(or_empty(PQport(x)), or_empty(PQport(y))) == 0;
}

}  // namespace holdfast::pg
