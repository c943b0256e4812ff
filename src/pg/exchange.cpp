// Sending statements and collecting their results: one statement (Connection::query(),
// prepare(), query_prepared()) or a pipeline of a few closed by one Sync
// (detail::ConnectionAccess::pipeline()). Every wait is bounded by the connection's
// deadline: past it the statement is cancelled, and if the server answers neither, the
// connection is closed and the outcome is unknown.
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "connection_impl.hpp"
#include "exchange_results.hpp"
#include "holdfast/core/classify.hpp"
#include "holdfast/core/liveness.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg {
namespace {

// How long to wait for the server to act on a cancel sent at the deadline before closing
// the connection: a server that runs the statement acts within milliseconds; one that
// does not (PgBouncer ignores a cancel for a client still queued for a server) never will,
// and the caller's window has already run out.
constexpr Duration kCancelGrace = std::chrono::milliseconds(200);

}  // namespace

Status Connection::Impl::ready() const {
  if (conn == nullptr) return closed();
  if (fatal_seen || PQstatus(conn) != CONNECTION_OK) return lost("", "", Outcome::kNotApplied);
  return Status();
}

// Waits until the socket is readable, `until` passed, or the server (or this host of several)
// was found silent (a watch's descriptor turned readable). What comes back is the server's answer:
// its liveness hears of it.
Connection::Impl::Readable Connection::Impl::wait_readable(TimePoint until) const noexcept {
  const int fd = PQsocket(conn);
  if (fd < 0) return Readable::kYes;  // let libpq report the broken connection
  // A read and a write alike: once the server is known to be silent, a read has nothing to
  // lose and a write's outcome is unknown either way (issue 45, item 3; ADR 0037).
  const int wake = watch != nullptr ? watch->wake_fd : -1;
  const int host_wake = host != nullptr ? host->wake_fd : -1;
  for (;;) {
    int timeout_ms = -1;
    if (until != TimePoint::max()) {
      const Duration left = until - clock->now();
      if (left <= Duration::zero()) return Readable::kTimeout;
      timeout_ms = static_cast<int>(
          std::min<long long>(std::chrono::ceil<std::chrono::milliseconds>(left).count(), 60'000));
    }
    // poll() skips the entries whose descriptor is negative.
    pollfd p[3] = {{fd, POLLIN, 0}, {wake, POLLIN, 0}, {host_wake, POLLIN, 0}};
    const int r = ::poll(p, host_wake >= 0 ? 3 : wake >= 0 ? 2 : 1, timeout_ms);
    if (r > 0 && p[0].revents != 0) {
      if (watch != nullptr) {
        if (Liveness* live = watch->liveness.load(std::memory_order_acquire)) {
          // A tick late is nothing to a 500 ms rule.
          live->answered(clock->coarse_now(), live_slot);
        }
      }
      return Readable::kYes;
    }
    if (r > 0) return Readable::kSilent;  // only a watch's descriptor
    if (r < 0 && errno != EINTR) return Readable::kYes;
  }
}

// Waits until PQgetResult() will not block, `until` passed, or the server went silent.
Connection::Impl::Readable Connection::Impl::wait_result(TimePoint until) const noexcept {
  while (PQisBusy(conn) != 0) {
    const Readable r = wait_readable(until);
    if (r != Readable::kYes) return r;
    if (PQconsumeInput(conn) == 0) return Readable::kYes;  // lost: PQgetResult reports it
  }
  return Readable::kYes;
}

PGresult* Connection::Impl::next_result(Wait& w) noexcept {
  for (;;) {
    const Readable r = wait_result(w.until);
    if (r == Readable::kYes) return PQgetResult(conn);
    if (r == Readable::kSilent) {
      // The server was found silent: waiting longer serves nobody. The cancel goes out (off
      // this thread) for when it thaws.
      if (!w.cancelled) cancel();
      w.silent = true;
      w.stuck = true;
      return nullptr;
    }
    if (w.cancelled) {
      w.stuck = true;
      return nullptr;
    }
    // Past the deadline: ask the server to cancel (off this thread: a server that accepts
    // the cancel's connection may never answer it), and give it a moment to act, unless it
    // is known to be silent: then it will not act on it either.
    cancel();
    w.cancelled = true;
    if ((watch != nullptr && watch->silent()) || (host != nullptr && host->silent())) {
      w.stuck = true;
      return nullptr;
    }
    w.until = clock->now() + kCancelGrace;
  }
}

Status Connection::Impl::stuck(const Wait& w, bool sent) {
  // Nothing came back even after the cancel, or the server was found silent: close the
  // connection (the cancel is on its way, off this thread).
  PQfinish(conn);
  conn = nullptr;
  const Outcome outcome = sent ? Outcome::kUnknown : Outcome::kNotApplied;
  if (w.silent) {
    Status s(Code::kUnavailable,
             sent ? "the server went silent (no answer to the work in flight nor to a check); "
                    "the connection was closed and the statement's outcome is unknown"
                  : "the server went silent (no answer to the work in flight nor to a check); "
                    "the connection was closed before the statement was sent",
             Fault{RetryScope::kReconnect, outcome, Pace::kSlow, true});
    s.with_sqlstate("");
    return s;
  }
  Status s(Code::kDeadlineExceeded,
           "the server answered neither before the deadline nor to the cancel after it; "
           "the connection was closed and the statement's outcome is unknown",
           Fault{RetryScope::kReconnect, outcome, Pace::kSlow, true});
  s.with_sqlstate("");
  return s;
}

namespace {

// Tells the server's liveness that an exchange waits on it, for as long as it lives; the
// wait's slot in `slot` (the connection's live_slot) meanwhile.
class Waiting {
 public:
  Waiting(const std::shared_ptr<detail::ServerWatch>& watch, const Clock& clock,
          std::uint32_t& slot) noexcept
      : live_(watch != nullptr ? watch->liveness.load(std::memory_order_acquire) : nullptr),
        slot_(slot) {
    if (live_ != nullptr) slot_ = live_->waiting(clock.coarse_now());
  }
  ~Waiting() {
    if (live_ != nullptr) live_->done(slot_);
    slot_ = Liveness::kNoSlot;
  }
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;

 private:
  Liveness* live_;
  std::uint32_t& slot_;
};

}  // namespace

Status Connection::Impl::failure(const PGresult* bad, bool sent) const {
  const char* sqlstate = bad != nullptr ? PQresultErrorField(bad, PG_DIAG_SQLSTATE) : nullptr;
  const char* primary = bad != nullptr ? PQresultErrorField(bad, PG_DIAG_MESSAGE_PRIMARY) : nullptr;
  const std::string message = primary != nullptr ? std::string(primary)
                              : bad != nullptr   ? trim(or_empty(PQresultErrorMessage(bad)))
                                                 : std::string();
  if (PQstatus(conn) != CONNECTION_OK) {
    return lost(or_empty(sqlstate), message, sent ? Outcome::kUnknown : Outcome::kNotApplied);
  }
  if (bad != nullptr) return postgres_status(or_empty(sqlstate), message);
  return lost("", "", Outcome::kNotApplied);
}

Result<Rows> Connection::Impl::collect(bool sent) {
  PGresult* good = nullptr;
  PGresult* bad = nullptr;
  const Waiting waiting(watch, *clock, live_slot);
  Wait w{deadline};
  while (PGresult* r = next_result(w)) {
    const ExecStatusType st = PQresultStatus(r);
    if (is_rows(st)) {
      if (good != nullptr) PQclear(good);
      good = r;
    } else if (is_copy(st)) {
      end_copy(conn, r);
    } else {
      keep_error(bad, r);
    }
  }
  // Owned from here on: both are cleared on every return path.
  Rows good_rows(good);
  Rows bad_rows(bad);
  if (w.stuck) return stuck(w, sent);
  if (bad != nullptr || !sent || PQstatus(conn) != CONNECTION_OK) return failure(bad, sent);
  if (good == nullptr) {
    Status s(Code::kInvalidArgument, "the statement returned no result");
    s.with_sqlstate("");
    return s;
  }
  return good_rows;
}

bool Connection::Impl::send_step(const detail::Step& step) {
  using Kind = detail::Step::Kind;
  bind(step.params);
  const int n = static_cast<int>(step.params.size());
  if (step.kind != Kind::kPrepared) sql.assign(step.sql);
  if (step.kind != Kind::kQuery) name.assign(step.name);
  switch (step.kind) {
    case Kind::kQuery:
      return PQsendQueryParams(conn, sql.c_str(), n, types.data(), values.data(), nullptr, nullptr,
                               0) != 0;
    case Kind::kPrepare:
      return PQsendPrepare(conn, name.c_str(), sql.c_str(), n, types.data()) != 0;
    case Kind::kPrepared:
      return PQsendQueryPrepared(conn, name.c_str(), n, values.data(), nullptr, nullptr, 0) != 0;
  }
  return false;
}

Status Connection::Impl::pipeline(std::span<const detail::Step> steps, std::span<Rows> out,
                                  std::size_t* failed) {
  if (failed != nullptr) *failed = steps.size();
  bool sent = false;
  if (Status s = pipeline_send(steps, sent); !s.ok()) return s;
  return pipeline_collect(steps, sent, out, failed);
}

Status Connection::Impl::pipeline_send(std::span<const detail::Step> steps, bool& sent) {
  sent = false;
  if (Status s = ready(); !s.ok()) return s;
  if (PQenterPipelineMode(conn) == 0) {
    return Status(Code::kInternal, "the connection could not enter pipeline mode: " +
                                       trim(or_empty(PQerrorMessage(conn))));
  }
  sent = true;
  for (const detail::Step& step : steps) {
    if (!(sent = send_step(step))) break;
  }
  sent = sent && PQpipelineSync(conn) != 0;
  return Status();
}

Status Connection::Impl::pipeline_collect(std::span<const detail::Step> steps, bool sent,
                                          std::span<Rows> out, std::size_t* failed) {
  if (failed != nullptr) *failed = steps.size();
  // In pipeline mode a nullptr ends one step's results, and PGRES_PIPELINE_SYNC the whole.
  PGresult* bad = nullptr;
  std::size_t at = 0;
  std::size_t bad_at = steps.size();
  bool synced = false;
  const Waiting waiting(watch, *clock, live_slot);
  Wait w{deadline};
  while (!synced && at <= steps.size()) {
    PGresult* r = next_result(w);
    if (r == nullptr) {
      if (w.stuck || PQstatus(conn) != CONNECTION_OK || !sent) break;
      ++at;
      continue;
    }
    const ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_PIPELINE_SYNC) {
      synced = true;
      PQclear(r);
    } else if (is_rows(st) && at < out.size()) {
      out[at] = Rows(r);
    } else if (is_copy(st)) {
      end_copy(conn, r);
    } else if (st == PGRES_PIPELINE_ABORTED || is_rows(st)) {
      PQclear(r);
    } else if (keep_error(bad, r)) {
      bad_at = at;
    }
  }
  Rows bad_rows(bad);  // cleared on every return path
  if (w.stuck) return stuck(w, sent);
  const bool up = PQstatus(conn) == CONNECTION_OK;
  if (up && !(synced && PQexitPipelineMode(conn) != 0)) {
    // Out of step with the server (a send failed, or the results did not line up with the
    // steps): never reuse this connection.
    Status s =
        bad != nullptr
            ? failure(bad, sent)
            : Status(Code::kInternal, "the pipeline's results did not end in its Sync",
                     Fault{RetryScope::kReconnect, sent ? Outcome::kUnknown : Outcome::kNotApplied,
                           Pace::kFast, false});
    PQfinish(conn);
    conn = nullptr;
    return s;
  }
  if (bad != nullptr || !up) {
    if (failed != nullptr && up) *failed = bad_at;
    return failure(bad, sent);
  }
  return Status();
}

int Connection::Impl::first_answer(Impl& a, Impl* b, TimePoint until) noexcept {
  Impl* c[2] = {&a, b};
  const int n = b != nullptr ? 2 : 1;
  for (;;) {
    for (int i = 0; i < n; ++i) {
      if (c[i]->conn == nullptr || PQisBusy(c[i]->conn) == 0) return i;
    }
    const Duration left = until - a.clock->now();
    if (until != TimePoint::max() && left <= Duration::zero()) return -1;
    const int timeout_ms =
        until == TimePoint::max()
            ? 60'000
            : static_cast<int>(std::min<long long>(
                  std::chrono::ceil<std::chrono::milliseconds>(left).count(), 60'000));
    // Per connection: its socket, its server's and its host's silence (poll() skips a
    // negative descriptor). A silent one is its caller's to collect: that gives up at once.
    pollfd p[6];
    for (int i = 0; i < n; ++i) {
      const Impl& x = *c[i];
      p[3 * i] = {PQsocket(x.conn), POLLIN, 0};
      p[3 * i + 1] = {x.watch != nullptr ? x.watch->wake_fd : -1, POLLIN, 0};
      p[3 * i + 2] = {x.host != nullptr ? x.host->wake_fd : -1, POLLIN, 0};
    }
    const int r = ::poll(p, static_cast<nfds_t>(3 * n), timeout_ms);
    if (r < 0 && errno != EINTR) return 0;  // let the first one's collect report it
    for (int i = 0; r > 0 && i < n; ++i) {
      if (p[3 * i + 1].revents != 0 || p[3 * i + 2].revents != 0) return i;
      if (p[3 * i].revents == 0) continue;
      Impl& x = *c[i];
      if (x.watch != nullptr) {
        if (Liveness* live = x.watch->liveness.load(std::memory_order_acquire)) {
          live->answered(x.clock->coarse_now(), x.live_slot);
        }
      }
      if (PQconsumeInput(x.conn) == 0) return i;  // lost: its collect reports it
    }
  }
}

void Connection::Impl::abandon() noexcept {
  if (conn == nullptr) return;
  cancel();  // off this thread: the server stops the statement when it gets to it
  PQfinish(conn);
  conn = nullptr;
}

// ---------------------------------------------------------------------------------------
// detail::ConnectionAccess

Status detail::ConnectionAccess::pipeline_send(Connection& c, std::span<const Step> steps,
                                               bool& sent) {
  sent = false;
  if (!c.impl_) return Connection::Impl::closed();
  return c.impl_->pipeline_send(steps, sent);
}

Status detail::ConnectionAccess::pipeline_collect(Connection& c, std::span<const Step> steps,
                                                  bool sent, std::span<Rows> out,
                                                  std::size_t* failed) {
  if (!c.impl_) {
    if (failed != nullptr) *failed = steps.size();
    return Connection::Impl::closed();
  }
  return c.impl_->pipeline_collect(steps, sent, out, failed);
}

int detail::ConnectionAccess::first_answer(Connection& a, Connection* b, TimePoint until) noexcept {
  if (!a.impl_) return 0;
  if (b != nullptr && !b->impl_) return 1;
  return Connection::Impl::first_answer(*a.impl_, b != nullptr ? b->impl_.get() : nullptr, until);
}

void detail::ConnectionAccess::abandon(Connection& c) noexcept {
  if (c.impl_) c.impl_->abandon();
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

void detail::ConnectionAccess::set_host(Connection& c, std::shared_ptr<ServerWatch> host) noexcept {
  if (c.impl_) c.impl_->host = std::move(host);
}

std::uintptr_t detail::ConnectionAccess::host_id(const Connection& c) noexcept {
  return c.impl_ ? reinterpret_cast<std::uintptr_t>(c.impl_->host.get()) : 0;
}

std::string detail::ConnectionAccess::server_name(const Connection& c) {
  PGconn* conn = native(c);
  if (conn == nullptr) return {};
  const char* host = PQhost(conn);
  const char* port = PQport(conn);
  return std::string(host != nullptr ? host : "") + ":" + (port != nullptr ? port : "");
}

Status detail::ConnectionAccess::pipeline(Connection& c, std::span<const Step> steps,
                                          std::span<Rows> out, std::size_t* failed) {
  if (!c.impl_) {
    if (failed != nullptr) *failed = steps.size();
    return Connection::Impl::closed();
  }
  return c.impl_->pipeline(steps, out, failed);
}

}  // namespace holdfast::pg
