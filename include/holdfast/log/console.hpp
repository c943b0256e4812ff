/// @file
/// The console: where every log line and every retry's DEBUG line goes (stderr).
///
/// One line per entry, easy to grep and to parse:
/// @code
///   2026-11-30T11:40:21.123Z DEBUG [retry] schedule.games: attempt 2 failed ... key=value
/// @endcode
/// The console never touches a database. The level comes from HOLDFAST_LOG_LEVEL
/// (debug, info, warn, error; default info) and can be changed at run time.
/// Writing never throws and never allocates for a filtered-out level.
#pragma once

#include <cstdint>
#include <string_view>

namespace holdfast {

/// How important a log entry is, lowest first.
enum class Level : std::uint8_t {
  kDebug = 0,  ///< detail, such as every retry's line
  kInfo = 1,   ///< normal events
  kWarn = 2,   ///< warnings
  kError = 3   ///< errors
};

/// "DEBUG", "INFO", "WARN", "ERROR".
[[nodiscard]] std::string_view to_string(Level level) noexcept;
/// Parses "debug", "info", "warn"/"warning", "error" (any case). False when unknown.
[[nodiscard]] bool parse_level(std::string_view text, Level& out) noexcept;

/// The process-wide console (stderr).
namespace console {

/// Sets the console level for the whole process, at any time, from any thread.
void set_level(Level level) noexcept;
/// The console level (HOLDFAST_LOG_LEVEL at start, default info).
[[nodiscard]] Level level() noexcept;
/// Whether the console writes entries of `level`.
[[nodiscard]] bool enabled(Level level) noexcept;

/// Writes one line (if `level` is enabled) with the wall-clock UTC time. Never throws.
void write(Level level, std::string_view context, std::string_view message) noexcept;

}  // namespace console
}  // namespace holdfast
