// GET /status: what the panel's Shields are doing now and what it answered over the last
// five minutes, as a page that reloads itself every 2 s (a <meta> refresh: the panel's
// Content-Security-Policy allows no script) with the traffic chart inline, and the chart
// alone as GET /status.svg. Pure functions from values to HTML and SVG; every value is
// escaped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "holdfast/core/shield.hpp"
#include "holdfast/pg/lost_writes.hpp"
#include "traffic_ring.hpp"

namespace holdfast {
class DatabaseSink;
class Shield;
}  // namespace holdfast

namespace holdfast::panel {

// One Shield, read at one moment (each field on its own: a snapshot, not a transaction).
struct ShieldStatus {
  std::string name;     // the Shield's name (its metrics' db label)
  std::string breaker;  // to_string(BreakerState): "closed", "open", ...
  double limit = 0;     // the learned concurrency limit
  std::int64_t in_flight = 0;
  double tokens = 0;  // the retry throttle's tokens, of max_tokens
  double max_tokens = 0;
  std::int64_t waiting = 0;  // requests queued for a place or a probe
  double recent_latency_ms = 0;
  double normal_latency_ms = 0;
};

[[nodiscard]] ShieldStatus read_shield_status(const Shield& shield);

// The logs table's overload pause (DatabaseSink); absent when the panel logs otherwise.
struct LogPauseStatus {
  bool paused = false;
  std::uint64_t pauses = 0;   // pauses started since the panel started
  std::uint64_t skipped = 0;  // entries not stored because of a pause
  std::uint64_t queued = 0;   // entries waiting for the writer
};

[[nodiscard]] LogPauseStatus read_log_pause(const DatabaseSink& sink);

struct StatusView {
  std::string strategy;               // "holdfast", "naive", ...
  std::string backend;                // "sqlite" or "postgresql"
  std::vector<ShieldStatus> shields;  // empty: a baseline, which has no Shield
  std::optional<LogPauseStatus> log_pause;
  // holdfast on PostgreSQL: confirmed writes a change of writer lost (ADR 0036).
  std::optional<pg::LostWritesReport> lost_writes;
  std::string as_of;  // "HH:MM:SS" UTC
};

// The whole page, with the chart of `traffic` inline.
[[nodiscard]] std::string render_status(const StatusView& view, const TrafficRing::Window& traffic);

// The chart: requests, errors, 503s and stale pages per 5 s over the window. Each series'
// legend ends with its total over the window ("503 busy: 12 in 5 min").
[[nodiscard]] std::string render_traffic_svg(const TrafficRing::Window& traffic);

}  // namespace holdfast::panel
