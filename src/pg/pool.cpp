#include <pthread.h>

#include <algorithm>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "holdfast/core/window.hpp"
#include "holdfast/pg/options.hpp"
#include "holdfast/pg/pool.hpp"
#include "pg_internal.hpp"
#include "server_watch.hpp"

namespace holdfast::pg {
namespace {

// How long a request that finds another one trying a connect (while connects fail) waits
// for that connect's result: long enough for a server that answers, far shorter than a
// connect to a server that hangs.
constexpr Duration kProbeResultWait = std::chrono::milliseconds(50);
// How long the query that checks a new connection through a pooler that could not reach
// the server may take: the pooler answers it in a millisecond once the server is back, or
// holds it (waiting for a server login) until its query_wait_timeout.
constexpr Duration kPoolerCheckTimeout = std::chrono::milliseconds(250);
// How long after its backoff ended an unanswered connect failure still holds connects to
// one at a time: past it, nobody has tried the server for a while (its reads went to a
// standby, say), the failure says little about the server now, and requests connect side
// by side again.
constexpr Duration kConnectFailureGoesStale = std::chrono::seconds(1);

// A failed probe connect (`delay` to the next connect) as its request's answer: the
// request that probed a server refusing connects learns what a request during the backoff
// learns, now. Retrying before the next connect would only be refused, and the server may
// be away for long. The breaker counts it as the server's refusal (ADR 0022).
Status refused_again(Status failed, Duration delay) {
  failed.with_stop(StopReason::kProbeFailed, 0, delay);
  return failed;
}

}  // namespace

Backoff detail::pool_reconnect_backoff() {
  return PoolOptions{}.reconnect_backoff;
}

PooledConnection::PooledConnection(PooledConnection&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      conn_(std::move(other.conn_)),
      fresh_(other.fresh_) {}

PooledConnection& PooledConnection::operator=(PooledConnection&& other) noexcept {
  if (this != &other) {
    give_back(false);
    pool_ = std::exchange(other.pool_, nullptr);
    conn_ = std::move(other.conn_);
    fresh_ = other.fresh_;
  }
  return *this;
}

PooledConnection::~PooledConnection() {
  give_back(false);
}

void PooledConnection::discard() noexcept {
  give_back(true);
}

Status PooledConnection::server_unreachable(Status why) {
  if (pool_ == nullptr) return why;
  Pool* pool = std::exchange(pool_, nullptr);
  return pool->server_unreachable(std::move(conn_), std::move(why));
}

void PooledConnection::give_back(bool unusable) noexcept {
  if (pool_ == nullptr) return;
  Pool* pool = std::exchange(pool_, nullptr);
  pool->release(std::move(conn_), unusable);
}

Pool::Pool(PoolOptions options)
    : options_(std::move(options)),
      connect_(options_.connect),
      clock_(options_.connect.clock != nullptr ? options_.connect.clock : &Clock::system()),
      rng_(Random::from_thread()) {
  if (options_.size < 1) {
    throw std::invalid_argument("PoolOptions::size must be at least 1, got " +
                                std::to_string(options_.size));
  }
  if (options_.connect.conninfo.empty()) {
    throw std::invalid_argument("PoolOptions::connect.conninfo must not be empty");
  }
  if (options_.window <= Duration::zero()) {
    throw std::invalid_argument("PoolOptions::window must be greater than zero");
  }
  connect_.clock = clock_;
  if (options_.read_only) connect_.settings.emplace_back("default_transaction_read_only", "on");
  idle_.reserve(static_cast<std::size_t>(options_.size));
}

Pool::~Pool() {
  if (connector_.joinable()) connector_.join();
  std::vector<Connection> idle;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    idle.swap(idle_);
  }
  // Connections close outside the lock (PQfinish sends a Terminate message).
}

Result<Connection> Pool::connect(TimePoint deadline) {
  return Connection::open(connect_, deadline);
}

Result<PooledConnection> Pool::acquire() {
  return acquire_impl(RequestScope::current_window(), nullptr, Mode::kWait);
}

Result<PooledConnection> Pool::acquire(TimePoint deadline) {
  return acquire_impl(nullptr, &deadline, Mode::kWait);
}

Result<PooledConnection> Pool::try_acquire(TimePoint connect_deadline) {
  return acquire_impl(nullptr, &connect_deadline, Mode::kNoWait);
}

Result<PooledConnection> Pool::try_idle(std::size_t leave) {
  std::unique_lock<std::mutex> lock(mutex_);
  const detail::ServerWatch* watch = connect_.watch.get();
  while (idle_.size() > leave && (watch == nullptr || !watch->silent())) {
    if (std::optional<PooledConnection> conn = take_idle(lock)) return std::move(*conn);
  }
  return Status(Code::kUnavailable, "no connection to spare");
}

std::optional<PooledConnection> Pool::take_idle(std::unique_lock<std::mutex>& lock) {
  // Last in, first out: the warmest connection, and idle ones at the bottom can age.
  Connection conn = std::move(idle_.back());
  idle_.pop_back();
  lock.unlock();
  if (conn.check()) return PooledConnection(this, std::move(conn), false);
  conn.close();
  lock.lock();
  --open_;
  ++stats_.discarded;
  return std::nullopt;
}

Result<PooledConnection> Pool::acquire_for_probe(TimePoint connect_deadline) {
  return acquire_impl(nullptr, &connect_deadline, Mode::kProbe);
}

Result<PooledConnection> Pool::acquire_impl(RetryWindow* window, const TimePoint* fixed,
                                            Mode mode) {
  const bool may_wait = mode == Mode::kWait;
  std::unique_lock<std::mutex> lock(mutex_);
  bool waiting = false;
  TimePoint wait_start{};
  TimePoint deadline{};
  TimePoint probe_wait_until = TimePoint::max();
  std::uint64_t mine = 0;  // the connect this request started off its thread, if any
  const detail::ServerWatch* watch = connect_.watch.get();
  for (;;) {
    if (watch != nullptr && mode != Mode::kProbe && watch->silent()) [[unlikely]] {
      return server_silent();
    }
    if (!idle_.empty()) {
      if (std::optional<PooledConnection> conn = take_idle(lock)) return std::move(*conn);
      continue;
    }
    const TimePoint now = clock_->now();
    if (failures_ > 0 && probing_ == 0 && now - next_connect_at_ >= kConnectFailureGoesStale) {
      failures_ = 0;
      previous_delay_ = Duration::zero();
      last_connect_error_ = Status();
    }
    if (mine != 0 && failed_in_background_ == mine) {
      // The connect this request started failed while it waited: that is its answer.
      return background_failure_;
    }
    if (open_ < options_.size &&
        (failures_ == 0 || mode == Mode::kProbe || (probing_ == 0 && now >= next_connect_at_))) {
      const TimePoint until =
          fixed != nullptr ? *fixed
          : waiting        ? deadline
                           : now + (window != nullptr ? window->remaining(now) : options_.window);
      if (failures_ == 0 || mode == Mode::kProbe) return connect_locked(lock, until);
      // Connects are failing and the next one is due: it runs on a thread of its own, and
      // this request waits for its result no longer than any other request would.
      mine = connect_in_background(until);
      if (mine == 0) return connect_locked(lock, until);
      probe_wait_until = std::min(probe_wait_until, now + kProbeResultWait);
      continue;
    }
    if (failures_ > 0 && !last_connect_error_.ok()) {
      // Connects are failing and the next one is not due yet: the answer is now, with
      // when to come back, rather than after the backoff (ADR 0008).
      if (probing_ == 0 && open_ < options_.size)
        return connect_backing_off(next_connect_at_ - now);
      // A connect is being tried (it may hold the last free slot): its result, or a
      // connection given back, is worth a short wait, not the whole window a connect to a
      // hung server can take (ADR 0017). A request that never waits waits this long for
      // the connect it started itself, as it would for one made on its own thread.
      if (may_wait && probe_wait_until == TimePoint::max()) {
        probe_wait_until = now + kProbeResultWait;
      }
      if ((may_wait || mine != 0) && now >= probe_wait_until) return connect_being_tried();
    }
    if (!may_wait && (mine == 0 || now >= probe_wait_until)) {
      if (failures_ > 0 && !last_connect_error_.ok()) return no_connection_in_time(Duration{});
      return Status(Code::kUnavailable, "no pooled connection is free right now",
                    Fault{RetryScope::kStatement, Outcome::kNotApplied, Pace::kFast, false});
    }
    // Wait for a connection to come back, a connect to finish, or the backoff to pass.
    if (!waiting) {
      waiting = true;
      wait_start = now;
      ++stats_.waits;
      if (fixed != nullptr) {
        deadline = *fixed;
      } else if (window != nullptr) {
        window->open(now);
        deadline = window->deadline();
      } else {
        deadline = now + options_.window;
      }
    }
    if (now >= deadline) {
      ++stats_.timeouts;
      return no_connection_in_time(now - wait_start);
    }
    // Backing off never gets here (answered above): the wait ends when a connection comes
    // back, another request's connect ends (both notify), the probe wait or the deadline.
    const TimePoint wake = std::min(deadline, probe_wait_until);
    const std::uint64_t seen = returned_.generation();
    ++waiters_;
    lock.unlock();
    clock_->sleep_until(wake, &returned_, seen);
    lock.lock();
    --waiters_;
  }
}

Result<Connection> Pool::connect_checked(TimePoint until, bool verify) {
  Result<Connection> conn = connect(until);
  if (conn.ok() && verify) {
    // Through a pooler that could not reach the server, only a query reaches it.
    conn->set_deadline(std::min(until, clock_->now() + kPoolerCheckTimeout));
    Result<Rows> checked = conn->query("SELECT 1");
    if (!checked.ok()) conn = checked.status();
  }
  return conn;
}

Result<PooledConnection> Pool::connect_locked(std::unique_lock<std::mutex>& lock, TimePoint until) {
  ++open_;
  const bool probe = failures_ > 0;
  const bool verify = verify_connects_;
  if (probe) ++probing_;
  lock.unlock();
  Result<Connection> conn = connect_checked(until, verify);
  lock.lock();
  if (probe) --probing_;
  if (conn.ok()) {
    connected();
    return PooledConnection(this, std::move(*conn), true);
  }
  --open_;
  Status failed = conn.status();
  const Duration delay = connect_failed(conn.status());
  // The first failed connect is not a give-up: the caller may retry once the delay passed.
  // A failed probe is the caller's answer, as a backoff is (refused_again()).
  if (probe) return refused_again(std::move(failed), delay);
  failed.with_stop(StopReason::kNone, 0, delay);
  return failed;
}

std::uint64_t Pool::connect_in_background(TimePoint until) {
  // The thread of the previous one has done its part under the lock (probing_ is 0): the
  // join only waits for it to return.
  if (connector_.joinable()) connector_.join();
  const std::uint64_t id = ++connects_started_;
  const bool verify = verify_connects_;
  ++open_;
  ++probing_;
  try {
    connector_ = std::thread([this, id, until, verify]() noexcept {
      pthread_setname_np(pthread_self(), "hf-pg-connect");  // seen in top -H and /proc
      Result<Connection> conn = [&]() -> Result<Connection> {
        try {
          return connect_checked(until, verify);
        } catch (const std::bad_alloc&) {  // a failed connect, not a terminated process
          return Status(Code::kUnavailable, "the connect ran out of memory");
        }
      }();
      std::lock_guard<std::mutex> lock(mutex_);
      --probing_;
      if (conn.ok()) {
        connected();
        idle_.push_back(std::move(*conn));  // room reserved: open_ <= size
      } else {
        --open_;
        const Duration delay = connect_failed(conn.status());
        background_failure_ = refused_again(conn.status(), delay);
        failed_in_background_ = id;
      }
    });
  } catch (const std::system_error&) {
    --open_;
    --probing_;
    return 0;  // no thread to be had: the caller connects itself
  }
  return id;
}

void Pool::drop_idle() {
  std::vector<Connection> idle;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    idle.swap(idle_);
    idle_.reserve(static_cast<std::size_t>(options_.size));  // release() stays allocation-free
    open_ -= static_cast<int>(idle.size());
    stats_.discarded += idle.size();
    if (waiters_ > 0) returned_.notify_all();
  }
  // Closed outside the lock (PQfinish sends a Terminate message).
}

void Pool::drop_idle_to(const Connection& like) {
  std::vector<Connection> gone;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The others keep their order (the warmest last).
    std::size_t kept = 0;
    for (std::size_t i = 0; i < idle_.size(); ++i) {
      if (detail::ConnectionAccess::same_server(idle_[i], like)) {
        gone.push_back(std::move(idle_[i]));
      } else {
        if (kept != i) idle_[kept] = std::move(idle_[i]);
        ++kept;
      }
    }
    idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(kept), idle_.end());
    open_ -= static_cast<int>(gone.size());
    stats_.discarded += gone.size();
    if (waiters_ > 0 && !gone.empty()) returned_.notify_all();
  }
  // Closed outside the lock (PQfinish sends a Terminate message).
}

void Pool::wake_waiters() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (waiters_ > 0) returned_.notify_all();
}

Status Pool::server_silent() const {
  // Our own shedding, like an open breaker: the Shield's breaker tripped already.
  Status s(Code::kUnavailable,
           "the server does not answer (silent: nothing came back to the work in flight nor "
           "to a check); no connection is handed out until it answers again",
           Fault{RetryScope::kReconnect, Outcome::kNotApplied, Pace::kSlow, false});
  s.with_sqlstate("");
  s.with_stop(StopReason::kBreakerOpen, 0, std::chrono::milliseconds(100));
  return s;
}

void Pool::server_answered() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failures_ == 0 || probing_ > 0) return;  // a connect under way will tell
  failures_ = 0;
  previous_delay_ = Duration::zero();
  verify_connects_ = false;
  last_connect_error_ = Status();
}

void Pool::connected() {
  failures_ = 0;
  previous_delay_ = Duration::zero();
  verify_connects_ = false;
  ++stats_.connects;
  if (waiters_ > 0) returned_.notify_all();
}

Duration Pool::connect_failed(Status why) {
  ++failures_;
  ++stats_.connect_failures;
  const Duration delay = options_.reconnect_backoff.delay(failures_, previous_delay_, rng_);
  previous_delay_ = delay;
  next_connect_at_ = clock_->now() + delay;
  last_connect_error_ = std::move(why);
  if (waiters_ > 0) returned_.notify_all();
  return delay;
}

Status Pool::server_unreachable(Connection conn, Status why) {
  std::vector<Connection> idle;
  Duration delay{};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    idle.swap(idle_);
    idle_.reserve(static_cast<std::size_t>(options_.size));  // release() stays allocation-free
    open_ -= 1 + static_cast<int>(idle.size());
    stats_.discarded += 1 + idle.size();
    verify_connects_ = true;
    delay = connect_failed(why);
  }
  // Closed outside the lock (PQfinish sends a Terminate message).
  conn.close();
  idle.clear();
  why.with_stop(StopReason::kNone, 0, delay);
  return why;
}

Status Pool::last_connect_failure(const std::string& what) const {
  // The server cannot be reached: say why, but this answer itself put no load on it, so it
  // must not count as overload a second time.
  Status s = last_connect_error_;
  Fault f = s.fault();
  f.overload = false;
  f.outcome = Outcome::kNotApplied;
  s.with_fault(f);
  s.annotate(what + " (" + std::to_string(failures_) + " failed connects in a row; the last said)");
  return s;
}

Status Pool::no_connection_in_time(Duration waited) const {
  if (failures_ > 0 && !last_connect_error_.ok()) {
    return last_connect_failure("no connection within " + ms_text(waited));
  }
  return Status(Code::kResourceExhausted,
                "all " + std::to_string(options_.size) + " pooled connections stayed busy for " +
                    ms_text(waited),
                Fault{RetryScope::kStatement, Outcome::kNotApplied, Pace::kSlow, false});
}

Status Pool::connect_backing_off(Duration left) const {
  // Like an open breaker: our own shedding, so it feeds no breaker and is not retried.
  Status s = last_connect_failure("the pool connects again in " + ms_text(left));
  s.with_stop(StopReason::kBreakerOpen, 0, left);
  return s;
}

Status Pool::connect_being_tried() const {
  // Shedding like connect_backing_off(): if that connect fails, the next one comes about
  // one backoff step later.
  Status s = last_connect_failure("another request is trying to connect");
  s.with_stop(StopReason::kBreakerOpen, 0, previous_delay_);
  return s;
}

void Pool::release(Connection conn, bool unusable) noexcept {
  bool usable = !unusable && conn.is_open() && conn.txn_status() == TxnStatus::kIdle;
  // A read-only session whose default was switched off (set_config in a function) would
  // run the next read in a read-write transaction: never reuse it.
  if (usable && options_.read_only &&
      conn.server_parameter("default_transaction_read_only") != "on") {
    usable = false;
  }
  if (!usable) conn.close();
  std::lock_guard<std::mutex> lock(mutex_);
  if (usable) {
    idle_.push_back(std::move(conn));
  } else {
    --open_;
    ++stats_.discarded;
  }
  if (waiters_ > 0) returned_.notify_all();
}

PoolStats Pool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  PoolStats s = stats_;
  s.open = open_;
  s.idle = static_cast<int>(idle_.size());
  s.consecutive_connect_failures = failures_;
  s.next_connect_at = next_connect_at_;
  return s;
}

}  // namespace holdfast::pg
