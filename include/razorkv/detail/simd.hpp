// razorkv/detail/simd.hpp: widening of stored rows (half, bfloat16) to float with vector
// instructions where the compiler targets them (AVX-512F, F16C), and a portable fallback.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <Eigen/Core>

#include "razorkv/config.hpp"

#if defined(__AVX512F__) || defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

RAZORKV_BEGIN_NAMESPACE
namespace detail {

// IEEE binary16 -> binary32 without branches (selects only), so that the compiler can
// vectorise the loop that calls it when no F16C instruction is available. Exact for zeros,
// subnormals, normals, inf and NaN.
inline float half_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t mag = static_cast<std::uint32_t>(h & 0x7fffu);
  // Normal numbers: shift into place and re-bias the exponent by 127 - 15 = 112.
  const std::uint32_t normal = (mag << 13) + (112u << 23);
  // Inf and NaN: an all-ones exponent stays all ones; the payload moves with the mantissa.
  const std::uint32_t inf_nan = (mag << 13) | 0x7f800000u;
  // Zero and subnormals: the value is mag * 2^-24, exact in float.
  const float tiny = static_cast<float>(mag) * 5.9604644775390625e-8f;
  std::uint32_t subnormal;
  std::memcpy(&subnormal, &tiny, sizeof(subnormal));
  const std::uint32_t bits =
      sign | (mag >= 0x7c00u ? inf_nan : (mag < 0x0400u ? subnormal : normal));
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

inline float bfloat16_bits_to_float(std::uint16_t b) noexcept {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

/// dst[0, n) = float(src[0, n)) for a 16-bit source. Float and double rows are never widened:
/// the kernels read them in place.
template <class T>
inline void widen_row(const T* RAZORKV_RESTRICT src, float* RAZORKV_RESTRICT dst,
                      std::ptrdiff_t n) noexcept {
  static_assert(sizeof(Eigen::half) == 2 && sizeof(Eigen::bfloat16) == 2,
                "razorkv: 16-bit storage types must be 2 bytes");
  std::ptrdiff_t i = 0;
  if constexpr (std::is_same_v<T, Eigen::half>) {
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
      _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
    }
#endif
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
#endif
    for (; i < n; ++i) {
      std::uint16_t bits;
      std::memcpy(&bits, src + i, sizeof(bits));
      dst[i] = half_bits_to_float(bits);
    }
  } else if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
      _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    }
#elif defined(__AVX2__)
    for (; i + 8 <= n; i += 8) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                          _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
    }
#endif
    for (; i < n; ++i) {
      std::uint16_t bits;
      std::memcpy(&bits, src + i, sizeof(bits));
      dst[i] = bfloat16_bits_to_float(bits);
    }
  } else {
    static_assert(sizeof(T) == 0, "razorkv: widen_row takes Eigen::half or Eigen::bfloat16");
  }
}

// ---------------------------------------------------------------------------------------
// simd<Acc>: the one native vector of the target (512, 256 or 128 bits) as a GCC/Clang vector
// extension, so the kernels are written once and compile to AVX-512, AVX2 or SSE2 depending
// on the caller's flags. The width follows the enabled ISA, so no vector crosses a function
// boundary wider than the ABI allows. Other compilers get a plain-array fallback.
#if defined(__GNUC__) || defined(__clang__)
#if defined(__AVX512F__)
inline constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
inline constexpr int kVectorBytes = 32;
#else
inline constexpr int kVectorBytes = 16;
#endif

template <class Acc>
struct simd;

template <>
struct simd<float> {
  typedef float type __attribute__((vector_size(kVectorBytes)));
};
template <>
struct simd<double> {
  typedef double type __attribute__((vector_size(kVectorBytes)));
};

template <class Acc>
using simd_t = typename simd<Acc>::type;
// The bits of one float vector's worth of bfloat16 values, and of the widened floats.
typedef std::uint16_t simd_bf16_bits_t __attribute__((vector_size(kVectorBytes / 2)));
typedef std::uint32_t simd_u32_t __attribute__((vector_size(kVectorBytes)));
template <class Acc>
inline constexpr int simd_lanes = kVectorBytes / static_cast<int>(sizeof(Acc));

template <class Acc>
inline simd_t<Acc> simd_broadcast(Acc x) noexcept {
  // x - 0 is x for every x, including -0 and NaN, so this folds to a single broadcast.
  return x - simd_t<Acc>{};
}
#else
template <class Acc>
struct simd_fallback {
  Acc lane[4];
  simd_fallback& operator+=(const simd_fallback& o) noexcept {
    for (int i = 0; i < 4; ++i) lane[i] += o.lane[i];
    return *this;
  }
  friend simd_fallback operator*(const simd_fallback& a, const simd_fallback& b) noexcept {
    simd_fallback r;
    for (int i = 0; i < 4; ++i) r.lane[i] = a.lane[i] * b.lane[i];
    return r;
  }
  friend simd_fallback operator+(const simd_fallback& a, const simd_fallback& b) noexcept {
    simd_fallback r = a;
    r += b;
    return r;
  }
  Acc operator[](int i) const noexcept { return lane[i]; }
};
template <class Acc>
using simd_t = simd_fallback<Acc>;
template <class Acc>
inline constexpr int simd_lanes = 4;
template <class Acc>
inline simd_t<Acc> simd_broadcast(Acc x) noexcept {
  simd_t<Acc> v;
  for (int i = 0; i < 4; ++i) v.lane[i] = x;
  return v;
}
#endif

/// Unaligned load and store of one vector.
template <class Acc>
inline simd_t<Acc> simd_load(const Acc* p) noexcept {
  simd_t<Acc> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <class Acc>
inline void simd_store(Acc* p, simd_t<Acc> v) noexcept {
  std::memcpy(p, &v, sizeof(v));
}

// Whether half rows widen in registers (AVX-512F, or F16C with 256-bit vectors); without the
// instructions they go through a float scratch buffer (widen_row's portable path).
#if defined(__AVX512F__) || (defined(__F16C__) && defined(__AVX__) && !defined(__AVX512F__))
inline constexpr bool kHalfInRegisters = true;
#else
inline constexpr bool kHalfInRegisters = false;
#endif

/// One vector of Acc from simd_lanes<Acc> consecutive elements stored as S: a plain load when S
/// is Acc, a widening in registers into float for bfloat16 (exact: a bfloat16 is the top half of
/// the float's bits) and, where kHalfInRegisters, for half, so that 16-bit rows need no trip
/// through a scratch buffer.
template <class Acc, class S>
inline simd_t<Acc> simd_load_as(const S* p) noexcept {
  if constexpr (std::is_same_v<S, Acc>) {
    return simd_load(p);
  } else if constexpr (std::is_same_v<S, Eigen::half>) {
    static_assert(kHalfInRegisters && std::is_same_v<Acc, float>,
                  "razorkv: simd_load_as widens half to float only with AVX-512F or F16C");
    simd_t<float> out;
#if defined(__AVX512F__)
    const __m512 wide = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    std::memcpy(&out, &wide, sizeof(out));
#elif defined(__F16C__) && defined(__AVX__)
    const __m256 wide = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    std::memcpy(&out, &wide, sizeof(out));
#else
    (void)p;
#endif
    return out;
  } else {
    static_assert(std::is_same_v<S, Eigen::bfloat16> && std::is_same_v<Acc, float>,
                  "razorkv: simd_load_as widens bfloat16 and half to float only");
#if defined(__GNUC__) || defined(__clang__)
    simd_bf16_bits_t narrow;
    std::memcpy(&narrow, p, sizeof(narrow));
    const simd_u32_t wide = __builtin_convertvector(narrow, simd_u32_t) << 16;
    simd_t<float> out;
    std::memcpy(&out, &wide, sizeof(out));
    return out;
#else
    simd_t<float> out;
    for (int i = 0; i < simd_lanes<float>; ++i) {
      std::uint16_t bits;
      std::memcpy(&bits, p + i, sizeof(bits));
      out.lane[i] = bfloat16_bits_to_float(bits);
    }
    return out;
#endif
  }
}

template <class Acc>
inline simd_t<Acc> simd_zero() noexcept {
  return simd_broadcast<Acc>(Acc(0));
}

#if defined(__GNUC__) || defined(__clang__)
// A vector of kBytes bytes of Acc, used to fold a register in halves.
template <class Acc, int kBytes>
struct simd_of_bytes {
  typedef Acc type __attribute__((vector_size(kBytes)));
};

// Sum of the lanes of a kBytes-byte vector: add its halves until one 16-byte vector is left.
template <class Acc, int kBytes>
inline Acc simd_fold(typename simd_of_bytes<Acc, kBytes>::type v) noexcept {
  if constexpr (kBytes > 16) {
    using half_t = typename simd_of_bytes<Acc, kBytes / 2>::type;
    half_t lo, hi;
    std::memcpy(&lo, &v, sizeof(lo));
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(lo), sizeof(hi));
    return simd_fold<Acc, kBytes / 2>(lo + hi);
  } else if constexpr (sizeof(Acc) == 4) {
    return (v[0] + v[2]) + (v[1] + v[3]);
  } else {
    return v[0] + v[1];
  }
}

/// Sum of the lanes, by a pairwise tree.
template <class Acc>
inline Acc simd_sum(simd_t<Acc> v) noexcept {
  return simd_fold<Acc, kVectorBytes>(v);
}
#else
template <class Acc>
inline Acc simd_sum(simd_t<Acc> v) noexcept {
  return (v[0] + v[2]) + (v[1] + v[3]);
}
#endif

}  // namespace detail
RAZORKV_END_NAMESPACE
