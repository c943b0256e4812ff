/// @file
/// Whether a SQLite file may have changed since a moment, for every connection of a process
/// at once: sqlite::ChangeEpoch. For a cache of query results (a page, a report) that is
/// answered again, without its queries, only while nothing was committed since it was read
/// (the demo panel's schedule, ADR 0031).
///
/// SQLite tells each connection, by PRAGMA data_version, whether another connection (of this
/// process or another) has committed since that connection last looked; the number means
/// nothing to the other connections. ChangeEpoch turns those per-connection numbers into one
/// process-wide epoch: each connection remembers the data_version it last reported, and the
/// epoch moves on whenever a connection reports a different one (or reports for the first
/// time). So a copy read after observing epoch e is still the file's content while an
/// observation on any connection answers e: a commit after the copy was read shows, on every
/// connection, as a data_version that differs from the one that connection reported before
/// the commit, and the first such report moves the epoch past e. Conservative by
/// construction: up to one move per connection and commit, never a missed commit.
#pragma once

#include <atomic>
#include <cstdint>

#include "holdfast/core/status.hpp"

struct sqlite3;

namespace holdfast::sqlite {

/// One process-wide change epoch of a SQLite file (see the top of this file).
class ChangeEpoch {
 public:
  /// One observation: run on any connection attach() prepared (e.g. Database::query_int()),
  /// it answers the epoch (>= 1). It reads the file (the pragma opens a read transaction),
  /// so it fails busy as any read does.
  static constexpr const char* kObserveSql =
      "SELECT holdfast_change_epoch(data_version) FROM pragma_data_version";

  ChangeEpoch() = default;
  ChangeEpoch(const ChangeEpoch&) = delete;
  ChangeEpoch& operator=(const ChangeEpoch&) = delete;

  /// For DatabaseOptions::on_connect: defines holdfast_change_epoch() on `db`, with the
  /// connection's own memory of what it last reported (freed when the connection closes).
  /// REQUIRES: this outlives `db`.
  Status attach(sqlite3* db);

  /// What an observation on one connection does with that connection's data_version
  /// `version` and its memory `last` of the one it reported before: the epoch after it.
  std::uint64_t observe(std::atomic<std::int64_t>& last, std::int64_t version) noexcept;

 private:
  std::atomic<std::uint64_t> epoch_{1};
};

}  // namespace holdfast::sqlite
