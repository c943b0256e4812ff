// Internal: the simulator's random streams, each seeded from the scenario's seed.
#pragma once

#include <cstdint>

namespace holdfast::sim::detail {

// The seed of stream `stream` of a run seeded with `seed` (the two combined, then
// SplitMix64's finalizer). Streams: 1 arrivals, 2 service times, 3 brownout refusals,
// 4 health probe answers, 5 request classes, 6 routes among standbys, 7 stragglers; 16 + n request
// number n (request_seed()).
[[nodiscard]] inline std::uint64_t mix(std::uint64_t seed, std::uint64_t stream) noexcept {
  std::uint64_t z = seed ^ (stream + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace holdfast::sim::detail
