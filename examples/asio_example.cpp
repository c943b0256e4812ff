// holdfast over Asio: a query retried on an io_context while the database is locked, with a
// timer between attempts (no thread sleeps), from a coroutine and from a callback.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <holdfast/adapters/asio.hpp>
#include <string>

using holdfast::asio::Done;

// A stand-in for an asynchronous driver: locked for the first two calls, then it answers.
struct LockedTwice {
  asio::io_context* io;
  int calls = 0;
  void operator()(Done<holdfast::Result<int>> done) {
    const bool locked = ++calls <= 2;
    asio::post(*io, [locked, done = std::move(done)]() mutable {
      if (locked) {
        done(holdfast::Status(holdfast::Code::kUnavailable, "database is locked",
                              {holdfast::RetryScope::kStatement, holdfast::Outcome::kNotApplied,
                               holdfast::Pace::kFast, true}));
      } else {
        done(42);
      }
    });
  }
};

int main() {
  holdfast::Shield::Options options;
  options.reads.backoff(holdfast::Backoff::steps({std::chrono::milliseconds(5)}));
  holdfast::Shield shield("club", options);
  asio::io_context io;  // after the Shield: its operations end before the Shield does
  int failures = 0;

  LockedTwice first{&io};
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        holdfast::Result<int> n = co_await holdfast::asio::async_run<holdfast::Result<int>>(
            io.get_executor(), shield, holdfast::Operation::read("games.count"), std::ref(first),
            asio::use_awaitable);
        if (!n.ok()) ++failures;
        std::printf("coroutine: %s after %d calls\n",
                    n.ok() ? std::to_string(*n).c_str() : n.status().to_string().c_str(),
                    first.calls);
      },
      asio::detached);

  LockedTwice second{&io};
  holdfast::asio::async_run<holdfast::Result<int>>(
      io.get_executor(), shield, holdfast::Operation::read("games.count"), std::ref(second),
      [&](holdfast::Result<int> n) {
        if (!n.ok()) ++failures;
        std::printf("callback: %s after %d calls\n",
                    n.ok() ? std::to_string(*n).c_str() : n.status().to_string().c_str(),
                    second.calls);
      });

  io.run();  // one thread runs both; each waits out its backoffs on a timer
  return failures == 0 ? 0 : 1;
}
