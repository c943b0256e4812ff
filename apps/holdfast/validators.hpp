// Range checks for the holdfast tool's numeric flags (CLI11 validators). A value out of
// range is a CLI::ValidationError, which main() prints as one line and exits with status 2.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <string>

#include <fmt/core.h>

namespace holdfast::cli {

// A finite number of seconds in (0, max]: refuses 0, negatives, nan, inf and huge values
// (CLI::Range lets nan through, since every comparison with nan is false).
inline CLI::Validator seconds_in(double max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        double v = 0;
        std::size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          return fmt::format("'{}' is not a number of seconds", text);
        }
        if (used != text.size() || !std::isfinite(v) || v <= 0 || v > max) {
          return fmt::format("'{}' must be a number of seconds above 0 and at most {}", text, max);
        }
        return {};
      },
      fmt::format("SECONDS in (0, {}]", max));
}

// Not empty (a file path, a URL).
inline CLI::Validator not_empty(const char* what) {
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        return text.empty() ? fmt::format("{} must not be empty", what) : std::string();
      },
      "NOT EMPTY");
}

}  // namespace holdfast::cli
