// Internal: a callable run by a compiled function (a retry loop, a statement on a leased
// connection), seen through a StatusRef: nothing is allocated or copied per call.
#pragma once

#include <optional>
#include <type_traits>
#include <utility>

#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"

namespace holdfast::detail {

// Calls the caller's callable, taking A..., which outlives the StatusRef.
template <class... A>
class StatusRef {
 public:
  template <class F>
  explicit StatusRef(F& fn) noexcept
      : object_(&fn),
        call_([](void* o, A... a) -> Status { return (*static_cast<F*>(o))(a...); }) {}

  Status operator()(A... a) const { return call_(object_, a...); }

 private:
  void* object_;
  Status (*call_)(void*, A...);
};

// One attempt of a loop.
using AttemptRef = StatusRef<>;

// Runs `fn` (taking A..., returning Status or Result<T>) through `run`, a function of a
// StatusRef<A...> returning Status (a compiled function that calls it, or loops over it).
// The result: fn's last result, when `run` succeeded; else `run`'s Status, which for a loop
// is its final Status (the failure with its StopReason), for a Result<T> too.
template <class... A, class F, class Run>
auto run_through(F& fn, Run&& run) -> std::invoke_result_t<F&, A...> {
  using R = std::invoke_result_t<F&, A...>;
  static_assert(std::is_same_v<R, Status> || is_result<R>::value,
                "the callable must return holdfast::Status or Result<T>");
  if constexpr (std::is_same_v<R, Status>) {
    return run(StatusRef<A...>(fn));
  } else {
    std::optional<R> last;
    auto each = [&](A... a) -> Status {
      last.emplace(fn(a...));
      if (last->ok()) [[likely]]
        return Status();
      return last->status();
    };
    Status s = run(StatusRef<A...>(each));
    if (s.ok()) [[likely]]
      return std::move(*last);
    return R(std::move(s));
  }
}

}  // namespace holdfast::detail
