/// @file
/// holdfast::asio::pg::LogStore: DatabaseSink's logs table on PostgreSQL, written through an
/// asio::pg::Client on its event loop, so that no thread waits in a socket call for the
/// database (a frozen server holds the sink's writer at a condition variable, not in libpq).
///
/// @code
///   // The table exists (pg::PgLogStore::open() or logs_table::kSchema made it).
///   holdfast::asio::pg::ClientOptions options;
///   options.connect.conninfo = url;
///   options.connect.application_name = "app-logs";
///   options.max_connections = 2;  // one batch and one delete at a time
///   auto client = holdfast::asio::pg::Client<>::open(io.get_executor(), options).value();
///   auto store = holdfast::asio::pg::LogStore<>::open(client).value();
///   auto sink = std::make_shared<holdfast::DatabaseSink>(*store);
/// @endcode
///
/// - Each batch is logs_table::kInsertBatch, one statement (all or nothing), sent by
///   Client::async_write() as a background write (Priority::kBackground) in a window of its
///   own (Options::window): the Client's retries, breaker, silence and cancel apply, and a
///   batch whose outcome is unknown is never sent again.
/// - write_batch() and delete_older_than() are called from the sink's threads. Each posts its
///   call to the Client's executor and waits for its answer at most window + grace: an event
///   loop that stopped or does not run the call in time is answered kUnavailable, and the
///   call, if it has not been sent yet, never is.
/// - A failure that may pass (a transient fault, a breaker that is open, a server found
///   silent, the window spent) has fault().overload set, so the sink pauses (its 30 s pause is
///   the backoff); any other failure is the Client's Status as it is.
/// - Text is made storable as pg::PgLogStore makes it (pg::LogBatch).
///
/// The store does not keep the Client alive: its owner does, and lets go of it as of any
/// Client, before its io_context goes (a call posted then is dropped with the loop's handlers);
/// a call after that is answered kUnavailable. Use a Client of its own (its own connections, so
/// a log batch never takes one from a request); a sibling of the application's Client
/// (Client::open(ex, options, sibling)) also shares what that one found of a silent primary.
/// Never throws.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "holdfast/adapters/asio_pg.hpp"
#include "holdfast/log/database_sink.hpp"
#include "holdfast/pg/log_store.hpp"

namespace holdfast::asio::pg {

/// DatabaseSink's LogStore on an asio::pg::Client (see the top of asio_pg_log_store.hpp).
template <class Executor = detail::net::any_io_executor>
class LogStore final : public holdfast::LogStore {
 public:
  /// How long one call may take.
  struct Options {
    /// The window of one batch (or one delete) on the Client: its wait for a connection, its
    /// retries and the server's answer. Short on purpose: a log batch must never hold a
    /// connection for long, and the sink pauses after a failure.
    Duration window = std::chrono::seconds(2);
    /// How much longer than `window` the calling thread waits for the event loop to answer at
    /// all (a loop that stopped or is stuck).
    Duration grace = std::chrono::seconds(1);
  };

  /// A store writing through `client` (not kept alive: see the top). INVALID_ARGUMENT when
  /// `client` is null or a duration is not positive, naming it.
  static Result<std::unique_ptr<LogStore>> open(const std::shared_ptr<Client<Executor>>& client,
                                                Options options = {}) {
    if (client == nullptr) {
      return Status(Code::kInvalidArgument, "asio::pg::LogStore: the client is null");
    }
    if (options.window <= Duration::zero()) {
      return Status(Code::kInvalidArgument, "asio::pg::LogStore::Options::window must be positive");
    }
    if (options.grace <= Duration::zero()) {
      return Status(Code::kInvalidArgument, "asio::pg::LogStore::Options::grace must be positive");
    }
    return std::unique_ptr<LogStore>(new LogStore(client, options));
  }

  /// Inserts `records` in order, in one statement: all or none (see the top).
  Status write_batch(std::span<const LogRecord> records) override {
    if (records.empty()) return Status();
    try {
      holdfast::pg::LogBatch batch;
      const std::uint64_t sanitized = batch.fill(records);
      auto call = std::make_shared<Call>();
      call->args = {std::move(batch.levels), std::move(batch.contexts), std::move(batch.messages),
                    std::move(batch.stamps)};
      Status s = run(call, holdfast::pg::logs_table::kInsertBatch, 4, "logs.batch");
      if (s.ok()) {
        if (sanitized > 0) sanitized_.fetch_add(sanitized, std::memory_order_relaxed);
        const long long stored = call->rows ? call->rows->affected() : -1;
        if (stored != static_cast<long long>(records.size())) {
          s = Status(Code::kInternal, "the logs INSERT stored " + std::to_string(stored) +
                                          " rows of a batch of " + std::to_string(records.size()));
        }
      }
      (s.ok() ? batches_ : failed_batches_).fetch_add(1, std::memory_order_relaxed);
      return s;
    } catch (const std::exception& e) {
      failed_batches_.fetch_add(1, std::memory_order_relaxed);
      return Status(Code::kInternal, std::string("asio::pg::LogStore::write_batch: ") + e.what());
    }
  }

  /// Deletes at most `limit` rows with created_at < utc_stamp(cutoff), oldest first, in one
  /// statement (logs_table::kDeleteOlderThan). Returns how many it deleted.
  Result<int> delete_older_than(WallTime cutoff, int limit) override {
    if (limit <= 0) {
      return Status(Code::kInvalidArgument,
                    "delete_older_than: limit must be positive, got " + std::to_string(limit));
    }
    try {
      auto call = std::make_shared<Call>();
      call->args[0] = std::string(utc_stamp(cutoff).view());
      call->args[1] = std::to_string(limit);
      Status s = run(call, holdfast::pg::logs_table::kDeleteOlderThan, 2, "logs.prune");
      if (!s.ok()) return s;
      return static_cast<int>(call->rows ? call->rows->affected() : 0);
    } catch (const std::exception& e) {
      return Status(Code::kInternal,
                    std::string("asio::pg::LogStore::delete_older_than: ") + e.what());
    }
  }

  /// Batches stored so far.
  [[nodiscard]] std::uint64_t batches() const noexcept {
    return batches_.load(std::memory_order_relaxed);
  }
  /// write_batch() calls that failed so far.
  [[nodiscard]] std::uint64_t failed_batches() const noexcept {
    return failed_batches_.load(std::memory_order_relaxed);
  }
  /// Values changed to be storable so far (NUL bytes, invalid UTF-8).
  [[nodiscard]] std::uint64_t sanitized() const noexcept {
    return sanitized_.load(std::memory_order_relaxed);
  }
  /// The Client the store writes through; null once its owner let go of it.
  [[nodiscard]] std::shared_ptr<Client<Executor>> client() const noexcept { return client_.lock(); }

 private:
  // One call between the calling thread and the loop: its parameters (kept alive until the
  // loop is done with them) and its answer.
  struct Call {
    std::array<std::string, 4> args;  // the statement's parameters, text; the first n are sent
    std::mutex mutex;
    std::condition_variable answered;
    std::optional<Status> status;
    std::optional<holdfast::pg::Rows> rows;
    bool abandoned = false;  // the caller stopped waiting: not to be sent any more

    // Whether the call may still be sent (its caller waits for it).
    bool wanted() {
      std::lock_guard<std::mutex> hold(mutex);
      return !abandoned;
    }

    void finish(Result<holdfast::pg::Rows> r) noexcept {
      std::lock_guard<std::mutex> hold(mutex);
      if (status) return;  // the first answer counts
      status = r.ok() ? Status() : r.status();
      if (r.ok()) rows.emplace(std::move(*r));
      answered.notify_all();
    }
  };
  // A failure that says "not now": the sink pauses.
  static Status unavailable(std::string_view why) {
    return Status(Code::kUnavailable, std::string(why))
        .with_fault(Fault{RetryScope::kStatement, Outcome::kUnknown, Pace::kSlow, true});
  }
  // Answers its call kUnavailable when the loop destroys the handler that holds it without
  // running it (the io_context went away); moved-from, it does nothing.
  struct Dropped {
    std::shared_ptr<Call> call;
    explicit Dropped(std::shared_ptr<Call> c) noexcept : call(std::move(c)) {}
    Dropped(Dropped&&) noexcept = default;
    Dropped& operator=(Dropped&&) = delete;
    Dropped(const Dropped&) = delete;
    ~Dropped() {
      if (call) {
        call->finish(unavailable("the event loop dropped the log store's call"));
      }
    }
  };

  LogStore(const std::shared_ptr<Client<Executor>>& client, Options options)
      : client_(client), options_(options) {}

  // Posts `sql` with the first `n` of the call's arguments as its parameters to the
  // Client's loop and waits for the answer (see the top).
  Status run(const std::shared_ptr<Call>& call, std::string_view sql, std::size_t n,
             std::string_view label) {
    std::shared_ptr<Client<Executor>> client = client_.lock();
    if (client == nullptr) return unavailable("the log store's Client is gone");
    // Only the posted call holds the Client from here: this thread waits without it.
    const Executor ex = client->get_executor();
    const Duration window = options_.window;
    detail::net::post(ex, [client = std::move(client), window, sql, n, label,
                           dropped = Dropped(call)]() mutable {
      Call& c = *dropped.call;
      if (!c.wanted()) return;
      const holdfast::pg::Param params[] = {
          holdfast::pg::Param(c.args[0]), holdfast::pg::Param(c.args[1]),
          holdfast::pg::Param(c.args[2]), holdfast::pg::Param(c.args[3])};
      RequestContext request(window);
      client->async_write(request, sql, std::span(params, n), Operation::write(label).background(),
                          // Holds the Client until its call has completed.
                          [done = std::move(dropped), client](Result<holdfast::pg::Rows> r) {
                            done.call->finish(std::move(r));
                          });
    });
    std::unique_lock<std::mutex> hold(call->mutex);
    if (!call->answered.wait_for(hold, options_.window + options_.grace,
                                 [&] { return call->status.has_value(); })) {
      call->abandoned = true;  // if the loop runs it later, it is not sent: never stored late
      return unavailable("the event loop did not answer the log store's call");
    }
    Status s = *call->status;
    if (!s.ok() && may_pass(s)) {
      Fault f = s.fault();
      f.overload = true;
      s.with_fault(f);
    }
    return s;
  }

  // Whether a failure may pass by itself, so the sink should pause rather than count a lost
  // batch.
  static bool may_pass(const Status& s) noexcept {
    if (s.fault().transient()) return true;
    switch (s.stop_reason()) {
      case StopReason::kWindowSpent:
      case StopReason::kThrottled:
      case StopReason::kBreakerOpen:  // also a server found silent
      case StopReason::kAtCapacity:
      case StopReason::kProbeFailed:
        return true;
      default:
        return false;
    }
  }

  std::weak_ptr<Client<Executor>> client_;
  Options options_;
  std::atomic<std::uint64_t> batches_{0};
  std::atomic<std::uint64_t> failed_batches_{0};
  std::atomic<std::uint64_t> sanitized_{0};
};

}  // namespace holdfast::asio::pg
