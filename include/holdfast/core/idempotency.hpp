/// @file
/// holdfast::KeyedResult: what once(key, fn) returns, in both drivers. once() records `key`
/// with fn's result in fn's own transaction, so a call repeated after any failure (an
/// outcome in doubt included) applies the write at most once.
#pragma once

#include <string>

namespace holdfast {

/// What once(key, fn) returns: fn's recorded result, and whether it was replayed.
struct KeyedResult {
  /// What fn returned (empty when fn returns Status).
  std::string result;
  /// True when an earlier call recorded the key: fn did not run this time.
  bool replayed = false;
};

}  // namespace holdfast
