// What the connections to one server share with pg::Database's watch of it (not installed):
// its Liveness (holdfast/core/liveness.hpp) and a descriptor that turns readable while the server
// is silent, so that every exchange waiting on it gives up at once (DESIGN.md §10). The same
// per host of a multi-host conninfo, process-wide (host_watch()). Also the driver's cancel
// requests, sent off the request's thread.
#pragma once

#include <libpq-fe.h>

#include <atomic>
#include <memory>
#include <string>

#include "holdfast/core/liveness.hpp"

namespace holdfast::pg::detail {

struct ServerWatch {
  ServerWatch();  // opens the eventfd (wake_fd stays -1 if none can be had)
  ~ServerWatch();
  ServerWatch(const ServerWatch&) = delete;
  ServerWatch& operator=(const ServerWatch&) = delete;

  // The server turned silent (wake_fd readable, exchanges give up) or answered again.
  void set_silent(bool silent) noexcept;
  [[nodiscard]] bool silent() const noexcept { return silent_.load(std::memory_order_acquire); }

  // Set once by pg::Database before any connection uses it, cleared before the Liveness
  // goes; null when nothing watches the server.
  std::atomic<Liveness*> liveness{nullptr};
  int wake_fd = -1;

 private:
  std::atomic<bool> silent_{false};
};

// The watch of one host of a multi-host conninfo ("host:port"), shared by every pool in the
// process that reaches it: silent while the last check that asked it got nothing back,
// although another host of the list answered (a frozen old primary after a failover). Its
// liveness stays null: the checks of the servers that list it set it (ADR 0027).
std::shared_ptr<ServerWatch> host_watch(const std::string& host);

// Asks the server to cancel what `conn` runs, on a thread of the driver's own: libpq 15's
// PQcancel() blocks without a timeout on a server that accepts the connection and never
// answers. Takes no time on the caller's thread beyond PQgetCancel(). While every cancel
// thread is stuck on such a server, later cancels are dropped (their connections are closed
// anyway: a thawed server ends the backend when it next writes to the closed socket).
void cancel_off_thread(PGconn* conn) noexcept;
// Starts the cancel threads if they have not started: every connection does before it
// connects, so that they exist before a server freezes and are not started by it.
void prepare_cancels() noexcept;

}  // namespace holdfast::pg::detail
