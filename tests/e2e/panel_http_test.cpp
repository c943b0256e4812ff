// Issues #13 and #32, the HTTP layer: the panel keeps answering while its clients are slow or
// hostile (apps/panel/http_server.hpp). Raw sockets, so a test can be the client a library
// would not be.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "http_server.hpp"
#include "panel_fixture.hpp"

namespace holdfast::panel {
namespace {

using std::chrono::milliseconds;

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A connection to the server from `source` (any 127.x.y.z address reaches loopback).
int connect_from(int port, const char* source) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &local.sin_addr);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_text(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Everything the server sends until it closes, or until `limit` passes.
std::string read_until_closed(int fd, milliseconds limit) {
  std::string out;
  const auto until = Steady::now() + limit;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(until - Steady::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// `text` with "Connection: close" after its request line (unless it names a Connection), so
// that the server closes once it has answered: the helpers below read until it does.
std::string closing(std::string_view text) {
  std::string out(text);
  const std::size_t line_end = out.find("\r\n");
  if (line_end != std::string::npos && out.find("Connection:") == std::string::npos) {
    out.insert(line_end + 2, "Connection: close\r\n");
  }
  return out;
}

std::string request(int port, std::string_view text, milliseconds limit = milliseconds(5000)) {
  const int fd = connect_to(port);
  if (fd < 0) return "";
  send_text(fd, closing(text));
  std::string out = read_until_closed(fd, limit);
  ::close(fd);
  return out;
}

std::string request_from(int port, const char* source, std::string_view text) {
  const int fd = connect_from(port, source);
  if (fd < 0) return "";
  send_text(fd, closing(text));
  std::string out = read_until_closed(fd, milliseconds(5000));
  ::close(fd);
  return out;
}

constexpr std::string_view kHealthz = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

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

long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

class PanelHttpTest : public PanelFixture {};

TEST_F(PanelHttpTest, HealthzAnswersWithin1sDuringSlowClientsBusyClientsAndALockStorm) {
  const int port = server_->port();
  std::atomic<bool> stop{false};
  // 40 slowloris sockets: a request head one header line every 500 ms, never finished.
  std::thread slow([&] {
    std::vector<int> fds;
    for (int i = 0; i < 40; ++i) {
      const int fd = connect_to(port);
      if (fd >= 0 && send_text(fd, "GET /dashboard/schedule HTTP/1.1\r\nHost: 127.0.0.1\r\n")) {
        fds.push_back(fd);
      }
    }
    for (int tick = 0; !stop.load(); ++tick) {
      for (int fd : fds)
        send_text(fd, "X-Slow-" + std::to_string(tick) + ": 1\r\n");
      std::this_thread::sleep_for(milliseconds(500));
    }
    for (int fd : fds)
      ::close(fd);
  });
  // 64 keep-alive clients loading the schedule as fast as they can.
  std::vector<std::thread> busy;
  for (int i = 0; i < 64; ++i) {
    busy.emplace_back([&] {
      http_client::Client c("127.0.0.1", port);
      c.set_keep_alive(true);
      c.set_read_timeout(std::chrono::seconds(15));
      while (!stop.load())
        (void)c.Get("/dashboard/schedule?date=" + today(), cookie_);
    });
  }
  auto lock = storm(StormKind::kRead);  // readers blocked: the schedule waits for it
  long long slowest_ms = 0;
  int answered = 0;
  for (int i = 0; i < 12; ++i) {
    std::this_thread::sleep_for(milliseconds(250));
    const auto t0 = Steady::now();
    const std::string r = request(port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    const auto ms = std::chrono::duration_cast<milliseconds>(Steady::now() - t0).count();
    slowest_ms = std::max<long long>(slowest_ms, ms);
    answered += r.rfind("HTTP/1.1 200", 0) == 0 ? 1 : 0;
  }
  lock->end();
  stop = true;
  slow.join();
  for (auto& t : busy)
    t.join();
  EXPECT_EQ(answered, 12);
  EXPECT_LE(slowest_ms, 1000) << "a health check waited behind slow or busy clients";
  std::printf(
      "[ info ] healthz during 40 slow + 64 busy clients and a read lock: slowest %lld "
      "ms\n",
      slowest_ms);
}

TEST_F(PanelHttpTest, AClientThatNeverFinishesItsHeadIsCutOffWith408) {
  const int fd = connect_to(server_->port());
  ASSERT_GE(fd, 0);
  send_text(fd, "GET /dashboard/schedule HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  const std::string r = read_until_closed(fd, milliseconds(8000));
  ::close(fd);
  EXPECT_EQ(r.rfind("HTTP/1.1 408", 0), 0u) << r;
  EXPECT_NE(r.find("did not arrive in time"), std::string::npos);
}

TEST_F(PanelHttpTest, A200MegabyteUnauthenticatedBodyIsRefusedUnread) {
  const long before = rss_kib();
  const int fd = connect_to(server_->port());
  ASSERT_GE(fd, 0);
  send_text(fd,
            "POST /payments HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-"
            "urlencoded\r\nContent-Length: 209715200\r\n\r\n");
  // Keep sending (as a real upload would) until the server has closed.
  const std::string chunk(1 << 20, 'a');
  for (int i = 0; i < 200 && send_text(fd, chunk); ++i) {
  }
  const std::string r = read_until_closed(fd, milliseconds(2000));
  ::close(fd);
  EXPECT_LE(rss_kib() - before, 100 * 1024) << "resident memory grew by more than 100 MB";
  if (!r.empty()) {  // the answer may be lost in the reset of an unread upload
    EXPECT_EQ(r.rfind("HTTP/1.1 413", 0), 0u) << r.substr(0, 200);
    EXPECT_NE(r.find("request body too large"), std::string::npos);
  }
  // Nothing was stored, and the panel still answers.
  EXPECT_EQ(request(server_->port(), "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                .rfind("HTTP/1.1 200", 0),
            0u);
}

TEST_F(PanelHttpTest, AHeaderFloodIsRefusedWith431AndAShortText) {
  std::string head = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 1000; ++i)
    head += "X-Flood-" + std::to_string(i) + ": 1\r\n";
  head += "\r\n";
  const std::string r = request(server_->port(), head);
  EXPECT_EQ(r.rfind("HTTP/1.1 431", 0), 0u) << r.substr(0, 200);
  EXPECT_NE(r.find("request header fields"), std::string::npos);
  // One header line of 9,000 bytes (over the 8 KiB head) is refused as soon as 8 KiB have
  // come, not after a deadline.
  const auto t0 = Steady::now();
  const std::string r2 = request(server_->port(),
                                 "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 "X-Long: " +
                                     std::string(9000, 'a') + "\r\n\r\n");
  const auto took = std::chrono::duration_cast<milliseconds>(Steady::now() - t0).count();
  EXPECT_EQ(r2.rfind("HTTP/1.1 431", 0), 0u) << r2.substr(0, 200);
  std::printf("[ info ] a 9,000-byte header line answered 431 in %lld ms\n",
              static_cast<long long>(took));
}

TEST_F(PanelHttpTest, ANulOrBareLineBreakInAHeaderIsRefusedWith400NotCut) {
  // A key cut at its NUL ("cut") would be another key: the request is refused whole.
  const std::string nul =
      std::string("POST /payments HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: cut") + '\0' +
      "here\r\nContent-Length: 0\r\n\r\n";
  const std::string r = request(server_->port(), nul);
  EXPECT_EQ(r.rfind("HTTP/1.1 400", 0), 0u) << r.substr(0, 200);
  const std::string bare = request(
      server_->port(), "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: 1\nX-Injected: 2\r\n\r\n");
  EXPECT_EQ(bare.rfind("HTTP/1.1 400", 0), 0u) << bare.substr(0, 200);
}

TEST_F(PanelHttpTest, AChunkedBodyMeetsTheSameLimitAsOneWithALength) {
  // A chunked form is read like any other (Beast's parser) and limited to 8 KiB as it comes.
  std::string big =
      "POST /report HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
      "application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i)
    big += "1000\r\n" + std::string(4096, 'a') + "\r\n";
  big += "0\r\n\r\n";
  const std::string r = request(server_->port(), big);
  EXPECT_EQ(r.rfind("HTTP/1.1 413", 0), 0u) << r.substr(0, 200);
  const std::string body = "digest=abc&note=chunked";
  const std::string small =
      request(server_->port(),
              "POST /report HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
              "application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n" +
                  fmt::format("{:x}", body.size()) + "\r\n" + body + "\r\n0\r\n\r\n");
  EXPECT_EQ(small.rfind("HTTP/1.1 202", 0), 0u) << small.substr(0, 200);
}

TEST_F(PanelHttpTest, ARequestNamingAnotherHostIs421AndOneWithoutAHost400BeforeAnyWork) {
  const int port = server_->port();
  const std::string form = "email=Ada.Nowak%40club.example&password=demo";
  const std::string sign_in =
      "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
      std::to_string(form.size()) + "\r\n\r\n" + form;
  // A page of another site whose name now resolves to 127.0.0.1 (DNS rebinding) still
  // sends its own name: refused before the sign-in is tried.
  for (const std::string& host :
       std::vector<std::string>{"evil.example", "evil.example:" + std::to_string(port),
                                "localhost.evil.example", "127.0.0.1.evil.example"}) {
    const std::string r = request(port, "POST /login HTTP/1.1\r\nHost: " + host + "\r\n" + sign_in);
    EXPECT_EQ(r.rfind("HTTP/1.1 421", 0), 0u) << host << ": " << r.substr(0, 200);
    EXPECT_EQ(r.find("Set-Cookie"), std::string::npos) << host;
  }
  const std::string none = request(port, "GET /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(none.rfind("HTTP/1.1 400", 0), 0u) << none.substr(0, 200);
  const std::string two =
      request(port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n");
  EXPECT_EQ(two.rfind("HTTP/1.1 400", 0), 0u) << two.substr(0, 200);
  // The loopback names, with or without the port, are this panel.
  for (const std::string& host : std::vector<std::string>{
           "localhost", "LocalHost:" + std::to_string(port), "127.0.0.1",
           "127.0.0.1:" + std::to_string(port), "[::1]", "[::1]:" + std::to_string(port)}) {
    const std::string r = request(port, "POST /login HTTP/1.1\r\nHost: " + host + "\r\n" + sign_in);
    EXPECT_EQ(r.rfind("HTTP/1.1 303", 0), 0u) << host << ": " << r.substr(0, 200);
  }
}

TEST_F(PanelHttpTest, AThousandRangesGetTheWholePageOnceNotAThousandCopies) {
  const std::string plain =
      request(server_->port(), "GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  ASSERT_EQ(plain.rfind("HTTP/1.1 200", 0), 0u) << plain.substr(0, 200);
  std::string ranges = "bytes=0-";
  for (int i = 1; i < 1000; ++i)
    ranges += ",0-";
  const std::string r = request(
      server_->port(), "GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: " + ranges + "\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r.substr(0, 200);
  EXPECT_LE(r.size(), 2 * plain.size());
  EXPECT_EQ(r.find("multipart/byteranges"), std::string::npos);
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

TEST_F(PanelHttpTest, TheClientAddressCannotBeSpoofedWithAHeader) {
  // Five failures from a forged X-Holdfast-Client (the old front's header) or any other
  // still count against the real address.
  for (int i = 0; i < 5; ++i) {
    const std::string body = "email=Ada.Nowak%40club.example&password=wrong";
    request(server_->port(),
            "POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Holdfast-Client: 10.0.0." +
                std::to_string(i) +
                "\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                "Content-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body);
  }
  const std::string body = "email=Bartek.Tran%40club.example&password=wrong";
  const std::string r =
      request(server_->port(),
              "POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Holdfast-Client: 10.9.9.9"
              "\r\nContent-Type: application/x-www-form-urlencoded\r\n"
              "Content-Length: " +
                  std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(r.rfind("HTTP/1.1 429", 0), 0u) << "the address limit holds: " << r.substr(0, 80);
}

TEST_F(PanelHttpTest, ProblemReportsAreCappedForAllAddressesTogether) {
  // Ten a minute from each address; addresses are cheap, so all of them together get
  // kReportsPerMinute.
  const std::string body = "path=%2Fdashboard&digest=abc&note=hello";
  const std::string report =
      "POST /report HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/x-www-form-urlencoded\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  int accepted = 0;
  int refused_for_all = 0;
  for (int a = 2; a < 14; ++a) {
    const std::string source = "127.0.0." + std::to_string(a);
    for (int i = 0; i < 10; ++i) {
      const std::string r = request_from(server_->port(), source.c_str(), report);
      if (r.rfind("HTTP/1.1 202", 0) == 0) ++accepted;
      if (r.rfind("HTTP/1.1 429", 0) == 0 && r.find("too many reports;") != std::string::npos)
        ++refused_for_all;
    }
  }
  EXPECT_EQ(accepted, PanelServer::kReportsPerMinute);
  EXPECT_EQ(refused_for_all, 120 - PanelServer::kReportsPerMinute);
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
