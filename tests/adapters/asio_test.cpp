// The Asio adapter against Debian's standalone Asio, on a real io_context run by one thread.
// Backoffs are a few milliseconds; the tests assert counts, order and statuses, never how
// long anything took.
#include "holdfast/adapters/asio.hpp"
#include "holdfast/adapters/asio_shared_reads.hpp"

#include <gtest/gtest.h>

// Built twice: on standalone Asio, and on Boost.Asio (Boost 1.81) with HOLDFAST_ASIO_BOOST.
#if defined(HOLDFAST_ASIO_BOOST)
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
namespace net = ::boost::asio;
#else
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
namespace net = ::asio;
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "holdfast/core/shield.hpp"

namespace holdfast::asio {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Lock contention: retried, and (not overload) never a breaker failure.
Status busy() {
  return Status(Code::kUnavailable, "database is locked",
                Fault{RetryScope::kStatement, Outcome::kNotApplied, Pace::kFast, false});
}

RetryPolicy quick_policy(Duration step = milliseconds(1), int attempts = 5) {
  RetryPolicy p;
  p.max_attempts(attempts)
      .backoff(Backoff::steps({step, 2 * step}, Jitter::none()))
      .window(seconds(60))
      .on_retry([](const RetryEvent&) {});
  return p;
}

Shield::Options roomy_options() {
  Shield::Options o;
  o.reads = o.writes = quick_policy();
  o.limit.initial = o.limit.min = o.limit.max = 1000;
  return o;
}

// An asynchronous attempt that fails `failures` times, then succeeds with `value`; each
// answer comes from a handler posted to the io_context, as a driver's would.
struct FlakyQuery {
  net::io_context* io;
  int failures;
  int value;
  std::shared_ptr<int> calls = std::make_shared<int>(0);

  void operator()(Done<Result<int>> done) const {
    const int n = ++*calls;
    net::post(*io, [n, f = failures, v = value, done = std::move(done)]() mutable {
      if (n <= f) {
        done(busy());
      } else {
        done(v);
      }
    });
  }
};

TEST(AsioAdapter, TwoHundredConcurrentRetriesOnOneThreadAllSucceed) {
  Shield shield("asio", roomy_options());
  net::io_context io;
  constexpr int kOps = 200;
  std::vector<std::optional<Result<int>>> results(kOps);
  std::vector<RetryStats> stats(kOps);
  std::vector<std::shared_ptr<int>> calls;
  for (int i = 0; i < kOps; ++i) {
    FlakyQuery q{&io, 2, i};
    calls.push_back(q.calls);
    RunOptions opts;
    opts.stats = &stats[static_cast<std::size_t>(i)];
    async_run<Result<int>>(io.get_executor(), shield, Operation::read("q"), opts, q,
                           [&results, i](Result<int> r) {
                             results[static_cast<std::size_t>(i)].emplace(std::move(r));
                           });
  }
  io.run();
  for (int i = 0; i < kOps; ++i) {
    const auto& r = results[static_cast<std::size_t>(i)];
    ASSERT_TRUE(r.has_value()) << "operation " << i << " never completed";
    ASSERT_TRUE(r->ok()) << r->status().to_string();
    EXPECT_EQ(**r, i);
    EXPECT_EQ(*calls[static_cast<std::size_t>(i)], 3);
    EXPECT_EQ(stats[static_cast<std::size_t>(i)].attempts, 3);
  }
  EXPECT_EQ(shield.limit().in_flight(), 0);
  EXPECT_EQ(shield.waiting(), 0);
}

// Two threads run the io_context; each operation keeps to its own strand, and its attempt
// answers from a third thread (a driver's own), through Done.
TEST(AsioAdapter, OnStrandsOfAContextRunByTwoThreadsWithAnswersFromAnotherThread) {
  Shield shield("asio", roomy_options());
  net::io_context io;
  net::io_context driver;  // the driver's own thread
  auto driver_work = net::make_work_guard(driver);
  std::thread driver_thread([&] { driver.run(); });
  constexpr int kOps = 100;
  std::atomic<int> ok{0};
  std::atomic<int> calls{0};
  for (int i = 0; i < kOps; ++i) {
    auto attempt = [&, n = std::make_shared<int>(0)](Done<Status> d) {
      ++calls;
      const bool fail = ++*n <= 2;
      net::post(driver, [fail, d = std::move(d)]() mutable { d(fail ? busy() : Status()); });
    };
    async_run(net::make_strand(io), shield, Operation::read("q"), attempt, [&](Status s) {
      EXPECT_TRUE(s.ok()) << s.to_string();
      if (s.ok()) ++ok;
    });
  }
  std::thread second([&] { io.run(); });
  io.run();
  second.join();
  driver_work.reset();
  driver_thread.join();
  EXPECT_EQ(ok.load(), kOps);
  EXPECT_EQ(calls.load(), 3 * kOps);
  EXPECT_EQ(shield.limit().in_flight(), 0);
}

TEST(AsioAdapter, CoAwaitWithUseAwaitableReturnsTheResult) {
  Shield shield("asio", roomy_options());
  net::io_context io;
  FlakyQuery q{&io, 1, 42};
  std::optional<Result<int>> got;
  RetryStats stats;
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        RunOptions opts;
        opts.stats = &stats;
        Result<int> r = co_await async_run<Result<int>>(
            io.get_executor(), shield, Operation::read("q"), opts, q, net::use_awaitable);
        got.emplace(std::move(r));
      },
      net::detached);
  io.run();
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->ok()) << got->status().to_string();
  EXPECT_EQ(**got, 42);
  EXPECT_EQ(*q.calls, 2);
  EXPECT_EQ(stats.attempts, 2);
}

TEST(AsioAdapter, APermanentFaultIsNotRetried) {
  Shield shield("asio", roomy_options());
  net::io_context io;
  int calls = 0;
  auto attempt = [&](Done<Status> d) {
    ++calls;
    d(Status(Code::kInvalidArgument, "syntax error"));  // answered at once, inline
  };
  std::optional<Status> got;
  async_run(io.get_executor(), shield, Operation::read("q"), attempt,
            [&](Status s) { got.emplace(std::move(s)); });
  io.run();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->code(), Code::kInvalidArgument);
  EXPECT_EQ(got->stop_reason(), StopReason::kPermanent);
  EXPECT_EQ(calls, 1);
}

TEST(AsioAdapter, AttemptsExhaustedGivesUpWithTheLastFailure) {
  Shield shield("asio", roomy_options());
  net::io_context io;
  FlakyQuery q{&io, 100, 0};
  std::optional<Result<int>> got;
  async_run<Result<int>>(io.get_executor(), shield, Operation::read("q"), q,
                         [&](Result<int> r) { got.emplace(std::move(r)); });
  io.run();
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->ok());
  EXPECT_EQ(got->status().stop_reason(), StopReason::kAttemptsExhausted);
  EXPECT_EQ(*q.calls, 5);
}

TEST(AsioAdapter, CancelledInItsBackoffCompletesCancelledAndReleasesItsPlace) {
  Shield::Options o = roomy_options();
  o.reads = quick_policy(seconds(30));  // a backoff the test never waits out
  Shield shield("asio", o);
  net::io_context io;
  net::cancellation_signal cancel;
  int calls = 0;
  auto attempt = [&](Done<Status> d) {
    ++calls;
    net::post(io, [&, d = std::move(d)]() mutable {
      d(busy());
      // The operation is in its backoff now: cancel it from the event loop.
      net::post(io, [&] { cancel.emit(net::cancellation_type::terminal); });
    });
  };
  std::optional<Status> got;
  async_run(
      io.get_executor(), shield, Operation::read("q"), attempt,
      net::bind_cancellation_slot(cancel.slot(), [&](Status s) { got.emplace(std::move(s)); }));
  io.run();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->code(), Code::kCancelled);
  EXPECT_EQ(got->stop_reason(), StopReason::kCancelled);
  EXPECT_EQ(got->attempts(), 1);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(shield.limit().in_flight(), 0);
}

// A Shield whose breaker opened on lock contention: requests wait for its probe (timer
// waits), and the probe's answer is held by the test. Waits are long (probe lease, probe_wait
// and wake_poll in seconds): anything that moves while the test polls the io_context was
// moved by an event, not by a timer.
class AsioProbeWait : public ::testing::Test {
 protected:
  static constexpr int kWaiters = 20;

  AsioProbeWait() : shield_("asio", options()) {}

  static Shield::Options options() {
    Shield::Options o = roomy_options();
    o.breaker.consecutive_failures = 3;
    o.breaker.open_initial = o.breaker.open_max = milliseconds(1);
    o.breaker.probe_lease = seconds(10);  // within the policy's 60 s window
    o.probe_wait = seconds(10);
    return o;
  }

  // Opens the breaker: three single-attempt requests that meet lock contention.
  void trip() {
    const Status locked(Code::kUnavailable, "database is locked",
                        Fault{RetryScope::kStatement, Outcome::kNotApplied, Pace::kFast, true});
    RunOptions once;
    once.policy = &single_;
    for (int i = 0; i < 3; ++i) {
      async_run(
          io_.get_executor(), shield_, Operation::read("trip"), once,
          [&](Done<Status> d) { d(locked); }, [](Status) {});
    }
    io_.run();
    io_.restart();
    ASSERT_EQ(shield_.breaker().state(), BreakerState::kOpen);
  }

  // The database: while the breaker is not closed, a call (the probe) is held for the test;
  // otherwise it answers OK from the event loop.
  auto database() {
    return [this](Done<Status> d) {
      if (shield_.breaker().state() != BreakerState::kClosed) {
        held_.push_back(std::move(d));
        return;
      }
      ++served_;
      net::post(io_, [d = std::move(d)]() mutable { d(Status()); });
    };
  }

  // Starts `n` requests, and runs the loop until one of them is the held probe and the
  // others wait for it.
  void start_waiters(int n, std::vector<std::optional<Status>>& results,
                     std::vector<net::cancellation_signal>* cancels = nullptr) {
    RunOptions patient;
    patient.wake_poll = seconds(600);
    for (int i = 0; i < n; ++i) {
      auto done = [&results, i](Status s) {
        results[static_cast<std::size_t>(i)].emplace(std::move(s));
      };
      if (cancels != nullptr) {
        async_run(
            io_.get_executor(), shield_, Operation::read("page"), patient, database(),
            net::bind_cancellation_slot((*cancels)[static_cast<std::size_t>(i)].slot(), done));
      } else {
        async_run(io_.get_executor(), shield_, Operation::read("page"), patient, database(), done);
      }
    }
    for (int turns = 0; turns < 200; ++turns) {
      if (held_.size() == 1 && shield_.waiting() == n - 1) break;
      if (std::all_of(results.begin(), results.end(), [](auto& r) { return r.has_value(); })) {
        break;  // they gave up: the test's assertions say how
      }
      io_.run_one_for(milliseconds(100));
    }
    io_.restart();
  }

  // Runs every handler that is ready, none that waits for a timer to expire.
  void poll_all() {
    io_.restart();
    io_.poll();
  }

  RetryPolicy single_ = quick_policy(milliseconds(1), 1);
  Shield shield_;
  net::io_context io_;  // after the Shield: pending operations hold Calls of it
  std::vector<Done<Status>> held_;
  int served_ = 0;
};

TEST_F(AsioProbeWait, WaitersAreReleasedByTheProbeThatSucceedsNotByTheirTimers) {
  trip();
  std::vector<std::optional<Status>> results(kWaiters);
  start_waiters(kWaiters, results);
  ASSERT_EQ(held_.size(), 1u) << "one probe reached the database while the breaker was open";
  ASSERT_EQ(shield_.waiting(), kWaiters - 1);
  EXPECT_EQ(served_, 0);

  held_.front()(Status());  // the database answers the probe
  poll_all();
  EXPECT_EQ(shield_.breaker().state(), BreakerState::kClosed);
  for (int i = 0; i < kWaiters; ++i) {
    const auto& r = results[static_cast<std::size_t>(i)];
    ASSERT_TRUE(r.has_value()) << "request " << i << " still waits";
    EXPECT_TRUE(r->ok()) << r->to_string();
  }
  EXPECT_EQ(served_, kWaiters - 1);
  EXPECT_EQ(shield_.waiting(), 0);
  EXPECT_EQ(shield_.limit().in_flight(), 0);
}

TEST_F(AsioProbeWait, CancelledWhileWaitingForTheProbeLeavesTheQueueAtOnce) {
  trip();
  std::vector<std::optional<Status>> results(3);
  std::vector<net::cancellation_signal> cancels(3);
  start_waiters(3, results, &cancels);
  ASSERT_EQ(held_.size(), 1u);
  ASSERT_EQ(shield_.waiting(), 2);
  // The probe is one of the three; cancel a waiter.
  int waiter = -1;
  for (int i = 0; i < 3 && waiter < 0; ++i) {
    cancels[static_cast<std::size_t>(i)].emit(net::cancellation_type::terminal);
    poll_all();
    if (results[static_cast<std::size_t>(i)].has_value()) waiter = i;
  }
  ASSERT_GE(waiter, 0);
  const Status& s = *results[static_cast<std::size_t>(waiter)];
  EXPECT_EQ(s.code(), Code::kCancelled);
  EXPECT_EQ(s.stop_reason(), StopReason::kCancelled);
  EXPECT_EQ(s.attempts(), 0);
  EXPECT_EQ(shield_.waiting(), 1);

  held_.front()(Status());
  io_.restart();
  io_.run();
  EXPECT_EQ(shield_.waiting(), 0);
  EXPECT_EQ(shield_.limit().in_flight(), 0);
  for (const auto& r : results)
    ASSERT_TRUE(r.has_value());
}

TEST(AsioAdapter, AnOpenBreakerFailsFastWithRetryAfter) {
  Shield shield("asio", roomy_options());
  net::io_context io;
  shield.breaker().isolate();
  int calls = 0;
  auto attempt = [&](Done<Status> d) {
    ++calls;
    d(Status());
  };
  std::optional<Status> got;
  async_run(io.get_executor(), shield, Operation::read("q"), attempt,
            [&](Status s) { got.emplace(std::move(s)); });
  io.run();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->code(), Code::kUnavailable);
  EXPECT_EQ(got->stop_reason(), StopReason::kBreakerOpen);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(shield.limit().in_flight(), 0);
}

TEST(AsioAdapter, OverloadOpensTheBreakerAndLaterCallsFailFast) {
  Shield::Options o = roomy_options();
  o.breaker.consecutive_failures = 3;
  o.breaker.open_initial = o.breaker.open_max = seconds(60);
  Shield shield("asio", o);
  net::io_context io;
  const Status overload(Code::kUnavailable, "too many connections",
                        Fault{RetryScope::kStatement, Outcome::kNotApplied, Pace::kSlow, true});
  int calls = 0;
  auto attempt = [&](Done<Status> d) {
    ++calls;
    net::post(io, [&, d = std::move(d)]() mutable { d(overload); });
  };
  std::vector<Status> got;
  for (int i = 0; i < 3; ++i) {
    async_run(io.get_executor(), shield, Operation::read("q"), attempt,
              [&](Status s) { got.push_back(std::move(s)); });
  }
  io.run();
  io.restart();
  const int calls_before = calls;
  std::optional<Status> late;
  async_run(io.get_executor(), shield, Operation::read("q"), attempt,
            [&](Status s) { late.emplace(std::move(s)); });
  io.run();
  ASSERT_EQ(got.size(), 3u);
  for (const Status& s : got)
    EXPECT_FALSE(s.ok());
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->stop_reason(), StopReason::kBreakerOpen);
  EXPECT_GT(late->retry_after(), Duration::zero());
  EXPECT_EQ(calls, calls_before);
}

// SharedReads: the requests that miss a cached answer after a commit share one read of it.
// The first leads the read; the others (which observed no later epoch) wait for its answer
// on their own event loop, here one of its own thread.
TEST(SharedReads, RequestsThatObservedNoLaterEpochShareOneRead) {
  SharedReads<std::string> reads;
  SharedReads<std::string>::Ticket leader = reads.join("2026-12-06", 7);
  ASSERT_TRUE(leader.leads());
  SharedReads<std::string>::Ticket same = reads.join("2026-12-06", 7);
  SharedReads<std::string>::Ticket older = reads.join("2026-12-06", 6);
  EXPECT_FALSE(same.leads());
  EXPECT_FALSE(older.leads()) << "a read begun after a later observation shows what it asks";
  SharedReads<std::string>::Ticket other_key = reads.join("2026-12-07", 7);
  EXPECT_TRUE(other_key.leads());
  EXPECT_EQ(reads.under_way(), 2u);

  net::io_context loop(1);
  auto work = net::make_work_guard(loop);
  std::thread runs([&] { loop.run(); });
  std::future<std::shared_ptr<const std::string>> first =
      net::co_spawn(loop, same.answer(std::chrono::hours(1)), net::use_future);
  std::future<std::shared_ptr<const std::string>> second =
      net::co_spawn(loop, older.answer(std::chrono::hours(1)), net::use_future);
  EXPECT_EQ(first.wait_for(milliseconds(0)), std::future_status::timeout);
  const auto page = std::make_shared<const std::string>("the day's page");
  leader.land(page);
  EXPECT_EQ(first.get(), page);
  EXPECT_EQ(second.get(), page);
  EXPECT_EQ(reads.under_way(), 1u) << "the key's read ended when it landed";
  // A request that comes after the landing leads the next read.
  EXPECT_TRUE(reads.join("2026-12-06", 7).leads());
  work.reset();
  runs.join();
}

// An epoch moved after a read began: a request that observed it leads a read of its own,
// and the older read's landing does not end the newer one.
TEST(SharedReads, ARequestThatObservedALaterEpochReadsAgain) {
  SharedReads<std::string> reads;
  SharedReads<std::string>::Ticket before = reads.join("k", 7);
  SharedReads<std::string>::Ticket after = reads.join("k", 8);
  EXPECT_TRUE(before.leads());
  EXPECT_TRUE(after.leads());
  EXPECT_FALSE(reads.join("k", 8).leads());
  before.land(std::make_shared<const std::string>("older"));
  EXPECT_EQ(reads.under_way(), 1u) << "the older read's landing ended the newer one";
}

// A leader whose read fails, or whose coroutine goes, lets its waiters go at once: each
// reads for itself, none waits out its `longest`. A waiter whose leader never answers gets
// nothing once its own `longest` has passed.
TEST(SharedReads, WhenTheLeaderFailsItsWaitersReadForThemselves) {
  SharedReads<std::string> reads;
  std::optional<SharedReads<std::string>::Ticket> leader(reads.join("k", 7));
  SharedReads<std::string>::Ticket waiter = reads.join("k", 7);
  net::io_context loop(1);
  std::future<std::shared_ptr<const std::string>> answer =
      net::co_spawn(loop, waiter.answer(std::chrono::hours(1)), net::use_future);
  loop.poll();
  EXPECT_EQ(answer.wait_for(milliseconds(0)), std::future_status::timeout);
  leader.reset();  // destroyed without landing: a failed read
  loop.run();      // returns once the waiter has resumed: nothing else is left to run
  EXPECT_EQ(answer.get(), nullptr);
  EXPECT_EQ(reads.under_way(), 0u);

  SharedReads<std::string>::Ticket silent = reads.join("k", 8);
  SharedReads<std::string>::Ticket patient = reads.join("k", 8);
  loop.restart();
  std::future<std::shared_ptr<const std::string>> late =
      net::co_spawn(loop, patient.answer(milliseconds(1)), net::use_future);
  loop.run();
  EXPECT_EQ(late.get(), nullptr) << "a waiter whose leader never answered read nothing";
  EXPECT_TRUE(silent.leads());
}

}  // namespace
}  // namespace holdfast::asio
