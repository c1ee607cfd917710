// razorkv/kernels/dequantise.hpp: quantised K/V rows (8-/4-bit blocks) widened to the kernels'
// accumulator type in registers, per ISA: what decode and prefill read quantised spans through.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <Eigen/Core>

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
// A float vector's lanes of bytes: the integers of a quantised block, a vector at a time.
typedef std::uint8_t simd_u8_lanes_t __attribute__((vector_size(simd_lanes<float>)));

// The simd_lanes<float> bytes at p as floats, sign-extended (q8's integers) or not (q4's nibbles),
// with the widening instructions of the ISA: GCC 12 turns a vector conversion from bytes into one
// scalar conversion per lane, which made dequantising slower than reading twice the bytes.
template <bool kSigned>
inline simd_t<float> bytes_to_float(const std::uint8_t* p) noexcept {
  simd_t<float> out;
#if defined(__AVX512F__)
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m512 f =
      _mm512_cvtepi32_ps(kSigned ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes));
  std::memcpy(&out, &f, sizeof(out));
#elif defined(__AVX2__)
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m256 f =
      _mm256_cvtepi32_ps(kSigned ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes));
  std::memcpy(&out, &f, sizeof(out));
#elif defined(__SSE2__) && !defined(__AVX__)
  std::int32_t four;
  std::memcpy(&four, p, sizeof(four));
  // Each byte to the top of its 32-bit lane, then shifted down with or without its sign.
  __m128i lanes = _mm_cvtsi32_si128(four);
  lanes = _mm_unpacklo_epi8(lanes, lanes);
  lanes = _mm_unpacklo_epi16(lanes, lanes);
  lanes = kSigned ? _mm_srai_epi32(lanes, 24) : _mm_srli_epi32(lanes, 24);
  const __m128 f = _mm_cvtepi32_ps(lanes);
  std::memcpy(&out, &f, sizeof(out));
#elif RAZORKV_DETAIL_NEON
  std::uint8_t eight[8] = {};
  std::memcpy(eight, p, 4);
  const int32x4_t lanes =
      kSigned ? vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_u8(vld1_u8(eight)))))
              : vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vld1_u8(eight)))));
  const float32x4_t f = vcvtq_f32_s32(lanes);
  std::memcpy(&out, &f, sizeof(out));
#else
  for (int i = 0; i < simd_lanes<float>; ++i)
    out[i] =
        kSigned ? static_cast<float>(static_cast<std::int8_t>(p[i])) : static_cast<float>(p[i]);
#endif
  return out;
}

// The 16 packed bytes of a q4 block at p as its 32 values: low nibbles to x[0, 16), high nibbles
// to x[16, 32), each (nibble - 8) * d, one 16-byte load split with the ISA's own instructions.
inline void nibbles_to_float(const std::uint8_t* p, simd_t<float> d, float* x) noexcept {
  constexpr int kW = simd_lanes<float>;
  const simd_t<float> eight = simd_broadcast(8.0f);
#if defined(__AVX512F__) || defined(__AVX2__)
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i nibbles[2] = {_mm_and_si128(packed, mask),
                              _mm_and_si128(_mm_srli_epi16(packed, 4), mask)};
  for (int half = 0; half < 2; ++half) {
    for (int j = 0; j < kQuantBlock / 2; j += kW) {
#if defined(__AVX512F__)
      const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(nibbles[half]));
#else
      const __m256 f = _mm256_cvtepi32_ps(
          _mm256_cvtepu8_epi32(j == 0 ? nibbles[half] : _mm_srli_si128(nibbles[half], 8)));
#endif
      simd_t<float> v;
      std::memcpy(&v, &f, sizeof(v));
      simd_store(x + half * (kQuantBlock / 2) + j, (v - eight) * d);
    }
  }
#else
  for (int j = 0; j < kQuantBlock / 2; j += kW) {
    simd_u8_lanes_t packed;
    std::memcpy(&packed, p + j, sizeof(packed));
    const simd_u8_lanes_t low = packed & 0x0f, high = packed >> 4;
    std::uint8_t nibbles[2][kW];
    std::memcpy(nibbles[0], &low, sizeof(low));
    std::memcpy(nibbles[1], &high, sizeof(high));
    simd_store(x + j, (bytes_to_float<false>(nibbles[0]) - eight) * d);
    simd_store(x + kQuantBlock / 2 + j, (bytes_to_float<false>(nibbles[1]) - eight) * d);
  }
#endif
}

// The kW bytes at p as floats: their low nibbles, or with `high` their high nibbles (0 to 15).
inline simd_t<float> nibbles_to_float(const std::uint8_t* p, bool high) noexcept {
  simd_t<float> out;
#if defined(__AVX512F__)
  const __m512i wide = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i n =
      high ? _mm512_srli_epi32(wide, 4) : _mm512_and_si512(wide, _mm512_set1_epi32(15));
  const __m512 f = _mm512_cvtepi32_ps(n);
  std::memcpy(&out, &f, sizeof(out));
#elif defined(__AVX2__)
  const __m256i wide = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i n =
      high ? _mm256_srli_epi32(wide, 4) : _mm256_and_si256(wide, _mm256_set1_epi32(15));
  const __m256 f = _mm256_cvtepi32_ps(n);
  std::memcpy(&out, &f, sizeof(out));
#else
  std::uint8_t nibbles[simd_lanes<float>];
  for (int i = 0; i < simd_lanes<float>; ++i)
    nibbles[i] = static_cast<std::uint8_t>(high ? p[i] >> 4 : p[i] & 0x0f);
  out = bytes_to_float<false>(nibbles);
#endif
  return out;
}

// The kW values of a quantised row's columns [c, c + kW), c a multiple of kW (so they lie in one
// block, whose scale as float is `scale`): the products the scalar reference computes, bit for bit.
template <row_format kFormat>
inline simd_t<float> quantised_vector(const std::uint8_t* row, index_t c,
                                      simd_t<float> scale) noexcept {
  constexpr index_t kBytes = block_bytes(kFormat);
  const std::uint8_t* q = row + (c / kQuantBlock) * kBytes + 2;
  const index_t offset = c % kQuantBlock;
  if constexpr (kFormat == row_format::kQ8) {
    return bytes_to_float<true>(q + offset) * scale;
  } else {
    // Values [0, 16) of a block are its bytes' low nibbles, [16, 32) their high nibbles.
    return (nibbles_to_float(q + offset % (kQuantBlock / 2), offset >= kQuantBlock / 2) -
            simd_broadcast(8.0f)) *
           scale;
  }
}

// The scales of rows [first, first + rows) as floats, row by row ([rows, cols / kQuantBlock]):
// gathered and widened with the ISA's half conversion a chunk at a time, so that the kernels
// broadcast a float per vector (converted one by one, they cost as much as the rows' arithmetic).
inline void row_scales(const quantised_rows& q, index_t first, index_t rows,
                       float* RAZORKV_RESTRICT scales) noexcept {
  constexpr index_t kChunk = 64;
  const index_t blocks = q.cols / kQuantBlock, bytes = block_bytes(q.format);
  Eigen::half bits[kChunk];
  index_t gathered = 0, done = 0;
  for (index_t r = 0; r < rows; ++r) {
    const std::uint8_t* row = q.data + (first + r) * q.stride;
    for (index_t b = 0; b < blocks; ++b) {
      std::memcpy(&bits[gathered++], row + b * bytes, 2);
      if (gathered == kChunk) {
        widen_row(bits, scales + done, kChunk);
        done += kChunk;
        gathered = 0;
      }
    }
  }
  widen_row(bits, scales + done, gathered);
}
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
        const simd_t<float> d = simd_broadcast(scale);
        if (q.format == row_format::kQ8) {
          RAZORKV_UNROLL
          for (int j = 0; j < kQuantBlock; j += kW)
            simd_store(x + j, bytes_to_float<true>(in + 2 + j) * d);
        } else {
          nibbles_to_float(in + 2, d, x);
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
