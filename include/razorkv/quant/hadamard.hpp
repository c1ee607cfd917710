// razorkv/quant/hadamard.hpp: the orthonormal Walsh-Hadamard rotation of a head's vectors, which
// spreads an outlier channel over all of them before quantisation and leaves q . k unchanged.
#pragma once

#include <cmath>
#include <cstring>
#include <type_traits>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// True when n is a power of two (1, 2, 4, ...): the lengths the rotation takes.
constexpr bool is_power_of_two(index_t n) noexcept { return n > 0 && (n & (n - 1)) == 0; }

/// x <- H x / sqrt(n) in place, H the n x n Sylvester-Hadamard matrix (entries +-1, H H = n I),
/// by the fast transform: log2(n) passes of butterflies, n log2(n) additions. The rotation is
/// orthonormal and its own inverse, so (H q) . (H k) = q . k: keys rotated as they are stored and
/// each query rotated once per decode step give the same logits, while a channel that dominates
/// a key (the outliers 4-bit keys lose precision to) is spread over all n of them. Throws
/// kInvalidArgument naming n unless it is a power of two.
namespace detail {
// The passes of half >= 4 over float, four pairs at a time in a vector of four lanes (SSE2 or
// NEON, which every build of x86-64 and AArch64 has): scalar, the transform cost as much per key
// as quantising it, and more than the rest of a compression.
#if defined(__GNUC__) || defined(__clang__)
typedef float hadamard_lanes_t __attribute__((vector_size(16)));
inline void hadamard_wide_passes(float* x, index_t n) noexcept {
  for (index_t half = 4; half < n; half *= 2) {
    for (index_t start = 0; start < n; start += 2 * half) {
      for (index_t i = start; i < start + half; i += 4) {
        hadamard_lanes_t a, b;
        std::memcpy(&a, x + i, sizeof a);
        std::memcpy(&b, x + i + half, sizeof b);
        const hadamard_lanes_t sum = a + b, difference = a - b;
        std::memcpy(x + i, &sum, sizeof sum);
        std::memcpy(x + i + half, &difference, sizeof difference);
      }
    }
  }
}
#endif
}  // namespace detail

template <class T>
void hadamard_rotate(T* x, index_t n) {
  RAZORKV_CHECK(is_power_of_two(n), kInvalidArgument, "hadamard_rotate: the length (", n,
                ") must be a power of two (head_dim 64 and 128 are)");
  // The butterflies pass by pass, a + b then a - b as the definition orders them, the first two
  // passes as one radix-4 butterfly per four values: the same additions in the same order
  // whatever the grouping, so every path gives the same bits.
  if (n == 2) {
    const T a = x[0], b = x[1];
    x[0] = a + b;
    x[1] = a - b;
  } else if (n >= 4) {
    for (index_t s = 0; s < n; s += 4) {
      const T a = x[s], b = x[s + 1], c = x[s + 2], d = x[s + 3];
      const T ab = a + b, a_b = a - b, cd = c + d, c_d = c - d;
      x[s] = ab + cd;
      x[s + 1] = a_b + c_d;
      x[s + 2] = ab - cd;
      x[s + 3] = a_b - c_d;
    }
#if defined(__GNUC__) || defined(__clang__)
    if constexpr (std::is_same_v<T, float>) {
      detail::hadamard_wide_passes(x, n);
    } else
#endif
    {
      for (index_t half = 4; half < n; half *= 2) {
        for (index_t start = 0; start < n; start += 2 * half) {
          for (index_t i = start; i < start + half; ++i) {
            const T a = x[i], b = x[i + half];
            x[i] = a + b;
            x[i + half] = a - b;
          }
        }
      }
    }
  }
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(n)));
  for (index_t i = 0; i < n; ++i) x[i] *= scale;
}

RAZORKV_END_NAMESPACE
