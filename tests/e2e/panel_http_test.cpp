// Issues #13 and #32, the HTTP layer: the panel keeps answering while its clients are slow or
// hostile (apps/panel/http_server.hpp), tried on the whole panel. Raw sockets (raw_http.hpp).
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "panel_fixture.hpp"
#include "raw_http.hpp"

namespace holdfast::panel {
namespace {

using namespace rawhttp;  // NOLINT(google-build-using-namespace): the tests' own helpers

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

}  // namespace
}  // namespace holdfast::panel
