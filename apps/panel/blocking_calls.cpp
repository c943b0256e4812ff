// The store's blocking calls, for a route run to its end on a worker's own thread (the
// baselines; holdfast on a ManualClock or without the lane): each call holds the worker for
// as long as the store's loop takes, retries and waits included, as the code a baseline models
// does. holdfast's calls run inside the request's RequestScope: its window, and on PostgreSQL
// its read-your-writes position.

#include "store_calls.hpp"

namespace holdfast::panel {
namespace {

namespace net = boost::asio;

class BlockingCalls final : public StoreCalls {
 public:
  explicit BlockingCalls(ClubStore& store) : store_(store) {}

  net::awaitable<Result<ClubStore::StampedSession>> session(lane::Context& ctx,
                                                            const std::string& token,
                                                            const std::string& now,
                                                            Priority /*priority*/) override {
    const lane::OnThisThread request(ctx);
    Result<std::optional<User>> who = store_.session(token, now);
    if (!who.ok()) co_return who.status();
    co_return ClubStore::StampedSession{std::move(*who), 0};
  }
  net::awaitable<Status> refresh_session(lane::Context& ctx, const std::string& token,
                                         const std::string& now) override {
    const lane::OnThisThread request(ctx);
    co_return store_.refresh_session(token, now);
  }
  net::awaitable<Result<std::vector<Game>>> games(lane::Context& ctx,
                                                  const std::string& date) override {
    const lane::OnThisThread request(ctx);
    co_return store_.games_on(date);
  }
  net::awaitable<Result<ScheduleContext>> context(lane::Context& ctx,
                                                  const std::string& date) override {
    const lane::OnThisThread request(ctx);
    co_return store_.context_on(date);
  }
  net::awaitable<Result<std::optional<ClubStore::Credentials>>> credentials(
      lane::Context& ctx, const std::string& email) override {
    const lane::OnThisThread request(ctx);
    co_return store_.credentials(email);
  }
  net::awaitable<Status> rehash(lane::Context& ctx, std::int64_t user_id, const std::string& fresh,
                                const std::string& stored) override {
    const lane::OnThisThread request(ctx);
    co_return store_.rehash(user_id, fresh, stored);
  }
  net::awaitable<Result<std::string>> open_session(lane::Context& ctx, std::int64_t user_id,
                                                   const std::string& now) override {
    const lane::OnThisThread request(ctx);
    co_return store_.open_session(user_id, now);
  }
  net::awaitable<Status> end_session(lane::Context& ctx, const std::string& token) override {
    const lane::OnThisThread request(ctx);
    co_return store_.end_session(token);
  }
  net::awaitable<Result<PaymentReceipt>> pay(lane::Context& ctx, std::int64_t user_id,
                                             std::int64_t amount_cents, const std::string& method,
                                             const std::string& key,
                                             const std::string& now) override {
    const lane::OnThisThread request(ctx);
    co_return store_.pay(user_id, amount_cents, method, key, now);
  }
  net::awaitable<Result<SignupReceipt>> sign_up(lane::Context& ctx, std::int64_t user_id,
                                                std::int64_t game_id, const std::string& key,
                                                const std::string& now) override {
    const lane::OnThisThread request(ctx);
    co_return store_.sign_up(user_id, game_id, key, now);
  }
  net::awaitable<Status> record_report(lane::Context& ctx, const std::string& path,
                                       const std::string& digest, const std::string& note,
                                       const std::string& now) override {
    const lane::OnThisThread request(ctx);
    co_return store_.record_report(path, digest, note, now);
  }

 private:
  ClubStore& store_;
};

}  // namespace

net::awaitable<Status> StoreCalls::refresh_session(lane::Context& /*ctx*/,
                                                   const std::string& /*token*/,
                                                   const std::string& /*now*/) {
  co_return Status(Code::kUnimplemented,
                   "refresh_session: only the blocking calls refresh a session on a page");
}

std::unique_ptr<StoreCalls> blocking_calls(ClubStore& store) {
  return std::make_unique<BlockingCalls>(store);
}

}  // namespace holdfast::panel
