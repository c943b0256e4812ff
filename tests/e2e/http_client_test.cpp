// The drill's and the tests' HTTP client (apps/drill/http_client.hpp) against a tiny server on
// loopback that does exactly what each test needs: answer, keep the connection, close it,
// or never answer.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http_client.hpp"

namespace holdfast::http_client {
namespace {

using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

// One request as the server read it: the head (up to its blank line) and the body its
// Content-Length names. "" when the connection closed first.
std::string read_request(int fd) {
  std::string in;
  char buf[4096];
  for (;;) {
    const std::size_t end = in.find("\r\n\r\n");
    if (end != std::string::npos) {
      std::size_t length = 0;
      if (const std::size_t at = in.find("Content-Length: "); at != std::string::npos && at < end)
        length = std::strtoul(in.c_str() + at + 16, nullptr, 10);
      if (in.size() >= end + 4 + length) return in.substr(0, end + 4 + length);
    }
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return {};
    in.append(buf, static_cast<std::size_t>(n));
  }
}

void send_all(int fd, const std::string& s) {
  (void)::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
}

std::string answer(std::string_view body, std::string_view extra = "") {
  return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         std::string(extra) + "\r\n" + std::string(body);
}

// A server on a port of 127.0.0.1 that hands each connection, one at a time, to `serve`
// (with the connection's number from 0) and closes it when `serve` returns. Keeps every
// request `serve` records. Stopped and joined when destroyed.
class TinyServer {
 public:
  using Serve = std::function<void(TinyServer&, int fd, int connection)>;
  explicit TinyServer(Serve serve) : serve_(std::move(serve)) {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof(addr);
    if (::bind(listen_, reinterpret_cast<sockaddr*>(&addr), size) != 0 ||
        ::listen(listen_, 16) != 0 ||
        ::getsockname(listen_, reinterpret_cast<sockaddr*>(&addr), &size) != 0) {
      ADD_FAILURE() << "cannot listen on loopback";
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { accept_loop(); });
  }
  ~TinyServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    ::close(listen_);
  }
  TinyServer(const TinyServer&) = delete;
  TinyServer& operator=(const TinyServer&) = delete;

  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] int connections() const { return connections_.load(); }
  [[nodiscard]] bool stopping() const { return stop_.load(); }
  // Reads a request from `fd` and keeps it; "" when the connection closed first.
  std::string take(int fd) {
    std::string r = read_request(fd);
    if (!r.empty()) {
      std::lock_guard<std::mutex> lock(mutex_);
      requests_.push_back(r);
    }
    return r;
  }
  [[nodiscard]] std::vector<std::string> requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }
  // Holds the connection open, unanswered, until the server stops.
  void hold() const {
    while (!stop_.load())
      std::this_thread::sleep_for(milliseconds(10));
  }

 private:
  void accept_loop() {
    while (!stop_.load()) {
      pollfd p{listen_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      serve_(*this, fd, connections_++);
      ::close(fd);
    }
  }

  Serve serve_;
  int listen_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  mutable std::mutex mutex_;
  std::vector<std::string> requests_;
  std::thread thread_;
};

// Answers every request on a connection with keep-alive until the client closes it.
void answer_all(TinyServer& server, int fd, int connection) {
  for (int i = 0;; ++i) {
    if (server.take(fd).empty()) return;
    send_all(fd, answer("c" + std::to_string(connection) + " r" + std::to_string(i)));
  }
}

TEST(HttpClient, AFormIsPercentEncodedAndTheHeadSaysWhatItCarries) {
  EXPECT_EQ(encode_form({{"a", "1"}, {"b b", "x&y=z+w/%"}, {"c", "caf\xc3\xa9~-._"}}),
            "a=1&b%20b=x%26y%3Dz%2Bw%2F%25&c=caf%C3%A9~-._");
  EXPECT_EQ(encode_form({}), "");
  TinyServer server([](TinyServer& s, int fd, int) {
    if (!s.take(fd).empty()) send_all(fd, answer("ok"));
  });
  Client client("127.0.0.1", server.port());
  auto r = client.Post("/login", Params{{"email", "Ada.Nowak@club.example"}, {"password", "d e"}});
  ASSERT_TRUE(r) << to_string(r.error());
  EXPECT_EQ(r.error(), Error::Success);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok");
  ASSERT_EQ(server.requests().size(), 1u);
  const std::string form = "email=Ada.Nowak%40club.example&password=d%20e";
  EXPECT_EQ(server.requests()[0],
            "POST /login HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(server.port()) +
                "\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
                std::to_string(form.size()) + "\r\nConnection: close\r\n\r\n" + form);
}

TEST(HttpClient, HeadersGoOutByteForByteAndWhatWouldBreakTheHeadIsRefusedUnsent) {
  TinyServer server([](TinyServer& s, int fd, int) {
    if (!s.take(fd).empty()) send_all(fd, answer("ok"));
  });
  Client client("127.0.0.1", server.port());
  const std::string odd = std::string(" lead\ttab \xff\xfe\xc3 trail ") + std::string(70000, 'v');
  auto r = client.Post("/p?x=1", Headers{{"X-Odd", odd}, {"Cookie", "session=\xff\xfe"}}, "{}",
                       "application/json");
  ASSERT_TRUE(r) << to_string(r.error());
  ASSERT_EQ(server.requests().size(), 1u);
  const std::string got = server.requests()[0];
  EXPECT_EQ(got.rfind("POST /p?x=1 HTTP/1.1\r\n", 0), 0u) << got.substr(0, 80);
  EXPECT_NE(got.find("\r\nX-Odd: " + odd + "\r\n"), std::string::npos);
  EXPECT_NE(got.find("\r\nCookie: session=\xff\xfe\r\n"), std::string::npos);
  EXPECT_NE(got.find("\r\nContent-Type: application/json\r\n"), std::string::npos);
  // A caller's Host is the one sent.
  ASSERT_TRUE(client.Get("/", Headers{{"host", "panel.example"}}));
  ASSERT_EQ(server.requests().size(), 2u);
  EXPECT_NE(server.requests()[1].find("\r\nhost: panel.example\r\n"), std::string::npos);
  EXPECT_EQ(server.requests()[1].find("127.0.0.1"), std::string::npos);

  for (const std::string& path : {std::string("/a b"), std::string("/a\r\nX: 1"),
                                  std::string("/a\0b", 4), std::string(""), std::string("/\x7f")}) {
    EXPECT_EQ(client.Get(path).error(), Error::InvalidRequest) << path;
  }
  for (const Headers& h :
       {Headers{{"X-Key", "a\r\nX-Injected: 1"}}, Headers{{"X-Key", "a\nb"}},
        Headers{{"X-Key", std::string("cut\0here", 8)}}, Headers{{"Bad Name", "1"}},
        Headers{{"", "1"}}, Headers{{"Content-Length", "5"}},
        Headers{{"Transfer-Encoding", "chunked"}}}) {
    EXPECT_EQ(client.Post("/p", h, Params{}).error(), Error::InvalidRequest) << h.begin()->first;
  }
  EXPECT_EQ(client.Post("/p", "x", "text/plain\r\nX: 1").error(), Error::InvalidRequest);
  EXPECT_EQ(server.connections(), 2) << "a refused request opened a connection";
}

TEST(HttpClient, AnAnswersHeadersAreFoundWhateverTheirCase) {
  TinyServer server([](TinyServer& s, int fd, int) {
    if (s.take(fd).empty()) return;
    // No Content-Length: the body ends with the connection.
    send_all(fd,
             "HTTP/1.1 303 See Other\r\nset-cookie: a=1\r\nSet-Cookie: b=2\r\nLocation: /x\r\n"
             "Connection: close\r\n\r\nuntil the end");
  });
  Client client("127.0.0.1", server.port());
  auto r = client.Get("/");
  ASSERT_TRUE(r) << to_string(r.error());
  EXPECT_EQ(r->status, 303);
  EXPECT_EQ(r->body, "until the end");
  EXPECT_EQ(r->get_header_value_count("SET-COOKIE"), 2u);
  EXPECT_EQ(r->get_header_value("Set-Cookie"), "a=1");
  EXPECT_EQ(r->get_header_value("set-cookie", 1), "b=2");
  EXPECT_EQ(r->get_header_value("Set-Cookie", 2), "");
  EXPECT_TRUE(r->has_header("location"));
  EXPECT_FALSE(r->has_header("X-Holdfast-Stale"));
  EXPECT_EQ(r->get_header_value("LOCATION"), "/x");
}

TEST(HttpClient, AServerThatNeverAnswersFailsTheCallWithReadAfterTheReadTimeout) {
  TinyServer server([](TinyServer& s, int fd, int) {
    s.take(fd);
    s.hold();
  });
  Client client("127.0.0.1", server.port());
  client.set_read_timeout(milliseconds(300));
  const auto t0 = Steady::now();
  auto r = client.Get("/slow");
  const auto took = Steady::now() - t0;
  EXPECT_FALSE(r);
  EXPECT_EQ(r.error(), Error::Read);
  EXPECT_GE(took, milliseconds(250));
  EXPECT_LT(took, milliseconds(3000));
  // The read timeout is an idle time: an answer whose bytes keep coming is not cut off.
  TinyServer trickle([](TinyServer& s, int fd, int) {
    if (s.take(fd).empty()) return;
    send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n");
    for (int i = 0; i < 8; ++i) {
      std::this_thread::sleep_for(milliseconds(100));
      send_all(fd, "x");
    }
  });
  Client patient("127.0.0.1", trickle.port());
  patient.set_read_timeout(milliseconds(400));
  auto slow = patient.Get("/");
  ASSERT_TRUE(slow) << to_string(slow.error());
  EXPECT_EQ(slow->body, "xxxxxxxx");
}

TEST(HttpClient, NoServerIsAConnectionError) {
  int port = 0;
  {
    TinyServer gone([](TinyServer&, int, int) {});
    port = gone.port();
  }
  Client client("127.0.0.1", port);
  auto r = client.Get("/");
  EXPECT_FALSE(r);
  EXPECT_EQ(r.error(), Error::Connection);
}

TEST(HttpClient, WithoutKeepAliveEachRequestHasAConnectionOfItsOwn) {
  TinyServer server(answer_all);
  Client client("127.0.0.1", server.port());
  for (int i = 0; i < 3; ++i) {
    auto r = client.Get("/");
    ASSERT_TRUE(r) << to_string(r.error());
    EXPECT_EQ(r->body, "c" + std::to_string(i) + " r0");
  }
  EXPECT_EQ(server.connections(), 3);
  for (const std::string& request : server.requests())
    EXPECT_NE(request.find("\r\nConnection: close\r\n"), std::string::npos) << request;
}

TEST(HttpClient, KeepAliveReusesOneConnection) {
  TinyServer server(answer_all);
  Client client("127.0.0.1", server.port());
  client.set_keep_alive(true);
  for (int i = 0; i < 3; ++i) {
    auto r = i == 1 ? client.Post("/p", Params{{"n", "1"}}) : client.Get("/");
    ASSERT_TRUE(r) << to_string(r.error());
    EXPECT_EQ(r->body, "c0 r" + std::to_string(i));
  }
  EXPECT_EQ(server.connections(), 1);
  for (const std::string& request : server.requests())
    EXPECT_EQ(request.find("Connection:"), std::string::npos) << request;
  // An answer that says Connection: close ends it; the next request gets a new one.
  TinyServer closing([](TinyServer& s, int fd, int connection) {
    if (s.take(fd).empty()) return;
    send_all(fd, answer("c" + std::to_string(connection), "Connection: close\r\n"));
    while (!s.stopping() && !s.take(fd).empty()) {
    }
  });
  Client polite("127.0.0.1", closing.port());
  polite.set_keep_alive(true);
  ASSERT_TRUE(polite.Get("/"));
  auto second = polite.Get("/");
  ASSERT_TRUE(second) << to_string(second.error());
  EXPECT_EQ(second->body, "c1");
}

TEST(HttpClient, AKeptConnectionTheServerClosedWhileIdleIsReplacedTransparently) {
  // The server answers one request per connection and then closes it, without saying so.
  TinyServer server([](TinyServer& s, int fd, int connection) {
    if (s.take(fd).empty()) return;
    send_all(fd, answer("c" + std::to_string(connection)));
    std::this_thread::sleep_for(milliseconds(50));
  });
  Client client("127.0.0.1", server.port());
  client.set_keep_alive(true);
  ASSERT_TRUE(client.Get("/"));
  std::this_thread::sleep_for(milliseconds(300));  // the server has closed it by now
  auto r = client.Post("/pay", Params{{"amount_cents", "100"}});
  ASSERT_TRUE(r) << to_string(r.error());
  EXPECT_EQ(r->body, "c1");
  EXPECT_EQ(server.connections(), 2);
  EXPECT_EQ(server.requests().size(), 2u) << "each request went out once";
}

TEST(HttpClient, ARequestThatMayHaveReachedTheServerIsNeverSentAgain) {
  // A new connection: the server reads the request and closes without an answer.
  TinyServer server([](TinyServer& s, int fd, int) { s.take(fd); });
  Client client("127.0.0.1", server.port());
  client.set_keep_alive(true);
  auto r = client.Post("/payments", Params{{"amount_cents", "100"}});
  EXPECT_FALSE(r);
  EXPECT_EQ(r.error(), Error::Read);
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(server.connections(), 1);
  EXPECT_EQ(server.requests().size(), 1u);
  // A kept connection: the first request is answered, the second read and left unanswered.
  TinyServer once([](TinyServer& s, int fd, int) {
    if (s.take(fd).empty()) return;
    send_all(fd, answer("first"));
    s.take(fd);
  });
  Client kept("127.0.0.1", once.port());
  kept.set_keep_alive(true);
  ASSERT_TRUE(kept.Get("/"));
  auto second = kept.Post("/payments", Params{{"amount_cents", "100"}});
  EXPECT_FALSE(second);
  EXPECT_EQ(second.error(), Error::Read);
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(once.connections(), 1);
  EXPECT_EQ(once.requests().size(), 2u);
}

TEST(HttpClient, AnAnswerTooLargeOrMalformedFailsWithRead) {
  TinyServer server([](TinyServer& s, int fd, int connection) {
    if (s.take(fd).empty()) return;
    send_all(fd, connection == 0 ? "HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\nx"
                                 : "not http at all\r\n\r\n");
  });
  Client client("127.0.0.1", server.port());
  EXPECT_EQ(client.Get("/").error(), Error::Read);
  EXPECT_EQ(client.Get("/").error(), Error::Read);
  const Result none;
  EXPECT_FALSE(none);
  EXPECT_EQ(none.error(), Error::Unknown);
}

}  // namespace
}  // namespace holdfast::http_client
