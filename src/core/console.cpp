#include "holdfast/log/console.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>

namespace holdfast {
namespace {

Level level_from_env() noexcept {
  Level level = Level::kInfo;
  if (const char* text = std::getenv("HOLDFAST_LOG_LEVEL")) {
    Level parsed;
    if (parse_level(text, parsed)) level = parsed;
  }
  return level;
}

std::atomic<Level>& current_level() noexcept {
  static std::atomic<Level> level{level_from_env()};
  return level;
}

std::mutex& write_mutex() noexcept {
  static std::mutex m;
  return m;
}

}  // namespace

std::string_view to_string(Level level) noexcept {
  switch (level) {
    case Level::kDebug:
      return "DEBUG";
    case Level::kInfo:
      return "INFO";
    case Level::kWarn:
      return "WARN";
    case Level::kError:
      return "ERROR";
  }
  return "?";
}

bool parse_level(std::string_view text, Level& out) noexcept {
  char lower[8] = {};
  if (text.size() >= sizeof(lower)) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    lower[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  }
  const std::string_view t(lower, text.size());
  if (t == "debug")
    out = Level::kDebug;
  else if (t == "info")
    out = Level::kInfo;
  else if (t == "warn" || t == "warning")
    out = Level::kWarn;
  else if (t == "error")
    out = Level::kError;
  else
    return false;
  return true;
}

namespace console {

void set_level(Level level) noexcept {
  current_level().store(level, std::memory_order_relaxed);
}
Level level() noexcept {
  return current_level().load(std::memory_order_relaxed);
}
bool enabled(Level l) noexcept {
  return l >= level();
}

void write(Level l, std::string_view context, std::string_view message) noexcept {
  if (!enabled(l)) return;
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[64];
  std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  const std::string_view lvl = to_string(l);
  // One entry is one line: control characters (a multi-line database error) are escaped.
  std::string escaped;
  if (std::any_of(message.begin(), message.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20; })) {
    try {
      for (char c : message) {
        if (c == '\n') {
          escaped += "\\n";
        } else if (c == '\r') {
          escaped += "\\r";
        } else if (c == '\t') {
          escaped += "\\t";
        } else if (static_cast<unsigned char>(c) < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned>(c));
          escaped += hex;
        } else {
          escaped += c;
        }
      }
      message = escaped;
    } catch (...) {
      return;  // out of memory: drop the line rather than throw
    }
  }
  std::lock_guard<std::mutex> lock(write_mutex());
  std::fprintf(stderr, "%s %-5.*s [%.*s] %.*s\n", stamp, static_cast<int>(lvl.size()), lvl.data(),
               static_cast<int>(context.size()), context.data(), static_cast<int>(message.size()),
               message.data());
}

}  // namespace console
}  // namespace holdfast
