#include "holdfast/log/logger.hpp"

#include <charconv>
#include <cstdio>
#include <stdexcept>

#include "format.hpp"

namespace holdfast {
namespace {

class SystemWallClock final : public WallClock {
 public:
  [[nodiscard]] WallTime now() const noexcept override {
    return std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now());
  }
};

}  // namespace

const WallClock& WallClock::system() noexcept {
  static const SystemWallClock clock;
  return clock;
}

FollowingWallClock::FollowingWallClock(const Clock& clock, WallTime origin) noexcept
    : clock_(&clock), start_(clock.now()), origin_(origin) {}

WallTime FollowingWallClock::now() const noexcept {
  return origin_ + std::chrono::floor<std::chrono::milliseconds>(clock_->now() - start_);
}

UtcStamp utc_stamp(WallTime t) noexcept {
  using namespace std::chrono;
  const sys_days day = floor<days>(t);
  const year_month_day ymd{day};
  const hh_mm_ss<milliseconds> hms{t - day};
  UtcStamp out;
  const int n = std::snprintf(
      out.text, sizeof(out.text), "%04d-%02u-%02uT%02d:%02d:%02d.%03dZ",
      static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
      static_cast<unsigned>(ymd.day()), static_cast<int>(hms.hours().count()),
      static_cast<int>(hms.minutes().count()), static_cast<int>(hms.seconds().count()),
      static_cast<int>(hms.subseconds().count()));
  out.size = static_cast<std::uint8_t>(n > 0 ? n : 0);
  return out;
}

void LogField::format_signed(long long v) noexcept {
  const auto r = std::to_chars(buffer_, buffer_ + sizeof(buffer_), v);
  size_ = static_cast<std::size_t>(r.ptr - buffer_);
}

void LogField::format_unsigned(unsigned long long v) noexcept {
  const auto r = std::to_chars(buffer_, buffer_ + sizeof(buffer_), v);
  size_ = static_cast<std::size_t>(r.ptr - buffer_);
}

LogField::LogField(std::string_view key, double value) noexcept : key_(key) {
  const auto r = std::to_chars(buffer_, buffer_ + sizeof(buffer_), value);
  size_ = r.ec == std::errc() ? static_cast<std::size_t>(r.ptr - buffer_) : 0;
}

Logger::Logger(Options options)
    : clock_(options.clock ? options.clock : &Clock::system()),
      wall_(options.wall ? options.wall : &WallClock::system()) {
  if (options.console) sinks_.push_back(std::make_shared<ConsoleSink>(options.console_options));
}

Logger& Logger::add_sink(std::shared_ptr<Sink> sink) {
  if (!sink) throw std::invalid_argument("Logger::add_sink: sink must not be null");
  sinks_.push_back(std::move(sink));
  return *this;
}

bool Logger::enabled(Level level) const noexcept {
  for (const auto& sink : sinks_) {
    if (sink->accepts(level)) return true;
  }
  return false;
}

void Logger::log(Level level, std::string_view context, std::string_view message,
                 std::span<const LogField> fields) noexcept {
  LogEntry entry;
  bool built = false;
  for (const auto& sink : sinks_) {
    if (!sink->accepts(level)) continue;
    if (!built) {
      // Times are read only when some sink wants the entry.
      entry = LogEntry{level, context, message, fields, clock_->now(), wall_->now()};
      built = true;
    }
    try {
      sink->write(entry);
    } catch (...) {
      sink_failures_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace holdfast
