// Internal to holdfast/adapters/asio_pg.hpp, which includes it after the Client class: a Client's
// attempts: reads (hedged to the primary when a standby is slow), writes and keyed writes.
#pragma once

namespace holdfast::asio::pg {

template <class Executor>
auto Client<Executor>::plain_attempt(std::shared_ptr<Plain> state) -> awaitable<Result<Rows>> {
  const TimePoint until = attempt_deadline(state->request);
  if (!state->write && standby_) {
    if (options_.hedge_budget > 0) co_return co_await hedged_read(state, until);
    std::optional<Result<Rows>> answered = co_await standby_read(*state, until);
    if (answered.has_value()) co_return std::move(*answered);
  }
  co_return co_await primary_call(state, until, nullptr);
}

template <class Executor>
auto Client<Executor>::stop(Slot& s) -> void {
  s.stop = true;
  detail::error_code ignored;
  s.descriptor.cancel(ignored);
}

template <class Executor>
auto Client<Executor>::race_wait(Race& race, TimePoint until) -> awaitable<void> {
  auto expired = std::make_shared<bool>(false);
  detail::net::steady_timer deadline(ex_, until);
  deadline.async_wait([expired, &race](const detail::error_code& ec) {
    if (ec || *expired) return;
    *expired = true;
    race.wake.cancel();
  });
  detail::error_code ec;
  co_await race.wake.async_wait(detail::net::redirect_error(detail::net::use_awaitable, ec));
  *expired = true;
  deadline.cancel();
}

template <class Executor>
auto Client<Executor>::hedged_read(std::shared_ptr<Plain> state, TimePoint until)
    -> awaitable<Result<Rows>> {
  hedge_tokens_ = std::min(hedge_tokens_ + options_.hedge_budget, 10.0);
  auto race = std::make_shared<Race>(ex_);
  const TimePoint started = detail::Clock::now();
  detail::net::co_spawn(
      ex_,
      [self = this->shared_from_this(), state, race, until, started]() -> awaitable<void> {
        std::optional<Result<Rows>> answer =
            co_await self->standby_read(*state, until, &race->standby_slot);
        if (answer.has_value() && answer->ok()) {
          self->latencies_[self->latency_count_++ % self->latencies_.size()] =
              detail::Clock::now() - started;
        }
        race->standby.emplace(std::move(answer));
        race->wake.cancel();
      },
      detail::net::detached);
  const std::optional<Duration> p95 = standby_p95();
  const Duration delay = std::max(options_.hedge_min_delay, p95.value_or(options_.standby_wait));
  const TimePoint hedge_at = std::min(until, started + delay);
  while (!race->standby.has_value() && detail::Clock::now() < hedge_at) {
    co_await race_wait(*race, hedge_at);
  }
  const bool primary_free = !primary_.idle.empty() || primary_.open < primary_.max;
  if (!race->standby.has_value() && p95.has_value() && hedge_tokens_ >= 1.0 && primary_free) {
    hedge_tokens_ -= 1.0;
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
  }
  // The first usable answer: the standby's when it has one, else the primary's.
  for (;;) {
    if (race->standby.has_value() && race->standby->has_value()) {
      if (race->primary_slot != nullptr) stop(*race->primary_slot);
      co_return std::move(**race->standby);
    }
    if (race->primary.has_value()) {
      if (race->standby_slot != nullptr) stop(*race->standby_slot);
      if (!race->standby.has_value()) hedges_won_.fetch_add(1, std::memory_order_relaxed);
      co_return std::move(*race->primary);
    }
    if (race->standby.has_value() && !race->hedged) {
      // The standby left the read to the primary, and no hedge is running: ask it now.
      co_return co_await primary_call(state, until, nullptr);
    }
    if (detail::Clock::now() >= until) {
      if (race->standby_slot != nullptr) stop(*race->standby_slot);
      if (race->primary_slot != nullptr) stop(*race->primary_slot);
      co_return Status(Code::kDeadlineExceeded, "no copy answered the read within its window",
                       Fault{RetryScope::kStatement, Outcome::kNotApplied, Pace::kSlow, true});
    }
    co_await race_wait(*race, until);
  }
}

template <class Executor>
auto Client<Executor>::write_once(Slot& s, const Plain& state, TimePoint until)
    -> awaitable<Result<Rows>> {
  const Piece pieces[] = {{"BEGIN"}, {state.sql, state.params.params}, {"COMMIT"}, {kPositionSql}};
  Rows out[4];
  std::size_t failed = 4;
  Status st = co_await exchange(s, pieces, out, &failed, until);
  if (st.ok() || failed == 3) {
    // Committed (a failure after the COMMIT leaves only the position unknown).
    wrote(state.request, st.ok() ? &out[3] : nullptr);
    co_return std::move(out[1]);
  }
  // Whether it committed may be unknown: its reads go to the primary from now on.
  if (st.fault().outcome == Outcome::kUnknown) state.request.position_unknown();
  co_return st;
}

template <class Executor>
auto Client<Executor>::once_attempt(std::shared_ptr<Keyed> state)
    -> awaitable<Result<KeyedResult>> {
  const TimePoint until = attempt_deadline(state->request);
  Result<std::unique_ptr<Slot>> leased = co_await lease(primary_, until);
  if (!leased.ok()) co_return leased.status();
  Slot& s = **leased;
  const holdfast::pg::Param key[] = {holdfast::pg::Param(state->key)};
  Result<KeyedResult> out = co_await keyed(s, *state, key, until);
  if (!out.ok() && out.status().sqlstate() == "25006") {
    out = Result<KeyedResult>(demoted(s, out.status()));
  }
  if (!out.ok() && s.conn.is_open() && s.conn.txn_status() != holdfast::pg::TxnStatus::kIdle) {
    // Roll back on the loop: the connection is reused only once it is idle again.
    (void)co_await exchange(s, "ROLLBACK", {}, until);
  }
  give_back(primary_, std::move(*leased));
  co_return out;
}

}  // namespace holdfast::asio::pg
