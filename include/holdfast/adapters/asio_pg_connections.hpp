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
    bool away = false;
    if (&pool == &primary_) {
      // (Not inside a condition: g++ 12 may lose the result of a co_await there.)
      if (pool.verdict->live->silent()) away = co_await primary_silent();
    } else {
      away = pool.verdict->silent && detail::Clock::now() < pool.verdict->verdict_until;
    }
    if (away) {
      // Found silent, and not answering since (a standby: could not be reached a moment ago):
      // answered at once (the Shield's backoff and breaker decide when to look again; the
      // probe closes the breaker). Looked at again after each wait for a connection to come
      // free.
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
  // Waiting on the server for as long as this runs, however it ends (the verdict kept: a
  // frame an io_context destroys may outlive the Client).
  struct Watched {
    std::shared_ptr<Verdict> verdict;
    ~Watched() {
      if (verdict != nullptr) verdict->live->done();
    }
  } watched{silence != nullptr ? silence->verdict : nullptr};
  holdfast::Liveness* live = watched.verdict != nullptr ? watched.verdict->live.get() : nullptr;
  TimePoint now{};
  TimePoint heard{};  // the last bytes this wait got (its start, before any)
  if (live != nullptr) {
    now = detail::Clock::now();
    heard = now;
    live->waiting(now);
  }
  bool cancelled = false;
  while (w != Want::kNothing) {
    TimePoint wake = until;
    if (live != nullptr && !cancelled) {
      // Wakes when a check would be due (or, while another one runs, a tick later).
      const Duration due = live->check_due_in(now, now - heard);
      wake = std::min(until, now + (due > Duration::zero() ? due : live->options().tick));
    }
    const bool ready = co_await detail::ready(s, w, wake, false);
    if (s.stop) {
      // The other copy answered a hedged read first: this one is not wanted any more.
      s.conn.cancel();
      s.forget();
      co_return s.conn.abandon(false);
    }
    if (live != nullptr) now = detail::Clock::now();
    if (ready) {
      if (live != nullptr && w == Want::kRead) {
        heard = now;
        live->answered(now);
      }
      w = s.conn.step();
      continue;
    }
    if (live != nullptr && !cancelled && now < until) {
      // Nothing heard on this wait for a while: is the server there at all? One check at a
      // time; the others wait on and see its verdict.
      if (!live->silent() && live->begin_check(now, now - heard)) {
        const holdfast::Liveness::CheckResult found = co_await check_server(*silence);
        now = detail::Clock::now();
        live->end_check(found, now);
      }
      if (!live->silent()) continue;  // only slow: wait on
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
auto Client<Executor>::make_liveness(Verdict& v) -> std::unique_ptr<holdfast::Liveness> {
  holdfast::Liveness::Options o;
  o.suspect_after = options_.silence_after;
  // A wait quiet for silence_after is checked each time (not twice as long after a check the
  // server answered, as pg::Database's watch of all work does): behind a pooler one wait can
  // stall while the others are answered, and the drill's tails showed it (ADR 0058).
  o.suspect_max = options_.silence_after;
  o.check_timeout = options_.silence_check;
  o.recheck = options_.health_probe_every > Duration::zero() ? options_.health_probe_every
                                                             : options_.silence_check;
  o.background = false;
  Verdict* shared = &v;
  return std::make_unique<holdfast::Liveness>(
      [shared](bool silent) {
        // Acted on by one live Client sharing the verdict, for all of them.
        for (const std::weak_ptr<Client>& w : shared->clients) {
          if (std::shared_ptr<Client> c = w.lock()) {
            c->on_primary_silence(silent);
            return;
          }
        }
      },
      o);
}

template <class Executor>
auto Client<Executor>::on_primary_silence(bool silent) noexcept -> void {
  try {
    const TimePoint at = holdfast::Clock::system().now();
    if (silent) {
      // The primary's silence trips the Shields' breakers (docs/adr/0037), this Client's and
      // its siblings', so that a call given up on it is answered at once with Retry-After
      // instead of retried for its window. Its idle connections reach a server that answers
      // nothing: none is worth keeping.
      for_each_sibling([at](Client& c) {
        c.shield_.server_silent(at);
        drop_idle(c.primary_);
        c.primary_.vacancy.cancel();  // the calls waiting for a connection are answered now
      });
      start_probe();
      return;
    }
    // Answering again: the breakers the silence tripped close, and every sibling connects
    // again at once (after a failover their idle connections reach the old primary).
    for_each_sibling([at](Client& c) {
      c.shield_.server_back(at, Duration::zero());
      drop_idle(c.primary_);
      c.primary_.connect_failures = 0;
      c.primary_.previous_delay = Duration::zero();
    });
  } catch (...) {
    // Nothing to undo: each step above stands alone, and the next check acts again.
  }
}

template <class Executor>
auto Client<Executor>::start_probe() -> void {
  Verdict& v = *primary_.verdict;
  if (v.probing || options_.health_probe_every <= Duration::zero()) return;
  v.probing = true;
  v.asked_at = detail::Clock::now();
  detail::net::co_spawn(ex_, probe(this->shared_from_this()), detail::net::detached);
}

template <class Executor>
auto Client<Executor>::primary_silent() -> awaitable<bool> {
  Verdict& v = *primary_.verdict;
  holdfast::Liveness& live = *v.live;
  if (v.probing) {
    v.asked_at = detail::Clock::now();
    co_return live.silent();
  }
  // No probe runs (none is set, or it stopped for want of calls): this call looks itself when
  // a recheck is due, and the others are answered at once.
  if (live.begin_check(detail::Clock::now())) {
    const holdfast::Liveness::CheckResult found = co_await check_server(primary_);
    live.end_check(found, detail::Clock::now());
  }
  if (live.silent()) start_probe();
  co_return live.silent();
}

template <class Executor>
auto Client<Executor>::check_server(Pool& pool) -> awaitable<holdfast::Liveness::CheckResult> {
  using Found = holdfast::Liveness::CheckResult;
  const TimePoint until = detail::Clock::now() + options_.silence_check;
  const std::size_t host =
      pool.only_host.value_or(holdfast::pg::LoopConnection::preferred_host(pool.options));
  const bool several = holdfast::pg::LoopConnection::host_count(pool.options) > 1;
  Result<std::unique_ptr<Slot>> check = co_await connect_host(pool.options, host, several, until);
  if (!check.ok()) {
    // A refusal is an answer; only a connect that heard nothing until the end is silence.
    co_return detail::Clock::now() < until ? Found::kAnswered : Found::kSilent;
  }
  Result<Rows> one = co_await exchange(**check, "SELECT 1", {}, until);
  (*check)->forget();
  co_return one.ok() || !one.status().sqlstate().empty() ? Found::kAnswered : Found::kSilent;
}

template <class Executor>
auto Client<Executor>::probe(std::shared_ptr<Client> self) -> awaitable<void> {
  Pool& pool = self->primary_;
  const std::shared_ptr<Verdict> v = pool.verdict;
  holdfast::Liveness& live = *v->live;
  const holdfast::pg::ConnectOptions& o = pool.options;
  const std::size_t n = holdfast::pg::LoopConnection::host_count(o);
  auto probing = std::make_shared<Probing>(ex_, n);
  for (;;) {
    TimePoint now = detail::Clock::now();
    if (!live.silent() || now - v->asked_at > kProbeIdle)
      break;  // answering again, or nobody asks: the next call looks itself
    if (probing->answered == nullptr && live.begin_check(now)) {
      // The check: every host at once, but for one still being probed (a frozen host does not
      // hold up another promoted meanwhile); answered when one that takes writes answers.
      const TimePoint until = now + (n > 1 ? o.host_connect_timeout : o.connect_timeout);
      const std::uint64_t check = ++probing->check;
      probing->left = 0;
      for (std::size_t host = 0; host < n; ++host) {
        if (probing->busy[host]) continue;
        probing->busy[host] = true;
        ++probing->left;
        detail::net::co_spawn(ex_, probe_host(self, probing, host, check, until),
                              detail::net::detached);
      }
      // Until one answers, each of this check's probes ended, or a tick passed: a frozen host's
      // probe runs on (its connect_timeout) without holding the next check back, and its answer,
      // should it come later, ends the silence when it comes (below).
      if (probing->left > 0) (void)co_await signalled(probing->wake, now + live.options().tick);
      live.end_check(probing->answered != nullptr ? holdfast::Liveness::CheckResult::kAnswered
                                                  : holdfast::Liveness::CheckResult::kSilent,
                     detail::Clock::now());
    } else if (probing->answered != nullptr) {
      // A host answered after its check's time: heard from, which ends the silence.
      now = detail::Clock::now();
      live.answered(now);
      (void)live.begin_check(now);
      if (live.silent()) {  // a check of another's runs: its end decides
        (void)co_await signalled(probing->wake, now + live.options().tick);
        continue;
      }
    } else {
      const Duration due = live.check_due_in(now);
      (void)co_await signalled(probing->wake,
                               now + (due > Duration::zero() ? due : live.options().tick));
      continue;
    }
    if (probing->answered == nullptr || live.silent()) continue;
    // Answering again (every sibling was told: on_primary_silence(false)): the pool keeps this
    // connection and connects without waiting.
    pool.connect_failures = 0;
    pool.previous_delay = Duration::zero();
    if (pool.open < pool.max) {
      ++pool.open;
      give_back(pool, std::move(probing->answered));
    }
    break;
  }
  probing->over = true;  // a probe still out closes what it gets
  v->probing = false;
}

template <class Executor>
auto Client<Executor>::probe_host(std::shared_ptr<Client> self, std::shared_ptr<Probing> probing,
                                  std::size_t host, std::uint64_t check, TimePoint until)
    -> awaitable<void> {
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
  // The last of its check's probes to end without an answer ends the check now: a refusing
  // host, or one that is still a standby, does not hold the next look back by silence_check.
  if (check == probing->check && --probing->left == 0) probing->wake.cancel();
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
