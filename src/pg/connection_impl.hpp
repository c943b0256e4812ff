// Connection::Impl: the libpq connection behind a holdfast::pg::Connection and the state
// its exchanges share (not installed). connection.cpp opens and inspects it;
// exchange.cpp sends statements and collects their results.
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "holdfast/pg/connection.hpp"
#include "pg_internal.hpp"
#include "server_watch.hpp"

namespace holdfast::pg {

const char* or_empty(const char* s) noexcept;
// `s` without trailing line breaks and spaces.
std::string trim(std::string_view s);

struct Connection::Impl {
  PGconn* conn = nullptr;
  Clock* clock = nullptr;
  TimePoint deadline = TimePoint::max();
  long long statement_timeout_ms = -1;
  std::deque<Notice> notices;
  std::uint64_t notices_received = 0;
  // A FATAL the server sent while we were not waiting for a result (a terminated idle
  // backend): its SQLSTATE explains the lost connection the next statement will see.
  bool fatal_seen = false;
  std::string fatal_sqlstate;
  std::string fatal_message;
  // Scratch space reused by every statement (no allocation once warm).
  std::string sql;
  std::string name;
  std::string arena;
  std::vector<const char*> values;
  std::vector<Oid> types;
  // Statement ids prepared on this connection (detail::ConnectionAccess::is_prepared()).
  std::vector<bool> prepared;
  // The watch of the server this connection reaches (pg::Database's), or null.
  std::shared_ptr<detail::ServerWatch> watch;
  // The watch of the one host this connection reaches, when its conninfo names several
  // (host_watch()): a check found that host silent while another one answered.
  std::shared_ptr<detail::ServerWatch> host;
  // The slot of the watch's Liveness the exchange under way waits in (Liveness::waiting()),
  // to which what comes back is told; Liveness::kNoSlot between exchanges.
  std::uint32_t live_slot = ~std::uint32_t{0};

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl();

  static void on_notice(void* arg, const PGresult* res) noexcept;
  static Status closed();

  // The status of a connection that is gone, with the best explanation we have.
  // `outcome`: whether the statement may have been applied.
  Status lost(std::string_view sqlstate, std::string_view message, Outcome outcome) const;
  // Fills values/types for `params`; string views that are not NUL-terminated (all of
  // them with `copy_all`) are copied into the arena first.
  void bind(std::span<const Param> params, bool copy_all = false);
  // Asks the server to cancel the running statement, off this thread (server_watch.hpp).
  void cancel() const noexcept;

  // exchange.cpp: sends with `send` (returns 1 on success, like libpq) and collects every
  // result of that one statement.
  template <class Send>
  Result<Rows> run(Send&& send) {
    if (Status s = ready(); !s.ok()) return s;
    return collect(send() != 0);
  }
  Status pipeline(std::span<const detail::Step> steps, std::span<Rows> out, std::size_t* failed);
  // pipeline() in two halves, for a hedged read (hedge.cpp): the steps sent (`sent`: all of
  // them and the Sync went out; a failure before anything was sent is returned), then their
  // results collected.
  Status pipeline_send(std::span<const detail::Step> steps, bool& sent);
  Status pipeline_collect(std::span<const detail::Step> steps, bool sent, std::span<Rows> out,
                          std::size_t* failed);
  // Waits until `a` or `b` (may be null) has a result to read (or was lost, or its server
  // found silent): 0 for `a`, 1 for `b`; -1 when `until` passed first.
  static int first_answer(Impl& a, Impl* b, TimePoint until) noexcept;
  // Gives up what runs on the connection: the cancel goes out (off this thread) and the
  // connection is closed.
  void abandon() noexcept;

 private:
  friend class LoopConnection;
  // Where a wait for results stands: the deadline, and whether the cancel went out.
  struct Wait {
    TimePoint until;
    bool cancelled = false;
    bool stuck = false;   // neither the deadline nor the cancel got an answer
    bool silent = false;  // given up because the server was found silent
  };
  enum class Readable : std::uint8_t { kYes, kTimeout, kSilent };
  Status ready() const;
  Result<Rows> collect(bool sent);
  // Waits until the socket is readable, `until` passed, or the server is found silent.
  Readable wait_readable(TimePoint until) const noexcept;
  Readable wait_result(TimePoint until) const noexcept;
  // The next result, or nullptr (the end of a statement's results, a lost connection, or
  // `w.stuck`). Past the deadline it cancels once and waits a short grace more.
  PGresult* next_result(Wait& w) noexcept;
  bool send_step(const detail::Step& step);
  // Closes a connection whose server answered neither the deadline nor the cancel, or was
  // found silent (`w.silent`); `sent`: the statement went out.
  Status stuck(const Wait& w, bool sent);
  // The status of a failed exchange from its first error (may be nullptr) and whether
  // everything was sent.
  Status failure(const PGresult* bad, bool sent) const;
};

}  // namespace holdfast::pg
