// A small HTTP service on Boost.Beast whose PostgreSQL calls go through holdfast's adapter on
// the same event loop: GET /games reads, POST /pay pays once per Idempotency-Key (a transaction
// of two statements). No thread waits for the database: one thread serves every connection and
// every query.
//
//   asio_pg_example postgresql://app@127.0.0.1:5432/app [port [standby-url]]
//
// With a port it serves until stopped (0: the first free one from 24000), and with a standby
// URL (a hot standby, or several as one multi-host URL) reads go there when it has the
// request's own writes. Without a port (as the tests run it), it serves on a free port below
// 32768, sends itself a few requests, prints the answers and exits (0 when they were right).
// Without a URL it says so and exits 77 (skipped).
#define HOLDFAST_ASIO_BOOST 1
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <cstdio>
#include <exception>
#include <holdfast/adapters/asio_pg.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Db = holdfast::asio::pg::Client<>;

// [service]
// One HTTP request's answer: each request gets its own window (6 s by default) that every
// database call of it shares.
net::awaitable<http::response<http::string_body>> answer(
    Db& db, const http::request<http::string_body>& req) {
  http::response<http::string_body> res{http::status::ok, req.version()};
  res.set(http::field::content_type, "text/plain");
  holdfast::RequestContext request;
  holdfast::Status failed;
  if (req.method() == http::verb::get && req.target() == "/games") {
    holdfast::Result<holdfast::pg::Rows> n = co_await db.async_read(
        request, "games.count", "SELECT count(*) FROM asio_example_games", {}, net::use_awaitable);
    if (n.ok()) res.body() = std::string(n->text(0, 0)) + " games\n";
    if (!n.ok()) failed = n.status();
  } else if (req.method() == http::verb::post && req.target() == "/pay") {
    // The payment and the club's total commit together, once per Idempotency-Key: a retry
    // after a lost COMMIT finds the key and answers with the first payment's id.
    const std::string key(req["Idempotency-Key"]);
    holdfast::pg::TransactionOptions pay;
    pay.operation = holdfast::Operation::transaction(true, "payments.create");
    holdfast::Result<holdfast::KeyedResult> paid = co_await db.async_once(
        request, key,
        [&](Db::Transaction& tx) -> net::awaitable<holdfast::Result<std::string>> {
          const holdfast::pg::Param payment[] = {holdfast::pg::Param(key)};
          holdfast::Result<holdfast::pg::Rows> id = co_await tx.query(
              "INSERT INTO asio_example_payments (key) VALUES ($1) RETURNING id", payment);
          if (!id.ok()) co_return id.status();
          holdfast::Result<holdfast::pg::Rows> total =
              co_await tx.query("UPDATE asio_example_totals SET payments = payments + 1");
          if (!total.ok()) co_return total.status();
          co_return std::string(id->text(0, 0));  // recorded with the key
        },
        pay, net::use_awaitable);
    if (paid.ok()) {
      res.body() = "payment " + paid->result + (paid->replayed ? " (already paid)\n" : "\n");
    } else {
      failed = paid.status();
    }
  } else {
    res.result(http::status::not_found);
  }
  if (!failed.ok()) {
    // Overloaded, away or out of window: say when to come back, never a stack trace. A
    // payment whose outcome is unknown is safe to send again with the same key.
    res.result(http::status::service_unavailable);
    const auto after = std::chrono::ceil<std::chrono::seconds>(failed.retry_after()).count();
    res.set(http::field::retry_after, std::to_string(std::max<long long>(1, after)));
    res.body() = "try again shortly\n";
  }
  res.prepare_payload();
  co_return res;
}
// [/service]

net::awaitable<void> serve(tcp::socket socket, Db& db) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  try {
    for (;;) {
      http::request<http::string_body> req;
      co_await http::async_read(stream, buffer, req, net::use_awaitable);
      http::response<http::string_body> res = co_await answer(db, req);
      res.keep_alive(req.keep_alive());
      co_await http::async_write(stream, res, net::use_awaitable);
      if (!res.keep_alive()) break;
    }
  } catch (const std::exception&) {
    // The client went away: nothing to answer.
  }
}

net::awaitable<void> listen(tcp::acceptor& acceptor, Db& db) {
  for (;;) {
    tcp::socket socket = co_await acceptor.async_accept(net::use_awaitable);
    net::co_spawn(acceptor.get_executor(), serve(std::move(socket), db), net::detached);
  }
}

// The self-test: a client on the same loop, one keep-alive connection.
net::awaitable<void> try_it(unsigned short port, int& wrong, net::io_context& io) {
  beast::tcp_stream stream(co_await net::this_coro::executor);
  co_await stream.async_connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port),
                                net::use_awaitable);
  beast::flat_buffer buffer;
  auto send = [&](http::verb verb, const char* target) -> net::awaitable<std::string> {
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.set("Idempotency-Key", "example-key-1");
    req.prepare_payload();
    co_await http::async_write(stream, req, net::use_awaitable);
    http::response<http::string_body> res;
    co_await http::async_read(stream, buffer, res, net::use_awaitable);
    std::printf("%s %s -> %u %s", std::string(http::to_string(verb)).c_str(), target,
                res.result_int(), res.body().c_str());
    co_return std::to_string(res.result_int()) + " " + res.body();
  };
  const std::string first = co_await send(http::verb::post, "/pay");
  const std::string again = co_await send(http::verb::post, "/pay");
  const std::string games = co_await send(http::verb::get, "/games");
  if (first.rfind("200 payment", 0) != 0) ++wrong;
  if (again.find("(already paid)") == std::string::npos) ++wrong;
  if (games.rfind("200 ", 0) != 0) ++wrong;
  io.stop();
}

// Makes the example's tables (the keys' table too).
net::awaitable<void> set_up(Db& db, int& wrong) {
  holdfast::RequestContext request;
  const char* tables[] = {
      "CREATE TABLE IF NOT EXISTS asio_example_games (id serial PRIMARY KEY, name text)",
      "CREATE TABLE IF NOT EXISTS asio_example_payments (id serial PRIMARY KEY, key text)",
      "CREATE TABLE IF NOT EXISTS asio_example_totals (payments bigint NOT NULL)",
      "INSERT INTO asio_example_totals SELECT 0 WHERE NOT EXISTS "
      "(SELECT 1 FROM asio_example_totals)",
      "DELETE FROM holdfast_idempotency WHERE key = 'example-key-1'"};
  holdfast::Result<holdfast::pg::Rows> keys =
      co_await db.async_create_idempotency_table(request, net::use_awaitable);
  if (!keys.ok()) ++wrong;
  for (const char* sql : tables) {
    holdfast::Result<holdfast::pg::Rows> r =
        co_await db.async_write(request, "example.setup", sql, {}, net::use_awaitable);
    if (!r.ok()) {
      std::printf("setting up: %s\n", r.status().to_string().c_str());
      ++wrong;
    }
  }
}

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '\0') {
    std::printf("asio_pg_example: give a PostgreSQL URL (skipped)\n");
    return 77;
  }
  net::io_context io;
  holdfast::asio::pg::ClientOptions options;
  options.connect.conninfo = argv[1];
  if (argc >= 4) options.standby.conninfo = argv[3];
  holdfast::Result<std::shared_ptr<Db>> db = Db::open(io.get_executor(), options);
  if (!db.ok()) {
    std::printf("asio_pg_example: %s\n", db.status().to_string().c_str());
    return 2;
  }
  const bool self_test = argc < 3;
  tcp::acceptor acceptor(io);
  unsigned short port = 0;
  if (!self_test) {
    const std::string_view text(argv[2]);
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
    if (ec != std::errc() || end != text.data() + text.size()) {
      std::printf("asio_pg_example: the port must be a number from 0 to 65535, not \"%s\"\n",
                  argv[2]);
      return 2;
    }
  }
  const bool any_port = port == 0;
  for (unsigned short p = any_port ? 24000 : port; acceptor.is_open() == false; ++p) {
    boost::system::error_code ec;
    tcp::acceptor a(io);
    a.open(tcp::v4(), ec);
    if (!ec) a.bind(tcp::endpoint(net::ip::make_address("127.0.0.1"), p), ec);
    if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
    if (!ec) {
      acceptor = std::move(a);
      port = p;
    } else if (!any_port || p >= 32767) {
      std::printf("asio_pg_example: cannot listen on port %u\n", p);
      return 2;
    }
  }
  int wrong = 0;
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        co_await set_up(**db, wrong);
        net::co_spawn(io, listen(acceptor, **db), net::detached);
        if (self_test) co_await try_it(port, wrong, io);
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  if (!self_test) {
    std::printf("serving on 127.0.0.1:%u\n", port);
    std::fflush(stdout);
  }
  io.run();
  return wrong == 0 ? 0 : 1;
}
