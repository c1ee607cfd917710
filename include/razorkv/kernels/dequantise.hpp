// razorkv/kernels/dequantise.hpp: quantised K/V rows (8-/4-bit blocks) widened to the kernels'
// accumulator type in registers, per ISA: what decode and prefill read quantised spans through.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/kernels/simd.hpp"
#include "razorkv/quant/row_blocks.hpp"
#include "razorkv/quant/storage.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {
// The kernels are compiled per ISA (see RAZORKV_DETAIL_ISA in simd.hpp).
inline namespace RAZORKV_DETAIL_ISA {

#if defined(__GNUC__) || defined(__clang__)
// A float vector's lanes of bytes: the integers of a quantised block, widened a vector at a time.
typedef std::int8_t simd_i8_lanes_t __attribute__((vector_size(simd_lanes<float>)));
typedef std::uint8_t simd_u8_lanes_t __attribute__((vector_size(simd_lanes<float>)));
#endif

// Rows [first, first + rows) of quantised rows as Acc values, into out ([rows, dim]): each
// block's integers widened and multiplied by its scale in registers, a vector at a time (the
// scalar reference is dequantise_row, quant/row_blocks.hpp; the values are the same bit for bit).
// Only this ISA's helpers are called (pointers by hand, the scale through half_bits_to_float), so
// that no out-of-line copy of a shared inline function escapes the ISA's namespace.
template <class Acc>
inline void dequantise_rows(const quantised_rows& q, index_t first, index_t rows,
                            Acc* RAZORKV_RESTRICT out) noexcept {
  const index_t dim = q.cols, blocks = dim / kQuantBlock;
  const index_t bytes = q.format == row_format::kQ8 ? 2 + kQuantBlock : 2 + kQuantBlock / 2;
  for (index_t r = 0; r < rows; ++r) {
    const std::uint8_t* row = q.data + (first + r) * q.stride;
    for (index_t b = 0; b < blocks; ++b) {
      const std::uint8_t* in = row + b * bytes;
      Acc* x = out + r * dim + b * kQuantBlock;
      std::uint16_t scale_bits;
      std::memcpy(&scale_bits, in, 2);
      const float scale = half_bits_to_float(scale_bits);
#if defined(__GNUC__) || defined(__clang__)
      if constexpr (std::is_same_v<Acc, float> && simd_lanes<float> <= kQuantBlock / 2) {
        constexpr int kW = simd_lanes<float>;
        using lanes_i8 = simd_i8_lanes_t;
        using lanes_u8 = simd_u8_lanes_t;
        const simd_t<float> d = simd_broadcast(scale);
        if (q.format == row_format::kQ8) {
          RAZORKV_UNROLL
          for (int j = 0; j < kQuantBlock; j += kW) {
            lanes_i8 v;
            std::memcpy(&v, in + 2 + j, sizeof(v));
            simd_store(x + j, __builtin_convertvector(v, simd_t<float>) * d);
          }
        } else {
          const simd_t<float> eight = simd_broadcast(8.0f);
          RAZORKV_UNROLL
          for (int j = 0; j < kQuantBlock / 2; j += kW) {
            lanes_u8 v;
            std::memcpy(&v, in + 2 + j, sizeof(v));
            const lanes_u8 low = v & 0x0f, high = v >> 4;
            simd_store(x + j, (__builtin_convertvector(low, simd_t<float>) - eight) * d);
            simd_store(x + kQuantBlock / 2 + j,
                       (__builtin_convertvector(high, simd_t<float>) - eight) * d);
          }
        }
        continue;
      }
#endif
      if (q.format == row_format::kQ8) {
        for (index_t i = 0; i < kQuantBlock; ++i)
          x[i] = static_cast<Acc>(scale * static_cast<std::int8_t>(in[2 + i]));
      } else {
        for (index_t i = 0; i < kQuantBlock / 2; ++i) {
          x[i] = static_cast<Acc>(scale * static_cast<float>((in[2 + i] & 0x0f) - 8));
          x[i + kQuantBlock / 2] =
              static_cast<Acc>(scale * static_cast<float>((in[2 + i] >> 4) - 8));
        }
      }
    }
  }
}

}  // namespace RAZORKV_DETAIL_ISA
}  // namespace detail
RAZORKV_END_NAMESPACE
