// Internal to holdfast/adapters/asio_pg.hpp: one pg::LoopConnection on the event loop (its
// socket's readiness as an awaitable) and a statement's parameters kept across attempts.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#if defined(HOLDFAST_ASIO_BOOST)
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#else
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#endif

#include "holdfast/adapters/asio.hpp"
#include "holdfast/pg/loop.hpp"

namespace holdfast::asio::pg {

namespace detail {

namespace net = ::holdfast::asio::detail::net;
using ::holdfast::asio::detail::error_code;
using Clock = std::chrono::steady_clock;

// One connection of the pool and the descriptor the loop watches its socket through. The
// descriptor never owns the socket (libpq does): it is released before libpq closes it.
struct Slot {
  explicit Slot(const net::any_io_executor& ex) : descriptor(ex) {}
  ~Slot() { forget(); }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

  void forget() noexcept {
    if (fd >= 0) {
      error_code ec;
      descriptor.cancel(ec);
      (void)descriptor.release();
      fd = -1;
    }
  }
  // The descriptor watches the connection's socket as it is now (a connect to several
  // hosts makes a new socket for each). `fresh`: watch it anew even if its number is the
  // same (during a connect, libpq may close a socket and get the same number again).
  void watch(bool fresh) {
    const int now = conn.socket();
    if (now == fd && !fresh) return;
    forget();
    if (now < 0) return;
    error_code ec;
    descriptor.assign(now, ec);
    if (!ec) fd = now;
  }

  holdfast::pg::LoopConnection conn;
  net::posix::stream_descriptor descriptor;
  int fd = -1;
  // Set by the winner of a hedged read: the loser gives up its statement at its next step.
  bool stop = false;
  // Which host of the pool's conninfo it reached (its index + 1), for the lost-writes watch.
  std::uintptr_t host = 0;
};

// Waits until the slot's socket is ready for `want`, or `until`. True when ready (or when
// there is no socket to wait on: libpq then reports the lost connection). At `until` the
// timer cancels the descriptor's wait; `race` tells a timer that fires after the wait ended
// (its handler already queued) to leave the descriptor alone.
inline net::awaitable<bool> ready(Slot& s, holdfast::pg::Want want, TimePoint until, bool fresh) {
  s.watch(fresh);
  if (s.fd < 0) co_return true;
  struct Race {
    bool over = false;
    bool expired = false;
  };
  auto race = std::make_shared<Race>();
  net::steady_timer timer(s.descriptor.get_executor(), until);
  timer.async_wait([race, d = &s.descriptor](const error_code& ec) {
    if (ec || race->over) return;
    race->expired = true;
    error_code ignored;
    d->cancel(ignored);
  });
  error_code ec;
  const auto what = want == holdfast::pg::Want::kRead ? net::posix::descriptor_base::wait_read
                                                      : net::posix::descriptor_base::wait_write;
  co_await s.descriptor.async_wait(what, net::redirect_error(net::use_awaitable, ec));
  race->over = true;
  timer.cancel();
  co_return !race->expired;
}

// One statement's parameters, copied so that every attempt of the call can send them.
struct Params {
  explicit Params(std::span<const holdfast::pg::Param> given) {
    text.reserve(given.size());
    for (const holdfast::pg::Param& p : given)
      text.emplace_back(p.is_null() ? std::string() : std::string(p.text()));
    params.reserve(given.size());
    for (std::size_t i = 0; i < given.size(); ++i) {
      params.push_back(given[i].is_null() ? holdfast::pg::Param(nullptr)
                                          : holdfast::pg::Param::typed(text[i], given[i].oid()));
    }
  }
  std::vector<std::string> text;
  std::vector<holdfast::pg::Param> params;
};

}  // namespace detail

}  // namespace holdfast::asio::pg
