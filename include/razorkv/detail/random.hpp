// razorkv/detail/random.hpp: razorkv's portable draws from a 64-bit generator (std::mt19937_64,
// whose output the standard fixes): the same sequence with every standard library.
#pragma once

#include <cmath>
#include <cstdint>
#include <iterator>
#include <utility>

#include "razorkv/config.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

// std::uniform_int_distribution, std::uniform_real_distribution, std::normal_distribution and
// std::shuffle are implementation-defined algorithms: libstdc++ and libc++ turn the same
// generator state into different values. Probes, needle tasks and synthetic models must be the
// same everywhere, so they draw with these instead.

/// Uniform integer in [0, n) by rejection of the low remainder.
template <class Rng>
std::uint64_t uniform_below(Rng& rng, std::uint64_t n) noexcept {
  RAZORKV_DASSERT(n > 0);
  const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  std::uint64_t x;
  do {
    x = rng();
  } while (x < threshold);
  return x % n;
}

/// Uniform double in [0, 1): the generator's top 53 bits.
template <class Rng>
double uniform_unit(Rng& rng) noexcept {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

/// Uniform double in [low, high).
template <class Rng>
double uniform_real(Rng& rng, double low, double high) noexcept {
  return low + (high - low) * uniform_unit(rng);
}

/// Standard normal deviate by Box-Muller (one generator output pair per deviate, the second
/// deviate discarded, so that a draw never depends on the call before it). Agrees across
/// platforms to the last bit of the C library's log, sqrt and cos.
template <class Rng>
double standard_normal(Rng& rng) noexcept {
  const double u = 1.0 - uniform_unit(rng);  // (0, 1]: log(u) is finite
  const double v = uniform_unit(rng);
  return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
}

/// Fisher-Yates shuffle of [first, last) with uniform_below.
template <class RandomIt, class Rng>
void shuffle(RandomIt first, RandomIt last, Rng& rng) {
  const auto n = static_cast<std::uint64_t>(std::distance(first, last));
  for (std::uint64_t i = n; i > 1; --i) {
    const std::uint64_t j = uniform_below(rng, i);
    using std::swap;
    swap(first[static_cast<std::ptrdiff_t>(i - 1)], first[static_cast<std::ptrdiff_t>(j)]);
  }
}

}  // namespace detail
RAZORKV_END_NAMESPACE
