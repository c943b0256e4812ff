/// @file
/// holdfast::sqlite::Options: how to open a Database (`{.path = "club.db"}`: WAL,
/// synchronous=NORMAL, foreign_keys=ON). Validated by Database::open(): a field out of range
/// throws std::invalid_argument naming it; a file that cannot be opened is a Status.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "holdfast/core/duration.hpp"
#include "holdfast/core/status.hpp"

struct sqlite3;  // the C handle, for Options::on_connect (no sqlite3.h here)

namespace holdfast {
class Clock;  // holdfast/core/clock.hpp
}  // namespace holdfast

namespace holdfast::sqlite {

namespace detail {
// &Clock::system(), Options::clock's default (database.cpp), so this header needs no clock.hpp.
Clock* system_clock() noexcept;
}  // namespace detail

/// SQLite's journal mode (PRAGMA journal_mode), set when the database is opened.
enum class JournalMode : std::uint8_t {
  kWal,     ///< write-ahead log: readers never wait for a writer (the default)
  kDelete,  ///< rollback journal: readers and writers block each other (tests, legacy files)
  kKeep,    ///< leave the file's journal mode as it is (tools that must not change the file)
};

/// SQLite's PRAGMA synchronous: how often it waits for the disk.
enum class Synchronous : std::uint8_t {
  kOff,     ///< OFF
  kNormal,  ///< NORMAL: in WAL mode, safe against corruption; the last commits may be lost
  kFull,    ///< FULL
  kExtra    ///< EXTRA
};

/// How a write transaction begins. kImmediate takes the write lock at BEGIN, so in WAL mode
/// nothing later in it, COMMIT included, meets SQLITE_BUSY (kExclusive: the same with a
/// rollback journal); a deferred one may fail SQLITE_BUSY_SNAPSHOT when it starts writing.
enum class TxnMode : std::uint8_t {
  kImmediate,  ///< BEGIN IMMEDIATE
  kExclusive,  ///< BEGIN EXCLUSIVE
  kDeferred    ///< BEGIN DEFERRED
};

/// Which kind of connection Options::on_connect is called for.
enum class Role : std::uint8_t {
  kWriter,  ///< the connection that writes
  kReader   ///< a read connection (PRAGMA query_only=1)
};

/// The size of the fixed array of read connections.
inline constexpr int kMaxReadConnections = 16;

/// How a Database opens its file and connections. Validated when the Database opens.
struct Options {
  /// A file path; "file:" URIs are accepted. ":memory:" is one in-memory database shared by
  /// all connections of this Database (SQLite's memdb VFS), gone when the Database closes.
  std::string path{};

  /// Set when the database is opened (it is persistent in the file). Ignored in memory.
  JournalMode journal_mode = JournalMode::kWal;
  Synchronous synchronous = Synchronous::kNormal;  ///< PRAGMA synchronous of every connection
  bool foreign_keys = true;                        ///< PRAGMA foreign_keys of every connection

  /// The longest one attempt waits for a lock held by another connection (SQLite's
  /// busy_timeout; 5 s by default), for a free read connection, or for this
  /// process's writer. The request's remaining retry window caps it on every attempt
  /// (RequestScope::current_window()). >= 0.
  Duration busy_timeout = std::chrono::milliseconds(5000);

  /// Connections opened with PRAGMA query_only=1 that serve reads in parallel. Opened on
  /// first use. 1..kMaxReadConnections.
  int read_connections = 4;

  /// Create the file when it does not exist. When false, a missing file is an error.
  bool create = true;
  /// Open every connection read-only; writes fail with a Status. Nothing in the file changes
  /// (journal_mode is left as it is).
  bool read_only = false;

  /// Distinct SQL texts whose prepared statements are kept per connection. SQL beyond that
  /// is prepared for each use (build SQL with parameters, not literal values).
  std::size_t statement_cache = 512;

  /// The idempotency-key table of once() (see idempotency.hpp). A plain or schema-qualified
  /// identifier; created by create_idempotency_table().
  std::string idempotency_table = "holdfast_idempotency";

  /// Times busy waits and waits for connections; Clock::system() unless set. REQUIRES: outlives
  /// the Database.
  Clock* clock = detail::system_clock();

  /// Called once for every connection right after it opens, before holdfast prepares
  /// anything on it: register functions, set connection pragmas. A non-OK Status fails the
  /// open. Do not change query_only, the busy handler or the authorizer.
  std::function<Status(sqlite3*, Role)> on_connect{};
};

}  // namespace holdfast::sqlite
