// razorkv/quant/hadamard.hpp: the orthonormal Walsh-Hadamard rotation of a head's vectors, which
// spreads an outlier channel over all of them before quantisation and leaves q . k unchanged.
#pragma once

#include <cmath>

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
template <class T>
void hadamard_rotate(T* x, index_t n) {
  RAZORKV_CHECK(is_power_of_two(n), kInvalidArgument, "hadamard_rotate: the length (", n,
                ") must be a power of two (head_dim 64 and 128 are)");
  for (index_t half = 1; half < n; half *= 2) {
    for (index_t start = 0; start < n; start += 2 * half) {
      for (index_t i = start; i < start + half; ++i) {
        const T a = x[i], b = x[i + half];
        x[i] = a + b;
        x[i + half] = a - b;
      }
    }
  }
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(n)));
  for (index_t i = 0; i < n; ++i) x[i] *= scale;
}

RAZORKV_END_NAMESPACE
