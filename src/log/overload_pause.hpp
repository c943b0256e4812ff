// Internal: DatabaseSink's overload pause (see database_sink.hpp). After a write fails from
// overload, the logs table gets no INFO or WARN for `length`, and ERROR at most once per
// `error_interval`, the first one an interval after the failure. Decided on the times the
// caller passes in, so ManualClock tests are exact.
//
// Thread safety: none; it belongs to the sink's writer thread.
#pragma once

#include "holdfast/core/clock.hpp"
#include "holdfast/log/logger.hpp"

namespace holdfast::log_detail {

class OverloadPause {
 public:
  OverloadPause(Duration length, Duration error_interval) noexcept
      : length_(length), error_interval_(error_interval) {}

  [[nodiscard]] bool active() const noexcept { return active_; }
  // Active: when the pause ends.
  [[nodiscard]] TimePoint until() const noexcept { return until_; }

  // A write failed from overload at `now`: the pause runs until now + length, whether it
  // starts now or was in force already. True when it starts now.
  bool on_overload(TimePoint now) noexcept;

  // Ends the pause when it is over at `now`; its length then awaits a gap line. True when
  // it ended now.
  bool end_if_over(TimePoint now) noexcept;

  // Whether an entry of `level` is stored at `now`: always, outside a pause; during one,
  // an ERROR whose turn has come (it takes the turn: the next one is an interval later).
  bool stores(Level level, TimePoint now) noexcept;

  // A pause has ended and no stored gap line says so yet.
  [[nodiscard]] bool gap_due() const noexcept { return gap_due_; }
  // The ended pauses' total length, for the gap line.
  [[nodiscard]] Duration unreported() const noexcept { return unreported_; }
  // The gap line is stored.
  void gap_reported() noexcept {
    gap_due_ = false;
    unreported_ = {};
  }

 private:
  const Duration length_;
  const Duration error_interval_;
  bool active_ = false;
  TimePoint start_{};
  TimePoint until_{};
  TimePoint next_error_at_{};
  Duration unreported_{};
  bool gap_due_ = false;
};

}  // namespace holdfast::log_detail
