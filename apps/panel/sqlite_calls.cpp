// The SQLite store's calls on the async lane (ADRs 0029, 0030): each attempt is one try of the
// store's *_once() form on the calling coroutine's event loop (at most 1 ms in the driver);
// the Shield's backoff, its queue for a place under the concurrency limit, its wait for the
// breaker's probe and SQLite's wait for a lock are timer waits that hold no thread
// (holdfast::asio::async_run_sqlite).

#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "holdfast/adapters/asio.hpp"
#include "holdfast/adapters/asio_sqlite.hpp"
#include "store_calls.hpp"

namespace holdfast::panel {
namespace {

namespace net = boost::asio;

class SqliteCalls final : public StoreCalls {
 public:
  explicit SqliteCalls(ClubStore& store) : store_(store), access_(*store.async_access()) {}

  net::awaitable<Result<ClubStore::StampedSession>> session(lane::Context& ctx,
                                                            const std::string& token,
                                                            const std::string& now,
                                                            Priority priority) override {
    // On the sessions' own schedule (ClubStore::session()).
    co_return co_await read<Result<ClubStore::StampedSession>>(
        ctx, Operation::read("session.read").with_priority(priority),
        [&] { return store_.stamped_session_once(token, now); }, access_.sessions);
  }
  net::awaitable<Result<std::vector<Game>>> games(lane::Context& ctx,
                                                  const std::string& date) override {
    co_return co_await read<Result<std::vector<Game>>>(ctx, Operation::read("schedule.games"),
                                                       [&] { return store_.games_once(date); });
  }
  net::awaitable<Result<ScheduleContext>> context(lane::Context& ctx,
                                                  const std::string& date) override {
    co_return co_await read<Result<ScheduleContext>>(ctx, Operation::read("schedule.context"),
                                                     [&] { return store_.context_once(date); });
  }
  net::awaitable<Result<std::optional<ClubStore::Credentials>>> credentials(
      lane::Context& ctx, const std::string& email) override {
    // Signing in is critical (ADR 0035): its reads and its session keep their places.
    co_return co_await read<Result<std::optional<ClubStore::Credentials>>>(
        ctx, Operation::read("login.user").critical(),
        [&] { return store_.credentials_once(email); });
  }
  net::awaitable<Status> rehash(lane::Context& ctx, std::int64_t user_id, const std::string& fresh,
                                const std::string& stored) override {
    co_return co_await write<Status>(ctx, Operation::idempotent_write("login.rehash"),
                                     [&] { return store_.rehash_once(user_id, fresh, stored); });
  }
  net::awaitable<Result<std::string>> open_session(lane::Context& ctx, std::int64_t user_id,
                                                   const std::string& now) override {
    const std::string token = ClubStore::new_token();
    const Status opened =
        co_await write<Status>(ctx, Operation::idempotent_write("login.session").critical(),
                               [&] { return store_.insert_session_once(token, user_id, now); });
    if (!opened.ok()) co_return opened;
    // Its failure is not the sign-in's: the next one tries again. Housekeeping: background.
    (void)co_await write<Status>(ctx, Operation::idempotent_write("login.session_cap").background(),
                                 [&] { return store_.cap_sessions_once(user_id, now); });
    co_return token;
  }
  net::awaitable<Status> end_session(lane::Context& ctx, const std::string& token) override {
    co_return co_await write<Status>(ctx, Operation::idempotent_write("session.end"),
                                     [&] { return store_.end_session_once(token); });
  }
  net::awaitable<Result<PaymentReceipt>> pay(lane::Context& ctx, std::int64_t user_id,
                                             std::int64_t amount_cents, const std::string& method,
                                             const std::string& key,
                                             const std::string& now) override {
    // A whole transaction, re-run after a rollback; with a key, idempotent too (the key makes
    // a repeat apply nothing). A payment is critical (ADR 0035).
    const Operation op{idempotency(key), true, Priority::kCritical, "payments.create"};
    co_return co_await write<Result<PaymentReceipt>>(
        ctx, op, [&] { return store_.pay_once(user_id, amount_cents, method, key, now); });
  }
  net::awaitable<Result<SignupReceipt>> sign_up(lane::Context& ctx, std::int64_t user_id,
                                                std::int64_t game_id, const std::string& key,
                                                const std::string& now) override {
    const Operation op{idempotency(key), true, Priority::kNormal, "signups.create"};
    co_return co_await write<Result<SignupReceipt>>(
        ctx, op, [&] { return store_.sign_up_once(user_id, game_id, key, now); });
  }
  net::awaitable<Status> record_report(lane::Context& ctx, const std::string& path,
                                       const std::string& digest, const std::string& note,
                                       const std::string& now) override {
    co_return co_await write<Status>(ctx, Operation::write("problem_reports.create"), [&] {
      return store_.record_report_once(path, digest, note, now);
    });
  }

 private:
  static Idempotency idempotency(const std::string& key) noexcept {
    return key.empty() ? Idempotency::kNonIdempotent : Idempotency::kIdempotent;
  }
  // One async_run of `call` (a *_once() call) for `op` through `shield` on `policy`'s
  // schedule, within the request's window, counted as one database call.
  template <class R, class Call>
  net::awaitable<R> run(lane::Context& ctx, Shield& shield, const RetryPolicy& policy, Operation op,
                        Call& call) {
    store_.count_call();
    holdfast::asio::SqliteRunOptions options;
    options.run.policy = &policy;
    options.run.window = &ctx.window();
    options.busy_timeout = access_.busy_timeout;
    co_return co_await holdfast::asio::async_run_sqlite<R>(
        co_await net::this_coro::executor, shield, op, options, call, net::use_awaitable);
  }
  // A read through the reads' Shield, on `policy` (the store's reads' schedule unless given).
  template <class R, class Call>
  net::awaitable<R> read(lane::Context& ctx, Operation op, Call call,
                         const RetryPolicy* policy = nullptr) {
    co_return co_await run<R>(ctx, *access_.shield, policy != nullptr ? *policy : *access_.reads,
                              op, call);
  }
  // A write through the writes' Shield.
  template <class R, class Call>
  net::awaitable<R> write(lane::Context& ctx, Operation op, Call call) {
    co_return co_await run<R>(ctx, *access_.write_shield, *access_.writes, op, call);
  }

  ClubStore& store_;
  const ClubStore::AsyncAccess& access_;
};

}  // namespace

std::unique_ptr<StoreCalls> sqlite_calls(ClubStore& store) {
  return std::make_unique<SqliteCalls>(store);
}

}  // namespace holdfast::panel
