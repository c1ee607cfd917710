// Tests of the vectorised widening of half and bfloat16 rows against Eigen's scalar
// conversion (every bit pattern, every length and misalignment; the in-order and split loads
// of decode too), of simd_sum, and of simd_in_register.
#include <gtest/gtest.h>

#include <razorkv/kernels/simd.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

namespace {

template <class T>
T from_bits(std::uint16_t bits) {
  T value;
  std::memcpy(static_cast<void*>(&value), &bits, sizeof(value));
  return value;
}

// The 65,536 values of a 16-bit type, in the order of their bits.
template <class T>
std::vector<T> every_bit_pattern() {
  std::vector<T> source(65536);
  for (std::uint32_t b = 0; b < 65536; ++b) source[b] = from_bits<T>(static_cast<std::uint16_t>(b));
  return source;
}

// Whether `got` is `source[element]` widened exactly: bit for bit (-0, infinities and
// subnormals included), or any NaN for a NaN.
template <class T>
::testing::AssertionResult widened_exactly(float got, const std::vector<T>& source,
                                           std::size_t element) {
  const float expected = static_cast<float>(source[element]);
  if (std::isnan(expected)) {
    if (std::isnan(got)) return ::testing::AssertionSuccess();
  } else {
    std::uint32_t got_bits, want_bits;
    std::memcpy(&got_bits, &got, 4);
    std::memcpy(&want_bits, &expected, 4);
    if (got_bits == want_bits) return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "bits 0x" << std::hex << element << ": got " << got << ", want " << expected;
}

template <class T>
void check_all_bit_patterns() {
  const std::vector<T> source = every_bit_pattern<T>();
  std::vector<float> widened(source.size());
  razorkv::detail::widen_row(source.data(), widened.data(),
                             static_cast<std::ptrdiff_t>(source.size()));
  for (std::size_t e = 0; e < source.size(); ++e)
    ASSERT_TRUE(widened_exactly(widened[e], source, e));
}

TEST(RazorkvSimd, HalfWideningIsExactForEveryBitPattern) { check_all_bit_patterns<Eigen::half>(); }
TEST(RazorkvSimd, BfloatWideningIsExactForEveryBitPattern) {
  check_all_bit_patterns<Eigen::bfloat16>();
}

// simd_load_as, the in-order widening decode uses for 16-bit rows in registers (bfloat16 rows
// of GQA 8 and of head dims not fixed at compile time; half rows where F16C or AVX-512F have
// the instruction): every lane of every vector.
template <class T>
void check_load_as_every_bit_pattern() {
  if constexpr (std::is_same_v<T, Eigen::half> && !razorkv::detail::kHalfInRegisters) {
    GTEST_SKIP() << "half rows are widened through a scratch buffer in this build (no F16C)";
  } else {
    constexpr int kW = razorkv::detail::simd_lanes<float>;
    const std::vector<T> source = every_bit_pattern<T>();
    for (std::size_t chunk = 0; chunk < source.size(); chunk += kW) {
      const razorkv::detail::simd_t<float> got =
          razorkv::detail::simd_load_as<float>(source.data() + chunk);
      for (int j = 0; j < kW; ++j)
        ASSERT_TRUE(widened_exactly(got[j], source, chunk + static_cast<std::size_t>(j)));
    }
  }
}

TEST(RazorkvSimd, BfloatInOrderLoadIsExactForEveryBitPattern) {
  check_load_as_every_bit_pattern<Eigen::bfloat16>();
}
TEST(RazorkvSimd, HalfInOrderLoadIsExactForEveryBitPattern) {
  check_load_as_every_bit_pattern<Eigen::half>();
}

#if defined(__GNUC__) || defined(__clang__)
// The split load decode uses for bfloat16 rows: even- and odd-indexed elements of 2 x lanes
// values, each widened exactly.
TEST(RazorkvSimd, BfloatSplitLoadIsExactForEveryBitPattern) {
  constexpr int kW = razorkv::detail::simd_lanes<float>;
  const std::vector<Eigen::bfloat16> source = every_bit_pattern<Eigen::bfloat16>();
  for (std::size_t chunk = 0; chunk < source.size(); chunk += 2 * kW) {
    razorkv::detail::simd_t<float> even, odd;
    razorkv::detail::simd_load_bf16_split(source.data() + chunk, even, odd);
    for (int j = 0; j < 2 * kW; ++j) {
      const float got = j % 2 == 0 ? even[j / 2] : odd[j / 2];
      ASSERT_TRUE(widened_exactly(got, source, chunk + static_cast<std::size_t>(j)));
    }
  }
}
#endif

TEST(RazorkvSimd, PortableHalfConversionMatchesEigen) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float expected =
        static_cast<float>(from_bits<Eigen::half>(static_cast<std::uint16_t>(b)));
    const float got = razorkv::detail::half_bits_to_float(static_cast<std::uint16_t>(b));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got));
    } else {
      ASSERT_EQ(std::memcmp(&got, &expected, 4), 0) << "bits " << b;
    }
  }
}

TEST(RazorkvSimd, WideningHandlesEveryLengthAndMisalignment) {
  std::vector<Eigen::bfloat16> b16(80);
  std::vector<Eigen::half> h16(80);
  for (int i = 0; i < 80; ++i) {
    b16[static_cast<std::size_t>(i)] = Eigen::bfloat16(0.25f * static_cast<float>(i) - 7.0f);
    h16[static_cast<std::size_t>(i)] = Eigen::half(0.5f * static_cast<float>(i) - 11.0f);
  }
  for (int offset = 0; offset < 5; ++offset) {
    for (int n = 0; n <= 70; ++n) {
      std::vector<float> out(static_cast<std::size_t>(n) + 1, -99.0f);  // sentinel after the end
      razorkv::detail::widen_row(b16.data() + offset, out.data(), n);
      for (int i = 0; i < n; ++i)
        ASSERT_EQ(out[static_cast<std::size_t>(i)],
                  static_cast<float>(b16[static_cast<std::size_t>(offset + i)]));
      ASSERT_EQ(out[static_cast<std::size_t>(n)], -99.0f) << "wrote past the end, n = " << n;
      razorkv::detail::widen_row(h16.data() + offset, out.data(), n);
      for (int i = 0; i < n; ++i)
        ASSERT_EQ(out[static_cast<std::size_t>(i)],
                  static_cast<float>(h16[static_cast<std::size_t>(offset + i)]));
      ASSERT_EQ(out[static_cast<std::size_t>(n)], -99.0f);
    }
  }
}

// simd_in_register only pins its vector to a register: every lane comes back bit for bit, a NaN's
// payload and a negative zero included.
template <class Acc, class Bits>
void check_in_register_keeps_every_lane() {
  constexpr std::size_t lanes = razorkv::detail::simd_lanes<Acc>;
  Bits bits[lanes];
  for (std::size_t i = 0; i < lanes; ++i)
    bits[i] = static_cast<Bits>(0x9e3779b97f4a7c15ull * (i + 1));
  bits[0] = static_cast<Bits>(Bits{1} << (8 * sizeof(Bits) - 1));  // -0
  bits[1] = static_cast<Bits>(~Bits{0} >> 1);  // a quiet NaN, every payload bit set
  Acc in[lanes], out[lanes];
  std::memcpy(in, bits, sizeof(in));
  razorkv::detail::simd_store(
      out, razorkv::detail::simd_in_register<Acc>(razorkv::detail::simd_load(in)));
  EXPECT_EQ(std::memcmp(in, out, sizeof(in)), 0);
}

TEST(RazorkvSimd, InRegisterKeepsEveryLaneBitForBit) {
  check_in_register_keeps_every_lane<float, std::uint32_t>();
  check_in_register_keeps_every_lane<double, std::uint64_t>();
}

TEST(RazorkvSimd, SumAddsEveryLane) {
  constexpr int lanes = razorkv::detail::simd_lanes<float>;
  float values[lanes];
  for (int i = 0; i < lanes; ++i) values[i] = static_cast<float>(1 << i);
  EXPECT_EQ(razorkv::detail::simd_sum<float>(razorkv::detail::simd_load(values)),
            static_cast<float>((1 << lanes) - 1));
  constexpr int dlanes = razorkv::detail::simd_lanes<double>;
  double dvalues[dlanes];
  for (int i = 0; i < dlanes; ++i) dvalues[i] = 0.5 * i;
  EXPECT_EQ(razorkv::detail::simd_sum<double>(razorkv::detail::simd_load(dvalues)),
            0.25 * dlanes * (dlanes - 1));
}

#if defined(__GNUC__) || defined(__clang__)
// simd_sum_each gives each vector's simd_sum bit for bit (values of mixed magnitudes, so that a
// different order of additions would show), for fewer, as many and more vectors than lanes.
template <class Acc, int kN>
void expect_sum_each_is_simd_sum(std::mt19937& rng) {
  constexpr int lanes = razorkv::detail::simd_lanes<Acc>;
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-20, 20);
  razorkv::detail::simd_t<Acc> vectors[std::size_t{kN}];
  Acc lane_values[std::size_t{lanes}];
  for (int v = 0; v < kN; ++v) {
    for (int i = 0; i < lanes; ++i)
      lane_values[i] = static_cast<Acc>(std::ldexp(mantissa(rng), exponent(rng)));
    vectors[v] = razorkv::detail::simd_load(lane_values);
  }
  Acc sums[std::size_t{kN}];
  razorkv::detail::simd_sum_each<Acc, kN>(vectors, sums);
  for (int v = 0; v < kN; ++v)
    EXPECT_EQ(sums[v], razorkv::detail::simd_sum<Acc>(vectors[v]))
        << kN << " vectors, vector " << v;
}

TEST(RazorkvSimd, SumEachIsSimdSumOfEachVector) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    expect_sum_each_is_simd_sum<float, 1>(rng);
    expect_sum_each_is_simd_sum<float, 2>(rng);
    expect_sum_each_is_simd_sum<float, 4>(rng);
    expect_sum_each_is_simd_sum<float, 8>(rng);
    expect_sum_each_is_simd_sum<float, 16>(rng);
    expect_sum_each_is_simd_sum<float, 32>(rng);
    expect_sum_each_is_simd_sum<double, 1>(rng);
    expect_sum_each_is_simd_sum<double, 2>(rng);
    expect_sum_each_is_simd_sum<double, 4>(rng);
    expect_sum_each_is_simd_sum<double, 8>(rng);
    expect_sum_each_is_simd_sum<double, 16>(rng);
  }
}

// The vector exp against std::exp: within 2 ulp where exp is a normal float, 0 below, NaN kept.
TEST(RazorkvSimd, ExpIsWithinTwoUlpOfStdExp) {
  constexpr int lanes = razorkv::detail::simd_lanes<float>;
  float in[lanes], out[lanes];
  int worst_ulp = 0;
  for (float x = -87.3f; x <= 88.0f; x += 0.00731f) {
    for (int i = 0; i < lanes; ++i) in[i] = x + 0.0001f * static_cast<float>(i);
    razorkv::detail::simd_store(out, razorkv::detail::simd_exp(razorkv::detail::simd_load(in)));
    for (int i = 0; i < lanes; ++i) {
      const float want = std::exp(in[i]);
      if (!std::isnormal(want) || in[i] > 88.0f) continue;
      std::int32_t a, b;
      std::memcpy(&a, &out[i], sizeof(a));
      std::memcpy(&b, &want, sizeof(b));
      worst_ulp = std::max(worst_ulp, std::abs(a - b));
    }
  }
  EXPECT_LE(worst_ulp, 2);
  for (int i = 0; i < lanes; ++i) in[i] = i % 3 == 0 ? -INFINITY : i % 3 == 1 ? -100.0f : NAN;
  razorkv::detail::simd_store(out, razorkv::detail::simd_exp(razorkv::detail::simd_load(in)));
  for (int i = 0; i < lanes; ++i) {
    if (i % 3 == 2) {
      EXPECT_TRUE(std::isnan(out[i]));
    } else {
      EXPECT_EQ(out[i], 0.0f) << in[i];
    }
  }
  in[0] = 0.0f;
  razorkv::detail::simd_store(out, razorkv::detail::simd_exp(razorkv::detail::simd_load(in)));
  EXPECT_EQ(out[0], 1.0f);
}
#endif

}  // namespace
