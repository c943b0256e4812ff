/// @file
/// Confirmed writes that a failover lost (DESIGN.md §13, ADR 0036): what a pg::Database
/// remembers of the writes it confirmed, and what it reports when a new writer does not hold
/// them.
///
/// @code
///   holdfast::pg::DatabaseOptions options;
///   options.url = "postgresql://app@db1,db2/club";   // failover: the writer is either host
///   options.lost_writes.logger = &logger;            // the ERROR lines go there
///   holdfast::pg::Database db(options);
///   ...
///   holdfast::pg::LostWritesReport seen = db.lost_writes();   // for a status page
///   if (seen.missing_total > 0) { ... }
/// @endcode
///
/// Every write the Database confirms (write(), transaction(), once() and a COMMIT in doubt
/// resolved as committed) is recorded in a fixed ring: its commit position, timeline, host and
/// idempotency key (the key's first 64 bytes and a hash of all of it). Recording takes no lock
/// and allocates nothing. When a commit reports another writer than the last one (another
/// host of the URL, another timeline, or an older timeline than the newest seen), a thread of
/// the Database's own asks the writer, off every request, whether it holds the writes
/// confirmed elsewhere in the last `horizon`: by key in the idempotency-key table where the
/// write had one, else by position (the writer's timeline history). What it does not hold is
/// reported: one ERROR line per 64 writes naming their keys or positions (never what they
/// wrote), holdfast_confirmed_writes_missing_total on the primary's Shield, and
/// lost_writes(). A writer on an older timeline than the newest seen is a split brain:
/// an ERROR line, holdfast_split_brains_total and lost_writes().split_brains.
///
/// Without superuser rights: keys are always checked (the table is the application's), and
/// so are positions on the writer's own timeline and on later ones (a split brain). A write
/// without a key confirmed on an earlier timeline needs the writer's timeline history
/// (pg_read_file() of pg_wal/0000000N.history: superuser, or GRANT EXECUTE ON FUNCTION
/// pg_read_file(text, bigint, bigint, boolean)); without it such writes are counted as
/// unverified (a WARN line, holdfast_confirmed_writes_unverified_total).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "holdfast/core/duration.hpp"
#include "holdfast/pg/options.hpp"  // LostWritesOptions

namespace holdfast::pg {

/// What a Database found so far (Database::lost_writes()).
struct LostWritesReport {
  std::uint64_t changes = 0;           ///< changes of writer seen
  std::uint64_t checks = 0;            ///< checks completed against a writer
  std::uint64_t checks_failed = 0;     ///< checks given up (the writer did not answer)
  std::uint64_t missing_total = 0;     ///< confirmed writes the writer did not hold
  std::uint64_t unverified_total = 0;  ///< writes without a key that could not be checked
  std::uint64_t split_brains = 0;      ///< writers found on an older timeline than the newest seen
  std::uint64_t dropped = 0;           ///< confirmed writes the ring could not record
  /// The last finding in one line (empty: none yet), and when it was made.
  std::string last_finding;
  TimePoint last_finding_at{};  ///< on the Database's clock
  /// The keys (or, for writes without one, "timeline:position") of the last finding's
  /// missing writes; at most 64.
  std::vector<std::string> last_missing;
};

}  // namespace holdfast::pg
