// Internal: the retry loop (holdfast::retry() or Shield::run()) behind a compiled function,
// for the templates of headers that must not include the Shield (an engine's main header).
// An attempt is seen through an AttemptRef, a pointer and a function pointer: nothing is
// allocated and nothing copied per call.
#pragma once

#include <optional>
#include <type_traits>
#include <utility>

#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"

namespace holdfast::detail {

// One attempt of a loop: calls the caller's callable, which outlives the loop.
class AttemptRef {
 public:
  template <class F>
  explicit AttemptRef(F& attempt) noexcept
      : object_(&attempt), call_([](void* o) -> Status { return (*static_cast<F*>(o))(); }) {}

  Status operator()() const { return call_(object_); }

 private:
  void* object_;
  Status (*call_)(void*);
};

// Runs `attempt` (returning Status or Result<T>) through `run`, a function of an AttemptRef
// returning the loop's Status (a compiled function that calls Shield::run() or retry()).
// The result: the last attempt's, when it succeeded; else the loop's final Status, which is
// what the loop itself returns for a Result<T> too (the failure with its StopReason).
template <class F, class Run>
auto run_through(F& attempt, Run&& run) -> std::invoke_result_t<F&> {
  using R = std::invoke_result_t<F&>;
  static_assert(std::is_same_v<R, Status> || is_result<R>::value,
                "the callable must return holdfast::Status or Result<T>");
  if constexpr (std::is_same_v<R, Status>) {
    return run(AttemptRef(attempt));
  } else {
    std::optional<R> last;
    auto each = [&]() -> Status {
      last.emplace(attempt());
      return status_of(*last);
    };
    Status s = run(AttemptRef(each));
    if (s.ok()) [[likely]]
      return std::move(*last);
    return R(std::move(s));
  }
}

}  // namespace holdfast::detail
