/// @file
/// SpdlogSink: an spdlog (1.10) sink that hands every message to a holdfast Sink, typically a
/// DatabaseSink, so spdlog users get the logs table with the same overload pause.
///
/// @code
///   auto db = std::make_shared<holdfast::DatabaseSink>(store);
///   auto logger = std::make_shared<spdlog::logger>("payments", spdlog::sinks_init_list{
///       std::make_shared<spdlog::sinks::stderr_color_sink_mt>(),   // the console, as before
///       std::make_shared<holdfast::SpdlogSinkMt>(db)});           // the logs table
/// @endcode
///
/// Levels: trace and debug become DEBUG (never stored), info INFO, warn WARN, err and
/// critical ERROR. The context is the spdlog logger's name ("spdlog" when it has none), the
/// message is the unformatted payload, created_at is spdlog's own timestamp.
///
/// flush() does not wait for the database: spdlog calls it on the logging thread (flush_on),
/// and logging must never wait on a database. Call DatabaseSink::flush() at shutdown instead.
///
/// Header-only: include it only where spdlog is available and link spdlog::spdlog.
#pragma once

#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "holdfast/core/clock.hpp"
#include "holdfast/log/logger.hpp"

namespace holdfast {

/// The holdfast Level of an spdlog level; false for `off` (and anything unknown).
inline bool level_from_spdlog(spdlog::level::level_enum level, Level& out) noexcept {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug:
      out = Level::kDebug;
      return true;
    case spdlog::level::info:
      out = Level::kInfo;
      return true;
    case spdlog::level::warn:
      out = Level::kWarn;
      return true;
    case spdlog::level::err:
    case spdlog::level::critical:
      out = Level::kError;
      return true;
    default:
      return false;
  }
}

/// An spdlog sink that hands every message to a holdfast Sink (see the top of this file).
/// `Mutex` is spdlog's: std::mutex or spdlog::details::null_mutex.
template <class Mutex>
class SpdlogSink final : public spdlog::sinks::base_sink<Mutex> {
 public:
  /// `target` receives every message it accepts. `clock` stamps LogEntry::time.
  /// REQUIRES: `target` is not null (std::invalid_argument), `clock` outlives this sink.
  explicit SpdlogSink(std::shared_ptr<Sink> target, Clock& clock = Clock::system())
      : target_(std::move(target)), clock_(&clock) {
    if (!target_) throw std::invalid_argument("SpdlogSink: target must not be null");
  }

  /// The Sink messages go to.
  [[nodiscard]] const std::shared_ptr<Sink>& target() const noexcept { return target_; }

 protected:
  /// spdlog's hook: turns one message into a LogEntry for the target. Never throws.
  void sink_it_(const spdlog::details::log_msg& msg) override {
    try {
      Level level;
      if (!level_from_spdlog(msg.level, level) || !target_->accepts(level)) return;
      const std::string_view name(msg.logger_name.data(), msg.logger_name.size());
      LogEntry entry;
      entry.level = level;
      entry.context = name.empty() ? std::string_view("spdlog") : name;
      entry.message = std::string_view(msg.payload.data(), msg.payload.size());
      entry.time = clock_->now();
      entry.created_at = std::chrono::floor<std::chrono::milliseconds>(msg.time);
      target_->write(entry);
    } catch (...) {
      // Logging never throws into the caller.
    }
  }

  /// Does nothing: logging never waits on a database (see the top of this file).
  void flush_() override {}

 private:
  std::shared_ptr<Sink> target_;
  Clock* clock_;
};

/// spdlog's naming: _mt locks a mutex per message (spdlog's base_sink does), _st does not.
/// DatabaseSink is thread-safe itself, so the _st form is safe with it from many threads too.
using SpdlogSinkMt = SpdlogSink<std::mutex>;
/// The same without a mutex (see SpdlogSinkMt).
using SpdlogSinkSt = SpdlogSink<spdlog::details::null_mutex>;

}  // namespace holdfast
