// Tests of the quantised row formats (q8, q4: blocks of 32 values and a binary16 scale) against a
// double reference: the scale's saturation, the error of each value within half a
// step of its block (q4's one clamped value within a step), the inner product against the
// dequantised row's, the errors; and of the Walsh-Hadamard rotation against the explicit matrix.
#include <gtest/gtest.h>

#include <razorkv/quant/hadamard.hpp>
#include <razorkv/quant/row_blocks.hpp>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace {

using razorkv::index_t;
using razorkv::row_format;

constexpr row_format kFormats[] = {row_format::kQ8, row_format::kQ4};

float block_scale(row_format f, const std::uint8_t* row, index_t block) {
  std::uint16_t bits;
  std::memcpy(&bits, row + block * razorkv::block_bytes(f), 2);
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits));
}

TEST(QuantRowBlocks, ScalesSaturateWhereAHalfWouldBeInfinite) {
  EXPECT_EQ(razorkv::detail::float_to_half_bits(1e30f), 0x7bffu);
  EXPECT_EQ(razorkv::detail::float_to_half_bits(-65520.0f), 0xfbffu);
  EXPECT_EQ(razorkv::detail::float_to_half_bits(65504.0f), 0x7bffu);
  EXPECT_EQ(razorkv::detail::float_to_half_bits(1.0f), 0x3c00u);
  EXPECT_EQ(razorkv::detail::half_bits_value(0x3c00u), 1.0f);
}

TEST(QuantRowBlocks, EveryValueIsWithinHalfAStepOfItsBlock) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 1);
  for (row_format f : kFormats) {
    for (index_t head_dim : {32, 64, 96, 128, 256}) {
      for (int trial = 0; trial < 50; ++trial) {
        std::vector<float> x(static_cast<std::size_t>(head_dim));
        for (float& v : x) v = normal(rng) * (trial % 5 == 0 ? 40.0f : 1.0f);
        if (trial % 3 == 0) x[static_cast<std::size_t>(trial) % x.size()] *= 25;  // an outlier
        std::vector<std::uint8_t> row(
            static_cast<std::size_t>(razorkv::quantised_row_bytes(f, head_dim)));
        razorkv::quantise_row(f, x.data(), head_dim, row.data());
        std::vector<float> back(x.size());
        razorkv::dequantise_row(f, row.data(), head_dim, back.data());
        for (index_t b = 0; b < head_dim / razorkv::kQuantBlock; ++b) {
          const double d = std::fabs(block_scale(f, row.data(), b));
          double extreme = 0;
          for (index_t i = 0; i < razorkv::kQuantBlock; ++i) {
            const double v = x[static_cast<std::size_t>(b * razorkv::kQuantBlock + i)];
            if (std::fabs(v) > std::fabs(extreme)) extreme = v;
          }
          const double levels = f == row_format::kQ8 ? 127 : 8;
          EXPECT_NEAR(d, std::fabs(extreme) / levels, std::fabs(extreme) / levels * 1e-3);
          for (index_t i = 0; i < razorkv::kQuantBlock; ++i) {
            const auto at = static_cast<std::size_t>(b * razorkv::kQuantBlock + i);
            const double error = std::fabs(static_cast<double>(x[at]) - back[at]);
            // q4's grid runs from -8 d to 7 d: a value of the extreme's magnitude and the
            // opposite sign clamps to the end of the grid, one step away.
            const bool clamped =
                f == row_format::kQ4 && std::fabs(x[at]) > 7.5 * d && (x[at] > 0) != (extreme > 0);
            EXPECT_LE(error, (clamped ? 1.0 : 0.5) * d * (1 + 1e-5))
                << razorkv::row_format_name(f) << " head_dim " << head_dim << " value " << at;
          }
        }
      }
    }
  }
}

TEST(QuantRowBlocks, TheInnerProductIsTheDequantisedRows) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0, 1);
  for (row_format f : kFormats) {
    for (index_t head_dim : {32, 64, 160}) {
      std::vector<float> k(static_cast<std::size_t>(head_dim)), q(k.size()), back(k.size());
      for (int trial = 0; trial < 100; ++trial) {
        for (float& v : k) v = normal(rng);
        for (float& v : q) v = normal(rng);
        std::vector<std::uint8_t> row(
            static_cast<std::size_t>(razorkv::quantised_row_bytes(f, head_dim)));
        razorkv::quantise_row(f, k.data(), head_dim, row.data());
        razorkv::dequantise_row(f, row.data(), head_dim, back.data());
        double want = 0, magnitude = 0;
        for (std::size_t i = 0; i < k.size(); ++i) {
          want += static_cast<double>(q[i]) * back[i];
          magnitude += std::fabs(static_cast<double>(q[i]) * back[i]);
        }
        EXPECT_NEAR(razorkv::quantised_dot(f, q.data(), row.data(), head_dim), want,
                    1e-6 * magnitude);
      }
    }
  }
}

TEST(QuantRowBlocks, ZeroTinyAndHugeBlocksStayFinite) {
  for (row_format f : kFormats) {
    std::vector<float> x(64, 0.0f), back(64);
    std::vector<std::uint8_t> row(static_cast<std::size_t>(razorkv::quantised_row_bytes(f, 64)));
    razorkv::quantise_row(f, x.data(), 64, row.data());
    razorkv::dequantise_row(f, row.data(), 64, back.data());
    for (float v : back) EXPECT_EQ(v, 0.0f);
    // A block below half's normal range (its scale is subnormal): still within a step of 2^-24.
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1e-6f * static_cast<float>(i % 7);
    razorkv::quantise_row(f, x.data(), 64, row.data());
    razorkv::dequantise_row(f, row.data(), 64, back.data());
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], 1e-6f * 6) << i;
    // Values beyond what a half scale can step through clamp to the grid's end, finite.
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 ? -3e38f : 2e38f);
    razorkv::quantise_row(f, x.data(), 64, row.data());
    razorkv::dequantise_row(f, row.data(), 64, back.data());
    for (float v : back) EXPECT_TRUE(std::isfinite(v));
  }
}

TEST(QuantRowBlocks, BadInputIsAnErrorNamingItAndWritesNothing) {
  std::vector<float> x(64, 1.0f);
  std::vector<std::uint8_t> row(34 * 2, 0xab);
  EXPECT_THROW(
      {
        try {
          razorkv::quantise_row(row_format::kQ8, x.data(), 48, row.data());
        } catch (const razorkv::error& e) {
          EXPECT_NE(std::string(e.what()).find("head_dim (48) must be a positive multiple of 32"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      razorkv::error);
  x[5] = std::nanf("");
  try {
    razorkv::quantise_row(row_format::kQ4, x.data(), 64, row.data());
    ADD_FAILURE() << "a NaN was quantised";
  } catch (const razorkv::error& e) {
    EXPECT_NE(std::string(e.what()).find("value 5 (nan) is not finite"), std::string::npos)
        << e.what();
  }
  for (std::uint8_t byte : row) ASSERT_EQ(byte, 0xab);
  EXPECT_THROW(razorkv::quantised_row_bytes(static_cast<row_format>(7), 64), razorkv::error);
}

// The float transform (radix-4 first passes, vector lanes after) against the textbook
// butterflies pass by pass: the same additions in the same order, so the same bits.
TEST(QuantHadamard, FloatPassesEqualThePlainButterfliesBitForBit) {
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0, 1);
  for (index_t n = 1; n <= 512; n *= 2) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (float& v : x) v = normal(rng);
    std::vector<float> want = x;
    for (index_t half = 1; half < n; half *= 2) {
      for (index_t start = 0; start < n; start += 2 * half) {
        for (index_t i = start; i < start + half; ++i) {
          const float a = want[static_cast<std::size_t>(i)];
          const float b = want[static_cast<std::size_t>(i + half)];
          want[static_cast<std::size_t>(i)] = a + b;
          want[static_cast<std::size_t>(i + half)] = a - b;
        }
      }
    }
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
    for (float& v : want) v *= scale;
    razorkv::hadamard_rotate(x.data(), n);
    EXPECT_EQ(x, want) << "n " << n;
  }
}

TEST(QuantHadamard, IsTheOrthonormalSylvesterMatrix) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0, 1);
  for (index_t n = 1; n <= 256; n *= 2) {
    std::vector<double> x(static_cast<std::size_t>(n)), rotated;
    for (double& v : x) v = normal(rng);
    rotated = x;
    razorkv::hadamard_rotate(rotated.data(), n);
    for (index_t i = 0; i < n; ++i) {
      double want = 0;  // H[i][j] = (-1)^popcount(i & j)
      for (index_t j = 0; j < n; ++j) {
        const bool odd = __builtin_popcountll(static_cast<unsigned long long>(i & j)) % 2;
        want += (odd ? -1.0 : 1.0) * x[static_cast<std::size_t>(j)];
      }
      EXPECT_NEAR(rotated[static_cast<std::size_t>(i)], want / std::sqrt(double(n)), 1e-12) << n;
    }
    razorkv::hadamard_rotate(rotated.data(), n);  // its own inverse
    for (index_t i = 0; i < n; ++i) {
      EXPECT_NEAR(rotated[static_cast<std::size_t>(i)], x[static_cast<std::size_t>(i)], 1e-12);
    }
  }
  std::vector<float> x(96);
  EXPECT_THROW(razorkv::hadamard_rotate(x.data(), 96), razorkv::error);
  EXPECT_THROW(razorkv::hadamard_rotate(x.data(), 0), razorkv::error);
}

// What the rotation is for: a key whose one channel dwarfs the others loses the rest to a 4-bit
// block's coarse step; rotated, its energy is spread and q . k keeps more of it.
TEST(QuantHadamard, RotatedOutlierKeysLoseLessToFourBits) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0, 1);
  double plain_error = 0, rotated_error = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> k(64), q(64), back(64);
    for (float& v : k) v = normal(rng);
    for (float& v : q) v = normal(rng);
    k[static_cast<std::size_t>(trial % 64)] = 30;
    double exact = 0;
    for (std::size_t i = 0; i < 64; ++i) exact += static_cast<double>(q[i]) * k[i];
    std::vector<std::uint8_t> row(
        static_cast<std::size_t>(2 * razorkv::block_bytes(row_format::kQ4)));
    razorkv::quantise_row(row_format::kQ4, k.data(), 64, row.data());
    plain_error +=
        std::fabs(razorkv::quantised_dot(row_format::kQ4, q.data(), row.data(), 64) - exact);
    razorkv::hadamard_rotate(k.data(), 64);
    razorkv::hadamard_rotate(q.data(), 64);
    razorkv::quantise_row(row_format::kQ4, k.data(), 64, row.data());
    rotated_error +=
        std::fabs(razorkv::quantised_dot(row_format::kQ4, q.data(), row.data(), 64) - exact);
  }
  EXPECT_LT(rotated_error, 0.5 * plain_error) << plain_error / 200 << " " << rotated_error / 200;
}

}  // namespace
