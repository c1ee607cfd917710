// Tests of the dense scorer: a hand-computed 6-token example, the analytic scores of a uniform
// head in every dtype, the duplicate-tolerant masks against a brute-force scan, row
// subsampling, and named errors that leave the score table untouched.
#include <gtest/gtest.h>

#include <razorkv/scoring/dense_scorer.hpp>
#include <razorkv/scoring/head_scores.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;

razorkv::probe make_probe(index_t p, index_t r, bool bos, bool duplicates = false,
                          std::int64_t vocab = 1000) {
  razorkv::probe_config c;
  c.num_random_tokens = p;
  c.repeats = r;
  c.max_id = vocab;
  c.seed = 11;
  c.allow_duplicates = duplicates;
  if (bos) c.bos_id = -1;
  return razorkv::probe(c);
}

// Causal uniform attention: row i spreads 1/(i+1) over keys 0..i.
template <class T>
std::vector<T> uniform_attention(index_t heads, index_t length) {
  std::vector<T> a(static_cast<std::size_t>(heads * length * length), T(0.0f));
  for (index_t h = 0; h < heads; ++h)
    for (index_t i = 0; i < length; ++i)
      for (index_t j = 0; j <= i; ++j)
        a[static_cast<std::size_t>((h * length + i) * length + j)] =
            static_cast<T>(1.0 / static_cast<double>(i + 1));
  return a;
}

// Brute force over the token ids: for each scored row, every earlier position with the same id.
razorkv::layer_scores brute_force(const razorkv::probe& probe, const std::vector<double>& a,
                                  index_t heads, index_t step = 1) {
  const index_t length = probe.length(), offset = probe.has_bos() ? 1 : 0;
  const index_t period = probe.num_random_tokens(), positions = period * probe.repeats();
  razorkv::layer_scores s{std::vector<double>(static_cast<std::size_t>(heads)),
                          std::vector<double>(static_cast<std::size_t>(heads))};
  for (index_t h = 0; h < heads; ++h) {
    index_t rows = 0;
    for (index_t i = period; i < positions; i += step, ++rows) {
      for (index_t j = 0; j < i; ++j) {
        if (probe.id_at(j) != probe.id_at(i)) continue;
        s.echo[static_cast<std::size_t>(h)] +=
            a[static_cast<std::size_t>((h * length + i + offset) * length + j + offset)];
        s.induction[static_cast<std::size_t>(h)] +=
            a[static_cast<std::size_t>((h * length + i + offset) * length + j + 1 + offset)];
      }
    }
    s.echo[static_cast<std::size_t>(h)] /= static_cast<double>(rows);
    s.induction[static_cast<std::size_t>(h)] /= static_cast<double>(rows);
  }
  return s;
}

TEST(RazorkvScoring, HandComputedSixTokens) {
  // Tokens a b c a b c; scored rows 3, 4, 5 read (echo, induction) at (0, 1), (1, 2), (2, 3).
  const std::vector<float> a = {
      1,      0,      0,     0,      0,      0,       //
      0.5,    0.5,    0,     0,      0,      0,       //
      0.25,   0.25,   0.5,   0,      0,      0,       //
      0.5,    0.25,   0.125, 0.125,  0,      0,       //
      0.125,  0.5,    0.25,  0.0625, 0.0625, 0,       //
      0.0625, 0.0625, 0.25,  0.5,    0.0625, 0.0625,  //
  };
  const auto probe = make_probe(3, 2, false);
  const auto s = razorkv::score_from_probabilities(probe, a.data(), 1, 6);
  EXPECT_EQ(s.echo[0], (0.5 + 0.5 + 0.25) / 3.0);
  EXPECT_EQ(s.induction[0], (0.25 + 0.25 + 0.5) / 3.0);

  // The same with a BOS in front taking 0.5 of every row: the BOS column stays in the
  // denominator, so every score halves.
  std::vector<double> with_bos(49, 0.0);
  with_bos[0] = 1.0;
  for (index_t i = 0; i < 6; ++i) {
    with_bos[static_cast<std::size_t>((i + 1) * 7)] = 0.5;
    for (index_t j = 0; j < 6; ++j)
      with_bos[static_cast<std::size_t>((i + 1) * 7 + j + 1)] =
          0.5 * a[static_cast<std::size_t>(i * 6 + j)];
  }
  const auto sb = razorkv::score_from_probabilities(make_probe(3, 2, true), with_bos.data(), 1, 7);
  EXPECT_EQ(sb.echo[0], 0.5 * (0.5 + 0.5 + 0.25) / 3.0);
  EXPECT_EQ(sb.induction[0], 0.5 * (0.25 + 0.25 + 0.5) / 3.0);
}

template <class T>
class RazorkvScoringTyped : public ::testing::Test {};
TYPED_TEST_SUITE(RazorkvScoringTyped, razorkv_test::storage_dtypes);

TYPED_TEST(RazorkvScoringTyped, UniformHeadScoresItsAnalyticValue) {
  using T = TypeParam;
  for (bool bos : {false, true}) {
    const index_t period = 7, repeats = 4, heads = 2;
    const auto probe = make_probe(period, repeats, bos);
    const index_t length = probe.length();
    const auto a = uniform_attention<T>(heads, length);
    const auto s = razorkv::score_from_probabilities(probe, a.data(), heads, length);
    // Row at position p (sequence index p + bos) has floor(p / P) earlier copies, each 1/(i+1).
    double expected = 0.0;
    for (index_t p = period; p < period * repeats; ++p) {
      expected += static_cast<double>(p / period) / static_cast<double>(p + (bos ? 1 : 0) + 1);
    }
    expected /= static_cast<double>(period * (repeats - 1));
    // 16-bit storage rounds 1/(i+1) to 8 or 11 significant bits.
    const double tol = std::is_same_v<T, Eigen::bfloat16> ? 8e-3
                       : std::is_same_v<T, Eigen::half>   ? 1e-3
                                                          : 1e-6;
    for (index_t h = 0; h < heads; ++h) {
      EXPECT_NEAR(s.echo[static_cast<std::size_t>(h)], expected, tol * expected) << "bos " << bos;
      EXPECT_NEAR(s.induction[static_cast<std::size_t>(h)], expected, tol * expected)
          << "bos " << bos;
    }
  }
}

TEST(RazorkvScoring, DuplicateMasksAndSubsamplingMatchBruteForce) {
  std::mt19937_64 rng(3);
  for (bool duplicates : {false, true}) {
    for (index_t step : {1, 3}) {
      const auto probe = make_probe(9, 3, true, duplicates, duplicates ? 4 : 1000);
      const index_t length = probe.length(), heads = 3;
      // Random causal rows normalised to 1.
      std::vector<double> a(static_cast<std::size_t>(heads * length * length), 0.0);
      std::uniform_real_distribution<double> u(0.0, 1.0);
      for (index_t h = 0; h < heads; ++h)
        for (index_t i = 0; i < length; ++i) {
          double sum = 0.0;
          for (index_t j = 0; j <= i; ++j)
            sum += (a[static_cast<std::size_t>((h * length + i) * length + j)] = u(rng));
          for (index_t j = 0; j <= i; ++j)
            a[static_cast<std::size_t>((h * length + i) * length + j)] /= sum;
        }
      razorkv::scoring_options options;
      options.row_step = step;
      const auto got = razorkv::score_from_probabilities(probe, a.data(), heads, length, options);
      const auto want = brute_force(probe, a, heads, step);
      for (index_t h = 0; h < heads; ++h) {
        EXPECT_NEAR(got.echo[static_cast<std::size_t>(h)], want.echo[static_cast<std::size_t>(h)],
                    1e-12);
        EXPECT_NEAR(got.induction[static_cast<std::size_t>(h)],
                    want.induction[static_cast<std::size_t>(h)], 1e-12);
      }
    }
  }
}

TEST(RazorkvScoring, BadInputIsANamedErrorAndTheTableStaysUntouched) {
  const auto probe = make_probe(5, 2, false);
  const index_t length = probe.length();
  auto a = uniform_attention<float>(2, length);
  razorkv::head_scores table(1, 2, 1);
  table.set_layer(0, razorkv::score_from_probabilities(probe, a.data(), 2, length));
  const double echo_before = table.echo(0, 1);

  const auto score_into_table = [&](const float* p, index_t heads, index_t len) {
    table.set_layer(0, razorkv::score_from_probabilities(probe, p, heads, len));
  };
  RAZORKV_EXPECT_ERROR(score_into_table(a.data(), 2, length + 1), kShapeMismatch,
                       "length (11) != probe length (10 = 5 x 2)");
  RAZORKV_EXPECT_ERROR(score_into_table(a.data(), 0, length), kInvalidArgument,
                       "num_query_heads (0)");
  RAZORKV_EXPECT_ERROR(score_into_table(nullptr, 2, length), kInvalidArgument,
                       "probabilities is null");
  a[static_cast<std::size_t>(length * length + 3 * length + 1)] =
      std::numeric_limits<float>::quiet_NaN();  // unscored row
  RAZORKV_EXPECT_ERROR(score_into_table(a.data(), 2, length), kInvalidArgument,
                       "probability (nan) at head 1 row 3 column 1");
  a[static_cast<std::size_t>(length * length + 3 * length + 1)] = 0.25f;
  a[static_cast<std::size_t>(length * length + 7 * length + 2)] += 0.5f;
  RAZORKV_EXPECT_ERROR(score_into_table(a.data(), 2, length), kInvalidArgument,
                       "row 7 of head 1 sums to 1.5");
  EXPECT_EQ(table.echo(0, 1), echo_before);

  RAZORKV_EXPECT_ERROR(table.set_layer(1, {{0, 0}, {0, 0}}), kOutOfRange, "layer (1)");
  RAZORKV_EXPECT_ERROR(table.set_layer(0, {{0, 0, 0}, {0, 0}}), kShapeMismatch,
                       "has 3 echo scores");
  RAZORKV_EXPECT_ERROR(table.set_layer(0, {{0.5, 0.5}, {0.5, std::nan("")}}), kInvalidArgument,
                       "induction score of layer 0 head 1 is nan");
  EXPECT_EQ(table.echo(0, 1), echo_before);
  RAZORKV_EXPECT_ERROR(razorkv::head_scores(2, 6, 4), kShapeMismatch, "num_query_heads (6)");
  RAZORKV_EXPECT_ERROR(table.echo(0, 2), kOutOfRange, "head (2)");
  EXPECT_TRUE(table.complete());
  EXPECT_FALSE(razorkv::head_scores(2, 4, 2).complete());
}

}  // namespace
