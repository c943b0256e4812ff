// Issues #13 and #32: HttpServer (apps/panel/http_server.hpp) on its own, with routes of the
// test's making: its bulkheads, its connection limit, its deadlines and how it reads a
// request. Raw sockets (raw_http.hpp).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "http_server.hpp"
#include "raw_http.hpp"

namespace holdfast::panel {
namespace {

using namespace rawhttp;  // NOLINT(google-build-using-namespace): the tests' own helpers
using Steady = std::chrono::steady_clock;

// Waits (up to 5 s) until the server has accepted `n` connections in all.
void await_accepted(const HttpServer& server, std::uint64_t n) {
  for (int i = 0; i < 500 && server.counters().accepted.load() < n; ++i)
    std::this_thread::sleep_for(milliseconds(10));
  ASSERT_GE(server.counters().accepted.load(), n);
}

// An HttpServer on loopback with `handler` for its routes (GET /healthz answers "ok" unless
// the handler answers it). Started by start(), stopped when destroyed.
class TestServer {
 public:
  explicit TestServer(HttpServer::Options o, HttpServer::Handler handler = {})
      : server_(std::move(o), [handler](const http::Request& req, http::Response& res) {
          if (req.path == "/healthz") {
            res.set_content("ok", "text/plain");
          } else if (handler) {
            handler(req, res);
          } else {
            res.status = 404;
          }
        }) {}
  Status start() { return server_.start(); }
  HttpServer& operator*() { return server_; }
  HttpServer* operator->() { return &server_; }
  [[nodiscard]] int port() const { return server_.port(); }

 private:
  HttpServer server_;
};

// Sets the soft open-file limit for the life of the object (this test's process only).
class FileLimit {
 public:
  explicit FileLimit(rlim_t soft) {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit lowered = saved_;
    lowered.rlim_cur = soft;
    ok_ = ::setrlimit(RLIMIT_NOFILE, &lowered) == 0;
  }
  ~FileLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  [[nodiscard]] bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  bool ok_ = false;
};

// Descriptors open in this process (the listing's own is not counted).
int open_descriptors() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n - 1;
}

TEST(HttpServer, AHostIsAllowedWhenItIsALoopbackNameTheBoundAddressOrANamedOne) {
  HttpServer::Options o;
  o.host = "192.0.2.7";
  o.allowed_hosts = {"panel.example", "proxy.example:8443"};
  for (std::string_view ok :
       {"localhost", "localhost:8080", "127.0.0.1", "[::1]:1", "192.0.2.7", "192.0.2.7:8080",
        "PANEL.example", "panel.example:443", "proxy.example:8443"}) {
    EXPECT_TRUE(HttpServer::host_allowed(ok, o)) << ok;
  }
  for (std::string_view bad : {"", ":8080", "evil.example", "proxy.example", "proxy.example:8444",
                               "localhost:", "localhost:x", "localhost:123456", "[::1]x",
                               "192.0.2.70", "panel.example.evil", "x"}) {
    EXPECT_FALSE(HttpServer::host_allowed(bad, o)) << bad;
  }
  // Reading a request: 421 for another name, 400 without one.
  http::Request r;
  EXPECT_EQ(HttpServer::parse_request("GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n", o, r), 421);
  EXPECT_EQ(HttpServer::parse_request("GET / HTTP/1.1\r\nX: 1\r\n\r\n", o, r), 400);
  EXPECT_EQ(HttpServer::parse_request("GET / HTTP/1.1\r\nHost: panel.example\r\n\r\n", o, r), 200);
}

TEST(HttpServer, ARequestIsReadIntoPathQueryFormAndHeaders) {
  HttpServer::Options o;
  http::Request r;
  const std::string body = "amount_cents=1250&method=c%61rd&note=a+b";
  ASSERT_EQ(HttpServer::parse_request(
                "POST /pay%6Dents?date=2026-12-03&x HTTP/1.1\r\nHost: localhost:8080\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\ncookie: session=abc\r\n"
                "Content-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body,
                o, r),
            200);
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/payments");
  EXPECT_EQ(r.get_param_value("date"), "2026-12-03");
  EXPECT_TRUE(r.has_param("x"));
  EXPECT_EQ(r.get_param_value("method"), "card");
  EXPECT_EQ(r.get_param_value("note"), "a b");
  EXPECT_EQ(r.get_header_value("Cookie"), "session=abc") << "header names match in any case";
  EXPECT_EQ(r.body, body);
  // A body longer than its route's limit is refused from its Content-Length.
  EXPECT_EQ(HttpServer::parse_request("POST /payments HTTP/1.1\r\nHost: localhost\r\n"
                                      "Content-Type: application/x-www-form-urlencoded\r\n"
                                      "Content-Length: 9000\r\n\r\n",
                                      o, r),
            413);
  EXPECT_EQ(HttpServer::parse_request("GET /x HTTP/1.1\r\nHost: localhost\r\n", o, r), 0)
      << "not all there yet";
  EXPECT_EQ(HttpServer::parse_request("GET http://evil/ HTTP/1.1\r\nHost: localhost\r\n\r\n", o, r),
            400);
}

TEST(HttpServer, AHeadWithMoreFieldsThanTheLimitIsRefusedWith431WhateverItsSize) {
  // 101 short fields are 700 bytes, far under the 8 KiB head: the count refuses them.
  HttpServer::Options o;
  auto head = [](int fields) {
    std::string h = "GET /healthz HTTP/1.1\r\nHost: localhost\r\n";
    for (int i = 1; i < fields; ++i)
      h += "a" + std::to_string(i) + ": 1\r\n";
    return h + "\r\n";
  };
  http::Request r;
  EXPECT_EQ(HttpServer::parse_request(head(100), o, r), 200);
  EXPECT_EQ(HttpServer::parse_request(head(101), o, r), 431);
  ASSERT_LT(head(101).size(), o.max_head_bytes);
  o.max_header_fields = 200;
  EXPECT_EQ(HttpServer::parse_request(head(101), o, r), 200);
}

// The bulkhead on its own, in front of routes whose database work never ends.
TEST(HttpServer, WhenTheDatabaseQueueIsFullTheAnswerIs503AtOnceAndHealthStillGoes) {
  std::mutex mutex;
  std::condition_variable release;
  bool released = false;
  HttpServer::Options o;
  o.heavy_workers = 1;
  o.heavy_queue = 1;
  o.light_workers = 1;
  TestServer server(o, [&](const http::Request&, http::Response& res) {
    std::unique_lock<std::mutex> lock(mutex);
    release.wait(lock, [&] { return released; });
    res.set_content("late", "text/plain");
  });
  ASSERT_TRUE(server.start().ok());
  // One being served, one queued: both held.
  std::vector<int> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(connect_to(server.port()));
    send_text(held.back(), "GET /dashboard/schedule HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    std::this_thread::sleep_for(milliseconds(200));  // the first reaches its worker first
  }
  const auto t0 = Steady::now();
  const std::string shed =
      request(server.port(), "GET /dashboard/schedule HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  const auto shed_ms = std::chrono::duration_cast<milliseconds>(Steady::now() - t0).count();
  EXPECT_EQ(shed.rfind("HTTP/1.1 503", 0), 0u) << shed;
  EXPECT_NE(shed.find("Retry-After: 1"), std::string::npos);
  std::printf("[ info ] shed with 503 in %lld ms\n", static_cast<long long>(shed_ms));
  const std::string health = request(
      server.port(), "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", milliseconds(2000));
  EXPECT_EQ(health.rfind("HTTP/1.1 200", 0), 0u) << "health does not queue behind the database";
  {
    std::lock_guard<std::mutex> lock(mutex);
    released = true;
  }
  release.notify_all();
  for (int fd : held) {
    // Keep-alive: the answer comes, and the connection stays open for the next request.
    const std::string answer = read_until_closed(fd, milliseconds(1000));
    EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
    ::close(fd);
  }
  server->stop();
  EXPECT_EQ(server->counters().shed_503.load(), 1u);
}

// A newcomer gets in when every place is held by slow clients: the address holding the most
// connections gives up the one it has been waiting on longest.
TEST(HttpServer, WhenFullTheAddressHoldingMostConnectionsMakesRoom) {
  HttpServer::Options o;
  o.max_connections = 8;
  TestServer server(o);
  ASSERT_TRUE(server.start().ok());
  // Two slow clients of one address come first; six of another fill the rest.
  std::vector<int> few;
  std::vector<int> many;
  for (int i = 0; i < 8; ++i) {
    std::vector<int>& to = i < 2 ? few : many;
    to.push_back(connect_from(server.port(), i < 2 ? "127.0.0.3" : "127.0.0.1"));
    send_text(to.back(), "GET /dashboard/schedule HTTP/1.1\r\n");
    await_accepted(*server, static_cast<std::uint64_t>(i) + 1);
  }
  const std::string health = request_from(server.port(), "127.0.0.2", kHealthz);
  EXPECT_EQ(health.rfind("HTTP/1.1 200", 0), 0u) << health;
  const std::string cut = read_until_closed(many.front(), milliseconds(2000));
  EXPECT_EQ(cut.rfind("HTTP/1.1 503", 0), 0u) << cut;
  EXPECT_NE(cut.find("too many connections"), std::string::npos) << cut;
  // The address with two keeps them, though they have been sending longer.
  for (int fd : few) {
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 100), 0) << "a connection of the lighter address was cut off";
  }
  for (int fd : few)
    ::close(fd);
  for (int fd : many)
    ::close(fd);
  server->stop();
}

// A POST without Content-Length has no body: nothing waits for one.
TEST(HttpServer, APostWithoutContentLengthHasAnEmptyBodyAndHoldsNoWorker) {
  HttpServer::Options o;
  o.heavy_workers = 1;
  TestServer server(o, [](const http::Request& req, http::Response& res) {
    res.set_content("body of " + std::to_string(req.body.size()), "text/plain");
  });
  ASSERT_TRUE(server.start().ok());
  for (int i = 0; i < 3; ++i) {
    const int fd = connect_to(server.port());
    ASSERT_TRUE(
        send_text(fd, "POST /payments HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
    const std::string answer = read_until_closed(fd, milliseconds(8000));
    ::close(fd);
    EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer.substr(0, 80);
    EXPECT_NE(answer.find("body of 0"), std::string::npos) << answer;
  }
  server->stop();
}

// A client that reads a large answer slowly: the deadline is for the whole answer, so the
// server cuts the connection and serves the next request.
TEST(HttpServer, AClientReadingSlowlyIsCutOffAtTheSendDeadline) {
  const std::string big(32 * 1024 * 1024, 'x');
  HttpServer::Options o;
  o.heavy_workers = 1;
  o.send_deadline = milliseconds(2000);
  TestServer server(o, [&](const http::Request& req, http::Response& res) {
    res.set_content(req.path == "/dashboard/big" ? big : std::string("small"), "text/plain");
  });
  ASSERT_TRUE(server.start().ok());

  const int slow = connect_to(server.port());
  ASSERT_TRUE(send_text(slow, "GET /dashboard/big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  // 128 KB every 50 ms: the whole answer would take 13 s.
  const auto start = Steady::now();
  std::size_t got = 0;
  bool closed = false;
  std::vector<char> buf(16 * 1024);
  while (!closed && Steady::now() - start < std::chrono::seconds(8)) {
    for (std::size_t tick = 0; tick < 128 * 1024;) {
      const ssize_t n = ::recv(slow, buf.data(), buf.size(), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        closed = true;
        break;
      }
      if (n < 0) break;  // nothing more for now
      got += static_cast<std::size_t>(n);
      tick += static_cast<std::size_t>(n);
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  ::close(slow);
  EXPECT_TRUE(closed) << "still receiving after 8 s; " << got << " bytes so far";
  EXPECT_LT(got, big.size());
  EXPECT_EQ(server->counters().answers_cut.load(), 1u);
  const std::string next =
      request(server.port(),
              "GET /dashboard/small HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(next.rfind("HTTP/1.1 200", 0), 0u) << next.substr(0, 80);
  server->stop();
}

TEST(HttpServer, TheConnectionLimitFitsUnderTheOpenFileLimit) {
  HttpServer::Options o;
  o.heavy_workers = 2;
  o.light_workers = 2;
  o.heavy_queue = 8;
  o.light_queue = 8;
  FileLimit limit(512);
  ASSERT_TRUE(limit.ok());
  {
    TestServer server(o);
    ASSERT_TRUE(server.start().ok());
    // 512, less one per worker, one per queued request and 128 for the databases and logs.
    EXPECT_EQ(server->max_connections(), 512 - 4 - 16 - 128);
  }
  o.max_connections = 100;
  {
    TestServer smaller(o);
    ASSERT_TRUE(smaller.start().ok());
    EXPECT_EQ(smaller->max_connections(), 100);
  }
  o.max_connections = 0;
  TestServer absurd(o);
  EXPECT_EQ(absurd.start().code(), Code::kInvalidArgument);
}

TEST(HttpServer, APortInUseOrABadHostIsAStatusNamingIt) {
  TestServer first(HttpServer::Options{});
  ASSERT_TRUE(first.start().ok());
  HttpServer::Options same;
  same.port = first.port();
  TestServer second(same);
  const Status s = second.start();
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.to_string();
  EXPECT_NE(s.message().find("127.0.0.1:" + std::to_string(first.port())), std::string::npos)
      << s.to_string();
  HttpServer::Options bad;
  bad.host = "no-such-host.invalid";
  TestServer third(bad);
  EXPECT_EQ(third.start().code(), Code::kInvalidArgument);
}

// CPU seconds `pid` has used (user and system), from /proc.
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

TEST(HttpServer, OutOfDescriptorsWaitingClientsAreAnsweredAndTheLoopDoesNotSpin) {
  // The server runs in a child process whose descriptors run out; this one keeps its own.
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    HttpServer::Options o;
    o.head_deadline = std::chrono::seconds(30);
    HttpServer server(o, [](const http::Request&, http::Response&) {});
    if (!server.start().ok()) ::_exit(2);
    // One refusal while descriptors are free: in a sanitized build the first type check of
    // the clock behind it opens a pipe.
    (void)request(server.port(), "nonsense\r\n\r\n");
    const int port = server.port();
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    // Room for two connections: one descriptor now, one more once the pipe's end is closed.
    limit.rlim_cur = static_cast<rlim_t>(open_descriptors() + 1);
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) ::_exit(3);
    if (::write(pipe_fds[1], &port, sizeof(port)) != sizeof(port)) ::_exit(4);
    ::close(pipe_fds[1]);
    ::pause();  // until killed
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  int port = 0;
  ASSERT_EQ(::read(pipe_fds[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  ::close(pipe_fds[0]);
  constexpr int kClients = 10;
  std::vector<int> clients;
  for (int i = 0; i < kClients; ++i)
    clients.push_back(connect_to(port));
  const double cpu0 = cpu_seconds(child);
  std::this_thread::sleep_for(milliseconds(1500));
  const double spent = cpu_seconds(child) - cpu0;
  int refused = 0;
  for (int fd : clients) {
    const std::string answer = read_until_closed(fd, milliseconds(300));
    if (answer.rfind("HTTP/1.1 503", 0) == 0) ++refused;
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  // About two were taken in (and wait for their heads; the limit counts descriptor
  // numbers, so a gap below it makes room for one more); the rest found no descriptor free
  // and are told to come back, one per pause.
  EXPECT_GE(refused, kClients - 4) << "clients left waiting in the backlog";
  EXPECT_LT(spent, 0.5) << "seconds of CPU in 1.5 s: the loop spun on a backlog it cannot take";
  for (int fd : clients)
    ::close(fd);
}

}  // namespace
}  // namespace holdfast::panel
