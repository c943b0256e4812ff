// The PostgreSQL drill's TCP proxy between the panels and the primary, for the blackhole
// fault (FAULTS.md, "Silence and failover"). It listens on a loopback port of its own and
// opens one connection to the primary for every connection it accepts, then copies bytes
// both ways. While blackholed it forwards nothing in either direction, yet keeps every
// connection open and still accepts new ones (which get no upstream connection until the
// blackhole ends): to a client the server has gone silent. The kernel still acknowledges
// what the client sends (the proxy's socket takes it, the proxy just does not read), so a
// client's tcp_user_timeout does not fire: only the client's own deadlines end its wait.
// When the blackhole ends, what was held is delivered, as a healed network would.
//
// One thread, epoll (level-triggered), non-blocking sockets with TCP_NODELAY, a 64 KiB
// buffer per direction per connection: a full buffer stops reading from the side that
// fills it. A few thousand small messages a second cost it well under a millisecond each.
//
// For the standby-slow fault it can also delay what the server sends: while an answer delay
// is set, every chunk the server sends is passed on to the client that long after it
// arrived (in order; connections stay open and the client's bytes go through at once), so
// the server is slow, not silent.
//
// When the primary refuses a connection (the stop fault), the client's connection is
// closed at once: the client reads "server closed the connection unexpectedly" where it
// would have read "connection refused". A side that closes or resets closes both sides,
// after what it sent has been passed on.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "holdfast/core/result.hpp"

namespace holdfast::panel::drill {

class TcpProxy {
 public:
  struct Counters {
    std::uint64_t accepted = 0;  // connections accepted since the start
    std::uint64_t open = 0;      // client connections open now
    std::uint64_t bytes_to_server = 0;
    std::uint64_t bytes_to_client = 0;
  };

  // Listens on 127.0.0.1 (a free port) and forwards to 127.0.0.1:`upstream_port`.
  static Result<std::unique_ptr<TcpProxy>> start(int upstream_port);
  // Stops the thread and closes every socket. Never throws.
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  [[nodiscard]] int port() const noexcept { return port_; }
  // Thread-safe; takes effect within one turn of the proxy's loop (microseconds).
  void set_blackhole(bool on) noexcept;
  [[nodiscard]] bool blackholed() const noexcept { return blackhole_.load(); }
  // Thread-safe: every chunk the server sends from now on reaches its client `delay` later
  // (zero: at once, after what is held back already).
  void set_answer_delay(std::chrono::milliseconds delay) noexcept;
  [[nodiscard]] Counters counters() const noexcept;

 private:
  struct Loop;
  TcpProxy() = default;
  void wake() const noexcept;

  int port_ = 0;
  int upstream_port_ = 0;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: a state change or stop
  std::atomic<bool> blackhole_{false};
  std::atomic<long long> delay_ms_{0};
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> accepted_{0}, open_{0}, to_server_{0}, to_client_{0};
  std::thread thread_;
};

}  // namespace holdfast::panel::drill
