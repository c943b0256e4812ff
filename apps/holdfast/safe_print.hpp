// Printing that never throws, for messages whose loss must not change what the command does.
//
// fmt::print throws fmt::system_error when the write fails: stderr on a pipe whose reader has
// gone (EPIPE; main() ignores SIGPIPE) or on a full device (ENOSPC, `2>/dev/full`). Thrown
// from an error path or a destructor that aborts the process, so error lines, progress lines
// and the panel's own lines go through these instead: a line nobody can receive is dropped,
// and the exit status still says what happened. A command's results (rows, tables) keep
// fmt::print, so that output which cannot be written fails the command.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <iterator>
#include <utility>

namespace holdfast::cli {

// fmt::print(stream, ...) that drops the text when formatting or writing fails.
template <typename... T>
void print_or_drop(std::FILE* stream, fmt::format_string<T...> format, T&&... args) noexcept {
  try {
    fmt::memory_buffer text;
    fmt::format_to(std::back_inserter(text), format, std::forward<T>(args)...);
    std::fwrite(text.data(), 1, text.size(), stream);  // a short write is the drop
  } catch (...) {
    // Out of memory while formatting: there is nothing to say it with.
  }
}

// The error line of a command: print_or_drop(stderr, ...).
template <typename... T>
void eprint(fmt::format_string<T...> format, T&&... args) noexcept {
  print_or_drop(stderr, format, std::forward<T>(args)...);
}

}  // namespace holdfast::cli
