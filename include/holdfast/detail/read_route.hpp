// Internal (not part of the API; public only because the header-only asio::pg::Client uses
// it too): the routing of a read over a primary and its standbys, written once for the
// blocking pg::Database (src/pg/replica_state.cpp) and the Client
// (adapters/asio_pg_attempts.hpp), which differ only in how they wait for a server: a thread
// or the event loop. ADR 0057.
//
//   - standby_may_answer(): whether a request's read may go to a standby at all;
//   - StandbyPass: which standby it asks next, and when the primary answers instead;
//   - CatchUp: whether a standby found behind a request's writes can have replayed them
//     (ADR 0016's hold: a stopped replay costs no round trip per read);
//   - standbys_again_after(): whether, after the primary could not answer, the standbys that
//     were only behind the request's writes are asked again;
//   - kWalPositionSql: the position a write's reads wait for a standby to have replayed.
//
// Each driver decides by itself whether one standby may be asked now (with CatchUp and the
// slow-copy rule, and its own evidence of the standby's health) and asks it; what it asked and
// heard goes back to the pass.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/status.hpp"

namespace holdfast::pg::detail {

// Whether a read of a request may go to a standby. Not when only the primary may answer it
// (a write of the request's committed at a position nobody knows), nor when its position is
// of a timeline older than the newest the primary's own answers showed: a promotion forked
// the history there, a standby's replay position cannot be compared with it, and the primary
// holds what survived. Timeline 0: not known (no promotion to compare with).
[[nodiscard]] constexpr bool standby_may_answer(bool primary_only, std::uint32_t timeline,
                                                std::uint32_t newest_timeline) noexcept {
  return !primary_only && (timeline == 0 || timeline >= newest_timeline);
}

// A write's position, read on the primary right after its COMMIT: the end of the WAL
// inserted so far, at or past the commit record; and its timeline (the first 8 hex digits of
// the WAL file's name). pg_current_wal_insert_lsn() alone is not it when the last record
// ended on a page boundary: it then points past the next page's header (24 bytes, 40 at a
// segment's start), where no record ends, and a standby's replay stops at the boundary until
// someone writes again; on a quiet primary a request's reads would never go to a standby.
// Such a position is taken back to the boundary (PostgreSQL 13 has no pg_lsn - numeric).
inline constexpr std::string_view kWalPositionSql =
    "SELECT CASE WHEN h = 0 THEN l::text ELSE pg_catalog.to_hex(pg_catalog.div(e, 4294967296)::"
    "int8) || '/' || pg_catalog.to_hex(pg_catalog.mod(e, 4294967296)::int8) END, "
    "pg_catalog.substr(f, 1, 8) FROM (SELECT l, f, h, (l - '0/0'::pg_catalog.pg_lsn) - h AS e "
    "FROM (SELECT l, n.file_name AS f, CASE WHEN n.file_offset = 40 THEN 40 WHEN n.file_offset "
    "% pg_catalog.current_setting('wal_block_size')::int4 = 24 THEN 24 ELSE 0 END AS h FROM "
    "pg_catalog.pg_current_wal_insert_lsn() l, pg_catalog.pg_walfile_name_offset(l) n) a) b";

// How long a read waits for its standbys, from the first one it asks, before it stops asking
// the next and the primary answers (the Client's ClientOptions::standby_wait; pg::Database's
// reads wait the same).
inline constexpr Duration kStandbyWait = std::chrono::milliseconds(500);

// One read's way through `count` standbys: in turn from `first`, each at most once, the
// next after one that did not answer; not past the first 64 for a pass `only` over some of
// them. A standby is asked while `wait` has not passed since the first was asked (a read
// waits for standbys about as long with several as with one), and not at or after `until`
// (the request's deadline). Then the primary answers.
//
//   StandbyPass pass(n, turn++, wait, until);
//   while (std::optional<std::size_t> i = pass.next(clock.now())) {
//     if (!may_be_asked(*i)) continue;        // the driver's own rules: no time spent
//     pass.asked(clock.now());
//     ... ask standby *i: answered -> return its answer
//     pass.unanswered(*i, only_behind);
//   }
//   ... the primary answers
class StandbyPass {
 public:
  static constexpr std::uint64_t kAll = ~std::uint64_t{0};

  StandbyPass(std::size_t count, std::size_t first, Duration wait,
              TimePoint until = TimePoint::max(), std::uint64_t only = kAll) noexcept
      : count_(count),
        first_(count == 0 ? 0 : first % count),
        wait_(wait),
        until_(until),
        only_(only) {}

  // The next standby to consider at `now`, or nullopt: the primary answers.
  [[nodiscard]] std::optional<std::size_t> next(TimePoint now) noexcept {
    if (now >= until_) return std::nullopt;
    if (asked_ && now - first_asked_ >= wait_) return std::nullopt;
    while (given_ < count_) {
      const std::size_t i = (first_ + given_++) % count_;
      if (only_ == kAll || (i < 64 && ((only_ >> i) & 1) != 0)) return i;
    }
    return std::nullopt;
  }
  // The standby next() gave last is asked now (`at`).
  void asked(TimePoint at) noexcept {
    if (!asked_) first_asked_ = at;
    asked_ = true;
  }
  // It did not answer the read. `behind`: it answered, but had not replayed the request's
  // writes (or its snapshot predates them): after the primary could not answer, it may have.
  void unanswered(std::size_t i, bool behind) noexcept {
    if (behind && i < 64) behind_ |= std::uint64_t{1} << i;
  }
  // The standbys of this pass that were only behind (bit i: standby i; the first 64).
  [[nodiscard]] std::uint64_t behind() const noexcept { return behind_; }

 private:
  std::size_t count_;
  std::size_t first_;
  Duration wait_;
  TimePoint until_;
  std::uint64_t only_;
  std::size_t given_ = 0;
  bool asked_ = false;
  TimePoint first_asked_{};
  std::uint64_t behind_ = 0;
};

// What the reads of a standby have shown of its replay, for the reads that need a request's
// writes: a standby found behind them is not asked by such a read for a hold (50 ms, doubling
// while its replay stays where it was, up to 1 s) unless it was seen past them since. Atomics:
// no lock on a read's way; racing reads may each set the hold, and any of their answers is a
// fair one.
class CatchUp {
 public:
  static constexpr Duration kFirstHold = std::chrono::milliseconds(50);
  static constexpr Duration kLongestHold = std::chrono::seconds(1);

  // A read reported the standby at `replayed`.
  void saw(std::uint64_t replayed) noexcept;
  // A read that needed more found the standby at `replayed` at `now`.
  void behind(std::uint64_t replayed, TimePoint now) noexcept;
  // Whether a read that needs `need` (0: nothing) should not ask the standby at `now`.
  [[nodiscard]] bool skip(std::uint64_t need, TimePoint now) const noexcept;
  // Whether a read has reported the standby at or past `need`.
  [[nodiscard]] bool reached(std::uint64_t need) const noexcept {
    return known_.load(std::memory_order_relaxed) >= need;
  }

 private:
  std::atomic<std::uint64_t> known_{0};     // the highest replay position reported
  std::atomic<std::uint64_t> stuck_at_{0};  // the replay position when last found behind
  std::atomic<std::int64_t> hold_ns_{0};
  std::atomic<std::int64_t> until_ns_{0};
};

// Whether the standbys `behind` (StandbyPass::behind()) are asked again after the primary
// answered `primary`: it could not answer (a fault that may pass, or holdfast's own shedding),
// and a standby was only behind the request's writes: it may have replayed them meanwhile (a
// primary going down streams its last WAL first).
[[nodiscard]] bool standbys_again_after(const Status& primary, std::uint64_t behind) noexcept;

}  // namespace holdfast::pg::detail
