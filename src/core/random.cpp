#include "holdfast/core/random.hpp"

#include <random>

namespace holdfast {
namespace {

std::uint64_t splitmix64(std::uint64_t& x) noexcept {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) noexcept {
  return (x << k) | (x >> (64 - k));
}

}  // namespace

Random::Random(std::uint64_t seed) noexcept {
  for (auto& s : s_)
    s = splitmix64(seed);
}

Random Random::from_thread() noexcept {
  // One entropy read per thread; after that each operation takes the next seed.
  thread_local std::uint64_t sequence = [] {
    try {
      std::random_device device;
      return (static_cast<std::uint64_t>(device()) << 32) ^ device();
    } catch (...) {
      return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&sequence));
    }
  }();
  return Random(splitmix64(sequence));
}

std::uint64_t Random::next() noexcept {
  const std::uint64_t result = rotl(s_[0] + s_[3], 23) + s_[0];
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

}  // namespace holdfast
