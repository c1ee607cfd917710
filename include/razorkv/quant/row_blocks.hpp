// razorkv/quant/row_blocks.hpp: 8-bit and 4-bit K/V rows, stored as blocks of 32 values that
// share one 16-bit scale (llama.cpp's q8_0 and q4_0 layouts), quantised, dequantised and dotted.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include <Eigen/Core>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// How a quantised row stores its values. A row of head_dim values is head_dim / 32 blocks; each
/// block holds a scale d (IEEE binary16) and 32 integers q, and stands for the values d * q.
///   kQ8: q in [-127, 127], one byte each: 34 bytes per 32 values (0.53 of a 16-bit row);
///        d = max|x| / 127, so |x - d q| <= d / 2.
///   kQ4: q in [-8, 7], two per byte: 18 bytes per 32 values (0.28 of a 16-bit row);
///        d = -m / 8 for the value m of largest magnitude, which lands exactly on q = -8, so
///        |x - d q| <= |d| / 2 for every value but the one of opposite sign and the same
///        magnitude, which clamps to q = 7 (an error of |d|).
/// Per-block scales follow each row as it is appended (no statistics over tokens are needed),
/// which is what a cache that grows one token at a time can keep.
enum class row_format : std::uint8_t { kQ8 = 1, kQ4 = 2 };

/// Values per block; head_dim must be a multiple of it.
inline constexpr index_t kQuantBlock = 32;

/// "q8" or "q4", for messages and benchmark labels.
constexpr const char* row_format_name(row_format f) noexcept {
  return f == row_format::kQ8 ? "q8" : f == row_format::kQ4 ? "q4" : "unknown";
}

/// Bytes of one block: the 2-byte scale and the packed integers.
constexpr index_t block_bytes(row_format f) noexcept {
  return f == row_format::kQ8 ? 2 + kQuantBlock : 2 + kQuantBlock / 2;
}

/// Bytes of one quantised row of `head_dim` values. Throws kInvalidArgument naming head_dim
/// unless it is a positive multiple of kQuantBlock.
inline index_t quantised_row_bytes(row_format f, index_t head_dim) {
  RAZORKV_CHECK(head_dim > 0 && head_dim % kQuantBlock == 0, kInvalidArgument,
                "quantised_row_bytes: head_dim (", head_dim, ") must be a positive multiple of ",
                kQuantBlock, " to be stored as ", row_format_name(f), " blocks");
  RAZORKV_CHECK(f == row_format::kQ8 || f == row_format::kQ4, kInvalidArgument,
                "quantised_row_bytes: row format (", static_cast<int>(f), ") is not q8 or q4");
  return head_dim / kQuantBlock * block_bytes(f);
}

namespace detail {

// The binary16 scale of a block, rounded to nearest even as Eigen::half rounds; beyond the
// largest half it saturates to it, so that a block of huge values keeps a finite scale (and its
// values clamp) rather than an infinite one.
inline std::uint16_t float_to_half_bits(float x) noexcept {
  const Eigen::half h(x);
  const auto bits = Eigen::numext::bit_cast<std::uint16_t>(h);
  return (bits & 0x7fffu) == 0x7c00u ? static_cast<std::uint16_t>((bits & 0x8000u) | 0x7bffu)
                                     : bits;
}

inline float half_bits_value(std::uint16_t h) noexcept {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(h));
}

}  // namespace detail

namespace detail {

// Quantises the kQuantBlock values at x into one block at out. A block holding a NaN stores a
// NaN scale (and zeros), so that its values read back as NaN, as a NaN stored as T would; an
// infinity saturates the scale and its values clamp.
inline void quantise_block(row_format f, const float* x, std::uint8_t* out) noexcept {
  // Written as loops a compiler vectorises (an OR, a max, a multiply-round-clamp, each over the
  // whole block): one value at a time through std::nearbyint (a libm call without SSE4.1) it cost
  // as much per value as decoding reads per token.
  bool nan = false;
  float largest = 0;  // the largest magnitude (NaNs skipped)
  for (index_t i = 0; i < kQuantBlock; ++i) {
    nan |= x[i] != x[i];
    const float a = std::fabs(x[i]);
    largest = a > largest ? a : largest;
  }
  // q4's scale carries the sign of the first value of that magnitude, so that it maps to -8.
  float extreme = largest;
  if (f == row_format::kQ4) {
    for (index_t i = 0; i < kQuantBlock; ++i) {
      if (std::fabs(x[i]) == largest) {
        extreme = x[i];
        break;
      }
    }
  }
  const std::uint16_t scale_bits =
      nan ? std::uint16_t{0x7e00}
          : float_to_half_bits(f == row_format::kQ8 ? largest / 127.0f : extreme / -8.0f);
  std::memcpy(out, &scale_bits, 2);
  // The integers are rounded against the scale as stored, so that d * q is what rounding x to
  // the stored grid gives: to nearest even, by adding and subtracting 1.5 * 2^23 (exact for the
  // magnitudes below 2^22 that are not clamped anyway; infinities stay infinite and clamp). Where
  // the compiler fuses the multiply into the add, a product within a float's rounding of a half
  // may round the other way: either integer is within half a step of the value.
  const float d = half_bits_value(scale_bits);
  const float inverse = d != 0 && !nan ? 1.0f / d : 0.0f;
  const float low = f == row_format::kQ8 ? -127.0f : -8.0f;
  const float high = f == row_format::kQ8 ? 127.0f : 7.0f;
  float q[kQuantBlock];
  for (index_t i = 0; i < kQuantBlock; ++i) {
    const float v = x[i] * inverse;
    const float rounded = (v + 12582912.0f) - 12582912.0f;
    // NaN (a NaN block's values times 0) compares false both ways and becomes low; the block
    // stores zeros then, below.
    q[i] = rounded > high ? high : (rounded >= low ? rounded : low);
  }
  if (nan) {
    for (index_t i = 0; i < kQuantBlock; ++i) q[i] = 0;
  }
  if (f == row_format::kQ8) {
    for (index_t i = 0; i < kQuantBlock; ++i)
      out[2 + i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q[i]));
  } else {
    // Value i in the low nibble of byte i, value i + 16 in its high nibble (llama.cpp's).
    for (index_t i = 0; i < kQuantBlock / 2; ++i) {
      out[2 + i] =
          static_cast<std::uint8_t>(static_cast<unsigned>(q[i] + 8.0f) |
                                    (static_cast<unsigned>(q[i + kQuantBlock / 2] + 8.0f) << 4));
    }
  }
}

// The kQuantBlock values one block stands for, into x.
inline void dequantise_block(row_format f, const std::uint8_t* in, float* x) noexcept {
  std::uint16_t scale_bits;
  std::memcpy(&scale_bits, in, 2);
  const float d = half_bits_value(scale_bits);
  if (f == row_format::kQ8) {
    for (index_t i = 0; i < kQuantBlock; ++i) x[i] = d * static_cast<std::int8_t>(in[2 + i]);
  } else {
    for (index_t i = 0; i < kQuantBlock / 2; ++i) {
      x[i] = d * static_cast<float>((in[2 + i] & 0x0f) - 8);
      x[i + kQuantBlock / 2] = d * static_cast<float>((in[2 + i] >> 4) - 8);
    }
  }
}

}  // namespace detail

/// Quantises `head_dim` finite values into `row` (quantised_row_bytes(f, head_dim) bytes).
/// A value that is not finite is an error naming its index; nothing is written then.
inline void quantise_row(row_format f, const float* values, index_t head_dim, std::uint8_t* row) {
  quantised_row_bytes(f, head_dim);  // checks head_dim and f
  for (index_t i = 0; i < head_dim; ++i) {
    RAZORKV_CHECK(std::isfinite(values[i]), kInvalidArgument, "quantise_row: value ", i, " (",
                  values[i], ") is not finite");
  }
  for (index_t b = 0; b < head_dim / kQuantBlock; ++b)
    detail::quantise_block(f, values + b * kQuantBlock, row + b * block_bytes(f));
}

/// The `head_dim` values a quantised row stands for, into `values`.
inline void dequantise_row(row_format f, const std::uint8_t* row, index_t head_dim, float* values) {
  quantised_row_bytes(f, head_dim);  // checks head_dim and f
  for (index_t b = 0; b < head_dim / kQuantBlock; ++b)
    detail::dequantise_block(f, row + b * block_bytes(f), values + b * kQuantBlock);
}

/// q . row for a quantised row: the scalar reference of the decode kernels' inner product,
/// accumulated per block and scaled once per block, as they do.
inline float quantised_dot(row_format f, const float* q, const std::uint8_t* row,
                           index_t head_dim) {
  quantised_row_bytes(f, head_dim);
  float total = 0;
  for (index_t b = 0; b < head_dim / kQuantBlock; ++b) {
    const std::uint8_t* in = row + b * block_bytes(f);
    std::uint16_t scale_bits;
    std::memcpy(&scale_bits, in, 2);
    const float* x = q + b * kQuantBlock;
    float block = 0;
    if (f == row_format::kQ8) {
      for (index_t i = 0; i < kQuantBlock; ++i) block += x[i] * static_cast<std::int8_t>(in[2 + i]);
    } else {
      for (index_t i = 0; i < kQuantBlock / 2; ++i) {
        block += x[i] * static_cast<float>((in[2 + i] & 0x0f) - 8) +
                 x[i + kQuantBlock / 2] * static_cast<float>((in[2 + i] >> 4) - 8);
      }
    }
    total += detail::half_bits_value(scale_bits) * block;
  }
  return total;
}

RAZORKV_END_NAMESPACE
