#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <string>

#include "holdfast/classify.hpp"
#include "holdfast/postgres_connection.hpp"
#include "holdfast/postgres_sql.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg {
namespace {

constexpr std::size_t kMaxNotices = 32;
// How long to wait for the server to act on a cancel sent at the deadline before closing
// the connection.
constexpr Duration kCancelGrace = std::chrono::milliseconds(1000);

std::string trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return std::string(s);
}

const char* or_empty(const char* s) noexcept {
  return s != nullptr ? s : "";
}

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

}  // namespace

// ---------------------------------------------------------------------------------------
// Param

Param::Param(bool v) noexcept : oid_(kOidBool), inline_(true), terminated_(true) {
  buf_[0] = v ? 't' : 'f';
  buf_[1] = '\0';
  length_ = 1;
}

void Param::set_int(long long v, std::uint32_t oid) noexcept {
  oid_ = oid;
  inline_ = true;
  terminated_ = true;
  const auto r = std::to_chars(buf_, buf_ + sizeof(buf_) - 1, v);
  *r.ptr = '\0';
  length_ = static_cast<std::uint32_t>(r.ptr - buf_);
}

Param::Param(double v) noexcept : oid_(kOidFloat8), inline_(true), terminated_(true) {
  const auto r = std::to_chars(buf_, buf_ + sizeof(buf_) - 1, v);
  *r.ptr = '\0';
  length_ = static_cast<std::uint32_t>(r.ptr - buf_);
}

Param::Param(const char* text) noexcept : ext_(text), terminated_(true) {
  if (text == nullptr) {
    null_ = true;
  } else {
    length_ = static_cast<std::uint32_t>(std::strlen(text));
  }
}

Param::Param(const std::string& text) noexcept
    : ext_(text.c_str()), length_(static_cast<std::uint32_t>(text.size())), terminated_(true) {}

Param::Param(std::string_view text) noexcept
    : ext_(text.data()), length_(static_cast<std::uint32_t>(text.size())) {}

Param Param::typed(std::string_view text, std::uint32_t oid) noexcept {
  Param p(text);
  p.oid_ = oid;
  return p;
}

// ---------------------------------------------------------------------------------------
// Rows

void Rows::Clear::operator()(pg_result* r) const noexcept {
  PQclear(r);
}

int Rows::size() const noexcept {
  return result_ ? PQntuples(result_.get()) : 0;
}
int Rows::columns() const noexcept {
  return result_ ? PQnfields(result_.get()) : 0;
}

std::string_view Rows::column_name(int col) const noexcept {
  if (col < 0 || col >= columns()) return {};
  return or_empty(PQfname(result_.get(), col));
}

int Rows::column(std::string_view name) const noexcept {
  for (int c = 0; c < columns(); ++c) {
    if (column_name(c) == name) return c;
  }
  return -1;
}

bool Rows::is_null(int row, int col) const noexcept {
  if (row < 0 || row >= size() || col < 0 || col >= columns()) return true;
  return PQgetisnull(result_.get(), row, col) != 0;
}

std::string_view Rows::text(int row, int col) const noexcept {
  if (row < 0 || row >= size() || col < 0 || col >= columns()) return {};
  return std::string_view(PQgetvalue(result_.get(), row, col),
                          static_cast<std::size_t>(PQgetlength(result_.get(), row, col)));
}

Status Rows::check_cell(int row, int col) const {
  if (row < 0 || row >= size()) {
    return Status(Code::kOutOfRange, "row " + std::to_string(row) + " does not exist (" +
                                         std::to_string(size()) + " rows)");
  }
  if (col < 0 || col >= columns()) {
    return Status(Code::kOutOfRange, "column " + std::to_string(col) + " does not exist (" +
                                         std::to_string(columns()) + " columns)");
  }
  if (PQgetisnull(result_.get(), row, col) != 0) {
    return Status(Code::kFailedPrecondition, "column " + std::string(column_name(col)) +
                                                 " is NULL in row " + std::to_string(row));
  }
  return Status();
}

namespace {
template <class T>
Result<T> parse_number(const Rows& rows, int row, int col, std::string_view text) {
  T v{};
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec == std::errc::result_out_of_range) {
    return Status(Code::kOutOfRange, "column " + std::string(rows.column_name(col)) + " value '" +
                                         std::string(text) + "' is out of range");
  }
  if (r.ec != std::errc() || r.ptr != text.data() + text.size()) {
    return Status(Code::kInvalidArgument,
                  "column " + std::string(rows.column_name(col)) + " value '" + std::string(text) +
                      "' is not a number of the requested type (row " + std::to_string(row) + ")");
  }
  return v;
}
}  // namespace

Result<long long> Rows::int64(int row, int col) const {
  if (Status s = check_cell(row, col); !s.ok()) return s;
  return parse_number<long long>(*this, row, col, text(row, col));
}

Result<int> Rows::int32(int row, int col) const {
  if (Status s = check_cell(row, col); !s.ok()) return s;
  return parse_number<int>(*this, row, col, text(row, col));
}

Result<double> Rows::float64(int row, int col) const {
  if (Status s = check_cell(row, col); !s.ok()) return s;
  const std::string_view t = text(row, col);
  if (t == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (t == "Infinity") return std::numeric_limits<double>::infinity();
  if (t == "-Infinity") return -std::numeric_limits<double>::infinity();
  return parse_number<double>(*this, row, col, t);
}

Result<bool> Rows::boolean(int row, int col) const {
  if (Status s = check_cell(row, col); !s.ok()) return s;
  const std::string_view t = text(row, col);
  if (t == "t") return true;
  if (t == "f") return false;
  return Status(Code::kInvalidArgument, "column " + std::string(column_name(col)) + " value '" +
                                            std::string(t) + "' is not a boolean");
}

Result<std::string> Rows::string(int row, int col) const {
  if (Status s = check_cell(row, col); !s.ok()) return s;
  return std::string(text(row, col));
}

long long Rows::affected() const noexcept {
  if (!result_) return 0;
  const char* n = PQcmdTuples(result_.get());
  long long v = 0;
  if (n != nullptr) std::from_chars(n, n + std::strlen(n), v);
  return v;
}

std::string_view Rows::command() const noexcept {
  return result_ ? or_empty(PQcmdStatus(result_.get())) : std::string_view();
}

// ---------------------------------------------------------------------------------------
// Connection

struct Connection::Impl {
  PGconn* conn = nullptr;
  Clock* clock = nullptr;
  TimePoint deadline = TimePoint::max();
  long long statement_timeout_ms = -1;
  std::deque<Notice> notices;
  std::uint64_t notices_received = 0;
  // A FATAL the server sent while we were not waiting for a result (a terminated idle
  // backend): its SQLSTATE explains the lost connection the next statement will see.
  bool fatal_seen = false;
  std::string fatal_sqlstate;
  std::string fatal_message;
  // Scratch space reused by every statement (no allocation once warm).
  std::string sql;
  std::string name;
  std::string arena;
  std::vector<const char*> values;
  std::vector<Oid> types;
  std::vector<bool> prepared;

  ~Impl() {
    if (conn != nullptr) PQfinish(conn);
  }

  static void on_notice(void* arg, const PGresult* res) noexcept {
    auto* self = static_cast<Impl*>(arg);
    try {
      Notice n;
      n.severity = or_empty(PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED));
      n.sqlstate = or_empty(PQresultErrorField(res, PG_DIAG_SQLSTATE));
      n.message = or_empty(PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
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

  // Waits until the socket is readable or `until`. False on timeout.
  bool wait_readable(TimePoint until) const noexcept {
    const int fd = PQsocket(conn);
    if (fd < 0) return true;  // let libpq report the broken connection
    for (;;) {
      int timeout_ms = -1;
      if (until != TimePoint::max()) {
        const Duration left = until - clock->now();
        if (left <= Duration::zero()) return false;
        timeout_ms = static_cast<int>(std::min<long long>(
            std::chrono::ceil<std::chrono::milliseconds>(left).count(), 60'000));
      }
      pollfd p{fd, POLLIN, 0};
      const int r = ::poll(&p, 1, timeout_ms);
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return true;
      if (r == 0 && until == TimePoint::max()) continue;
    }
  }

  // Waits until PQgetResult() will not block. False when `until` passed first.
  bool wait_result(TimePoint until) const noexcept {
    while (PQisBusy(conn) != 0) {
      if (!wait_readable(until)) return false;
      if (PQconsumeInput(conn) == 0) return true;  // lost: PQgetResult reports it
    }
    return true;
  }

  // The status of a connection that is gone, with the best explanation we have.
  // `outcome`: whether the statement may have been applied.
  Status lost(std::string_view sqlstate, std::string_view message, Outcome outcome) const {
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
    // Whatever the SQLSTATE says, the connection is gone: only a new one can help, unless
    // the reason is permanent (the database was dropped, ...).
    if (state.empty() || f.scope != RetryScope::kNone) {
      f.scope = RetryScope::kReconnect;
      f.outcome = outcome;
    }
    s.with_fault(f);
    return s;
  }

  // Sends with `send` (returns 1 on success, like libpq) and collects every result.
  template <class Send>
  Result<Rows> run(Send&& send) {
    if (conn == nullptr) return closed();
    if (fatal_seen || PQstatus(conn) != CONNECTION_OK) return lost("", "", Outcome::kNotApplied);
    const bool sent = send() != 0;
    PGresult* good = nullptr;
    PGresult* bad = nullptr;
    TimePoint until = deadline;
    bool cancelled = false;
    for (;;) {
      if (!wait_result(until)) {
        if (cancelled) break;
        // Past the deadline: ask the server to cancel, and give it a moment to answer.
        cancel();
        cancelled = true;
        until = clock->now() + kCancelGrace;
        continue;
      }
      PGresult* r = PQgetResult(conn);
      if (r == nullptr) break;
      switch (PQresultStatus(r)) {
        case PGRES_TUPLES_OK:
        case PGRES_COMMAND_OK:
        case PGRES_SINGLE_TUPLE:
          if (good != nullptr) PQclear(good);
          good = r;
          break;
        case PGRES_COPY_IN:
          PQputCopyEnd(conn, "holdfast does not support COPY");
          PQclear(r);
          break;
        case PGRES_COPY_OUT: {
          char* buf = nullptr;
          while (PQgetCopyData(conn, &buf, 0) > 0)
            PQfreemem(buf);
          PQclear(r);
          break;
        }
        default:
          // Keep the first error, unless a later one carries a SQLSTATE and it did not
          // (the FATAL of a terminated backend, then "server closed the connection").
          if (bad == nullptr || (PQresultErrorField(bad, PG_DIAG_SQLSTATE) == nullptr &&
                                 PQresultErrorField(r, PG_DIAG_SQLSTATE) != nullptr)) {
            if (bad != nullptr) PQclear(bad);
            bad = r;
          } else {
            PQclear(r);
          }
          break;
      }
    }
    // Owned from here on: both are cleared on every return path.
    Rows good_rows(good);
    Rows bad_rows(bad);
    if (PQstatus(conn) == CONNECTION_OK && PQisBusy(conn) != 0) {
      // Nothing came back even after the cancel: the server is unreachable or stuck.
      PQfinish(conn);
      conn = nullptr;
      Status s(Code::kDeadlineExceeded,
               "the server answered neither before the deadline nor to the cancel after it; "
               "the connection was closed and the statement's outcome is unknown",
               Fault{RetryScope::kReconnect, Outcome::kUnknown, Pace::kSlow, true});
      s.with_sqlstate("");
      return s;
    }
    const char* sqlstate = bad != nullptr ? PQresultErrorField(bad, PG_DIAG_SQLSTATE) : nullptr;
    const char* primary =
        bad != nullptr ? PQresultErrorField(bad, PG_DIAG_MESSAGE_PRIMARY) : nullptr;
    std::string message = primary != nullptr ? std::string(primary)
                          : bad != nullptr   ? trim(or_empty(PQresultErrorMessage(bad)))
                                             : std::string();
    if (PQstatus(conn) != CONNECTION_OK) {
      return lost(or_empty(sqlstate), message, sent ? Outcome::kUnknown : Outcome::kNotApplied);
    }
    if (bad != nullptr) return postgres_status(or_empty(sqlstate), message);
    if (!sent) return lost("", "", Outcome::kNotApplied);
    if (good == nullptr) {
      Status s(Code::kInvalidArgument, "the statement returned no result");
      s.with_sqlstate("");
      return s;
    }
    return good_rows;
  }

  static Status closed() {
    return Status(Code::kFailedPrecondition, "the connection is closed",
                  Fault{RetryScope::kReconnect, Outcome::kNotApplied, Pace::kFast, false});
  }

  void cancel() const noexcept {
    PGcancel* c = PQgetCancel(conn);
    if (c == nullptr) return;
    char err[256];
    PQcancel(c, err, sizeof(err));
    PQfreeCancel(c);
  }

  // Fills values/types for `params`; string views that are not NUL-terminated are copied
  // into the arena first.
  void bind(std::span<const Param> params) {
    values.resize(params.size());
    types.resize(params.size());
    std::size_t need = 0;
    for (const Param& p : params) {
      if (!p.is_null() && !p.terminated()) need += p.text().size() + 1;
    }
    arena.clear();
    arena.reserve(need);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Param& p = params[i];
      types[i] = p.oid();
      if (p.is_null()) {
        values[i] = nullptr;
      } else if (p.terminated()) {
        values[i] = p.text().data();
      } else {
        const std::size_t at = arena.size();
        arena.append(p.text());
        arena.push_back('\0');
        values[i] = arena.data() + at;  // arena never reallocates after reserve()
      }
    }
  }
};

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

Result<Connection> Connection::open(const ConnectOptions& options, TimePoint deadline) {
  if (options.conninfo.empty()) {
    return Status(Code::kInvalidArgument, "ConnectOptions::conninfo is empty");
  }
  auto impl = std::make_unique<Impl>();
  impl->clock = options.clock != nullptr ? options.clock : &Clock::system();
  const TimePoint until = std::min(deadline, impl->clock->now() + options.connect_timeout);

  std::vector<const char*> keys;
  std::vector<const char*> vals;
  keys.push_back("dbname");
  vals.push_back(options.conninfo.c_str());
  for (const auto& [k, v] : options.keywords) {
    keys.push_back(k.c_str());
    vals.push_back(v.c_str());
  }
  if (!options.application_name.empty()) {
    keys.push_back("application_name");
    vals.push_back(options.application_name.c_str());
  }
  std::string settings;
  for (const auto& [k, v] : options.settings) {
    append_setting(settings, k, v);
    if (k == "statement_timeout") {
      // Remember what we asked for, so the first ensure_statement_timeout() is free.
      long long ms = -1;
      const auto r = std::from_chars(v.data(), v.data() + v.size(), ms);
      if (r.ec == std::errc() && r.ptr == v.data() + v.size()) impl->statement_timeout_ms = ms;
    }
  }
  if (!settings.empty()) {
    keys.push_back("options");
    vals.push_back(settings.c_str());
  }
  keys.push_back(nullptr);
  vals.push_back(nullptr);

  PGconn* conn = PQconnectStartParams(keys.data(), vals.data(), /*expand_dbname=*/1);
  if (conn == nullptr) {
    return Status(Code::kResourceExhausted, "libpq could not allocate a connection");
  }
  impl->conn = conn;
  PQsetNoticeReceiver(conn, &Impl::on_notice, impl.get());
  // Startup errors then carry their SQLSTATE in the message ("FATAL:  53300: ...").
  PQsetErrorVerbosity(conn, PQERRORS_VERBOSE);
  PostgresPollingStatusType st =
      PQstatus(conn) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
  while (st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
    const int fd = PQsocket(conn);
    const Duration left = until - impl->clock->now();
    if (left <= Duration::zero() || fd < 0) break;
    pollfd p{fd, static_cast<short>(st == PGRES_POLLING_READING ? POLLIN : POLLOUT), 0};
    const int ms = static_cast<int>(
        std::max<long long>(1, std::chrono::ceil<std::chrono::milliseconds>(left).count()));
    const int r = ::poll(&p, 1, std::min(ms, 60'000));
    if (r < 0 && errno != EINTR) break;
    if (r == 0) continue;
    st = PQconnectPoll(conn);
  }
  if (st != PGRES_POLLING_OK || PQstatus(conn) != CONNECTION_OK) {
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
  PQsetErrorVerbosity(conn, PQERRORS_DEFAULT);
  return Connection(std::move(impl));
}

bool Connection::is_open() const noexcept {
  return impl_ && impl_->conn != nullptr && PQstatus(impl_->conn) == CONNECTION_OK;
}

Result<Rows> Connection::query(std::string_view sql, std::span<const Param> params) {
  if (const SqlClass c = classify_sql(sql, standard_conforming_strings());
      c.kind == SqlKind::kInvalid) {
    Status s(Code::kInvalidArgument, "refused: " + c.explain());
    s.with_sqlstate("");
    return s;
  }
  return detail::ConnectionAccess::query_unchecked(*this, sql, params);
}

Result<Rows> detail::ConnectionAccess::query_unchecked(Connection& c, std::string_view sql,
                                                       std::span<const Param> params) {
  if (!c.impl_) return Connection::Impl::closed();
  Connection::Impl& impl = *c.impl_;
  impl.sql.assign(sql);
  impl.bind(params);
  return impl.run([&] {
    return PQsendQueryParams(impl.conn, impl.sql.c_str(), static_cast<int>(params.size()),
                             impl.types.data(), impl.values.data(), nullptr, nullptr, 0);
  });
}

Status Connection::prepare(std::string_view name, std::string_view sql,
                           std::span<const Param> params) {
  if (!impl_) return Impl::closed();
  const SqlClass c = classify_sql(sql, standard_conforming_strings());
  if (c.kind == SqlKind::kInvalid) {
    Status s(Code::kInvalidArgument, "refused: " + c.explain());
    s.with_sqlstate("");
    return s;
  }
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

Status Connection::set_statement_timeout(Duration timeout) {
  if (!impl_) return Status(Code::kFailedPrecondition, "the connection is closed");
  const long long ms =
      std::max<long long>(1, std::chrono::ceil<std::chrono::milliseconds>(timeout).count());
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf) - 1, ms);
  *r.ptr = '\0';
  const Param params[] = {Param(static_cast<const char*>(buf))};
  // set_config() rather than SET: the extended protocol cannot bind a parameter into SET.
  Result<Rows> rows = detail::ConnectionAccess::query_unchecked(
      *this, "SELECT pg_catalog.set_config('statement_timeout', $1, false)", params);
  if (!rows.ok()) {
    impl_->statement_timeout_ms = -1;
    return rows.status();
  }
  impl_->statement_timeout_ms = ms;
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

bool Connection::is_prepared(std::uint32_t id) const noexcept {
  return impl_ && id < impl_->prepared.size() && impl_->prepared[id];
}

void Connection::mark_prepared(std::uint32_t id) {
  if (!impl_) return;
  if (id >= impl_->prepared.size()) impl_->prepared.resize(id + 16, false);
  impl_->prepared[id] = true;
}

void Connection::close() noexcept {
  impl_.reset();
}

pg_conn* Connection::native() const noexcept {
  return impl_ ? impl_->conn : nullptr;
}

}  // namespace holdfast::pg
