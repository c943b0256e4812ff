// Internal to holdfast/adapters/asio_pg.hpp, which includes it after the Client class: how a Client
// keeps its connections to a server, connects them and drives their exchanges on the loop, and
// checks a server that stopped answering.
#pragma once

namespace holdfast::asio::pg {

template <class Executor>
auto Client<Executor>::open(const Executor& ex, ClientOptions options,
                            const std::shared_ptr<Client>& sibling)
    -> Result<std::shared_ptr<Client>> {
  if (sibling == nullptr || sibling->options_.connect.conninfo != options.connect.conninfo) {
    return Status(Code::kInvalidArgument,
                  "Client::open(ex, options, sibling): the sibling must be a Client of the same "
                  "primary (the same connect.conninfo)");
  }
  Result<std::shared_ptr<Client>> c = open(ex, std::move(options));
  if (!c.ok()) return c;
  std::shared_ptr<Verdict> shared = sibling->primary_.verdict;
  // Siblings gone are forgotten: the list holds the live ones and this one.
  std::erase_if(shared->clients, [](const std::weak_ptr<Client>& w) { return w.expired(); });
  shared->clients.push_back(*c);
  (*c)->primary_.verdict = std::move(shared);
  return c;
}

template <class Executor>
auto Client<Executor>::lease(Pool& pool, TimePoint until)
    -> awaitable<Result<std::unique_ptr<Slot>>> {
  for (;;) {
    if (pool.verdict->silent &&
        (pool.verdict->probing || detail::Clock::now() < pool.verdict->verdict_until)) {
      // Found silent a moment ago, or not yet answering the probe: answered at once (the
      // Shield's backoff and breaker decide when to look again; the probe closes the breaker).
      // Looked at again after each wait for a connection to come free.
      if (pool.verdict->probing) pool.verdict->asked_at = detail::Clock::now();
      Status s(Code::kUnavailable,
               pool.verdict->probing
                   ? "the server was found silent and has not answered a probe since"
                   : "the server was found silent (no answer to a check)",
               Fault{RetryScope::kReconnect, Outcome::kNotApplied, Pace::kSlow, true});
      s.with_sqlstate("");
      co_return s;
    }
    while (!pool.idle.empty()) {
      std::unique_ptr<Slot> s = std::move(pool.idle.back());
      pool.idle.pop_back();
      if (s->conn.check()) co_return s;
      // Lost while idle (a terminated backend, whose FATAL came while nobody read): find
      // another rather than send a statement into it and fail the attempt.
      s->forget();
      s->conn.close();
      --pool.open;
    }
    if (pool.connect_failures > 0 && &pool == &primary_) {
      const TimePoint now = detail::Clock::now();
      if (now < pool.next_connect_at)
        co_return connect_backing_off(pool, pool.next_connect_at - now);
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

template <class Executor>
auto Client<Executor>::signalled(detail::net::steady_timer& signal, TimePoint until)
    -> awaitable<bool> {
  auto expired = std::make_shared<bool>(false);
  detail::net::steady_timer deadline(ex_, until);
  deadline.async_wait([expired, &signal](const detail::error_code& ec) {
    if (ec || *expired) return;
    *expired = true;
    signal.cancel();  // wakes every waiter on it; each looks again
  });
  detail::error_code ec;
  co_await signal.async_wait(detail::net::redirect_error(detail::net::use_awaitable, ec));
  const bool woken = !*expired;
  *expired = true;  // a deadline that fires now finds nothing to do
  deadline.cancel();
  co_return woken;
}

template <class Executor>
auto Client<Executor>::vacancy(Pool& pool, TimePoint until) -> awaitable<bool> {
  // (Not inside ||: g++ 12 may lose the result of a co_await inside a conditional.)
  const bool came_free = co_await signalled(pool.vacancy, until);
  co_return came_free || detail::Clock::now() < until;
}

template <class Executor>
auto Client<Executor>::connect(Pool& pool, TimePoint until)
    -> awaitable<Result<std::unique_ptr<Slot>>> {
  const holdfast::pg::ConnectOptions& o = pool.options;
  const TimePoint cap = std::min(until, detail::Clock::now() + o.connect_timeout);
  const std::size_t n = holdfast::pg::LoopConnection::host_count(o);
  // A standby of several connects to its own host only; the others try each host in turn.
  const std::size_t tries = pool.only_host ? 1 : n;
  const std::size_t first =
      pool.only_host.value_or(holdfast::pg::LoopConnection::preferred_host(o));
  Status last;
  for (std::size_t k = 0; k < tries; ++k) {
    const std::size_t host = (first + k) % n;
    const TimePoint host_cap =
        k + 1 < tries ? std::min(cap, detail::Clock::now() + o.host_connect_timeout) : cap;
    Result<std::unique_ptr<Slot>> s = co_await connect_host(o, host, n > 1, host_cap);
    if (s.ok() && n > 1 && &pool == &primary_ && (*s)->conn.in_hot_standby()) {
      // With several hosts the primary's pool takes only the server that takes writes (as
      // target_session_attrs=read-write would): a standby reached while the primary is away
      // may not have the request's own writes, and its reads would miss them.
      (*s)->forget();
      (*s)->conn.close();
      s = Status(Code::kUnavailable,
                 "host " + std::to_string(host + 1) + " of " + std::to_string(n) +
                     " is a standby (in recovery)",
                 Fault{RetryScope::kReconnect, Outcome::kNotApplied, Pace::kSlow, false});
    }
    if (s.ok()) {
      if (n > 1 && !pool.only_host) holdfast::pg::LoopConnection::remember_host(o, host);
      (*s)->host = host + 1;
      pool.connect_failures = 0;
      pool.previous_delay = Duration::zero();
      co_return s;
    }
    last = s.status();
    if (detail::Clock::now() >= cap) break;
  }
  if (&pool == &primary_) {
    // Not a give-up: the call may try again once the wait passed (as pg::Database's pool says).
    const Duration wait = connect_failed(pool, last);
    last.with_stop(StopReason::kNone, 0, wait);
  }
  if (&pool != &primary_) {
    // No standby to be had (stopped, or its hosts frozen or not standbys any more, as after a
    // failover): the reads of the next silence_check go to the primary at once instead of each
    // waiting standby_wait for a connect that fails again. One of several standbys is left
    // alone longer: the others take its reads meanwhile.
    if (pool.only_host) {
      leave_alone(pool);
    } else {
      pool.verdict->silent = true;
      pool.verdict->verdict_until = detail::Clock::now() + options_.silence_check;
    }
  }
  give_back(pool, nullptr);
  co_return last;
}

template <class Executor>
auto Client<Executor>::give_back(Pool& pool, std::unique_ptr<Slot> s) -> void {
  if (s != nullptr && s->conn.is_open() && s->conn.txn_status() == holdfast::pg::TxnStatus::kIdle) {
    pool.idle.push_back(std::move(s));
  } else {
    if (s != nullptr) s->forget();
    --pool.open;
  }
  pool.vacancy.cancel();
}

template <class Executor>
auto Client<Executor>::drop_idle(Pool& pool) -> void {
  for (std::unique_ptr<Slot>& idle : pool.idle) {
    idle->forget();
    idle->conn.close();
  }
  pool.open -= pool.idle.size();
  pool.idle.clear();
}

template <class Executor>
auto Client<Executor>::drop_all(Pool& pool, Slot& s) -> void {
  s.forget();
  s.conn.close();
  drop_idle(pool);
}

template <class Executor>
auto Client<Executor>::drive(Slot& s, Want w, TimePoint until, Pool* silence) -> awaitable<Status> {
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

template <class Executor>
auto Client<Executor>::answers(Pool& pool) -> awaitable<bool> {
  const TimePoint now = detail::Clock::now();
  if (now < pool.verdict->verdict_until || pool.verdict->checking || pool.verdict->probing) {
    co_return !pool.verdict->silent || pool.verdict->checking;
  }
  pool.verdict->checking = true;
  const TimePoint until = now + options_.silence_check;
  const std::size_t host =
      pool.only_host.value_or(holdfast::pg::LoopConnection::preferred_host(pool.options));
  const bool several = holdfast::pg::LoopConnection::host_count(pool.options) > 1;
  Result<std::unique_ptr<Slot>> check = co_await connect_host(pool.options, host, several, until);
  bool answered = false;
  if (check.ok()) {
    Result<Rows> one = co_await exchange(**check, "SELECT 1", {}, until);
    answered = one.ok() || !one.status().sqlstate().empty();
    (*check)->forget();
  } else {
    // A refusal is an answer; only a connect that heard nothing until the end is silence.
    answered = detail::Clock::now() < until;
  }
  pool.verdict->checking = false;
  pool.verdict->silent = !answered;
  pool.verdict->verdict_until = detail::Clock::now() + options_.silence_check;
  if (pool.verdict->silent) {
    // Its idle connections reach a server that answers nothing: none is worth keeping.
    drop_idle(pool);
    if (&pool == &primary_) {
      // The primary's silence trips the Shields' breakers (docs/adr/0037), this Client's and
      // its siblings', so that a call given up on it is answered at once with Retry-After
      // instead of retried for its window.
      const TimePoint at = holdfast::Clock::system().now();
      for_each_sibling([at](Client& c) {
        c.shield_.server_silent(at);
        drop_idle(c.primary_);
        c.primary_.vacancy.cancel();  // the calls waiting for a connection are answered now
      });
      if (options_.health_probe_every > Duration::zero()) {
        pool.verdict->probing = true;
        pool.verdict->asked_at = detail::Clock::now();
        detail::net::co_spawn(ex_, probe(this->shared_from_this()), detail::net::detached);
      }
    }
  }
  co_return answered;
}

template <class Executor>
auto Client<Executor>::probe(std::shared_ptr<Client> self) -> awaitable<void> {
  Pool& pool = self->primary_;
  const holdfast::pg::ConnectOptions& o = pool.options;
  const std::size_t n = holdfast::pg::LoopConnection::host_count(o);
  auto probing = std::make_shared<Probing>(ex_, n);
  for (;;) {
    const TimePoint now = detail::Clock::now();
    if (now - pool.verdict->asked_at > kProbeIdle)
      break;  // nobody asks: the next call looks itself
    // Every host at once, each tick, but for one still being probed: a frozen host does not
    // hold up another promoted meanwhile.
    const TimePoint until = now + (n > 1 ? o.host_connect_timeout : o.connect_timeout);
    for (std::size_t host = 0; host < n; ++host) {
      if (probing->busy[host]) continue;
      probing->busy[host] = true;
      detail::net::co_spawn(ex_, probe_host(self, probing, host, until), detail::net::detached);
    }
    (void)co_await signalled(probing->wake, now + options_.health_probe_every);
    if (probing->answered == nullptr) continue;
    // Answering again: the pool keeps this connection, connects without waiting, and the
    // breaker the silence tripped closes (a probe answered, as pg::Database's HealthProbe).
    pool.connect_failures = 0;
    pool.previous_delay = Duration::zero();
    if (pool.open < pool.max) {
      ++pool.open;
      give_back(pool, std::move(probing->answered));
    }
    const TimePoint at = holdfast::Clock::system().now();
    for_each_sibling([at, this](Client& c) {
      c.shield_.server_back(at, Duration::zero());
      if (&c == this) return;
      // The siblings connect again (after a failover their idle connections reach the old
      // primary), without waiting for a backoff.
      drop_idle(c.primary_);
      c.primary_.connect_failures = 0;
      c.primary_.previous_delay = Duration::zero();
    });
    break;
  }
  probing->over = true;  // a probe still out closes what it gets
  pool.verdict->probing = false;
  pool.verdict->silent = false;
  pool.verdict->verdict_until = TimePoint{};
}

template <class Executor>
auto Client<Executor>::probe_host(std::shared_ptr<Client> self, std::shared_ptr<Probing> probing,
                                  std::size_t host, TimePoint until) -> awaitable<void> {
  const holdfast::pg::ConnectOptions& o = self->primary_.options;
  const std::size_t n = holdfast::pg::LoopConnection::host_count(o);
  Result<std::unique_ptr<Slot>> s = co_await connect_host(o, host, n > 1, until);
  // With several hosts only the one that takes writes is the primary (as connect() judges).
  if (s.ok() && !(n > 1 && (*s)->conn.in_hot_standby())) {
    Result<Rows> one =
        co_await exchange(**s, "SELECT 1", {}, detail::Clock::now() + options_.silence_check);
    if (one.ok() && !probing->over && probing->answered == nullptr) {
      if (n > 1) holdfast::pg::LoopConnection::remember_host(o, host);
      (*s)->host = host + 1;
      probing->answered = std::move(*s);
      probing->wake.cancel();
    }
  }
  if (s.ok() && *s != nullptr) {
    (*s)->forget();
    (*s)->conn.close();
  }
  probing->busy[host] = false;
}

template <class Executor>
auto Client<Executor>::connect_host(const holdfast::pg::ConnectOptions& o, std::size_t host,
                                    bool alone, TimePoint until)
    -> awaitable<Result<std::unique_ptr<Slot>>> {
  Result<holdfast::pg::LoopConnection> started =
      alone ? holdfast::pg::LoopConnection::start(o, host) : holdfast::pg::LoopConnection::start(o);
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

template <class Executor>
auto Client<Executor>::connect_failed(Pool& pool, const Status& why) -> Duration {
  ++pool.connect_failures;
  const Duration delay =
      options_.reconnect_backoff.delay(pool.connect_failures, pool.previous_delay, rng_);
  pool.previous_delay = delay;
  pool.next_connect_at = detail::Clock::now() + delay;
  pool.last_connect_error = why;
  return delay;
}

template <class Executor>
auto Client<Executor>::connect_backing_off(const Pool& pool, Duration left) -> Status {
  Status s = pool.last_connect_error;
  Fault f = s.fault();
  f.overload = false;
  f.outcome = Outcome::kNotApplied;
  s.with_fault(f);
  s.annotate("the pool connects again in " +
             std::to_string(std::chrono::ceil<std::chrono::milliseconds>(left).count()) + " ms (" +
             std::to_string(pool.connect_failures) + " failed connects in a row; the last said)");
  s.with_stop(StopReason::kBreakerOpen, 0, left);
  return s;
}

template <class Executor>
auto Client<Executor>::exchange(Slot& s, std::span<const Piece> pieces, std::span<Rows> out,
                                std::size_t* failed, TimePoint until, std::size_t settings_at,
                                Pool* silence, bool prepare_timeout) -> awaitable<Status> {
  *failed = pieces.size();
  // Where the pipeline's transaction begins: the settings (behind a transaction pooler), and
  // what the deadline leaves as the server's statement_timeout, as pg::Database sends it. The
  // Client cancels the statement at its deadline too; the server's own limit ends it even
  // when the cancel cannot reach the server (a cut network), so that it holds no lock long
  // after its caller has gone.
  Piece extra[2];
  std::size_t inserted = 0;
  char timeout_text[24];
  holdfast::pg::Param timeout_param[1] = {nullptr};
  if (settings_at != kNoSettings) {
    if (!settings_sql_.empty()) extra[inserted++] = Piece{settings_sql_, settings_params_};
    if (std::optional<std::string_view> ms = timeout_text_until(until, timeout_text)) {
      timeout_param[0] = holdfast::pg::Param(*ms);
      extra[inserted++] = Piece{kStatementTimeoutSql, timeout_param, prepare_timeout};
    }
  }
  if (inserted == 0) {
    Status st = co_await drive(s, s.conn.send_pipeline(pieces), until, silence);
    lost(s);
    if (!st.ok()) co_return st;
    co_return s.conn.pipeline_result(out, failed);
  }
  std::array<Piece, 8> all;  // LoopConnection::send_pipeline() takes at most 8
  std::array<Rows, 8> got;
  const std::size_t n = std::min(pieces.size() + inserted, all.size());
  const auto is_extra = [&](std::size_t i) {
    return i >= settings_at && i < settings_at + inserted;
  };
  for (std::size_t i = 0, k = 0; i < n; ++i) {
    all[i] = is_extra(i) ? extra[i - settings_at] : pieces[k++];
  }
  // The parameters are copied as the pipeline is sent: timeout_text may go after this.
  Status st = co_await drive(s, s.conn.send_pipeline(std::span(all.data(), n)), until, silence);
  lost(s);
  if (!st.ok()) co_return st;
  std::size_t at = n;
  st = s.conn.pipeline_result(std::span(got.data(), n), &at);
  for (std::size_t i = 0, k = 0; i < n; ++i) {
    if (!is_extra(i) && k < out.size()) out[k++] = std::move(got[i]);
  }
  // A failed setting fails the piece after it (nothing of that one ran).
  *failed = at < settings_at ? at : at < settings_at + inserted ? settings_at : at - inserted;
  co_return st;
}

template <class Executor>
auto Client<Executor>::timeout_text_until(TimePoint until, char (&buf)[24])
    -> std::optional<std::string_view> {
  const Duration left = until - detail::Clock::now();
  if (left > kLongestStatementTimeout) return std::nullopt;  // no deadline to speak of
  return holdfast::pg::statement_timeout_text(left, buf);
}

}  // namespace holdfast::asio::pg
