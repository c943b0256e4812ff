// The routing rule of holdfast/detail/read_route.hpp that is not inline (ADR 0057).
#include "holdfast/detail/read_route.hpp"

#include "holdfast/core/circuit_breaker.hpp"

namespace holdfast::pg::detail {

bool standbys_again_after(const Status& primary, std::uint64_t behind) noexcept {
  return !primary.ok() && behind != 0 && (is_own_shedding(primary) || primary.fault().transient());
}

}  // namespace holdfast::pg::detail
