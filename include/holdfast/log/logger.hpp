/// @file
/// Logger: levels, a context tag, a message and key/values, fanned out to sinks.
///
/// @code
///   holdfast::Logger log;                                   // console sink included
///   log.add_sink(database_sink);                            // the logs table (database_sink.hpp)
///   log.info("payments", "charged", {{"user", user_id}, {"amount_cents", 1250}});
///   log.error("schedule", "render failed: " + status.to_string());
/// @endcode
///
/// Each entry carries two times: `time` from the injected Clock (steady; what timed decisions
/// use) and `created_at`, UTC wall time from the injected WallClock (what people read and the
/// logs table stores). Tests inject ManualClock and a FollowingWallClock, so both are exact.
///
/// The console always receives everything at or above the console level (HOLDFAST_LOG_LEVEL,
/// console::set_level), one line per entry in console::write's layout:
/// @code
///   2026-11-30T11:40:21.123Z INFO  [payments] charged user=42 amount_cents=1250
/// @endcode
/// Control characters in the message are escaped (a newline becomes the two characters `\n`)
/// so one entry is always one line; a value with a space, '"', '=' or a control character is
/// quoted ("a b", with `\"` and `\\` inside quotes).
///
/// Logging never throws and never waits on a database: a sink that throws is counted and
/// skipped; DatabaseSink hands entries to a background writer.
///
/// Thread safety: add_sink() only before the Logger is shared; everything else from any
/// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "holdfast/core/clock.hpp"
#include "holdfast/log/console.hpp"

namespace holdfast {

/// UTC wall time with millisecond precision (the precision of created_at).
using WallTime = std::chrono::sys_time<std::chrono::milliseconds>;

/// The source of UTC wall time for log entries (created_at). Abstract; WallClock::system() is
/// the real one.
class WallClock {
 public:
  virtual ~WallClock() = default;
  /// The current UTC time, to the millisecond.
  [[nodiscard]] virtual WallTime now() const noexcept = 0;
  /// std::chrono::system_clock, truncated to milliseconds.
  static const WallClock& system() noexcept;
};

/// Wall time that moves with a Clock: `origin` at the instant of construction, then
/// origin + (clock.now() - that instant). Pair it with ManualClock for exact created_at in
/// tests. REQUIRES: `clock` outlives this.
class FollowingWallClock final : public WallClock {
 public:
  /// Starts at `origin` now.
  FollowingWallClock(const Clock& clock, WallTime origin) noexcept;
  [[nodiscard]] WallTime now() const noexcept override;

 private:
  const Clock* clock_;
  TimePoint start_;
  WallTime origin_;
};

/// "2026-11-30T11:40:21.123Z": ISO-8601 UTC with milliseconds. Fixed width for years 0..9999,
/// so the text sorts like the time (the logs table compares created_at as text).
struct UtcStamp {
  char text[32] = {};     ///< the text: its first `size` characters
  std::uint8_t size = 0;  ///< its length
  /// The text as a view.
  [[nodiscard]] std::string_view view() const noexcept { return {text, size}; }
};
/// `t` as a UtcStamp.
[[nodiscard]] UtcStamp utc_stamp(WallTime t) noexcept;

/// One key=value pair. The value is a view of the caller's text, or for a number or bool
/// formatted into the field itself (no allocation).
class LogField {
 public:
  /// `value` is the caller's text: it must outlive the field.
  LogField(std::string_view key, std::string_view value) noexcept
      : key_(key), text_(value.data()), size_(value.size()) {}
  /// A C string (nullptr: empty); it must outlive the field.
  LogField(std::string_view key, const char* value) noexcept
      : LogField(key, std::string_view(value ? value : "")) {}
  /// "true" or "false".
  LogField(std::string_view key, bool value) noexcept
      : LogField(key, value ? std::string_view("true") : std::string_view("false")) {}
  /// An integer, formatted into the field.
  template <std::integral T>
  requires(!std::same_as<T, bool> && !std::same_as<T, char>) LogField(std::string_view key, T value)
  noexcept : key_(key) {
    if constexpr (std::is_signed_v<T>) {
      format_signed(static_cast<long long>(value));
    } else {
      format_unsigned(static_cast<unsigned long long>(value));
    }
  }
  /// A double, formatted into the field (shortest round-trip form).
  LogField(std::string_view key, double value) noexcept;

  /// The key.
  [[nodiscard]] std::string_view key() const noexcept { return key_; }
  /// The value's text.
  [[nodiscard]] std::string_view value() const noexcept {
    return text_ ? std::string_view(text_, size_) : std::string_view(buffer_, size_);
  }

 private:
  void format_signed(long long v) noexcept;
  void format_unsigned(unsigned long long v) noexcept;

  std::string_view key_;
  const char* text_ = nullptr;  // the caller's text; nullptr when the value is in buffer_
  std::size_t size_ = 0;
  char buffer_[32] = {};
};

/// What a sink receives. The views are valid only during Sink::write().
struct LogEntry {
  Level level = Level::kInfo;        ///< the entry's level
  std::string_view context;          ///< the context tag ("payments", "retry")
  std::string_view message;          ///< the message
  std::span<const LogField> fields;  ///< the key=value pairs
  TimePoint time{};                  ///< from the Logger's Clock
  WallTime created_at{};             ///< from the Logger's WallClock
};

/// Where log entries go: the console, the logs table, spdlog, ... Implement accepts() and
/// write().
class Sink {
 public:
  virtual ~Sink() = default;
  /// Whether write() wants entries of `level`; the Logger builds no entry nobody wants.
  [[nodiscard]] virtual bool accepts(Level level) const noexcept = 0;
  /// Receives one entry on the caller's thread. Must not wait on a database or the network.
  /// May throw: the Logger catches and counts it.
  virtual void write(const LogEntry& entry) = 0;
};

/// One line per entry on a stdio stream (stderr by default), in console::write's layout, with
/// the entry's own created_at. A line is written with the stream locked (flockfile), so lines
/// from other threads and from console::write never interleave; nothing is allocated.
class ConsoleSink final : public Sink {
 public:
  /// Where and what it writes.
  struct Options {
    std::FILE* stream = nullptr;  ///< nullptr: stderr
    /// The lowest level written; unset: console::level() at each call (HOLDFAST_LOG_LEVEL).
    std::optional<Level> level;
  };

  /// stderr, at the console level.
  ConsoleSink() noexcept : ConsoleSink(Options{}) {}
  /// With `options`.
  explicit ConsoleSink(Options options) noexcept;

  [[nodiscard]] bool accepts(Level level) const noexcept override;
  void write(const LogEntry& entry) noexcept override;

 private:
  Options options_;
};

/// Formats `entry` as one console line (without the newline) into `out`. The same text
/// ConsoleSink writes; for sinks of your own and tests.
void format_console_line(const LogEntry& entry, std::string& out);

/// Levels, a context tag, a message and key/values, fanned out to sinks (see the top of this
/// file). Not copyable; add sinks before sharing it, then use it from any thread.
class Logger {
 public:
  /// The clocks, and whether to start with a console sink.
  struct Options {
    Clock* clock = nullptr;                ///< nullptr: Clock::system()
    const WallClock* wall = nullptr;       ///< nullptr: WallClock::system()
    bool console = true;                   ///< start with a ConsoleSink
    ConsoleSink::Options console_options;  ///< the console sink's options
  };

  Logger() : Logger(Options{}) {}
  /// With `options`.
  explicit Logger(Options options);
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  /// Adds a sink. REQUIRES: `sink` is not null; called before the Logger is shared between
  /// threads (std::invalid_argument for a null sink).
  Logger& add_sink(std::shared_ptr<Sink> sink);

  /// Sends one entry to every sink that accepts `level`. Never throws; a sink that throws is
  /// skipped (sink_failures() counts it).
  void log(Level level, std::string_view context, std::string_view message,
           std::span<const LogField> fields = {}) noexcept;
  /// log() with a braced list of fields.
  void log(Level level, std::string_view context, std::string_view message,
           std::initializer_list<LogField> fields) noexcept {
    log(level, context, message, std::span<const LogField>(fields.begin(), fields.size()));
  }

  /// log(Level::kDebug, ...).
  void debug(std::string_view context, std::string_view message,
             std::initializer_list<LogField> fields = {}) noexcept {
    log(Level::kDebug, context, message, fields);
  }
  /// log(Level::kInfo, ...).
  void info(std::string_view context, std::string_view message,
            std::initializer_list<LogField> fields = {}) noexcept {
    log(Level::kInfo, context, message, fields);
  }
  /// log(Level::kWarn, ...).
  void warn(std::string_view context, std::string_view message,
            std::initializer_list<LogField> fields = {}) noexcept {
    log(Level::kWarn, context, message, fields);
  }
  /// log(Level::kError, ...).
  void error(std::string_view context, std::string_view message,
             std::initializer_list<LogField> fields = {}) noexcept {
    log(Level::kError, context, message, fields);
  }

  /// Whether some sink would take an entry of `level` (skip building an expensive message).
  [[nodiscard]] bool enabled(Level level) const noexcept;

  /// How many times a sink threw from write().
  [[nodiscard]] std::uint64_t sink_failures() const noexcept {
    return sink_failures_.load(std::memory_order_relaxed);
  }

  /// The clock that stamps LogEntry::time.
  [[nodiscard]] Clock& clock() const noexcept { return *clock_; }
  /// The wall clock that stamps LogEntry::created_at.
  [[nodiscard]] const WallClock& wall_clock() const noexcept { return *wall_; }

 private:
  Clock* clock_;
  const WallClock* wall_;
  std::vector<std::shared_ptr<Sink>> sinks_;
  std::atomic<std::uint64_t> sink_failures_{0};
};

}  // namespace holdfast
