#include "loss_report.hpp"

#include <chrono>

#include "holdfast/log/console.hpp"

namespace holdfast::log_detail {
namespace {

void append_count(std::string& out, std::uint64_t n) {
  out.append(std::to_string(n));
}

// "812 entries (INFO 700, WARN 100, ERROR 12)"
void append_counts(std::string& out, const PerLevel& counts) {
  const std::uint64_t total = sum(counts);
  append_count(out, total);
  out.append(total == 1 ? " entry (" : " entries (");
  bool first = true;
  for (Level level : {Level::kInfo, Level::kWarn, Level::kError}) {
    if (!first) out.append(", ");
    first = false;
    out.append(to_string(level));
    out.push_back(' ');
    append_count(out, counts[index_of(level)]);
  }
  out.push_back(')');
}

PerLevel minus(const PerLevel& a, const PerLevel& b) noexcept {
  PerLevel out{};
  for (std::size_t i = 0; i < kLevels; ++i)
    out[i] = a[i] - b[i];
  return out;
}

}  // namespace

std::uint64_t sum(const PerLevel& counts) noexcept {
  std::uint64_t total = 0;
  for (std::uint64_t n : counts)
    total += n;
  return total;
}

void LossReport::write_failed(const Status& status) noexcept {
  if (failing_) return;
  failing_ = true;
  try {
    lost_reason_ = status.ok() ? "the log store failed" : status.to_string();
    console::write(Level::kError, kLoggerContext,
                   "Log persistence failed (" + lost_reason_ +
                       "); entries are counted as lost until a write succeeds");
  } catch (...) {
  }
}

void LossReport::shut_down(const PerLevel& lost) noexcept {
  for (std::size_t i = 0; i < kLevels; ++i)
    lost_[i] += lost[i];
  if (sum(lost) > 0 && lost_reason_.empty()) {
    try {
      lost_reason_ = "the sink shut down before they were stored";
    } catch (...) {
    }
  }
}

std::size_t LossReport::write_rows(std::span<LogRecord> rows, WallTime at,
                                   std::optional<Duration> gap, const PerLevel& dropped) const {
  std::size_t r = 0;
  auto next = [&]() -> std::string& {
    LogRecord& rec = rows[r++];
    rec.level = Level::kWarn;
    rec.context.assign(kLoggerContext);
    rec.created_at = at;
    rec.message.clear();
    return rec.message;
  };
  if (gap) {
    std::string& m = next();
    const auto secs =
        std::chrono::duration_cast<std::chrono::seconds>(*gap + std::chrono::milliseconds(500));
    m.append("Log persistence paused for ");
    append_count(m, static_cast<std::uint64_t>(secs.count()));
    m.append(" s while the database was overloaded; skipped ");
    append_counts(m, skipped_);
  }
  if (sum(lost_) > 0) {
    std::string& m = next();
    m.append("Log persistence failed; lost ");
    append_counts(m, lost_);
    m.append(": ");
    m.append(lost_reason_);
  }
  const PerLevel new_drops = minus(dropped, dropped_reported_);
  if (sum(new_drops) > 0) {
    std::string& m = next();
    m.append("Log queue was full; dropped ");
    append_counts(m, new_drops);
  }
  return r;
}

void LossReport::rows_stored(const PerLevel& dropped) noexcept {
  skipped_ = {};
  if (sum(lost_) > 0) {
    try {
      std::string line = "Log persistence works again; lost ";
      append_counts(line, lost_);
      console::write(Level::kWarn, kLoggerContext, line);
    } catch (...) {
    }
  }
  lost_ = {};
  failing_ = false;
  dropped_reported_ = dropped;
}

void LossReport::console_summary(const PerLevel& dropped) const noexcept {
  const PerLevel new_drops = minus(dropped, dropped_reported_);
  const std::uint64_t missing = sum(skipped_) + sum(lost_) + sum(new_drops);
  if (missing == 0) return;
  try {
    std::string line = "DatabaseSink closing: ";
    append_count(line, missing);
    line.append(missing == 1 ? " entry" : " entries");
    line.append(" never reached the logs table and no line there says so (skipped ");
    append_counts(line, skipped_);
    line.append("; lost ");
    append_counts(line, lost_);
    line.append("; dropped ");
    append_counts(line, new_drops);
    line.push_back(')');
    console::write(Level::kWarn, kLoggerContext, line);
  } catch (...) {
  }
}

}  // namespace holdfast::log_detail
