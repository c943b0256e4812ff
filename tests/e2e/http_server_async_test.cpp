// Issue #32 item 2: HttpServer's async lane (serve_async()) on its own. A request served
// there is a coroutine; while it waits it holds no thread, so one lane thread carries as
// many waiting requests as arrive, and the lane is bounded by max_async_requests instead.
// Raw sockets (raw_http.hpp).
#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "http_server.hpp"
#include "raw_http.hpp"

namespace holdfast::panel {
namespace {

namespace net = boost::asio;
using namespace rawhttp;  // NOLINT(google-build-using-namespace): the tests' own helpers

constexpr std::string_view kAsyncPage = "GET /async HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

// Requests to /async, counted while they wait on a timer until `gate` opens (or 5 s pass,
// so that a failing test ends).
struct WaitingRoute {
  std::atomic<int> in_flight{0};
  std::atomic<int> most{0};
  std::atomic<bool> gate{false};
  int open_at = 0;  // the gate opens by itself when this many wait at once (0: never)

  net::awaitable<void> serve(http::Response& res) {
    const int now = ++in_flight;
    for (int seen = most.load(); seen < now && !most.compare_exchange_weak(seen, now);) {
    }
    if (open_at > 0 && now >= open_at) gate = true;
    net::steady_timer timer(co_await net::this_coro::executor);
    for (int i = 0; i < 500 && !gate; ++i) {
      timer.expires_after(milliseconds(10));
      co_await timer.async_wait(net::use_awaitable);
    }
    --in_flight;
    res.set_content(gate ? "through the gate" : "gave up", "text/plain");
  }
};

std::unique_ptr<HttpServer> make_server(HttpServer::Options o, WaitingRoute& route) {
  auto server =
      std::make_unique<HttpServer>(std::move(o), [](const http::Request&, http::Response& res) {
        res.set_content("on a worker", "text/plain");
      });
  server->serve_async(
      [](const http::Request& req) { return req.path == "/async"; },
      [&route](const http::Request&, http::Response& res) { return route.serve(res); });
  return server;
}

std::vector<int> send_all(int port, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    fds.push_back(connect_to(port));
    send_text(fds.back(), closing(kAsyncPage));
  }
  return fds;
}

TEST(HttpServerAsync, TwentyRequestsWaitAtOnceOnOneLaneThread) {
  WaitingRoute route;
  route.open_at = 20;  // only when all twenty wait together
  HttpServer::Options o;
  o.async_workers = 1;
  const std::unique_ptr<HttpServer> made = make_server(o, route);
  HttpServer& server = *made;
  ASSERT_TRUE(server.start().ok());
  std::vector<int> fds = send_all(server.port(), 20);
  for (int fd : fds) {
    const std::string answer = read_until_closed(fd, milliseconds(8000));
    EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
    EXPECT_NE(answer.find("through the gate"), std::string::npos)
        << "a waiting request held the lane's one thread";
    ::close(fd);
  }
  EXPECT_EQ(route.most.load(), 20);
  EXPECT_EQ(server.counters().served_async.load(), 20u);
  // Any other route goes to the workers, as without a lane.
  const std::string other =
      request(server.port(), "GET /dashboard/schedule HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_NE(other.find("on a worker"), std::string::npos) << other;
  EXPECT_EQ(server.counters().served_async.load(), 20u);
}

TEST(HttpServerAsync, PastMaxAsyncRequestsTheAnswerIs503AndTheOthersAreServed) {
  WaitingRoute route;
  HttpServer::Options o;
  o.async_workers = 1;
  o.max_async_requests = 3;
  const std::unique_ptr<HttpServer> made = make_server(o, route);
  HttpServer& server = *made;
  ASSERT_TRUE(server.start().ok());
  std::vector<int> held = send_all(server.port(), 3);
  for (int i = 0; i < 200 && route.in_flight.load() < 3; ++i)
    std::this_thread::sleep_for(milliseconds(10));
  ASSERT_EQ(route.in_flight.load(), 3);
  const std::string shed = request(server.port(), kAsyncPage);
  EXPECT_EQ(shed.rfind("HTTP/1.1 503", 0), 0u) << shed;
  EXPECT_NE(shed.find("Retry-After: 1"), std::string::npos);
  const std::string health = request(server.port(), kHealthz);
  EXPECT_EQ(health.rfind("HTTP/1.1 200", 0), 0u) << "the workers' lanes are apart";
  route.gate = true;
  for (int fd : held) {
    const std::string answer = read_until_closed(fd, milliseconds(5000));
    EXPECT_NE(answer.find("through the gate"), std::string::npos) << answer;
    ::close(fd);
  }
  EXPECT_EQ(server.counters().shed_503.load(), 1u);
}

TEST(HttpServerAsync, AnExceptionIsAnswered500AndTheLaneGoesOn) {
  HttpServer::Options o;
  o.async_workers = 1;
  std::atomic<int> calls{0};
  HttpServer server(o, [](const http::Request&, http::Response&) {});
  server.serve_async([](const http::Request& req) { return req.path == "/async"; },
                     [&calls](const http::Request&, http::Response& res) -> net::awaitable<void> {
                       if (++calls == 1) throw std::runtime_error("a route's bug");
                       res.set_content("fine", "text/plain");
                       co_return;
                     });
  ASSERT_TRUE(server.start().ok());
  const std::string first = request(server.port(), kAsyncPage);
  EXPECT_EQ(first.rfind("HTTP/1.1 500", 0), 0u) << first;
  EXPECT_EQ(first.find("a route's bug"), std::string::npos) << "no internals in the answer";
  const std::string second = request(server.port(), kAsyncPage);
  EXPECT_EQ(second.rfind("HTTP/1.1 200", 0), 0u) << second;
}

// A handler hands CPU-heavy work (the panel's password checks) to cpu_executor(): while a
// job runs there, the lane's one event loop goes on serving. The job holds its thread
// until another request has been served on the lane (or 5 s pass, so that a failing test
// ends); a handler that ran it on the lane's thread would serve nothing meanwhile.
TEST(HttpServerAsync, AJobOnTheCpuExecutorLeavesTheLanesEventLoopFree) {
  HttpServer::Options o;
  o.async_workers = 1;
  std::atomic<bool> other_served{false};
  std::atomic<bool> job_saw_other{false};
  HttpServer server(o, [](const http::Request&, http::Response&) {});
  server.serve_async(
      [](const http::Request& req) { return req.path == "/async" || req.path == "/job"; },
      [&](const http::Request& req, http::Response& res) -> net::awaitable<void> {
        if (req.path == "/job") {
          const bool saw = co_await net::co_spawn(
              server.cpu_executor(),
              [&]() -> net::awaitable<bool> {
                for (int i = 0; i < 500 && !other_served; ++i)
                  std::this_thread::sleep_for(milliseconds(10));
                co_return other_served.load();
              },
              net::use_awaitable);
          job_saw_other = saw;
          res.set_content("job done", "text/plain");
        } else {
          other_served = true;
          res.set_content("fine", "text/plain");
        }
      });
  ASSERT_TRUE(server.start().ok());
  const int job = connect_to(server.port());
  send_text(job, closing("GET /job HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  std::this_thread::sleep_for(milliseconds(100));  // the job has begun (or the test proves less)
  const std::string other = request(server.port(), kAsyncPage);
  const std::string done = read_until_closed(job, milliseconds(8000));
  ::close(job);
  EXPECT_EQ(other.rfind("HTTP/1.1 200", 0), 0u) << other;
  EXPECT_NE(done.find("job done"), std::string::npos) << done;
  EXPECT_TRUE(job_saw_other.load()) << "the lane served nothing while the job ran";
}

// Stopping the server while a job runs on the CPU executor and others wait for it: the
// running one ends, the waiting ones are dropped with their requests, and nothing is left
// touching the lane's event loops (ASan would see it).
TEST(HttpServerAsync, StoppingWithCpuJobsRunningAndQueuedEndsCleanly) {
  HttpServer::Options o;
  o.async_workers = 1;
  o.async_cpu_workers = 1;
  std::atomic<int> started{0};
  auto server = std::make_unique<HttpServer>(o, [](const http::Request&, http::Response&) {});
  HttpServer& s = *server;
  s.serve_async([](const http::Request& req) { return req.path == "/job"; },
                [&](const http::Request&, http::Response& res) -> net::awaitable<void> {
                  co_await net::co_spawn(
                      s.cpu_executor(),
                      [&]() -> net::awaitable<void> {
                        ++started;
                        std::this_thread::sleep_for(milliseconds(300));
                        co_return;
                      },
                      net::use_awaitable);
                  res.set_content("job done", "text/plain");
                });
  ASSERT_TRUE(s.start().ok());
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) {
    fds.push_back(connect_to(s.port()));
    send_text(fds.back(), closing("GET /job HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  }
  for (int i = 0; i < 200 && started.load() == 0; ++i)
    std::this_thread::sleep_for(milliseconds(10));
  ASSERT_EQ(started.load(), 1) << "one job runs, the others wait for the one CPU thread";
  server->stop();
  server.reset();
  for (int fd : fds)
    ::close(fd);
  EXPECT_EQ(started.load(), 1) << "a queued job ran after stop()";
}

}  // namespace
}  // namespace holdfast::panel
