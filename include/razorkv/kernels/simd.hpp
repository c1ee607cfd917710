// razorkv/kernels/simd.hpp: the vector types of the target ISA, widening of stored rows (half,
// bfloat16) to float in vector instructions where the compiler targets them, and a vector exp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "razorkv/config.hpp"

#if defined(__AVX512F__) || defined(__F16C__) || defined(__AVX2__) || defined(__SSE2__)
#include <immintrin.h>
#endif

// A build for an x86 CPU without F16C (the default -march=x86-64) still widens half rows with it
// where the CPU has it, checked once at run time: widening is what compression, prefill and
// scoring spend on half rows, 4-5x slower without the instruction.
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define RAZORKV_DETAIL_X86_CPUID 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define RAZORKV_DETAIL_X86_CPUID 0
#endif
#if RAZORKV_DETAIL_X86_CPUID && !defined(__F16C__)
#define RAZORKV_DETAIL_RUNTIME_F16C 1
#else
#define RAZORKV_DETAIL_RUNTIME_F16C 0
#endif
// AArch64: NEON and its half-to-float conversion (FCVTL) are in every ARMv8-A core, so a build
// with default flags widens half rows in registers.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__) && defined(__ARM_NEON)
#define RAZORKV_DETAIL_NEON 1
#include <arm_neon.h>
#else
#define RAZORKV_DETAIL_NEON 0
#endif

// The vector instruction set this translation unit is compiled for. Everything whose code depends
// on it (this header, the decode kernels) lives in an inline namespace named after it, so that
// translation units compiled for different ISAs never share the definition of an inline function:
// razorkv::kernels compiles the decode kernels once per ISA and picks one at run time, and the
// linker must not swap an AVX-512 copy of a helper into the SSE2 kernels. The name promises "at
// least these instructions" (a -march=native build on an AVX-512 CPU is isa_avx512 as well).
// RAZORKV_DETAIL_TUNED_FOR_ZEN marks razorkv::kernels' second AVX-512 set, the same code compiled
// with -mtune=znver3 for AMD's cores; its own namespace keeps its helpers apart from the first's.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#if defined(RAZORKV_DETAIL_TUNED_FOR_ZEN) && RAZORKV_DETAIL_TUNED_FOR_ZEN
#define RAZORKV_DETAIL_ISA isa_avx512_zen
#define RAZORKV_DETAIL_ISA_NAME "avx512_zen"
#else
#define RAZORKV_DETAIL_ISA isa_avx512
#define RAZORKV_DETAIL_ISA_NAME "avx512"
#endif
#elif defined(__AVX512F__)
#define RAZORKV_DETAIL_ISA isa_avx512f
#define RAZORKV_DETAIL_ISA_NAME "avx512f"
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define RAZORKV_DETAIL_ISA isa_avx2
#define RAZORKV_DETAIL_ISA_NAME "avx2"
#elif defined(__AVX__) && defined(__F16C__)
#define RAZORKV_DETAIL_ISA isa_avx_f16c
#define RAZORKV_DETAIL_ISA_NAME "avx+f16c"
#elif defined(__AVX__)
#define RAZORKV_DETAIL_ISA isa_avx
#define RAZORKV_DETAIL_ISA_NAME "avx"
#elif defined(__x86_64__) || defined(_M_X64)
#define RAZORKV_DETAIL_ISA isa_sse2
#define RAZORKV_DETAIL_ISA_NAME "sse2"
#elif defined(__aarch64__) || defined(_M_ARM64)
#define RAZORKV_DETAIL_ISA isa_neon
#define RAZORKV_DETAIL_ISA_NAME "neon"
#else
#define RAZORKV_DETAIL_ISA isa_generic
#define RAZORKV_DETAIL_ISA_NAME "generic"
#endif

RAZORKV_BEGIN_NAMESPACE
namespace detail {
inline namespace RAZORKV_DETAIL_ISA {

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

// std::min and std::max for the kernels: a sanitizer build may leave such helpers out of line,
// and these copies then stay in this ISA's namespace (razorkv_kernels_isolated checks it).
template <class T>
constexpr T min_of(T a, T b) noexcept {
  return b < a ? b : a;
}
template <class T>
constexpr T max_of(T a, T b) noexcept {
  return a < b ? b : a;
}

/// One stored element as the accumulation type, without Eigen's out-of-line conversions (which
/// would be shared between translation units compiled for different ISAs; see above).
template <class Acc, class S>
inline Acc to_accum(S x) noexcept {
  if constexpr (std::is_same_v<S, Eigen::half> || std::is_same_v<S, Eigen::bfloat16>) {
    std::uint16_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    return static_cast<Acc>(std::is_same_v<S, Eigen::half> ? half_bits_to_float(bits)
                                                           : bfloat16_bits_to_float(bits));
  } else {
    return static_cast<Acc>(x);
  }
}

#if RAZORKV_DETAIL_X86_CPUID
/// The vector instructions of this x86 CPU that razorkv picks kernels by, counting only what the OS
/// also supports (CPUID for the instructions, XGETBV for the registers saved on a context switch).
struct x86_features {
  bool f16c = false, fma = false, avx2 = false;
  bool avx512 = false;  // F, BW, DQ and VL
  bool amd = false;     // the vendor string is "AuthenticAMD"
};

inline x86_features detect_x86_features() noexcept {
  x86_features f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return f;
  // The vendor string is spelt across EBX, EDX, ECX in that order: "Auth", "enti", "cAMD".
  f.amd = ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = (ecx >> 27) & 1u, avx = (ecx >> 28) & 1u;
  if (!osxsave || !avx) return f;
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  if ((xcr0_low & 0x6u) != 0x6u) return f;  // the OS does not save YMM: no AVX of any kind
  f.fma = (ecx >> 12) & 1u;
  f.f16c = (ecx >> 29) & 1u;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  f.avx2 = (ebx >> 5) & 1u;
  const bool zmm_saved = (xcr0_low & 0xe0u) == 0xe0u;  // opmask, ZMM0-15 upper halves, ZMM16-31
  f.avx512 = zmm_saved && ((ebx >> 16) & 1u) && ((ebx >> 17) & 1u) && ((ebx >> 30) & 1u) &&
             ((ebx >> 31) & 1u);
  return f;
}
#endif

#if RAZORKV_DETAIL_RUNTIME_F16C
inline bool cpu_has_f16c() noexcept {
  static const bool has = detect_x86_features().f16c;
  return has;
}

// dst[0, i) for the largest i <= n that is a multiple of 8; returns i. Call only where
// cpu_has_f16c().
__attribute__((target("avx,f16c"))) inline std::ptrdiff_t widen_half_f16c(
    const Eigen::half* RAZORKV_RESTRICT src, float* RAZORKV_RESTRICT dst,
    std::ptrdiff_t n) noexcept {
  std::ptrdiff_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  return i;
}
#endif

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
#elif RAZORKV_DETAIL_RUNTIME_F16C
    if (cpu_has_f16c()) i = widen_half_f16c(src, dst, n);
#elif RAZORKV_DETAIL_NEON
    for (; i + 4 <= n; i += 4) {
      const uint16x4_t h = vld1_u16(reinterpret_cast<const std::uint16_t*>(src + i));
      vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(h)));
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

/// v, held in a register from here on. A vector the kernels load once to use several times (a
/// key or value vector that every query of a GQA group reads) could otherwise be loaded again for
/// each use: GCC's Zen tunings fold a load into every instruction that reads it, which on AVX2
/// turned the value accumulation of float GQA 4 from 6 loads per 8 multiply-adds into 12, more
/// than the two load ports of a Zen 2 core keep up with. The empty asm claims to change v, so the
/// compiler must hold it in a register and cannot reload it from memory; it emits no instruction.
template <class Acc>
inline simd_t<Acc> simd_in_register(simd_t<Acc> v) noexcept {
#if (defined(__GNUC__) || defined(__clang__)) && defined(__AVX512F__)
  __asm__("" : "+v"(v));  // any of the 32 vector registers
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__SSE2__)
  __asm__("" : "+x"(v));
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
  __asm__("" : "+w"(v));
#endif
  return v;
}

// Whether half rows widen in registers (AVX-512F, F16C with 256-bit vectors, or AArch64's NEON);
// without the instructions they go through a float scratch buffer (widen_row's portable path).
#if defined(__AVX512F__) || (defined(__F16C__) && defined(__AVX__) && !defined(__AVX512F__)) || \
    RAZORKV_DETAIL_NEON
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
                  "razorkv: simd_load_as widens half to float only with AVX-512F, F16C or NEON");
    simd_t<float> out;
#if defined(__AVX512F__)
    const __m512 wide = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    std::memcpy(&out, &wide, sizeof(out));
#elif defined(__F16C__) && defined(__AVX__)
    const __m256 wide = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    std::memcpy(&out, &wide, sizeof(out));
#elif RAZORKV_DETAIL_NEON
    const uint16x4_t bits = vld1_u16(reinterpret_cast<const std::uint16_t*>(p));
    const float32x4_t wide = vcvt_f32_f16(vreinterpret_f16_u16(bits));
    std::memcpy(&out, &wide, sizeof(out));
#else
    (void)p;
#endif
    return out;
  } else {
    static_assert(std::is_same_v<S, Eigen::bfloat16> && std::is_same_v<Acc, float>,
                  "razorkv: simd_load_as widens bfloat16 and half to float only");
#if defined(__GNUC__) || defined(__clang__)
    // The x86 paths are spelled in intrinsics: GCC 12 splits __builtin_convertvector's widening
    // of 16-bit lanes into halves and re-joins them (with AVX2 a load and five instructions,
    // where a zero-extending load and a shift do; clang emits those two). On Zen 2 bfloat16 GQA
    // 8 decode, whose rows widen in order (kSplitColumns), then took 0.91x the time with the
    // layer in cache and 0.95-0.97x cold. SSE2 has no zero-extension: interleaving the bits with
    // zeros puts them in the high halves of the 32-bit lanes in one instruction.
    simd_t<float> out;
#if defined(__AVX512F__)
    const __m256i narrow = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m512i wide = _mm512_slli_epi32(_mm512_cvtepu16_epi32(narrow), 16);
#elif defined(__AVX2__)
    const __m128i narrow = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m256i wide = _mm256_slli_epi32(_mm256_cvtepu16_epi32(narrow), 16);
#elif defined(__SSE2__) && !defined(__AVX__)
    const __m128i narrow = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i wide = _mm_unpacklo_epi16(_mm_setzero_si128(), narrow);
#else
    simd_bf16_bits_t narrow;
    std::memcpy(&narrow, p, sizeof(narrow));
    const simd_u32_t wide = __builtin_convertvector(narrow, simd_u32_t) << 16;
#endif
    static_assert(sizeof(wide) == sizeof(out), "razorkv: one widened vector");
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

#if defined(__GNUC__) || defined(__clang__)
/// Two vectors of float from 2 * simd_lanes<float> consecutive bfloat16 values: `even` holds the
/// even-indexed ones and `odd` the odd-indexed ones, each in order. Exact, as simd_load_as; one
/// load and two lane-wise integer operations, where widening in order costs a lane shuffle per
/// vector: seen as pairs of bfloat16 in 32-bit lanes, an even element is the low half (shifted
/// up into a float's high half) and an odd one is the high half (the low half masked off).
inline void simd_load_bf16_split(const Eigen::bfloat16* p, simd_t<float>& even,
                                 simd_t<float>& odd) noexcept {
  simd_u32_t pairs;
  std::memcpy(&pairs, p, sizeof(pairs));
  const simd_u32_t even_bits = pairs << 16;
  const simd_u32_t odd_bits = pairs & 0xFFFF0000u;
  std::memcpy(&even, &even_bits, sizeof(even));
  std::memcpy(&odd, &odd_bits, sizeof(odd));
}

// One double vector's lanes as float, and as bfloat16 bits before and after widening.
typedef float simd_float_for_double_t __attribute__((vector_size(kVectorBytes / 2)));
typedef std::uint16_t simd_bf16_for_double_t __attribute__((vector_size(kVectorBytes / 4)));
typedef std::uint32_t simd_u32_for_double_t __attribute__((vector_size(kVectorBytes / 2)));
#endif

// Whether simd_load_as_double widens S in registers: every storage type but half, which needs
// kHalfInRegisters' instructions (else rows of it go through widen_row's scratch).
template <class S>
inline constexpr bool kWidensToDoubleInRegisters =
    !std::is_same_v<S, Eigen::half> || kHalfInRegisters;

/// One vector of double from simd_lanes<double> consecutive elements stored as S (float, double,
/// half where kHalfInRegisters, bfloat16): exact, as every such value is a double. The x86 paths
/// are spelled in intrinsics because GCC 12 splits __builtin_convertvector's float-to-double
/// widening into halves and re-joins them, three instructions where one does.
template <class S>
inline simd_t<double> simd_load_as_double(const S* p) noexcept {
  static_assert(kWidensToDoubleInRegisters<S>,
                "razorkv: simd_load_as_double widens half only with AVX-512F, F16C or NEON");
  if constexpr (std::is_same_v<S, double>) {
    return simd_load(p);
  } else {
#if defined(__GNUC__) || defined(__clang__)
    simd_t<double> out;
#if defined(__AVX512F__)
    __m256 wide;  // the 8 lanes, in float
    if constexpr (std::is_same_v<S, float>) {
      wide = _mm256_loadu_ps(p);
    } else if constexpr (std::is_same_v<S, Eigen::half>) {
      wide = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    } else {
      const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      wide = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
    }
    // The all-lanes masked form: GCC 12 warns that _mm512_cvtps_pd's undefined pass-through may
    // be used uninitialized.
    const __m512d result = _mm512_maskz_cvtps_pd(__mmask8(0xFF), wide);
#elif defined(__AVX__)
    __m128 wide;  // the 4 lanes, in float
    if constexpr (std::is_same_v<S, float>) {
      wide = _mm_loadu_ps(p);
    } else {
      std::uint16_t bits[4];
      std::memcpy(bits, p, sizeof(bits));
      const __m128i narrow = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bits));
      if constexpr (std::is_same_v<S, Eigen::half>) {
#if defined(__F16C__)
        wide = _mm_cvtph_ps(narrow);
#endif
      } else {
        wide = _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), narrow));
      }
    }
    const __m256d result = _mm256_cvtps_pd(wide);
#else
    simd_float_for_double_t wide;
    if constexpr (std::is_same_v<S, float>) {
      std::memcpy(&wide, p, sizeof(wide));
    } else if constexpr (std::is_same_v<S, Eigen::half>) {
      static_assert(RAZORKV_DETAIL_NEON && sizeof(S) == 2, "razorkv: half needs F16C or NEON here");
#if RAZORKV_DETAIL_NEON
      // The two halves of one double vector, widened in the low lanes of a 4-lane conversion.
      std::uint32_t pair;
      std::memcpy(&pair, p, sizeof(pair));
      const float32x2_t two = vget_low_f32(vcvt_f32_f16(vreinterpret_f16_u32(vdup_n_u32(pair))));
      static_assert(sizeof(two) == sizeof(wide), "razorkv: one double vector's lanes");
      std::memcpy(&wide, &two, sizeof(wide));
#endif
    } else {
      static_assert(std::is_same_v<S, Eigen::bfloat16>,
                    "razorkv: simd_load_as_double widens float, half and bfloat16");
      simd_bf16_for_double_t bits;
      std::memcpy(&bits, p, sizeof(bits));
      const simd_u32_for_double_t shifted = __builtin_convertvector(bits, simd_u32_for_double_t)
                                            << 16;
      std::memcpy(&wide, &shifted, sizeof(wide));
    }
    const simd_t<double> result = __builtin_convertvector(wide, simd_t<double>);
#endif
    std::memcpy(&out, &result, sizeof(out));
    return out;
#else
    simd_t<double> out;
    for (int i = 0; i < simd_lanes<double>; ++i) out.lane[i] = to_accum<double>(p[i]);
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

// Lane indices for __builtin_shufflevector: the even (kOdd = 0) or odd segments of kSegment
// lanes of a, then those of b (whose lanes are numbered from kW).
template <int kW, int kSegment, int kOdd>
struct segment_lanes {
  static constexpr std::array<int, std::size_t{kW}> value = [] {
    std::array<int, std::size_t{kW}> lanes{};
    std::size_t n = 0;
    for (int from = 0; from < 2; ++from) {
      for (int segment = kOdd; segment < kW / kSegment; segment += 2) {
        for (int t = 0; t < kSegment; ++t) lanes[n++] = from * kW + segment * kSegment + t;
      }
    }
    return lanes;
  }();
};

template <class Acc, int kSegment, int kOdd, std::size_t... kLane>
inline simd_t<Acc> pick_segments(simd_t<Acc> a, simd_t<Acc> b,
                                 std::index_sequence<kLane...>) noexcept {
  return __builtin_shufflevector(a, b,
                                 segment_lanes<simd_lanes<Acc>, kSegment, kOdd>::value[kLane]...);
}

// One level of simd_sum_each: the even segments of a and b plus their odd segments, so that each
// of a's and b's lanes is added to the one kSegment lanes above it, as simd_fold does.
template <class Acc, int kSegment>
inline simd_t<Acc> fold_pair(simd_t<Acc> a, simd_t<Acc> b) noexcept {
  const auto lanes = std::make_index_sequence<std::size_t{simd_lanes<Acc>}>{};
  return pick_segments<Acc, kSegment, 0>(a, b, lanes) +
         pick_segments<Acc, kSegment, 1>(a, b, lanes);
}

template <class Acc, int kSegment, int kCount>
inline void fold_level(simd_t<Acc>* v) noexcept {
  if constexpr (kSegment >= 1) {
    if constexpr (kCount >= 2) {
      RAZORKV_UNROLL
      for (int i = 0; i < kCount / 2; ++i) v[i] = fold_pair<Acc, kSegment>(v[2 * i], v[2 * i + 1]);
      fold_level<Acc, kSegment / 2, kCount / 2>(v);
    } else {
      v[0] = fold_pair<Acc, kSegment>(v[0], v[0]);
      fold_level<Acc, kSegment / 2, 1>(v);
    }
  }
}

/// sums[i] = the sum of the lanes of v[i], for i < kN (a power of two), each in simd_sum's order
/// (so bit for bit simd_sum's result), but with the folds of kN vectors shared: a level of the
/// tree folds two vectors with two shuffles and one add, where simd_sum spends that on one.
template <class Acc, int kN>
inline void simd_sum_each(const simd_t<Acc>* v, Acc* RAZORKV_RESTRICT sums) noexcept {
  static_assert(kN > 0 && (kN & (kN - 1)) == 0, "razorkv: simd_sum_each folds a power of two");
  constexpr int kW = simd_lanes<Acc>;
  simd_t<Acc> level[std::size_t{kN}];
  RAZORKV_UNROLL
  for (int i = 0; i < kN; ++i) level[i] = v[i];
  fold_level<Acc, kW / 2, kN>(level);
  // kN >= kW: vector m holds the sums of v[m * kW, (m + 1) * kW); else vector 0 holds all.
  RAZORKV_UNROLL
  for (int i = 0; i < kN; ++i) sums[i] = level[i / kW][i % kW];
}
#else
template <class Acc>
inline Acc simd_sum(simd_t<Acc> v) noexcept {
  return (v[0] + v[2]) + (v[1] + v[3]);
}
#endif

/// Lane-wise maximum (a > b ? a : b, maxps' rule: a NaN in b wins only where a is not greater).
template <class Acc>
inline simd_t<Acc> simd_max(simd_t<Acc> a, simd_t<Acc> b) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  return a > b ? a : b;
#else
  simd_t<Acc> r;
  for (int i = 0; i < simd_lanes<Acc>; ++i)
    r.lane[i] = a.lane[i] > b.lane[i] ? a.lane[i] : b.lane[i];
  return r;
#endif
}

#if defined(__GNUC__) || defined(__clang__)
typedef std::int32_t simd_i32_t __attribute__((vector_size(kVectorBytes)));

/// exp of every lane, for softmax weights: within 2 ulp of std::exp for x >= -87.3 (Cephes' expf
/// polynomial on [-ln2/2, ln2/2], scaled by 2^n built in the exponent bits); 0 below, where
/// exp(x) < 2^-126 is not a normal float and weighs nothing against a row's maximum of 1; NaN
/// stays NaN. Inputs above 88 are clamped to it (softmax never passes them: x = logit - max <= 0).
inline simd_t<float> simd_exp(simd_t<float> x) noexcept {
  const simd_t<float> lowest = simd_broadcast(-87.33654f), highest = simd_broadcast(88.0f);
  const simd_i32_t underflows = x < lowest;
  x = x > highest ? highest : x;
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (round to nearest in the adder), r = x - n ln 2
  // in two parts so that r is exact to float precision.
  const simd_t<float> magic = simd_broadcast(12582912.0f);
  simd_t<float> n = (x * simd_broadcast(1.44269504088896341f) + magic) - magic;
  n = n == n ? n : simd_t<float>{};  // a NaN keeps its NaN through p below, not through 2^n
  const simd_t<float> r =
      (x - n * simd_broadcast(0.693359375f)) - n * simd_broadcast(-2.12194440e-4f);
  simd_t<float> p = simd_broadcast(1.9875691500e-4f);
  p = p * r + simd_broadcast(1.3981999507e-3f);
  p = p * r + simd_broadcast(8.3334519073e-3f);
  p = p * r + simd_broadcast(4.1665795894e-2f);
  p = p * r + simd_broadcast(1.6666665459e-1f);
  p = p * r + simd_broadcast(5.0000001201e-1f);
  p = p * (r * r) + r + simd_broadcast(1.0f);
  const simd_i32_t exponent = (__builtin_convertvector(n, simd_i32_t) + 127) << 23;
  simd_t<float> scale;
  std::memcpy(&scale, &exponent, sizeof(scale));
  return underflows ? simd_t<float>{} : p * scale;
}
#endif

}  // namespace RAZORKV_DETAIL_ISA
}  // namespace detail
RAZORKV_END_NAMESPACE
