/// @file
/// holdfast::KeyedResult: what once(key, fn) returns, in both drivers.
///
/// @code
///   auto paid = db.once("order-42", [&](Transaction& tx) -> Result<std::string> { ... });
///   if (paid.ok() && paid->replayed) { /* an earlier call applied it; fn did not run */ }
/// @endcode
///
/// once(key, fn) runs fn in a write transaction and records `key` with fn's result in the same
/// transaction, in the driver's idempotency-key table (key, result, created_at). A call with a
/// key that is recorded already returns the recorded result and does not run fn. The write and
/// its key commit together, so a call repeated after any failure -- an outcome in doubt
/// included -- applies the write at most once; each driver therefore runs once() as an
/// idempotent, re-runnable transaction. A failed fn rolls back and records nothing.
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
