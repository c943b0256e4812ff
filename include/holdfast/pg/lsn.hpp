/// @file
/// Read-your-writes on PostgreSQL replicas: a WAL position (Lsn) and the one the current
/// request's reads must see.
///
/// @code
///   {
///     holdfast::RequestScope scope;
///     holdfast::pg::require_lsn(session.last_write);        // carried by a signed-in session
///     db.write("UPDATE profile SET name = $1 WHERE id = $2", {name, id});
///     auto me = db.read("SELECT name FROM profile WHERE id = $1", {id});  // sees the UPDATE
///     session.last_write = holdfast::pg::request_lsn();
///   }
/// @endcode
///
/// A Database records, after every write, transaction() and once() it commits on the
/// primary, the primary's WAL insert position after the COMMIT (at or past the end of the
/// commit record; a page's start, not past its header) as the request's position. A read
/// goes to a standby only if the standby has replayed at least that far
/// (pg_last_wal_replay_lsn(), read in the read's own round trip); otherwise the primary
/// answers it. See docs/adr/0013-postgres-read-your-writes-and-transaction-pooling.md.
///
/// The position carries the primary's timeline. After a failover the promoted standby writes
/// on a new timeline, and a position of the old one cannot be compared with its positions: a
/// request whose position is of an older timeline than a Database has seen its primary write
/// on is answered by the primary (which holds all of the old timeline that survived). A
/// later write of the request replaces the old position (ADR 0028).
///
/// The position lives with the request. A request carried as a RequestContext (window.hpp)
/// keeps it in the context: every thread where a RequestScope(context) makes that request
/// current reads and moves the same position, with nothing to carry by hand. Otherwise it
/// lives with the window of the innermost RequestScope on this thread, which nested scopes
/// share; a RequestScope adopted on another thread by its window starts without it: carry it
/// there whole with a PositionScope (or call require_lsn() there). Outside any
/// RequestScope there is none: each call stands alone. It is kept on the thread, keyed by the
/// window, and a window never closes once open, so the next request starts afresh once this one has
/// reached the database; a request that called require_lsn() and never reached the database may
/// pass that position on to the next request on its thread whose RequestScope sits at the same
/// address (which can only send some of that request's reads to the primary).
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "holdfast/core/result.hpp"

namespace holdfast::pg {

/// A PostgreSQL WAL position (pg_lsn), and the timeline it was written on. Zero is "none".
struct Lsn {
  std::uint64_t value = 0;  ///< the position as a 64-bit number
  /// The primary's timeline when the position was written (it grows by one at each
  /// promotion); 0: not known. Positions of different timelines are not comparable: after a
  /// promotion the new timeline forks from the old one somewhere before its end.
  std::uint32_t timeline = 0;

  /// "16/B374D848" (pg_lsn's text form), or with its timeline in decimal before a colon,
  /// "3:16/B374D848" (to_string_with_timeline()). INVALID_ARGUMENT for anything else.
  static Result<Lsn> parse(std::string_view text);
  /// pg_lsn's text form, what a `pg_lsn` cast reads: "16/B374D848", "0/0" for none.
  [[nodiscard]] std::string to_string() const;
  /// The form to carry between requests (a cookie): "3:16/B374D848" when the timeline is
  /// known, else to_string(). parse() reads it back.
  [[nodiscard]] std::string to_string_with_timeline() const;
  /// True for "none" (zero).
  [[nodiscard]] bool empty() const noexcept { return value == 0; }
  /// Positions compare in WAL order, then by timeline (meaningful on one timeline only).
  friend auto operator<=>(const Lsn&, const Lsn&) = default;
};

/// The position the current request's reads must see: the latest of its writes' commits and
/// of what require_lsn() was given. Empty outside a RequestScope and before either.
[[nodiscard]] Lsn request_lsn() noexcept;

/// Raises the current request's position to at least `lsn` (for instance the last write of
/// a signed-in session, carried from request to request). A position of a newer timeline
/// replaces one of an older timeline; one of an older timeline is ignored. No-op outside a
/// RequestScope.
void require_lsn(Lsn lsn) noexcept;

/// The current request's position in full: request_lsn(), and whether a write of unknown
/// position (a COMMIT whose answer was lost) sends its reads to the primary.
struct CarriedPosition {
  Lsn lsn;                    ///< what request_lsn() gives
  bool primary_only = false;  ///< a write's position is unknown: only the primary answers
};

/// The current request's whole position, for a driver that runs one request's calls on
/// several threads (an event loop's coroutine, blocking jobs on a pool): the position lives
/// on the thread, so the driver takes it where the request was and gives it, with
/// carry_position(), where the request goes next. Empty outside a RequestScope.
[[nodiscard]] CarriedPosition carried_position() noexcept;

/// Makes `position` the current request's position, replacing what this thread held for
/// it. No-op outside a RequestScope.
void carry_position(const CarriedPosition& position) noexcept;

/// Gives a request's position to this thread for a scope, and takes it back at its end:
/// inside a RequestScope of the request's window, as a blocking job of the request does.
///
/// @code
///   holdfast::RequestScope scope(request.window);          // adopted on the job's thread
///   holdfast::pg::PositionScope carried(request.position);  // ... and its position
///   auto r = db.write(...);  // request.position moves past the commit at the scope's end
/// @endcode
class PositionScope {
 public:
  /// Gives `position` to the current request on this thread; the scope's end writes the
  /// request's position, moved by any commit meanwhile, back into it.
  explicit PositionScope(CarriedPosition& position) noexcept : position_(position) {
    carry_position(position);
  }
  ~PositionScope() { position_ = carried_position(); }
  PositionScope(const PositionScope&) = delete;
  PositionScope& operator=(const PositionScope&) = delete;

 private:
  CarriedPosition& position_;
};

}  // namespace holdfast::pg
