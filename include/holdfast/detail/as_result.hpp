// Internal: the Result an adapter's retry helper returns for a callable returning R (the
// SQLiteCpp and libpqxx adapters).
#pragma once

#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"

namespace holdfast::detail {

// Result<R> for a value, Result<void> for Status, R itself for a Result.
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

}  // namespace holdfast::detail
