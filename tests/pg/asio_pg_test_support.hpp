// What the tests of holdfast::asio::pg::Client share (asio_pg_test.cpp, asio_pg_standby_test.cpp):
// the Asio flavour (Boost.Asio with HOLDFAST_ASIO_BOOST, else standalone), a Client's options for a
// server, and a coroutine run to its end on a loop of its own.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "holdfast/adapters/asio_pg.hpp"
#include "holdfast/pg/connection.hpp"
#include "pg_test_support.hpp"

#if defined(HOLDFAST_ASIO_BOOST)
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
namespace net = boost::asio;
#else
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
namespace net = asio;
#endif

namespace holdfast::asio_pg_test {

using holdfast::Code;
using holdfast::KeyedResult;
using holdfast::Operation;
using holdfast::Outcome;
using holdfast::RequestContext;
using holdfast::Result;
using holdfast::StopReason;
using holdfast::asio::pg::Client;
using holdfast::asio::pg::ClientOptions;
using holdfast::pg::Param;
using holdfast::pg::Rows;
using namespace holdfast::pgtest;
using namespace std::chrono_literals;

inline ClientOptions options_for(const std::string& url) {
  ClientOptions o;
  o.connect.conninfo = url;
  o.max_connections = 4;
  return o;
}

// Runs `body` as a coroutine on a fresh io_context with one thread until it is done.
template <class Body>
void run_on_loop(Body body) {
  net::io_context io;
  bool finished = false;
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        co_await body(io);
        finished = true;
      },
      net::detached);
  io.run();
  EXPECT_TRUE(finished);
}

}  // namespace holdfast::asio_pg_test
