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

#include "holdfast/status.hpp"

namespace holdfast {

/// Thrown only at the edges: by Result::value() on an error, and by adapters that turn a
/// Status into an exception for callers that want one.
class Error : public std::runtime_error {
 public:
  explicit Error(Status status);
  [[nodiscard]] const Status& status() const noexcept { return status_; }

 private:
  Status status_;
};

namespace detail {
Status status_from_ok_without_value();
}

template <class T>
class [[nodiscard]] Result {
 public:
  using value_type = T;

  Result(const T& value) : value_(value) {}        // NOLINT(google-explicit-constructor)
  Result(T&& value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status)                            // NOLINT(google-explicit-constructor)
      : status_(status.ok() ? detail::status_from_ok_without_value() : std::move(status)) {}
  template <class... Args>
  explicit Result(std::in_place_t, Args&&... args) : value_(std::forward<Args>(args)...) {}

  [[nodiscard]] bool ok() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] const Status& status() const noexcept { return status_; }

  T& operator*() & noexcept { return *value_; }
  const T& operator*() const& noexcept { return *value_; }
  T&& operator*() && noexcept { return std::move(*value_); }
  T* operator->() noexcept { return &*value_; }
  const T* operator->() const noexcept { return &*value_; }

  T& value() & {
    check();
    return *value_;
  }
  const T& value() const& {
    check();
    return *value_;
  }
  T&& value() && {
    check();
    return std::move(*value_);
  }
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

template <>
class [[nodiscard]] Result<void> {
 public:
  using value_type = void;
  Result() noexcept = default;
  Result(Status status) : status_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const noexcept { return status_.ok(); }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] const Status& status() const noexcept { return status_; }
  void value() const {
    if (!ok()) throw Error(status_);
  }

 private:
  Status status_;
};

template <class T>
struct is_result : std::false_type {};
template <class T>
struct is_result<Result<T>> : std::true_type {};

namespace detail {
// The Result a retry helper returns for a callable returning R: Result<R> for a value,
// Result<void> for Status, R itself for a Result.
template <class R>
struct AsResult {
  using type = Result<R>;
};
template <>
struct AsResult<Status> {
  using type = Result<void>;
};
template <class U>
struct AsResult<Result<U>> {
  using type = Result<U>;
};
}  // namespace detail

/// The Status of a Status or a Result (the retry loop accepts callables returning either).
inline const Status& status_of(const Status& s) noexcept {
  return s;
}
template <class T>
const Status& status_of(const Result<T>& r) noexcept {
  return r.status();
}
inline bool is_ok(const Status& s) noexcept {
  return s.ok();
}
template <class T>
bool is_ok(const Result<T>& r) noexcept {
  return r.ok();
}

}  // namespace holdfast
