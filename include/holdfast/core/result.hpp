/// @file
/// Result<T>: a T or the Status that explains why there is none.
///
/// Accessors follow std::expected: ok(), operator bool, operator*, operator-> (REQUIRES:
/// ok()), value() which throws holdfast::Error when there is no value, status(), value_or().
/// Result<void> carries only a Status.
#pragma once

#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "holdfast/core/status.hpp"

namespace holdfast {

/// An exception that carries a Status, thrown only at the edges: by Result::value() on an
/// error, and by adapters that turn a Status into an exception for callers that want one.
class Error : public std::runtime_error {
 public:
  /// Carries `status`; what() is status.to_string().
  explicit Error(Status status);
  /// The Status this exception carries.
  [[nodiscard]] const Status& status() const noexcept { return status_; }

 private:
  Status status_;
};

namespace detail {
Status status_from_ok_without_value();
}

/// A T, or the Status that explains why there is none (see the top of this file). A
/// copyable value when T is.
template <class T>
class [[nodiscard]] Result {
 public:
  /// The type of the value.
  using value_type = T;

  /// A Result holding `value`.
  Result(const T& value) : value_(value) {}  // NOLINT(google-explicit-constructor)
  /// A Result holding `value`, moved in.
  Result(T&& value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  /// A Result without a value. An OK `status` is a caller's mistake: it becomes kInternal
  /// ("Result built from an OK Status without a value"), so the Result is never OK without a
  /// value.
  Result(Status status)  // NOLINT(google-explicit-constructor)
      : status_(status.ok() ? detail::status_from_ok_without_value() : std::move(status)) {}
  /// A Result whose value is constructed in place from `args`.
  template <class... Args>
  explicit Result(std::in_place_t, Args&&... args) : value_(std::forward<Args>(args)...) {}

  /// True when there is a value.
  [[nodiscard]] bool ok() const noexcept { return value_.has_value(); }
  /// ok().
  explicit operator bool() const noexcept { return ok(); }
  /// Why there is no value; OK when there is one.
  [[nodiscard]] const Status& status() const noexcept { return status_; }

  /// The value. REQUIRES: ok().
  T& operator*() & noexcept { return *value_; }
  /// The value. REQUIRES: ok().
  const T& operator*() const& noexcept { return *value_; }
  /// The value, moved out. REQUIRES: ok().
  T&& operator*() && noexcept { return std::move(*value_); }
  /// The value's members. REQUIRES: ok().
  T* operator->() noexcept { return &*value_; }
  /// The value's members. REQUIRES: ok().
  const T* operator->() const noexcept { return &*value_; }

  /// The value; throws holdfast::Error with status() when there is none.
  T& value() & {
    check();
    return *value_;
  }
  /// The value; throws holdfast::Error with status() when there is none.
  const T& value() const& {
    check();
    return *value_;
  }
  /// The value, moved out; throws holdfast::Error with status() when there is none.
  T&& value() && {
    check();
    return std::move(*value_);
  }
  /// The value, or `fallback` converted to T when there is none.
  template <class U>
  T value_or(U&& fallback) const& {
    return ok() ? *value_ : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  void check() const {
    if (!ok()) throw Error(status_);
  }
  Status status_;
  std::optional<T> value_;
};

/// A Result that carries only a Status: the outcome of work that returns no value.
template <>
class [[nodiscard]] Result<void> {
 public:
  /// void: there is no value.
  using value_type = void;
  /// An OK Result.
  Result() noexcept = default;
  /// The outcome `status` (OK or not).
  Result(Status status) : status_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  /// True when the Status is OK.
  [[nodiscard]] bool ok() const noexcept { return status_.ok(); }
  /// ok().
  explicit operator bool() const noexcept { return ok(); }
  /// The outcome: OK, or why the work failed.
  [[nodiscard]] const Status& status() const noexcept { return status_; }
  /// Throws holdfast::Error with status() when not OK; does nothing otherwise.
  void value() const {
    if (!ok()) throw Error(status_);
  }

 private:
  Status status_;
};

/// True for a Result type, false for anything else (`is_result<R>::value`).
template <class T>
struct is_result : std::false_type {};
/// The Result case of is_result.
template <class T>
struct is_result<Result<T>> : std::true_type {};

/// The Status of a Status or a Result (the retry loop accepts callables returning either).
inline const Status& status_of(const Status& s) noexcept {
  return s;
}
/// The Status of a Result: OK when it holds a value.
template <class T>
const Status& status_of(const Result<T>& r) noexcept {
  return r.status();
}
/// Whether a Status or a Result is OK (the retry loop accepts callables returning either).
inline bool is_ok(const Status& s) noexcept {
  return s.ok();
}
/// Whether a Result holds a value.
template <class T>
bool is_ok(const Result<T>& r) noexcept {
  return r.ok();
}

}  // namespace holdfast
