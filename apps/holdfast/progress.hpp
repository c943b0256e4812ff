// ProgressBar: the holdfast tool's progress output (the drill, the simulator).
//
// On a terminal it redraws one line in place: "[#########.....]  12.3/60 s  storm 5 s".
// Into a file or a pipe (a CI log, `2> drill.log`) carriage returns would pile up as one
// endless line, so it writes one line per phase instead: a line when `what` changes, none
// while it stays the same. A line that cannot be written (a full disk, a closed pipe) is
// dropped: progress never fails the command, and finishing never throws.
//
// Not thread-safe: one writer.
#pragma once

#include <cstdio>
#include <string>

namespace holdfast::cli {

class ProgressBar {
 public:
  // `out`: where to draw. `enabled` false: draws nothing at all. `unit` follows the numbers
  // ("s" for seconds; "" for counts).
  ProgressBar(std::FILE* out, bool enabled, std::string unit = "");
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  ~ProgressBar() { finish(); }

  // `done` of `total`, now doing `what`.
  void phase(double done, double total, const std::string& what);
  // Terminal: erases the bar so other output can be printed; the next phase() redraws it.
  void clear() noexcept;
  // Terminal: ends the bar's line. Idempotent.
  void finish() noexcept;

  // True when `out` is a terminal (isatty).
  [[nodiscard]] static bool is_terminal(std::FILE* out) noexcept;

 private:
  std::FILE* out_;
  bool enabled_;
  bool terminal_;
  std::string unit_;
  std::string last_what_;
  bool drawn_ = false;  // terminal: the bar is on the current line
};

}  // namespace holdfast::cli
