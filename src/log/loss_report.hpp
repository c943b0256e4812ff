// Internal: what DatabaseSink (database_sink.hpp) could not store, kept until a row of the
// logs table says so: entries skipped by an overload pause, lost to failed writes or to
// shutdown, dropped because the queue was full. It writes those rows (WARN, context
// "logger") and the console lines about them.
//
// Thread safety: none; it belongs to the sink's writer thread (and to the destructor once
// the writer has stopped).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/log/database_sink.hpp"
#include "holdfast/log/logger.hpp"

namespace holdfast::log_detail {

inline constexpr std::size_t kLevels = 4;
// Counts indexed by Level.
using PerLevel = std::array<std::uint64_t, kLevels>;

[[nodiscard]] inline std::size_t index_of(Level level) noexcept {
  return static_cast<std::size_t>(level);
}
[[nodiscard]] std::uint64_t sum(const PerLevel& counts) noexcept;

// The context of every row and console line the sink writes about itself.
inline constexpr std::string_view kLoggerContext = "logger";

// Report rows ahead of a batch, at most: the pause gap, lost entries, dropped entries.
inline constexpr std::size_t kMaxReports = 3;

class LossReport {
 public:
  void skipped(Level level) noexcept { ++skipped_[index_of(level)]; }
  void lost(Level level) noexcept { ++lost_[index_of(level)]; }

  // A write failed for a reason other than overload. The first failure of a run says so on
  // the console, and its reason goes into the "lost" row.
  void write_failed(const Status& status) noexcept;
  // The sink shuts down with `lost` entries it could not store in time.
  void shut_down(const PerLevel& lost) noexcept;

  // Fills the rows due into `rows` (size >= kMaxReports), dated `at`, and returns how many:
  // the gap line when `gap` holds an ended pause's length, then lost entries, then the
  // entries of `dropped` (the sink's counts now) not reported yet. Throws std::bad_alloc.
  std::size_t write_rows(std::span<LogRecord> rows, WallTime at, std::optional<Duration> gap,
                         const PerLevel& dropped) const;
  // The rows of the last write_rows(), given the same `dropped`, are stored: the counts
  // they report start over.
  void rows_stored(const PerLevel& dropped) noexcept;

  // At shutdown: one console line for the entries that never reached the table and no
  // stored row reports, if there are any.
  void console_summary(const PerLevel& dropped) const noexcept;

 private:
  PerLevel skipped_{};
  PerLevel lost_{};
  PerLevel dropped_reported_{};  // of the sink's dropped counts: those a stored row reports
  std::string lost_reason_;
  bool failing_ = false;  // the last write failed for a reason other than overload
};

}  // namespace holdfast::log_detail
