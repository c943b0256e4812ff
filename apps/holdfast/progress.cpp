// ProgressBar (progress.hpp).
#include "progress.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "safe_print.hpp"

namespace holdfast::cli {

ProgressBar::ProgressBar(std::FILE* out, bool enabled, std::string unit)
    : out_(out),
      enabled_(enabled),
      terminal_(enabled && is_terminal(out)),
      unit_(std::move(unit)) {}

bool ProgressBar::is_terminal(std::FILE* out) noexcept {
  return out != nullptr && ::isatty(::fileno(out)) == 1;
}

void ProgressBar::phase(double done, double total, const std::string& what) {
  if (!enabled_) return;
  const std::string unit = unit_.empty() ? std::string() : " " + unit_;
  const std::string numbers = unit_.empty() ? fmt::format("{:.0f}/{:.0f}", done, total)
                                            : fmt::format("{:5.1f}/{:.0f}{}", done, total, unit);
  if (!terminal_) {
    if (what == last_what_) return;
    last_what_ = what;
    print_or_drop(out_, "{}  {}\n", numbers, what);
    std::fflush(out_);
    return;
  }
  constexpr int kWidth = 30;
  const int filled = total > 0 ? std::clamp(static_cast<int>(kWidth * done / total), 0, kWidth) : 0;
  // \033[K erases what a longer line before left behind.
  print_or_drop(out_, "\r[{}{}] {}  {}\033[K", std::string(filled, '#'),
                std::string(kWidth - filled, '.'), numbers, what);
  std::fflush(out_);
  drawn_ = true;
}

void ProgressBar::clear() noexcept {
  if (!terminal_ || !drawn_) return;
  print_or_drop(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

void ProgressBar::finish() noexcept {
  if (!terminal_ || !drawn_) return;
  print_or_drop(out_, "\n");
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace holdfast::cli
