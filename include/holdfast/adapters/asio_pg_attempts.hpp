// Internal to holdfast/adapters/asio_pg.hpp, which includes it after the Client class: a Client's
// attempts: reads (hedged to the primary when a standby is slow, and sent to the primary when
// it is far slower: ADR 0041) and writes. Transactions: asio_pg_transactions.hpp.
#pragma once

namespace holdfast::asio::pg {

template <class Executor>
auto Client<Executor>::plain_attempt(std::shared_ptr<Plain> state) -> awaitable<Result<Rows>> {
  namespace route = holdfast::pg::detail;
  const TimePoint until = attempt_deadline(state->request);
  // The routing pg::Database's reads take (holdfast/detail/read_route.hpp, ADR 0057): the
  // standbys in turn, the primary, and the standbys that were only behind the request's
  // writes again when the primary could not answer.
  std::uint64_t behind = 0;
  const holdfast::WritePosition at =
      state->write ? holdfast::WritePosition{} : state->request.position();
  if (!state->write && !standbys_.empty() && standby_may_answer(at)) {
    route::StandbyPass pass(standbys_.size(), next_standby_++, options_.standby_wait, until);
    std::optional<Result<Rows>> answered = co_await standby_pass(state, pass, until, at.value);
    if (answered.has_value()) co_return std::move(*answered);
    behind = pass.behind();
  }
  Result<Rows> r = co_await primary_call(state, until, nullptr);
  if (!r.ok() && route::standbys_again_after(r.status(), behind)) {
    route::StandbyPass again(standbys_.size(), 0, options_.standby_wait, until, behind);
    std::optional<Result<Rows>> answered = co_await standby_pass(state, again, until, at.value);
    if (answered.has_value()) co_return std::move(*answered);
  }
  co_return r;
}

template <class Executor>
auto Client<Executor>::standby_pass(std::shared_ptr<Plain> state,
                                    holdfast::pg::detail::StandbyPass& pass, TimePoint until,
                                    std::uint64_t need) -> awaitable<std::optional<Result<Rows>>> {
  // A standby far slower than the primary gets no reads but its probes (ADR 0041); a read
  // whose primary try failed comes back to one whatever its state: a slow answer beats none.
  TimePoint now = detail::Clock::now();
  while (const std::optional<std::size_t> i = pass.next(now)) {
    Standby& sb = *standbys_[*i];
    Use use = Use::kSkip;
    if (!may_ask(sb, now, need, state->primary_failed, use)) continue;
    pass.asked(now);
    const bool probe = use == Use::kProbe;
    const bool suspect = probe || (!state->primary_failed && sb.copy.slow.suspect());
    state->standby_behind = false;
    std::optional<Result<Rows>> answered;
    if (options_.hedge_budget > 0 || suspect) {
      answered = co_await hedged_read(state, sb, until, probe, suspect);
    } else {
      Duration took{-1};
      answered = co_await standby_read(sb, *state, until, now, nullptr, &took);
      judge_standby(sb, took);
    }
    if (answered.has_value()) co_return answered;
    pass.unanswered(*i, state->standby_behind);
    now = detail::Clock::now();
  }
  co_return std::nullopt;
}

template <class Executor>
auto Client<Executor>::may_ask(Standby& sb, TimePoint now, std::uint64_t need, bool primary_failed,
                               Use& use) -> bool {
  Verdict& v = *sb.pool.verdict;
  if (standbys_.size() > 1 && v.silent) {
    // Left alone: no read waits to find out whether it is back; a check off the request
    // path looks, when its wait (leave_alone()) has passed.
    if (!v.checking && now >= v.verdict_until) {
      v.checking = true;
      detail::net::co_spawn(ex_, recheck_standby(this->shared_from_this(), &sb),
                            detail::net::detached);
    }
    return false;
  }
  // Found behind the request's writes moments ago: the primary answers, no round trip here
  // (after the primary failed, the standby is asked whatever its hold).
  if (need != 0 && !primary_failed && sb.catch_up.skip(need, now)) return false;
  if (!replay_allows(sb, now)) return false;
  use = sb.copy.slow.use(now, primary_failed);
  return use != Use::kSkip;
}

template <class Executor>
auto Client<Executor>::recheck_standby(std::shared_ptr<Client> self, Standby* sb)
    -> awaitable<void> {
  const holdfast::pg::ConnectOptions& o = sb->pool.options;
  const TimePoint until = detail::Clock::now() + o.connect_timeout;
  Result<std::unique_ptr<Slot>> s =
      co_await self->connect_host(o, *sb->pool.only_host, true, until);
  const bool standby = s.ok() && (*s)->conn.in_hot_standby();
  if (s.ok()) {
    (*s)->forget();
    (*s)->conn.close();
  }
  sb->pool.verdict->checking = false;
  if (!standby) {
    self->leave_alone(sb->pool);
    co_return;
  }
  sb->pool.verdict->silent = false;
  sb->pool.verdict->verdict_until = TimePoint{};
  sb->pool.verdict->alone_for = Duration::zero();
}

template <class Executor>
auto Client<Executor>::standby_read(Standby& sb, Plain& state, TimePoint until, TimePoint started,
                                    Slot** in_use, Duration* took)
    -> awaitable<std::optional<Result<Rows>>> {
  const holdfast::WritePosition mine = state.request.position();
  if (mine.primary_only) co_return std::nullopt;  // a write of the request's became unknown
  const TimePoint cap = std::min(until, detail::Clock::now() + options_.standby_wait);
  Result<std::unique_ptr<Slot>> slot = co_await lease(sb.pool, cap);
  if (!slot.ok()) co_return std::nullopt;
  Slot& s = **slot;
  if (in_use != nullptr) *in_use = &s;
  // Its setting, the standby's head and the read: prepared statements of the connection.
  const bool prepared = prepares();
  const Piece pieces[] = {{kStandbyHead, {}, prepared}, {state.sql, state.params.params, prepared}};
  Rows out[2];
  std::size_t failed = 2;
  Status st = co_await exchange(s, pieces, out, &failed, cap, 0, nullptr, prepared);
  const TimePoint end = detail::Clock::now();
  std::optional<Result<Rows>> answer;
  if (st.ok()) {
    Result<holdfast::pg::Lsn> replayed = holdfast::pg::Lsn::parse(out[0].text(0, 0));
    if (out[0].text(0, 1) != "t") {
      sb.copy.lag.forget();
      drop_all(sb.pool, s);  // promoted: no replica any more
      if (sb.pool.only_host) leave_alone(sb.pool);
    } else {
      if (sb.pool.only_host) {  // a standby again
        sb.pool.verdict->silent = false;
        sb.pool.verdict->alone_for = Duration::zero();
      }
      if (took != nullptr) *took = end - started;
      // Not streaming (no receive position): nothing received waits to be replayed.
      Result<holdfast::pg::Lsn> received = holdfast::pg::Lsn::parse(out[0].text(0, 2));
      const std::uint64_t at = replayed.ok() ? replayed->value : 0;
      if (sb.copy.lag.observe(at, received.ok() ? received->value : at, end) >
          options_.max_standby_lag) {
        // Its answer is older than the primary's by more than the standby may lag (replay
        // paused, or too slow to keep up): the primary answers, as pg::Database's replica
        // rule (DatabaseOptions::max_replica_lag) has it.
        sb.lagging_until = end + kLagRecheck;
        lagging_reads_.fetch_add(1, std::memory_order_relaxed);
      } else {
        sb.lagging_until = TimePoint{};
        if (replayed.ok() && replayed->value >= mine.value) {
          sb.catch_up.saw(replayed->value);
          sb.reads.fetch_add(1, std::memory_order_relaxed);
          answer = std::move(out[1]);
        } else {
          if (replayed.ok()) sb.catch_up.behind(replayed->value, end);
          behind_reads_.fetch_add(1, std::memory_order_relaxed);
          state.standby_behind = true;  // may have replayed them after the primary failed
        }
      }
    }
  } else if (failed == 1 && !st.fault().transient()) {
    answer = Result<Rows>(std::move(st));  // the statement's own error: the primary's too
  } else if (took != nullptr && !s.stop && end >= cap &&
             end - started > holdfast::pg::detail::slow_threshold(primary_latency_.recent(),
                                                                  sb.copy.slow.rule())) {
    // Not answered within standby_wait: slower than any answer that counts as fast (without
    // this a standby slower than standby_wait would never be found slow).
    *took = kUnanswered;
  }
  // No answer from the standby itself (lost, or silent): its lag is measured anew from its
  // next answer, as pg::Database's replica rule does after a failure.
  if (failed == 0 && !s.stop && !st.ok()) sb.copy.lag.forget();
  if (in_use != nullptr) *in_use = nullptr;
  s.stop = false;
  give_back(sb.pool, std::move(*slot));
  co_return answer;
}

template <class Executor>
auto Client<Executor>::stop(Slot& s) -> void {
  s.stop = true;
  detail::error_code ignored;
  s.descriptor.cancel(ignored);
}

template <class Executor>
auto Client<Executor>::race_wait(Race& race, TimePoint until) -> awaitable<void> {
  (void)co_await signalled(race.wake, until);
}

template <class Executor>
auto Client<Executor>::hedged_read(std::shared_ptr<Plain> state, Standby& sb, TimePoint until,
                                   bool probe, bool suspect)
    -> awaitable<std::optional<Result<Rows>>> {
  if (!probe) hedge_tokens_ = std::min(hedge_tokens_ + options_.hedge_budget, 10.0);
  auto race = std::make_shared<Race>(ex_);
  const TimePoint started = detail::Clock::now();
  detail::net::co_spawn(
      ex_,
      // The standby lives as long as the Client, which `self` keeps.
      [self = this->shared_from_this(), standby = &sb, state, race, until,
       started]() -> awaitable<void> {
        Duration took{-1};
        std::optional<Result<Rows>> answer = co_await self->standby_read(
            *standby, *state, until, started, &race->standby_slot, &took);
        if (!race->judged) {
          race->judged = true;
          self->judge_standby(*standby, took);
        }
        race->standby.emplace(std::move(answer));
        race->wake.cancel();
      },
      detail::net::detached);
  const std::optional<Duration> p95 = standby_p95(sb);
  // Above this an answer is slow (ADR 0041). A probe waits for the standby that long; a read
  // of a standby whose last answer was slow is hedged by then at the latest.
  const Duration threshold =
      holdfast::pg::detail::slow_threshold(primary_latency_.recent(), sb.copy.slow.rule());
  Duration delay = threshold;
  if (!probe) {
    delay = std::max(options_.hedge_min_delay, p95.value_or(options_.standby_wait));
    if (suspect) delay = std::min(delay, threshold);
  }
  const TimePoint hedge_at = std::min(until, started + delay);
  while (!race->standby.has_value() && detail::Clock::now() < hedge_at) {
    co_await race_wait(*race, hedge_at);
  }
  const bool primary_free = !primary_.idle.empty() || primary_.open < primary_.max;
  const bool paid = probe || (options_.hedge_budget > 0 && p95.has_value() && hedge_tokens_ >= 1.0);
  if (!race->standby.has_value() && paid && primary_free) {
    if (!probe) hedge_tokens_ -= 1.0;
    hedged_.fetch_add(1, std::memory_order_relaxed);
    race->hedged = true;
    detail::net::co_spawn(
        ex_,
        [self = this->shared_from_this(), state, race, until]() -> awaitable<void> {
          Result<Rows> r = co_await self->primary_call(state, until, &race->primary_slot);
          race->primary.emplace(std::move(r));
          race->wake.cancel();
        },
        detail::net::detached);
  } else if (suspect) {
    // No hedge could go: a standby that was just slow gets the threshold, then its try is
    // given up (another slow answer) and it leaves the read to the next standby or the
    // primary, as any standby that does not answer.
    const TimePoint give_up_at = std::min(until, started + threshold);
    while (!race->standby.has_value() && detail::Clock::now() < give_up_at) {
      co_await race_wait(*race, give_up_at);
    }
    if (!race->standby.has_value()) {
      if (race->standby_slot != nullptr) stop(*race->standby_slot);
      race->judged = true;
      judge_standby(sb, kUnanswered);
      co_return std::nullopt;
    }
  }
  // The first usable answer: the standby's when it has one, else the primary's. A failed
  // primary answer does not win while the standby's may still come.
  for (;;) {
    if (race->standby.has_value() && race->standby->has_value()) {
      if (race->primary_slot != nullptr) stop(*race->primary_slot);
      co_return std::move(**race->standby);
    }
    if (race->primary.has_value() && (race->primary->ok() || race->standby.has_value())) {
      if (race->standby_slot != nullptr) stop(*race->standby_slot);
      if (!race->standby.has_value()) {
        // The primary answered first: the standby lost the hedge (a slow answer for it).
        hedges_won_.fetch_add(1, std::memory_order_relaxed);
        race->judged = true;
        judge_standby(sb, kUnanswered);
      }
      co_return std::move(*race->primary);
    }
    if (race->standby.has_value() && !race->hedged) {
      // The standby left the read to the others, and no hedge is running: the caller asks the
      // next standby or the primary.
      co_return std::nullopt;
    }
    if (detail::Clock::now() >= until) {
      if (race->standby_slot != nullptr) stop(*race->standby_slot);
      if (race->primary_slot != nullptr) stop(*race->primary_slot);
      co_return Result<Rows>(
          Status(Code::kDeadlineExceeded, "no copy answered the read within its window",
                 Fault{RetryScope::kStatement, Outcome::kNotApplied, Pace::kSlow, true}));
    }
    co_await race_wait(*race, until);
  }
}

template <class Executor>
auto Client<Executor>::write_once(Slot& s, const Plain& state, TimePoint until)
    -> awaitable<Result<Rows>> {
  // The write, its setting and the commit position's query: prepared statements of the
  // connection.
  const bool prepared = prepares();
  const Piece pieces[] = {{"BEGIN"},
                          {state.sql, state.params.params, prepared},
                          {"COMMIT"},
                          {kPositionSql, {}, prepared}};
  Rows out[4];
  std::size_t failed = 4;
  const std::uint64_t heard = s.conn.notices_received();
  Status st = co_await exchange(s, pieces, out, &failed, until, 1, &primary_, prepared);
  if (st.ok() || failed == 3) {
    if (unconfirmed(s, heard, state.request)) co_return holdfast::pg::unconfirmed_commit();
    // Committed (a failure after the COMMIT leaves only the position unknown).
    wrote(state.request, st.ok() ? &out[3] : nullptr, s);
    co_return std::move(out[1]);
  }
  // Whether it committed may be unknown: its reads go to the primary from now on.
  if (st.fault().outcome == Outcome::kUnknown) state.request.position_unknown();
  co_return st;
}

template <class Executor>
auto Client<Executor>::wrote(const RequestContext& request, const Rows* position, const Slot& s,
                             std::string_view key) -> void {
  if (position == nullptr || position->is_null(0, 0)) {
    request.position_unknown();
    if (lost_ != nullptr) lost_->confirmed(0, 0, s.host, key);
    return;
  }
  Result<holdfast::pg::Lsn> lsn = holdfast::pg::Lsn::parse(position->text(0, 0));
  std::uint32_t timeline = 0;
  const std::string_view t = position->text(0, 1);
  if (std::from_chars(t.data(), t.data() + t.size(), timeline, 16).ec != std::errc()) {
    timeline = 0;
  }
  primary_.verdict->newest_timeline = std::max(primary_.verdict->newest_timeline, timeline);
  if (lsn.ok()) {
    request.raise_position(lsn->value, timeline);
  } else {
    request.position_unknown();
  }
  if (lost_ != nullptr) lost_->confirmed(lsn.ok() ? lsn->value : 0, timeline, s.host, key);
}

template <class Executor>
auto Client<Executor>::primary_call(std::shared_ptr<Plain> state, TimePoint until, Slot** in_use)
    -> awaitable<Result<Rows>> {
  Result<std::unique_ptr<Slot>> slot = co_await lease(primary_, until);
  if (!slot.ok()) {
    if (!state->write && in_use == nullptr) state->primary_failed = true;
    co_return slot.status();
  }
  if (in_use != nullptr) *in_use = slot->get();
  // (Not a conditional expression: g++ 12 loses the result of a co_await inside one.)
  Result<Rows> r = Status(Code::kInternal, "not run");
  if (state->write) {
    r = co_await write_once(**slot, *state, until);
  } else {
    // The primary's read latency (its round trip, not the wait for a connection) is what a
    // standby's is judged against (ADR 0041).
    const TimePoint sent = detail::Clock::now();
    r = co_await read_once(**slot, state->sql, state->params.params, until, &primary_, prepares());
    if (r.ok() && !standbys_.empty()) primary_latency_.record(detail::Clock::now() - sent);
    if (!r.ok() && in_use == nullptr) state->primary_failed = true;
  }
  if (!r.ok() && r.status().sqlstate() == "25006" && several_hosts_) {
    r = Result<Rows>(demoted(**slot, r.status()));
  }
  if (in_use != nullptr) *in_use = nullptr;
  (*slot)->stop = false;
  give_back(primary_, std::move(*slot));
  co_return r;
}

}  // namespace holdfast::asio::pg
